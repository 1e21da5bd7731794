#!/usr/bin/env bash
# Flight-recorder GPU pass in one call: GPU tests (hang/trap in killed children), memcheck
# on the healthy pipeline and the trap-free cost kernel, a dump read back by the CLI, cost.
#   source .gpu/setup.sh && bash tests/gpu/run_flight.sh
set -uo pipefail
OUT=${OUT:-/tmp/cute_prof_flight}; mkdir -p "$OUT"
export PYTHONPATH="$PWD:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
export CUTE_PROF_FIGURES="$OUT/figures.txt"
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python -c "import sys,torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda)"; } > "$OUT/info.log" 2>&1
timeout 300 python -m pytest -v -rA -s tests/gpu/test_flight_gpu.py > "$OUT/tests.log" 2>&1; echo "tests rc=$?" | tee -a "$OUT/summary.txt"
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 3 python tests/gpu/flight_kernels.py ok --ctas 8 --k-tiles 16 --timeout 60 > "$OUT/memcheck_ok.log" 2>&1; echo "memcheck ok-pipeline rc=$?" | tee -a "$OUT/summary.txt"
timeout 60 python tests/gpu/flight_kernels.py hang --ctas 16 --k-tiles 32 --stop-k 9 --timeout 1.5 --dump "$OUT/hang_dump.npz" > "$OUT/hang_dump.log" 2>&1; echo "hang dump rc=$?" | tee -a "$OUT/summary.txt"
python -m cute_prof.cli flight "$OUT/hang_dump.npz" -o "$OUT/hang_partial_trace.json" > "$OUT/cli_flight.log" 2>&1; echo "cli flight rc=$?" | tee -a "$OUT/summary.txt"
timeout 150 python bench/flight_cost.py --json "$OUT/flight_cost.json" > "$OUT/flight_cost.log" 2>&1; echo "cost rc=$?" | tee -a "$OUT/summary.txt"
nvidia-smi --query-compute-apps=pid,name --format=csv > "$OUT/leftover_procs.log" 2>&1
tail -n 30 "$OUT/tests.log"; cat "$OUT/cli_flight.log" "$OUT/flight_cost.log" "$OUT/summary.txt"
