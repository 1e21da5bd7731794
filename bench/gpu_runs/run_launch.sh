#!/usr/bin/env bash
# GPU pass for launch identity, CUDA graphs, profile_loop and the torch.profiler merge
# (issue #10), plus the existing device-op suite (the record format changed) and the SASS
# of the overhead probe on the base commit and on this branch.
#   source .gpu/setup.sh && bash bench/gpu_runs/run_launch.sh     (from the branch's root)
set -uo pipefail
OUT=${OUT:-/tmp/cute_prof_launch}; mkdir -p "$OUT"
BRANCH=$PWD
export PYTHONUNBUFFERED=1 CUTE_PROF_FIGURES="$OUT/figures.txt" CUTE_PROF_LAUNCH_OUT=/tmp/merge_test
status=0
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv;
  python -c "import torch,sys; print(sys.version.split()[0], torch.__version__, torch.version.cuda)"; } > "$OUT/info.log" 2>&1
cat "$OUT/info.log"
export PYTHONPATH="$BRANCH:${PYTHONPATH:-}"
python -m pytest -v -rA tests/gpu/test_launches_gpu.py tests/gpu/test_ops_gpu.py tests/test_seed_compat.py > "$OUT/tests.log" 2>&1 || status=1
tail -n 60 "$OUT/tests.log" | grep -E "PASSED|FAILED|ERROR|passed|failed" | tail -n 50
python examples/torch_loop.py --out-dir /tmp/example > "$OUT/example.log" 2>&1 || status=1
tail -n 20 "$OUT/example.log"
python -m cute_prof.cli merge /tmp/example/torch_trace.json /tmp/example/recording.npz -o /tmp/cli_merged.json > "$OUT/cli.log" 2>&1 || status=1
cat "$OUT/cli.log"
# baseline: the branch's base commit (git archive 8115fe1 cute_prof bench), staged beside it
BASE=${BASE:-$BRANCH/../launch_base}
( cd "$BASE" && PYTHONPATH="$PWD:${PYTHONPATH#$BRANCH:}" python bench/tools/sass_probe.py /tmp/sass_main ) > "$OUT/sass.log" 2>&1
echo "--- branch" >> "$OUT/sass.log"
python bench/tools/sass_probe.py /tmp/sass_branch >> "$OUT/sass.log" 2>&1
for m in atomic staged; do
  echo "--- opcode diff $m (< base, > branch)" >> "$OUT/sass.log"
  diff <(grep -oE '/\*[0-9a-f]{4}\*/ +[A-Z0-9_.]+' /tmp/sass_main/probe_$m.sass | awk '{print $2}') \
       <(grep -oE '/\*[0-9a-f]{4}\*/ +[A-Z0-9_.]+' /tmp/sass_branch/probe_$m.sass | awk '{print $2}') >> "$OUT/sass.log"
done
cp /tmp/sass_branch/probe_staged.sass "$OUT/branch_probe_staged.sass" 2>/dev/null
cat "$OUT/sass.log" | head -60
echo "--- figures"; cat "$OUT/figures.txt" 2>/dev/null
exit $status
