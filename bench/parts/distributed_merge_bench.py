"""Rank-0 cost of the distributed gather, measured on this machine without GPUs: each of N
ranks contributes a buffer of R records; the payloads are pickled and unpickled (what
``gather_object`` does on top of the transfer) and merged. Prints and optionally writes
seconds, bytes and peak RSS, the figures behind the README's scale table.

  python bench/parts/distributed_merge_bench.py --ranks 8 --records 1000000 --json bench/results/host_speed/distributed_merge.json
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import platform
import resource
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from cute_prof import layout  # noqa: E402
from cute_prof.distributed import merge_rank_payloads, rank_payload  # noqa: E402


def rank_buffer(rank: int, records: int, rng) -> np.ndarray:
    words = np.zeros(layout.buffer_words(records), dtype=np.int64)
    starts = 1_800_000_000_000_000_000 + np.sort(rng.integers(0, 10**9, size=records))
    layout.write_records(words, starts, rng.integers(32, 5000, size=records),
                         rng.integers(0, 8, size=records), rng.integers(0, 4096, size=records),
                         sm=rng.integers(0, 132, size=records))
    return words


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    names = [f"tag{i}" for i in range(8)]
    payloads = [rank_payload(rank_buffer(r, args.records, rng), names, rank=r,
                             clock={"offset_ns": float(r * 1000), "uncertainty_ns": 5.0})
                for r in range(args.ranks)]
    t0 = time.perf_counter()
    blobs = [pickle.dumps(p, protocol=pickle.HIGHEST_PROTOCOL) for p in payloads]
    received = [pickle.loads(b) for b in blobs]
    pickle_s = time.perf_counter() - t0
    moved = sum(len(b) for b in blobs)
    del payloads, blobs
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trace = merge_rank_payloads(received)
    merge_s = time.perf_counter() - t0
    result = {
        "machine": f"{platform.node()} {os.cpu_count()} cores, Python {platform.python_version()}",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "ranks": args.ranks, "records_per_rank": args.records,
        "bytes_to_rank0": moved, "pickle_roundtrip_s": pickle_s, "merge_s": merge_s,
        "events": len(trace.events),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    print(json.dumps(result, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
