#!/usr/bin/env bash
# One device call: zero-edit GPU tests, the FA4 example (traces, picture) and the cost bench.
# Needs .gpu/ (../shared/gpu/make-bundle.sh) and .whl/ (requirements-gpu.txt).
set -uo pipefail
source bench/tools/gpu_env.sh || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/device.txt"
python -m pytest -q -x tests/gpu/test_autoprof_gpu.py 2>&1 | tee "$OUT/tests.log" | tail -25
python examples/flash_attention.py 2>&1 | tee "$OUT/fa4.log" | tail -60
tar czf "$OUT/fa4_out.tgz" examples/traces/fa4_* docs/fa4_zero_edit_timeline.png 2>/dev/null
python bench/zero_edit_cost.py --rounds ${ROUNDS:-20} --json "$OUT/cost.json" 2>&1 | tee "$OUT/cost.log" | tail -30
