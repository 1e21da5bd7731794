#!/usr/bin/env bash
# The IKET pass in one GPU call: a small IKET capture of tests/gpu/iket_compare.py (plus a
# warp-trace capture), the same kernel under cute_prof, and the comparison.
#   source .gpu/setup.sh && bash bench/gpu_runs/run_iket_gpu.sh      (logs and captures in $OUT)
set -uo pipefail
OUT=${OUT:-/tmp/cute_prof_iket}; mkdir -p "$OUT"
export PYTHONPATH="$PWD:${PYTHONPATH:-}"
RUN_IKET='import sys; from iket.cli.main import entrypoint; sys.argv = ["run-iket"] + sys.argv[1:]; entrypoint()'
{
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv
python -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda)"
t0=$(date +%s)
timeout 150 python -c "$RUN_IKET" -o /tmp/iket_cap --clobber profile --postprocess json -- \
    python tests/gpu/iket_compare.py --mode iket; echo "run-iket rc=$? in $(( $(date +%s) - t0 ))s"
ls -la /tmp/iket_cap
cap=$(ls /tmp/iket_cap/*.trace.json 2>/dev/null | head -1)
if [ -z "$cap" ]; then
  echo "no capture with payloads: trying without payloads"
  timeout 120 python -c "$RUN_IKET" -o /tmp/iket_cap --clobber profile --postprocess json -- \
      python tests/gpu/iket_compare.py --mode iket_plain; echo "run-iket plain rc=$?"
  cap=$(ls /tmp/iket_cap/*.trace.json 2>/dev/null | head -1)
fi
[ -n "$cap" ] && cp "$cap" "$OUT/iket_compare.trace.json"
t0=$(date +%s)
timeout 150 python -c "$RUN_IKET" -o /tmp/iket_warps --clobber profile --warp-trace --postprocess json -- \
    python tests/gpu/iket_compare.py --mode iket; echo "run-iket --warp-trace rc=$? in $(( $(date +%s) - t0 ))s"
wcap=$(ls /tmp/iket_warps/*.trace.json 2>/dev/null | head -1)
[ -n "$wcap" ] && cp "$wcap" "$OUT/iket_warp_trace.trace.json"
python tests/gpu/iket_compare.py --mode ours --save "$OUT/ours_compare.npz"; echo "ours rc=$?"
ls -la "$OUT"
for f in "$OUT"/*.trace.json; do
  python - "$f" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
def shape(v, depth=0):
    if isinstance(v, dict):
        return {k: shape(x, depth + 1) for k, x in list(v.items())[:40]}
    if isinstance(v, list):
        return [len(v)] + ([shape(v[0], depth + 1)] if v else [])
    return v
print(sys.argv[1]); print(json.dumps(shape(d), indent=1)[:6000])
PY
done
[ -f "$OUT/iket_compare.trace.json" ] && python tests/gpu/iket_compare.py --compare "$OUT/iket_compare.trace.json" "$OUT/ours_compare.npz"
echo "compare rc=$?"
} > "$OUT/iket_gpu.log" 2>&1
tail -c 6000 "$OUT/iket_gpu.log"
