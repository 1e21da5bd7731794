#!/usr/bin/env bash
# ptxas's own account of FA4's forward compiled plain and in zero-edit mode: registers,
# spills and any "wgmma serialized" advisory (the DSL compiles without printing them).
# Needs .gpu/ and .whl/ (bench/tools/gpu_env.sh). The PTX is .version 9.4: a ptxas older
# than CUDA 13.1 needs that line lowered to 9.0 first.
set -uo pipefail
source bench/tools/gpu_env.sh || exit 1
for variant in plain zero_edit waits_only; do
  dir=/tmp/ptx_$variant; mkdir -p $dir
  CUTE_DSL_KEEP=ptx CUTE_DSL_DUMP_DIR=$dir python bench/zero_edit_probe.py --once \
    --variants "$variant" --shape 1,1024,16,128 2>&1 | grep -v Warning | tail -3
  for f in $(find $dir -name "*.ptx"); do
    echo "== $variant $(basename $f)"
    cp "$f" "$OUT/$variant.ptx"
    ptxas -arch=sm_90a -v "$f" -o /dev/null 2>&1 | tail -12
  done 2>&1 | tee "$OUT/ptxas_$variant.txt"
done
