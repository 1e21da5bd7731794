#!/usr/bin/env bash
# ptxas's own account of FA4's forward compiled plain and in zero-edit mode: registers,
# spills and any "wgmma serialized" advisory (the DSL compiles without printing them).
# Needs .gpu/ and .whl/ (see bench/zero_edit_gpu.sh).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
source .gpu/setup.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
for variant in plain zero_edit waits_only; do
  dir=/tmp/ptx_$variant; mkdir -p $dir
  CUTE_DSL_KEEP=ptx CUTE_DSL_DUMP_DIR=$dir python - "$variant" <<'PY' 2>&1 | grep -v Warning | tail -3
import sys, contextlib
sys.path.insert(0, "bench"); sys.path.insert(0, ".")
import torch, cute_prof
from flash_attn.cute import interface as fa
from examples.flash_attention import inputs
import zero_edit_probe as probe
variant = sys.argv[1]
q, k, v = inputs(1, 1024, 16, 128)
context = probe.VARIANTS.get(variant, contextlib.nullcontext)
with context():
    if variant == "plain":
        fa._flash_attn_fwd(q, k, v)
    else:
        with cute_prof.autoprofile(per_warp=4096):
            fa._flash_attn_fwd(q, k, v)
torch.cuda.synchronize()
print(variant, "compiled")
PY
  for f in $(find $dir -name "*.ptx"); do
    echo "== $variant $(basename $f)"
    cp "$f" "$OUT/$variant.ptx"
    ptxas -arch=sm_90a -v "$f" -o /dev/null 2>&1 | tail -12
  done 2>&1 | tee "$OUT/ptxas_$variant.txt"
done
