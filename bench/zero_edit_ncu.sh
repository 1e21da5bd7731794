#!/usr/bin/env bash
# Nsight Compute's warp-state sampling of FA4's forward, plain and in zero-edit mode: which
# stall reason grows when the records are in. Needs .gpu/ and .whl/ (bench/tools/gpu_env.sh).
set -uo pipefail
source bench/tools/gpu_env.sh || exit 1
for variant in ${VARIANTS:-plain zero_edit store_never}; do
  ncu --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__inst_executed.sum,gpu__time_duration.sum,smsp__issue_active.avg.pct_of_peak_sustained_active" -k regex:kernel_cutlass_kernel_flash -c 1 \
    python bench/zero_edit_probe.py --once --variants "$variant" > "$OUT/ncu_$variant.txt" 2>&1
  echo "== $variant"; grep -E "stalled|inst_executed|duration|issue_active" "$OUT/ncu_$variant.txt" | awk '{print $1, $(NF)}' | head -40
done
