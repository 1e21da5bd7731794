#!/usr/bin/env bash
# The 2-GPU pass (nvidia-h200-x2): examples/two_gpu.py under torchrun, NVLS off.
#   source .gpu/setup.sh && bash bench/gpu_runs/run_two_gpu.sh      (logs and trace in $OUT)
set -uo pipefail
OUT=${OUT:-/tmp/cute_prof_two_gpu}; mkdir -p "$OUT"
export PYTHONPATH="$PWD:${PYTHONPATH:-}" NCCL_NVLS_ENABLE=0
{
date -u; nvidia-smi --query-gpu=index,name,driver_version --format=csv
python -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda, torch.cuda.nccl.version())"
echo "NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE"
t0=$(date +%s)
timeout 240 python -m torch.distributed.run --nproc-per-node 2 examples/two_gpu.py -o "$OUT/two_gpu_trace.json"
echo "two_gpu rc=$? in $(( $(date +%s) - t0 ))s"
} > "$OUT/two_gpu.log" 2>&1
tail -c 8000 "$OUT/two_gpu.log"
