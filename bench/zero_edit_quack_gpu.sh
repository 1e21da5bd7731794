#!/usr/bin/env bash
# One device call: quack's GEMM in zero-edit mode (example and GPU test) and the zero-edit
# GPU tests. Needs .gpu/ (../shared/gpu/make-bundle.sh) and .whl/ (requirements-fa4.txt).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 QUACK_CACHE_ENABLED=0
source .gpu/setup.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/device.txt"
python examples/quack_gemm.py --json "$OUT/quack_4096.json" 2>&1 | tee "$OUT/quack_example.log" | tail -40
python examples/quack_gemm.py --schedule pingpong 2>&1 | tail -12
python -m pytest -q -rA tests/gpu/test_autoprof_quack_gpu.py ${MORE_TESTS:-} 2>&1 | tee "$OUT/tests.log" | tail -15
