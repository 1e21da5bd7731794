#!/usr/bin/env bash
# One GPU call: the flight recorder's cost on the GEMM (bench/parts/flight_gemm_cost.py) and
# Proton's rows of the side-by-side overhead bench (bench/parts/overhead_peers.py proton).
#   source .gpu/setup.sh && bash bench/gpu_runs/run_flight_gemm_proton.sh
set -uo pipefail
OUT=${OUT:-/tmp/cute_prof_fgp}; mkdir -p "$OUT"; W=$(mktemp -d)
export PYTHONPATH="$PWD:${PYTHONPATH:-}" PYTHONUNBUFFERED=1 OVERHEAD_CHAINS=4
step() { local name=$1; shift; local t0=$(date +%s); echo "=== $name: $*" | tee -a "$OUT/run.log"
  "$@" 2>&1 | grep -v "^Warning (cta" >> "$OUT/run.log"; echo "=== $name rc=${PIPESTATUS[0]} in $(( $(date +%s) - t0 ))s" | tee -a "$OUT/run.log"; }
step info bash -c 'date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader'
[ "${SKIP_GEMM:-0}" = 1 ] || step flight_gemm timeout 300 python bench/parts/flight_gemm_cost.py --rounds 20 --json "$OUT/flight_gemm.json"
for m in proton_default proton_clock32_time_shift proton_global; do
  step "$m" timeout 150 python bench/parts/overhead_peers.py proton --proton-mode "$m" --rounds 5 --json "$OUT/$m.json" --capture "$W"
done
grep -vE "^\[" "$OUT/run.log" | tail -n 40
