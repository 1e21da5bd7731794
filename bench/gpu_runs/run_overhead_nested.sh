#!/usr/bin/env bash
# Issue 19, second look: our slices and IKET on the same loop nest (one record per outer
# iteration, no run-time record test), events in a plain process and under run-iket.
#   source .gpu/setup.sh && bash bench/gpu_runs/run_overhead_nested.sh
set -uo pipefail
OUT=${OUT:-/tmp/cute_prof_nested}; mkdir -p "$OUT"
export PYTHONPATH="$PWD:${PYTHONPATH:-}" PYTHONUNBUFFERED=1 OVERHEAD_CHAINS=4
RUN_IKET='import sys; from iket.cli.main import entrypoint; sys.argv = ["run-iket"] + sys.argv[1:]; entrypoint()'
step() { local name=$1; shift; local t0=$(date +%s); echo "=== $name: $*" | tee -a "$OUT/nested.log"
  "$@" >> "$OUT/nested.log" 2>&1; echo "=== $name rc=$? in $(( $(date +%s) - t0 ))s" | tee -a "$OUT/nested.log"; }
step info bash -c 'date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader'
step ours timeout 200 python bench/parts/overhead_peers.py ours --rounds 20 --json "$OUT/ours_nested.json"
step iket timeout 200 python -c "$RUN_IKET" -o /tmp/iket_nested --clobber profile --postprocess none -- \
    python bench/parts/overhead_peers.py iket --rounds 8 --batch 5 --json "$OUT/iket_nested.json"
grep -vE "^\[run-iket\]" "$OUT/nested.log" | tail -n 40
