"""What does recording cost a real kernel? This repository's warp-specialised GEMM at each
profiling level and write path; FA4, quack and the GEMM in zero-edit mode, light and full (GPU).

    python bench/kernel_cost.py gemm --rounds 100 --json gemm_overhead_8192.json
    python bench/kernel_cost.py light --rounds 20 --json light_cost.json
    python bench/kernel_cost.py --help
"""

import sys

from tools.runner import Part, run

PARTS = [
    Part("gemm", "bench/parts/gemm_overhead.py",
         "level 0/1/2 on every write path and the persistent kernel, x level 0, CUPTI, shuffled rounds",
         "GPU", "bench/results/gemm_cost/README.md"),
    Part("light", "bench/parts/light_cost.py",
         "plain, light and full zero-edit recording of FA4 forward and backward, quack and ws_gemm",
         "GPU", "bench/results/light_cost/README.md"),
]

if __name__ == "__main__":
    sys.exit(run(" ".join(__doc__.splitlines()[:2]), PARTS))
