"""Does the pipeline model predict a change? Trace each kernel's base and time its variants
on a GPU, then predict each change from the base alone and compare with the measured one.

    bash bench/gpu.sh                                   # GPU: every part, then the check
    python bench/whatif.py check GPU_OUT                # CPU: bench/results/whatif/whatif_table.md
    python bench/whatif.py --help
"""

import sys

from tools.runner import Part, run

TABLE = "bench/results/whatif/whatif_table.md"
PARTS = [
    Part("gemm", "bench/parts/gemm_whatif_gpu.py",
         "ws_gemm (or --persistent): zero-edit and probed base traces, variants timed", "GPU", TABLE),
    Part("fa4", "bench/parts/fa4_whatif_gpu.py", "the same for FA4's forward (--shape, --causal)",
         "GPU", TABLE),
    Part("quack", "bench/parts/quack_whatif_gpu.py", "the same for quack's Hopper GEMM", "GPU", TABLE),
    Part("cluster-gap", "bench/parts/cluster_gap_gpu.py",
         "an SM's gap between CTAs per cluster size (the model's cluster change)",
         "GPU", "bench/results/whatif/cluster_gap.json"),
    Part("check", "bench/parts/whatif_check.py",
         "every kernel: predict each variant from its base trace (with an interval); compare with the timings",
         "CPU", TABLE),
]

if __name__ == "__main__":
    sys.exit(run(" ".join(__doc__.splitlines()[:2]), PARTS))
