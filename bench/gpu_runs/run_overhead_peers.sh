#!/usr/bin/env bash
# Issue 19's side-by-side bench in one GPU call: our write paths (bench/parts/overhead.py, CUPTI;
# and CUDA events in a plain process), Triton's Proton (each mode in its own process) and
# NVIDIA IKET under run-iket (timing pass without post-processing; a one-launch capture for
# the range count), then one table. Logs and JSON in $OUT.
#   source .gpu/setup.sh && bash bench/gpu_runs/run_overhead_peers.sh
set -uo pipefail
OUT=${OUT:-/tmp/cute_prof_peers}; mkdir -p "$OUT"; W=$(mktemp -d)
export PYTHONPATH="$PWD:${PYTHONPATH:-}" PYTHONUNBUFFERED=1 OVERHEAD_CHAINS=${OVERHEAD_CHAINS:-4}
ROUNDS=${ROUNDS:-20}
RUN_IKET='import sys; from iket.cli.main import entrypoint; sys.argv = ["run-iket"] + sys.argv[1:]; entrypoint()'
step() { local name=$1; shift; local t0=$(date +%s); echo "=== $name: $*" | tee -a "$OUT/peers.log"
  "$@" 2>&1 | grep -v "^Warning (cta" >> "$OUT/peers.log"; echo "=== $name rc=${PIPESTATUS[0]} in $(( $(date +%s) - t0 ))s" | tee -a "$OUT/peers.log"; }
step info bash -c 'date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; python -c "import sys,torch,triton; print(sys.version.split()[0], torch.__version__, torch.version.cuda, triton.__version__)"'
step overhead timeout 200 python bench/parts/overhead.py --rounds "$ROUNDS" --json "$OUT/overhead.json" --sass-dir "$W/sass"
step ours timeout 100 python bench/parts/overhead_peers.py ours --rounds "$ROUNDS" --json "$OUT/ours_events.json"
for m in proton_default proton_clock32_time_shift proton_global; do
  step "$m" timeout 90 python bench/parts/overhead_peers.py proton --proton-mode "$m" --rounds 10 --json "$OUT/$m.json" --capture "$W"
done
step iket timeout 150 python -c "$RUN_IKET" -o "$W/iket_time" --clobber profile --postprocess none -- \
    python bench/parts/overhead_peers.py iket --rounds 8 --batch 5 --json "$OUT/iket.json"
step iket_count timeout 150 python -c "$RUN_IKET" -o "$W/iket_cap" --clobber profile --postprocess json -- \
    python bench/parts/overhead_peers.py iket-count --json "$W/iket_count.json"
ls -la "$W/iket_cap" >> "$OUT/peers.log" 2>&1
shopt -s nullglob
step table python bench/parts/overhead_peers.py table "$OUT/overhead.json" "$OUT/ours_events.json" "$OUT"/iket*.json \
    "$OUT"/proton_*.json --iket-capture "$W/iket_cap" --out "$OUT/table.md"
grep -E "^=== |unprofiled|FMA-issue|exactness|note:|^# " "$OUT/peers.log" | tail -n 50
cat "$OUT/table.md" 2>/dev/null
