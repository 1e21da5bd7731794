#!/usr/bin/env bash
# GPU pass for launch identity, CUDA graphs and the torch.profiler merge (issue #10).
#   source .gpu/setup.sh && bash tests/gpu/run_launch.sh
set -uo pipefail
OUT=${OUT:-/tmp/cute_prof_launch}; mkdir -p "$OUT"
export PYTHONPATH="$PWD:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
export CUTE_PROF_FIGURES="$OUT/figures.txt" CUTE_PROF_LAUNCH_OUT="$OUT/merge_test"
status=0
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv;
  python -c "import torch,sys; print(sys.version.split()[0], torch.__version__, torch.version.cuda)"; } > "$OUT/info.log" 2>&1
cat "$OUT/info.log"
python -m pytest -v -rA tests/gpu/test_launches_gpu.py > "$OUT/tests.log" 2>&1 || status=1
tail -n 30 "$OUT/tests.log"
python examples/torch_loop.py --out-dir "$OUT/example" > "$OUT/example.log" 2>&1 || status=1
cat "$OUT/example.log" | tail -n 30
python -m cute_prof.cli merge "$OUT/example/torch_trace.json" "$OUT/example/recording.npz" -o "$OUT/cli_merged.json" > "$OUT/cli.log" 2>&1 || status=1
cat "$OUT/cli.log"
echo "--- figures"; cat "$OUT/figures.txt" 2>/dev/null
ls -la "$OUT" "$OUT/example" 2>/dev/null
exit $status
