"""Does the pipeline model predict a change? Record the GEMM's variants on a GPU, then
predict each change from the base trace and compare with the measured one.

    python bench/whatif.py gpu                                    # GPU: traces and timings in $OUT
    python bench/whatif.py check GPU_OUT                          # CPU: bench/results/whatif/whatif_table.md
    python bench/whatif.py --help

``check`` is one table for every kernel (gemm/, persistent/, ... under GPU_OUT, the folder
``bench/whatif_all_gpu.sh`` fills); ``persistent-check`` is its persistent entry alone.
"""

import sys

from tools.runner import Part, run

PARTS = [
    Part("gpu", "bench/whatif_gpu.py", "record the base GEMM's level-2 trace and time its variants",
         "GPU", "bench/results/whatif_h100/whatif_table.md"),
    Part("check", "bench/whatif_check.py", "every kernel: predict each variant from its base trace (with an interval); compare with the timings",
         "CPU", "bench/results/whatif/whatif_table.md"),
    Part("persistent-gpu", "bench/persistent_gpu.py", "the same for the persistent GEMM (GPU half)",
         "GPU", "bench/results/persistent_h100/whatif_table.md"),
    Part("persistent-check", "bench/persistent_whatif_check.py", "the persistent entry of check alone",
         "CPU", "bench/results/whatif/whatif_table.md"),
]

if __name__ == "__main__":
    sys.exit(run(" ".join(__doc__.splitlines()[:2]), PARTS))
