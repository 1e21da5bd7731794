#!/usr/bin/env bash
# Flight-recorder GPU pass in one call: GPU tests (hang/trap in killed children), memcheck
# on the healthy pipeline, a dump read back by the CLI, the cost bench. Few files come back:
# flight_all.log (every log, concatenated), flight_cost.json, figures.txt.
#   source .gpu/setup.sh && bash bench/gpu_runs/run_flight.sh
set -uo pipefail
OUT=${OUT:-/tmp/cute_prof_flight}; mkdir -p "$OUT"; W=$(mktemp -d)
export PYTHONPATH="$PWD:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
export CUTE_PROF_FIGURES="$OUT/figures.txt"
step() { local name=$1; shift; echo "=== $name: $*" >> "$W/all.log"; "$@" >> "$W/all.log" 2>&1; echo "=== $name rc=$?" | tee -a "$W/all.log"; }
step info bash -c 'date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python -c "import sys,torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda)"'
step tests timeout 200 python -m pytest -v -rA -s tests/gpu/test_flight_gpu.py
step memcheck timeout 120 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 3 python tests/gpu/flight_kernels.py ok --ctas 8 --k-tiles 16 --timeout 60
step hangdump timeout 60 python tests/gpu/flight_kernels.py hang --ctas 16 --k-tiles 32 --stop-k 9 --timeout 1.5 --dump "$W/hang_dump.npz"
step cli python -m cute_prof.cli flight "$W/hang_dump.npz" -o "$W/hang_partial_trace.json"
step cost timeout 100 python bench/parts/flight_cost.py --rounds 5 --json "$OUT/flight_cost.json"
step leftover nvidia-smi --query-compute-apps=pid,name --format=csv
cp "$W/all.log" "$OUT/flight_all.log"
grep -E "^=== |PASSED|FAILED|ERROR|kernel |warps|records decoded|variant|^record|^flight|^none" "$W/all.log" | tail -n 80
