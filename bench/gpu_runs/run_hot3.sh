#!/usr/bin/env bash
# Issue 19, the four-instruction slices record (cursor = low half of the record address,
# latched capacity compare): its GPU tests, the probe (CUPTI; 4 chains, and the issue's own
# 1-chain shape), our slices beside IKET on IKET's loop nest (events; plain process and under
# run-iket), and the GEMM at level 2. Logs and JSON in $OUT.
#   source .gpu/setup.sh && bash bench/gpu_runs/run_hot3.sh
set -uo pipefail
OUT=${OUT:-/tmp/cute_prof_hot3}; mkdir -p "$OUT"; W=$(mktemp -d)
export PYTHONPATH="$PWD:${PYTHONPATH:-}" PYTHONUNBUFFERED=1 OVERHEAD_CHAINS=4
RUN_IKET='import sys; from iket.cli.main import entrypoint; sys.argv = ["run-iket"] + sys.argv[1:]; entrypoint()'
step() { local name=$1; shift; local t0=$(date +%s); echo "=== $name: $*" | tee -a "$OUT/run.log"
  "$@" 2>&1 | grep -vE "^Warning \(cta|^\[run-iket\]" >> "$OUT/run.log"
  echo "=== $name rc=${PIPESTATUS[0]} in $(( $(date +%s) - t0 ))s" | tee -a "$OUT/run.log"; }
step info bash -c 'date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; python -c "import sys,torch; print(sys.version.split()[0], torch.__version__)"'
if [ -z "${SKIP_TESTS:-}" ]; then
  step tests timeout 400 python -m pytest -v -rA -s tests/gpu/test_slices_gpu.py tests/gpu/test_slices_window_gpu.py \
      tests/gpu/test_ws_gemm_slices_analysis.py --junitxml="$OUT/junit.xml"
  step gemm_tests timeout 300 python -m pytest -q -rA tests/gpu/test_ws_gemm.py tests/gpu/test_ws_gemm_persistent.py \
      -k slices --junitxml="$OUT/junit_gemm.xml"
fi
step overhead timeout 200 python bench/parts/overhead.py --rounds 20 --json "$OUT/overhead.json" --sass-dir "$W/sass"
step overhead_1chain env OVERHEAD_CHAINS=1 timeout 200 python bench/parts/overhead.py --rounds 20 \
    --json "$OUT/overhead_1chain.json"
step ours_nested timeout 200 python bench/parts/overhead_peers.py ours --rounds 20 --json "$OUT/ours_nested.json"
step iket_nested timeout 200 python -c "$RUN_IKET" -o "$W/iket" --clobber profile --postprocess none -- \
    python bench/parts/overhead_peers.py iket --rounds 8 --batch 5 --json "$OUT/iket_nested.json"
step table python bench/parts/overhead_peers.py table "$OUT/overhead.json" "$OUT/ours_nested.json" \
    "$OUT/iket_nested.json" --iket-ranges 1081344 --out "$OUT/table.md"
if [ -z "${SKIP_GEMM:-}" ]; then
  step gemm_8192 timeout 200 python bench/parts/gemm_overhead.py --rounds 100 --json "$OUT/gemm_overhead_8192.json"
  step gemm_2048x2048x8192 timeout 150 python bench/parts/gemm_overhead.py --mnk 2048,2048,8192 --rounds 300 \
      --json "$OUT/gemm_overhead_2048x2048x8192.json"
fi
grep -E "^=== |passed|failed|wrap test|^# check|x L0|^variant|^L[0-9]|^persistent|^cuBLAS|exactness|^slices|^staged|unprofiled" \
    "$OUT/run.log" | tail -n 80
cat "$OUT/table.md" 2>/dev/null | tail -n 30
