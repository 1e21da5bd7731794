"""How fast is the host side? Decoding and every writer on 1 M .. 50 M records, the
multi-rank merge and a recorded run's folder (CPU).

    python bench/host_speed.py decode --records 1000000 --repeat 3 --no-write
    python bench/host_speed.py --help
"""

import sys

from tools.runner import Part, run

PARTS = [
    Part("decode", "bench/parts/decode_speed.py", "decode_buffer throughput and peak memory, 1 M .. 50 M records",
         "CPU", "bench/results/host_speed/decode_speed.md"),
    Part("export", "bench/parts/export_scale.py", "pftrace, JSON and the aggregated overview, 1 M .. 50 M records",
         "CPU", "bench/results/host_speed/export_scale.md"),
    Part("ranks", "bench/parts/distributed_merge_bench.py", "rank 0's cost of gathering N ranks' buffers",
         "CPU", "bench/results/host_speed/distributed_merge.json"),
    Part("record", "bench/parts/record_folder_speed.py", "a 50 M-record cute-prof record run: its save, its summary",
         "CPU", "bench/results/host_speed/record_folder.md"),
]

if __name__ == "__main__":
    sys.exit(run(" ".join(__doc__.splitlines()[:2]), PARTS))
