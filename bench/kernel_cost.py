"""What does profiling cost a real kernel? The warp-specialised GEMM (examples/ws_gemm.py)
at each profiling level and write path, beside cuBLAS (GPU).

    python bench/kernel_cost.py gemm --rounds 100 --json gemm_overhead_8192.json
    python bench/kernel_cost.py --help
"""

import sys

from tools.runner import Part, run

PARTS = [
    Part("gemm", "bench/parts/gemm_overhead.py",
         "level 0/1/2 on every write path and the persistent kernel, x level 0, CUPTI, shuffled rounds",
         "GPU", "bench/results/gemm_cost/README.md"),
    Part("ws_gemm", "bench/parts/ws_gemm_bench.py", "the GEMM's correctness sweep, then its speed beside cuBLAS",
         "GPU", "bench/results/gemm_cost/ws_gemm_bench.json"),
    Part("flight", "bench/parts/flight_gemm_cost.py", "level 2 plus flight-recorder marks on every wait",
         "GPU", "bench/results/flight_cost/flight_cost.md"),
]

if __name__ == "__main__":
    sys.exit(run(" ".join(__doc__.splitlines()[:2]), PARTS))
