"""Decode throughput and peak memory of ``decode_buffer`` at 1 M .. 50 M records.

    python bench/parts/decode_speed.py                       # 1 M, 5 M, 20 M, 50 M; writes results
    python bench/parts/decode_speed.py --records 1000000 --repeat 3 --no-write

Each size runs in its own process on a buffer built as the device writes it (``layout``
encoders): 4,224 warp tracks, four tags, ~3 us regions that sometimes overlap on a track,
2 % instants, 5 % clock-mode spans, slots in end-time order (``--order random``: shuffled,
the sort's worst case). Peak memory: the peak resident set (VmHWM, reset once the buffer is
built) above the resident set before the buffer existed. Time: median of ``--repeat``
decodes after one warm-up.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tools.machine import cpu_model  # noqa: E402

from cute_prof import layout  # noqa: E402

SMS, WARPS_PER_SM = 132, 32
TAGS = ["load", "mma", "epilogue", "store"]
CLOCK_HZ = 1.755e9
T0 = 1_760_000_000_000_000_000
BLOCK = 1 << 20


def build_buffer(records: int, *, order: str = "end", seed: int = 0) -> np.ndarray:
    """A ``records``-slot buffer (all claimed), built in blocks with small temporaries."""
    rng = np.random.default_rng(seed)
    buf = np.zeros(layout.buffer_words(records), dtype=np.int64)
    view = buf[1:].reshape(records, 4)
    sync_pairs = 2 * SMS
    work = records - sync_pairs
    kernel_ns = max(10 * work, 1_000_000)  # ~ a record per 10 ns over the whole GPU
    sms = np.arange(SMS)
    cycles0 = rng.integers(10**11, 10**12, SMS)
    # kernel-start calibration pairs first, kernel-end pairs last
    view[:SMS, 0] = T0 + rng.integers(0, 2000, SMS)
    view[:SMS, 1] = cycles0
    view[:SMS, 2] = layout.encode_tag_words(0, kind=layout.KIND_CLOCK_SYNC)
    view[:SMS, 3] = layout.encode_tid_words(sms, sm=sms)
    view[records - SMS:, 0] = view[:SMS, 0] + kernel_ns
    view[records - SMS:, 1] = cycles0 + round(kernel_ns * CLOCK_HZ / 1e9)
    view[records - SMS:, 2] = view[:SMS, 2]
    view[records - SMS:, 3] = view[:SMS, 3]
    for first in range(0, work, BLOCK):
        n = min(BLOCK, work - first)
        end = T0 + 5_000 + (first + np.sort(rng.random(n)) * n) * (kernel_ns - 10_000) / work
        end = end.astype(np.int64)
        dur = rng.lognormal(np.log(3_000), 0.8, n).astype(np.int64)
        kind = rng.choice([layout.KIND_SPAN, layout.KIND_INSTANT, layout.KIND_CLOCK_SPAN], n,
                          p=[0.93, 0.02, 0.05])
        dur[kind == layout.KIND_INSTANT] = 0
        start_word = end - dur
        dur_word = dur
        clock = kind == layout.KIND_CLOCK_SPAN
        start_word[clock] = end[clock]  # clock spans store the END %globaltimer ...
        dur_word[clock] = np.rint(dur[clock] * CLOCK_HZ / 1e9).astype(np.int64)  # ... and cycles
        sm = rng.integers(0, SMS, n)
        warp = rng.integers(0, WARPS_PER_SM, n)
        rows = view[SMS + first : SMS + first + n]
        rows[:, 0] = start_word
        rows[:, 1] = dur_word
        rows[:, 2] = layout.encode_tag_words(rng.integers(0, len(TAGS), n),
                                             payload=rng.integers(0, 64, n), kind=kind)
        rows[:, 3] = layout.encode_tid_words(sm * WARPS_PER_SM + warp, sm=sm, warp=warp)
    if order == "random":
        rng.shuffle(view)  # in place, row by row
    buf[0] = records
    return buf


def _status_kib(key: str) -> int:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{key} not in /proc/self/status")


def measure_one(records: int, repeat: int, order: str) -> dict:
    """Runs in the child process: build, decode, report one row."""
    from cute_prof import decode_buffer

    decode_buffer(build_buffer(1000), TAGS)  # import and first-call costs out of the way
    baseline_kib = _status_kib("VmRSS")
    buf = build_buffer(records, order=order)
    buffer_bytes = buf.nbytes
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")  # reset VmHWM to the current resident set
    start = time.perf_counter()
    trace = decode_buffer(buf, TAGS)
    first_s = time.perf_counter() - start
    peak_kib = _status_kib("VmHWM")
    events, invalid = len(trace), trace.invalid
    del trace
    times = [first_s]
    for _ in range(repeat):
        start = time.perf_counter()
        trace = decode_buffer(buf, TAGS)
        times.append(time.perf_counter() - start)
        del trace
    median = statistics.median(times[1:] or times)
    peak_bytes = (peak_kib - baseline_kib) * 1024
    return {
        "records": records,
        "order": order,
        "buffer_bytes": buffer_bytes,
        "events": events,
        "invalid": invalid,
        "first_decode_s": round(first_s, 4),
        "median_decode_s": round(median, 4),
        "records_per_s": round(records / median),
        "peak_bytes": peak_bytes,
        "peak_over_buffer": round(peak_bytes / buffer_bytes, 3),
        "repeat": repeat,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, nargs="*",
                        default=[1_000_000, 5_000_000, 20_000_000, 50_000_000])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--order", choices=("end", "random"), nargs="*", default=["end", "random"])
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--child", nargs=3, metavar=("RECORDS", "REPEAT", "ORDER"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        row = measure_one(int(args.child[0]), int(args.child[1]), args.child[2])
        print(json.dumps(row))
        return 0
    rows = []
    for order in args.order:
        for records in args.records:
            done = subprocess.run(
                [sys.executable, __file__, "--child", str(records), str(args.repeat), order],
                capture_output=True, text=True, check=True,
            )
            row = json.loads(done.stdout.strip().splitlines()[-1])
            rows.append(row)
            print(f"{order:6s} {records:>11,} records: {row['median_decode_s']:.3f} s "
                  f"({row['records_per_s'] / 1e6:.1f} M/s), peak {row['peak_bytes'] / 2**30:.2f} "
                  f"GiB = {row['peak_over_buffer']:.2f}x the buffer", flush=True)
    import numpy

    result = {
        "command": "python bench/parts/decode_speed.py " + " ".join(argv or sys.argv[1:]),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{cpu_model()}, {os.cpu_count()} cores, "
                   f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB",
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "targets": {"records_per_s": 50_000_000, "peak_over_buffer": 3.0},
        "rows": rows,
    }
    if not args.no_write:
        out = ROOT / "bench" / "results" / "host_speed"
        (out / "decode_speed.json").write_text(json.dumps(result, indent=1) + "\n")
        lines = [
            "# decode_buffer speed on the CPU",
            "",
            f"{result['date']}, {result['machine']}, Python {result['python']}, numpy "
            f"{result['numpy']}. Command: `{result['command'].strip()}`. Buffer built as in "
            "the docstring of `bench/parts/decode_speed.py`; median of "
            f"{args.repeat} decodes after one warm-up; peak = process peak RSS minus its RSS "
            "before the buffer existed (buffer + Trace + temporaries).",
            "",
            "| slot order | records | buffer | median decode | records/s | peak memory | peak / buffer |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for row in rows:
            lines.append(
                f"| {row['order']} | {row['records']:,} | {row['buffer_bytes'] / 2**30:.2f} GiB "
                f"| {row['median_decode_s']:.3f} s | {row['records_per_s'] / 1e6:.1f} M "
                f"| {row['peak_bytes'] / 2**30:.2f} GiB | {row['peak_over_buffer']:.2f} |"
            )
        (out / "decode_speed.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
