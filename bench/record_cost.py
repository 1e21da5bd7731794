"""What does one record cost? The probe kernel, per write path; one
zero-edit record on a dependency chain; the flight recorder's marks (GPU).

    python bench/record_cost.py probe --rounds 30 --json overhead.json
    python bench/record_cost.py --help
"""

import sys

from tools.runner import Part, run

PARTS = [
    Part("probe", "bench/parts/overhead.py", "every write path on the FMA probe, CUPTI: slope and x unprofiled",
         "GPU", "bench/results/record_cost/table.md"),
    Part("chain", "bench/parts/record_chain.py",
         "one zero-edit record on a dependency chain: two warps' 1-stage PipelineAsync ping-pong",
         "GPU", "bench/results/record_cost/chain.md"),
    Part("flight", "bench/parts/flight_cost.py", "flight-recorder position marks against a normal record",
         "GPU", "bench/results/flight_cost/flight_cost.md"),
]

if __name__ == "__main__":
    sys.exit(run(" ".join(__doc__.splitlines()[:2]), PARTS))
