#!/usr/bin/env bash
# Where in FA4's SASS do the warps wait longer once zero-edit records are in? Nsight Compute's
# per-instruction warp-stall sampling of one forward (b4 s4096 h16 d128), plain and in each
# of $VARIANTS, summarised by bench/tools/sass_stalls.py; the SASS of each build next to it.
# Then the probe times $TIME_VARIANTS against the plain kernel (CUPTI, shuffled rounds).
# Needs .gpu/ and .whl/ (bench/tools/gpu_env.sh).
set -uo pipefail
source bench/tools/gpu_env.sh || exit 1
csvs=()
for variant in ${VARIANTS:-plain zero_edit}; do
  ncu --section SourceCounters --section WarpStateStats -k regex:kernel_cutlass_kernel_flash -c 1 \
    -f -o "/tmp/rep_$variant" python bench/zero_edit_probe.py --once --variants "$variant" \
    > "$OUT/ncu_log_$variant.txt" 2>&1 || { tail -20 "$OUT/ncu_log_$variant.txt"; continue; }
  ncu -i "/tmp/rep_$variant.ncu-rep" --page source --csv --print-source sass > "/tmp/sass_$variant.csv" 2>&1
  gzip -c "/tmp/sass_$variant.csv" > "$OUT/sass_$variant.csv.gz"
  csvs+=("/tmp/sass_$variant.csv")
done
python bench/tools/sass_stalls.py "${csvs[@]}" --top ${TOP:-30} 2>&1 | tee "$OUT/sass_stalls.txt"
if [ -n "${TIME_VARIANTS:-}" ]; then
  for group in $TIME_VARIANTS; do  # groups separated by spaces, variants within by commas
    python bench/zero_edit_probe.py --rounds ${ROUNDS:-20} --variants "$group" \
      --json "$OUT/probe_${group//,/_}.json" 2>&1 | grep -v Warning | tail -8
  done
fi
