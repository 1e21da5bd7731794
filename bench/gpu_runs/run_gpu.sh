#!/usr/bin/env bash
# The whole GPU pass in one call: device facts, the GPU test suite, memcheck on the
# overflow cases, the example (saving its recording), and the benchmarks. Logs go to $OUT.
#   source .gpu/setup.sh && bash bench/gpu_runs/run_gpu.sh [steps...]
set -uo pipefail
OUT=${OUT:-/tmp/cute_prof_gpu}; mkdir -p "$OUT"
steps=${*:-"info tests sanitize example overhead gemm gemmprof gemmbig gemmsmall"}
export PYTHONPATH="$PWD:${PYTHONPATH:-}"
export CUTE_PROF_FIGURES="$OUT/figures.txt"
status=0
run() {  # name, command...
  local name=$1; shift
  local t0=$(date +%s)
  echo "=== $name: $*" | tee -a "$OUT/summary.txt"
  "$@" > "$OUT/$name.log" 2>&1; local rc=$?
  echo "=== $name: rc=$rc in $(( $(date +%s) - t0 ))s" | tee -a "$OUT/summary.txt"
  tail -n 25 "$OUT/$name.log"
  [ $rc -eq 0 ] || status=1
}
for step in $steps; do
  case $step in
    info) run info bash -c 'date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv; python -c "import torch,cutlass,sys; print(sys.version.split()[0], torch.__version__, torch.version.cuda, cutlass.__version__ if hasattr(cutlass, \"__version__\") else \"\")"' ;;
    tests) run tests python -m pytest -v -rA tests/gpu tests/test_seed_compat.py tests/test_recorder_scope.py --junitxml="$OUT/junit.xml" ;;
    sanitize) run sanitize compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 3 python bench/gpu_runs/sanitize_probe.py ;;
    example) run example python -m cute_prof.example -o "$OUT/profiler_example_trace.json" --save-recording "$OUT/example_recording.npz" ;;
    overhead) run overhead bash -c 'for i in 1 2 3; do python bench/parts/overhead.py --json "$OUT/overhead_$i.json" || exit 1; done' ;;
    gemm) run gemm timeout 300 python bench/parts/ws_gemm_bench.py --reps 100 ;;
    gemmprof) run gemmprof timeout 200 python examples/ws_gemm_profile.py -o /tmp/ws_gemm_l2.json ;;
    gemmbig) run gemmbig timeout 200 python examples/ws_gemm_profile.py --mnk 8192,8192,8192 -o /tmp/ws_gemm_8192.json ;;
    gemm128) run gemm128 timeout 200 python examples/ws_gemm_profile.py --tile-n 128 -o /tmp/ws_gemm_t128.json ;;
    gemmsmall) run gemmsmall timeout 200 python examples/ws_gemm_profile.py --mnk 256,1024,4096 -o "$OUT/ws_gemm_small_trace.json" ;;
  esac
done
python bench/gpu_runs/make_log.py "$OUT" "bash bench/gpu_runs/run_gpu.sh $steps"
# keep what comes back small and few: one archive of the logs, the log, and the traces
tar -C "$OUT" -czf /tmp/gpu_logs.tgz --exclude='*.tgz' --exclude='*trace*' . && mv /tmp/gpu_logs.tgz "$OUT/"
cat "$OUT/summary.txt"
find "$OUT" -maxdepth 1 -type f ! -name 'GPU_LOG.md' ! -name 'gpu_logs.tgz' ! -name '*trace*' ! -name '*.npz' -delete
exit $status
