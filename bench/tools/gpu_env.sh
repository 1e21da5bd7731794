# Sourced by the GPU scripts in bench/, in the repository root on the device machine: install
# the carried wheels (.whl/: requirements-gpu.txt), source the CuTe DSL bundle (.gpu/, made
# by ../shared/gpu/make-bundle.sh) and make $OUT.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || return 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 QUACK_CACHE_ENABLED=0  # quack compiles in-process
source .gpu/setup.sh
export OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
