"""Does the pipeline model predict a change? Record the GEMM's variants on a GPU, then
predict each change from the base trace and compare with the measured one.

    python bench/whatif.py gpu                                    # GPU: traces and timings in $OUT
    python bench/whatif.py check OUT_DIR > whatif_table.md        # CPU: the table
    python bench/whatif.py --help

The parts keep their own command lines: ``python bench/whatif_check.py DIR`` and the others
work as before.
"""

import sys

from tools.runner import Part, run

PARTS = [
    Part("gpu", "bench/whatif_gpu.py", "record the base GEMM's level-2 trace and time its variants",
         "GPU", "bench/results/whatif_h100/whatif_table.md"),
    Part("check", "bench/whatif_check.py", "predict each variant from the base trace; compare with the timings",
         "CPU", "bench/results/whatif_h100/whatif_table.md"),
    Part("persistent-gpu", "bench/persistent_gpu.py", "the same for the persistent GEMM (GPU half)",
         "GPU", "bench/results/persistent_h100/whatif_table.md"),
    Part("persistent-check", "bench/persistent_whatif_check.py", "the persistent GEMM's what-if table",
         "CPU", "bench/results/persistent_h100/whatif_table.md"),
]

if __name__ == "__main__":
    sys.exit(run(" ".join(__doc__.splitlines()[:2]), PARTS))
