"""How fast are the conclusions? analyze, flows, diff, report and the pipeline model on
~5 M records (CPU).

    python bench/analysis_speed.py whatif tests/data/gemm_traces/whatif_base.npz --copies 576
    python bench/analysis_speed.py --help
"""

import sys

from tools.runner import Part, run

PARTS = [
    Part("scale", "bench/parts/analysis_scale.py", "analyze, flows, diff and report on ~5 M records",
         "CPU", "bench/results/analysis_speed/analysis_scale.md"),
    Part("whatif", "bench/parts/whatif_scale.py", "the pipeline model with one what-if on ~5 M records",
         "CPU", "bench/results/analysis_speed/whatif_scale.txt"),
]

if __name__ == "__main__":
    sys.exit(run(" ".join(__doc__.splitlines()[:2]), PARTS))
