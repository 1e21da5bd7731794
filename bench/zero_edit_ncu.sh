#!/usr/bin/env bash
# Nsight Compute's warp-state sampling of FA4's forward, plain and in zero-edit mode: which
# stall reason grows when the records are in. Needs .gpu/ and .whl/ (bench/zero_edit_gpu.sh).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
source .gpu/setup.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
for variant in ${VARIANTS:-plain zero_edit store_never}; do
  ncu --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__inst_executed.sum,gpu__time_duration.sum,smsp__issue_active.avg.pct_of_peak_sustained_active" -k regex:kernel_cutlass_kernel_flash -c 1 \
    python - "$variant" > "$OUT/ncu_$variant.txt" 2>&1 <<'PY'
import sys, contextlib
sys.path.insert(0, "bench"); sys.path.insert(0, ".")
import torch, cute_prof
from flash_attn.cute import interface as fa
from examples.flash_attention import inputs
import zero_edit_probe as probe
variant = sys.argv[1]
q, k, v = inputs(4, 4096, 16, 128)
if variant == "plain":
    fa._flash_attn_fwd(q, k, v)
else:
    with probe.VARIANTS[variant]():
        with cute_prof.autoprofile(per_warp=4096):
            fa._flash_attn_fwd(q, k, v)
torch.cuda.synchronize()
PY
  echo "== $variant"; grep -E "stalled|inst_executed|duration|issue_active" "$OUT/ncu_$variant.txt" | awk '{print $1, $(NF)}' | head -40
done
