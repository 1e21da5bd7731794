#!/usr/bin/env bash
# One device call: the zero-edit GPU tests (ws_gemm, FA4, quack, opt-in regions), the FA4 example (trace,
# picture, analysis) and the quack example. Needs .gpu/ and .whl/ (requirements-gpu.txt).
set -uo pipefail
source bench/tools/gpu_env.sh || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/device.txt"
python -m pytest -q -rA tests/gpu/test_autoprof_gpu.py tests/gpu/test_autoprof_quack_gpu.py tests/gpu/test_autoprof_regions_gpu.py 2>&1 | tee "$OUT/gpu_tests.log" | tail -12
python examples/flash_attention.py 2>&1 | grep -v "Warning\|exe_args\|warn_once\|SmemAllocator" | tee "$OUT/fa4_example_output.txt" | tail -30
python examples/quack_gemm.py 2>&1 | grep -v "Warning\|exe_args\|warn_once" > "$OUT/quack_example_output.txt"
python examples/quack_gemm.py --schedule pingpong 2>&1 | grep -v "Warning\|exe_args\|warn_once" >> "$OUT/quack_example_output.txt"
tar czf "$OUT/fa4_out.tgz" examples/traces/fa4_* docs/fa4_zero_edit_timeline.png
