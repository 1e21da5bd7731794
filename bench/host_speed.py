"""How fast is the host side? Decoding, statistics and every writer on 1 M .. 50 M records,
IKET captures and the multi-rank merge (CPU).

    python bench/host_speed.py decode --records 1000000 --repeat 3 --no-write
    python bench/host_speed.py --help
"""

import sys

from tools.runner import Part, run

PARTS = [
    Part("decode", "bench/parts/decode_speed.py", "decode_buffer throughput and peak memory, 1 M .. 50 M records",
         "CPU", "bench/results/host_speed/decode_speed.md"),
    Part("scale", "bench/parts/host_scale.py", "decode, summary, JSON and pftrace, 1 M .. 50 M records",
         "CPU", "bench/results/host_speed/host_scale.md"),
    Part("export", "bench/parts/export_scale.py", "pftrace, JSON and the aggregated overview, 1 M .. 50 M records",
         "CPU", "bench/results/host_speed/export_scale.md"),
    Part("quick", "bench/parts/host_bench.py", "decode and JSON export of one 1 M-record buffer",
         "CPU", "bench/results/host_speed/host_bench.md"),
    Part("iket", "bench/parts/iket_load_bench.py", "load time and memory of a large IKET capture",
         "CPU", "bench/results/host_speed/iket_load.json"),
    Part("ranks", "bench/parts/distributed_merge_bench.py", "rank 0's cost of gathering N ranks' buffers",
         "CPU", "bench/results/host_speed/distributed_merge.json"),
]

if __name__ == "__main__":
    sys.exit(run(" ".join(__doc__.splitlines()[:2]), PARTS))
