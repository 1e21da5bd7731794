#!/usr/bin/env bash
# The final timing pass of issue #19 in one GPU call: the flight tests (hang-report latency
# after the numpy-only report), ws_gemm_bench and gemm_overhead (both CUPTI, shuffled).
#   source .gpu/setup.sh && bash bench/gpu_runs/run_final_benches.sh
set -uo pipefail
OUT=${OUT:-/tmp/cute_prof_final}; mkdir -p "$OUT"
export PYTHONPATH="$PWD:${PYTHONPATH:-}" PYTHONUNBUFFERED=1 CUTE_PROF_FIGURES="$OUT/figures.txt"
step() { local name=$1; shift; local t0=$(date +%s); echo "=== $name: $*" | tee -a "$OUT/run.log"
  "$@" >> "$OUT/run.log" 2>&1; echo "=== $name rc=$? in $(( $(date +%s) - t0 ))s" | tee -a "$OUT/run.log"; }
step info bash -c 'date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader'
step flight timeout 200 python -m pytest -v -rA tests/gpu/test_flight_gpu.py
step gemm timeout 200 python bench/parts/ws_gemm_bench.py --reps 100 --skip-correctness
cp "$OUT/ws_gemm_bench.json" "$OUT/ws_gemm_bench_final.json" 2>/dev/null
step gemm_overhead_8192 timeout 200 python bench/parts/gemm_overhead.py --rounds 100 --json "$OUT/gemm_overhead_8192.json"
step gemm_overhead_2048 timeout 150 python bench/parts/gemm_overhead.py --mnk 2048,2048,8192 --rounds 300 \
    --json "$OUT/gemm_overhead_2048x2048x8192.json"
grep -E "^=== |passed|failed|flight hang|x L0|vs L0|^variant|^L[0-9]|^persistent|^cuBLAS|^ws_gemm|exactness" "$OUT/run.log" "$OUT/figures.txt" | tail -n 60
