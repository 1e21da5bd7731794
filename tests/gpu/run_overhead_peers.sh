#!/usr/bin/env bash
# Issue 19's side-by-side bench in one GPU call: our write paths (bench/overhead.py, CUPTI),
# Triton's Proton and NVIDIA IKET (bench/overhead_peers.py, CUDA events) on the same probe,
# then one table. Logs and JSON in $OUT.
#   source .gpu/setup.sh && bash tests/gpu/run_overhead_peers.sh
set -uo pipefail
OUT=${OUT:-/tmp/cute_prof_peers}; mkdir -p "$OUT"; W=$(mktemp -d)
export PYTHONPATH="$PWD:${PYTHONPATH:-}" PYTHONUNBUFFERED=1 OVERHEAD_CHAINS=${OVERHEAD_CHAINS:-4}
ROUNDS=${ROUNDS:-10}
RUN_IKET='import sys; from iket.cli.main import entrypoint; sys.argv = ["run-iket"] + sys.argv[1:]; entrypoint()'
step() { local name=$1; shift; local t0=$(date +%s); echo "=== $name: $*" | tee -a "$OUT/peers.log"
  "$@" >> "$OUT/peers.log" 2>&1; echo "=== $name rc=$? in $(( $(date +%s) - t0 ))s" | tee -a "$OUT/peers.log"; }
step info bash -c 'date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; python -c "import sys,torch,triton; print(sys.version.split()[0], torch.__version__, torch.version.cuda, triton.__version__)"'
step iket_help timeout 30 python -c "$RUN_IKET" profile --help
step overhead timeout 240 python bench/overhead.py --rounds "$ROUNDS" --json "$OUT/overhead.json" --sass-dir "$W/sass"
step proton timeout 150 python bench/overhead_peers.py proton --rounds "$ROUNDS" --json "$OUT/proton.json" --capture "$W"
step iket timeout 200 python -c "$RUN_IKET" -o "$W/iket_cap" --clobber profile --postprocess json -- \
    python bench/overhead_peers.py iket --rounds "$ROUNDS" --json "$OUT/iket.json"
ls -la "$W/iket_cap" "$OUT" >> "$OUT/peers.log" 2>&1
step table python bench/overhead_peers.py table "$OUT/overhead.json" "$OUT"/iket*.json "$OUT/proton.json" \
    --iket-capture "$W/iket_cap" --out "$OUT/table.md"
grep -E "^=== |unprofiled|FMA-issue|exactness|note:|ns/rec/SM" "$OUT/peers.log" | tail -n 40
cat "$OUT/table.md" 2>/dev/null
