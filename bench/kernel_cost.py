"""What does recording cost a real kernel? This repository's warp-specialised GEMM at each
profiling level and write path, and FA4's forward and the GEMM in zero-edit mode (GPU).

    python bench/kernel_cost.py gemm --rounds 100 --json gemm_overhead_8192.json
    python bench/kernel_cost.py zero-edit --json cost.json
    python bench/kernel_cost.py --help
"""

import sys

from tools.runner import Part, run

PARTS = [
    Part("gemm", "bench/parts/gemm_overhead.py",
         "level 0/1/2 on every write path and the persistent kernel, x level 0, CUPTI, shuffled rounds",
         "GPU", "bench/results/gemm_cost/README.md"),
    Part("zero-edit", "bench/parts/zero_edit_cost.py",
         "FA4's forward and ws_gemm recorded by autoprofile() against their plain kernels",
         "GPU", "bench/results/zero_edit_h100/README.md"),
]

if __name__ == "__main__":
    sys.exit(run(" ".join(__doc__.splitlines()[:2]), PARTS))
