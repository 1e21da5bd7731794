#!/usr/bin/env bash
# issue 19 GPU pass: device facts, slices GPU tests, the CUPTI overhead bench. Logs to $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/hot2}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv
  python -c "import torch,sys; print(sys.version.split()[0], torch.__version__, torch.version.cuda)"
  which nvdisasm cuobjdump; } > "$OUT/info.log" 2>&1
cat "$OUT/info.log"
timeout 120 python -m pytest -q -rA tests/gpu/test_slices_gpu.py > "$OUT/tests.log" 2>&1; echo "tests rc=$?"
tail -n 15 "$OUT/tests.log"
for c in 1 2; do OVERHEAD_CHAINS=$c timeout 200 python bench/parts/overhead.py --rounds ${ROUNDS:-25} --json "$OUT/overhead_chains$c.json" --sass-dir "$OUT" > "$OUT/overhead_chains$c.log" 2>&1; echo "bench chains=$c rc=$?"; tail -n 22 "$OUT/overhead_chains$c.log"; done
