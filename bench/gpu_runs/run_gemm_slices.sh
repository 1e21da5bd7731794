#!/usr/bin/env bash
# Issue 19, the GEMM on the slices path: the span GPU tests, the GEMM's profiling cost per write
# path (CUPTI, shuffled; bench/parts/gemm_overhead.py) at two shapes, and the probe with span pairs.
#   source .gpu/setup.sh && bash bench/gpu_runs/run_gemm_slices.sh [pytest test paths...]
set -uo pipefail
OUT=${OUT:-/tmp/cute_prof_gemm_slices}; mkdir -p "$OUT"
export PYTHONPATH="$PWD:${PYTHONPATH:-}" PYTHONUNBUFFERED=1 OVERHEAD_CHAINS=4
step() { local name=$1; shift; local t0=$(date +%s); echo "=== $name: $*" | tee -a "$OUT/run.log"
  "$@" >> "$OUT/run.log" 2>&1; echo "=== $name rc=$? in $(( $(date +%s) - t0 ))s" | tee -a "$OUT/run.log"; }
step info bash -c 'date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; python -c "import sys,torch; print(sys.version.split()[0], torch.__version__)"'
TESTS=${*:-tests/gpu/test_slices_gpu.py}
step tests timeout 300 python -m pytest -v -rA $TESTS --junitxml="$OUT/junit.xml"
step gemm_8192 timeout 200 python bench/parts/gemm_overhead.py --rounds 100 --json "$OUT/gemm_overhead_8192.json"
step gemm_2048x2048x8192 timeout 120 python bench/parts/gemm_overhead.py --mnk 2048,2048,8192 --rounds 300 \
    --json "$OUT/gemm_overhead_2048x2048x8192.json"
[ -n "${PROBE:-}" ] && step probe timeout 200 python bench/parts/overhead.py --rounds 20 --json "$OUT/overhead.json"
# the issue's own probe: one dependent FMA chain per thread
[ -n "${PROBE1:-}" ] && step probe_1chain env OVERHEAD_CHAINS=1 timeout 200 python bench/parts/overhead.py --rounds 20 \
    --json "$OUT/overhead_1chain.json"
grep -E "^=== |passed|failed|error|^# check|x L0|^variant|^L[0-9]|^persistent|^cuBLAS|exactness|^chains|^span_pairs|^slices|^staged" "$OUT/run.log" | tail -n 70
