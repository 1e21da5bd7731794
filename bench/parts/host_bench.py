"""Host-side benchmark: decode and JSON export of a realistic 1 M-record buffer.

    python bench/parts/host_bench.py                 # 1 M records, 5 timed runs each
    python bench/parts/host_bench.py --events 200000 --repeat 3 --markdown

The buffer is built exactly as the device writes it (``layout.write_records``): 132 SMs,
CTAs of 8 warps with one recording lane each, six region tags, ~5% instants, ~5% clock-mode
spans with clock_sync pairs at the start and end of every SM's work, slots claimed in
roughly end-time order. Each measurement has one warm-up run and reports the median.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tools.machine import cpu_model  # noqa: E402

import cute_prof  # noqa: E402
from cute_prof import layout  # noqa: E402

TAGS = ["load", "mma", "epilogue", "store", "barrier", "tile"]
SMS = 132
WARPS = 8
CLOCK_HZ = 1.755e9
KERNEL_NS = 50_000_000


def build_buffer(events: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    sync_pairs = 2 * SMS
    work = events - sync_pairs
    buf = np.zeros(layout.buffer_words(events), dtype=np.int64)
    t0 = 1_760_000_000_000_000_000

    # calibration pairs first (kernel start) and last (kernel end) on every SM
    sms = np.arange(SMS)
    cycles0 = rng.integers(10**11, 10**12, SMS)
    start_ns = t0 + rng.integers(0, 2000, SMS)
    end_ns = start_ns + KERNEL_NS
    layout.write_records(buf, start_ns, cycles0, 0, sms, sm=sms, kind=layout.KIND_CLOCK_SYNC)

    sm = rng.integers(0, SMS, work)
    warp = rng.integers(0, WARPS, work)
    cta = rng.integers(0, 4 * SMS, work)
    begin = t0 + np.sort(rng.integers(5_000, KERNEL_NS - 5_000, work))
    dur = rng.lognormal(np.log(3_000), 0.8, work).astype(np.int64)
    kind = rng.choice(
        [layout.KIND_SPAN, layout.KIND_INSTANT, layout.KIND_CLOCK_SPAN], work, p=[0.9, 0.05, 0.05]
    )
    dur[kind == layout.KIND_INSTANT] = 0
    clock = kind == layout.KIND_CLOCK_SPAN
    begin_word = begin.copy()
    dur_word = dur.copy()
    begin_word[clock] = begin[clock] + dur[clock]  # clock spans store the END time
    dur_word[clock] = np.rint(dur[clock] * CLOCK_HZ / 1e9).astype(np.int64)  # and cycles
    order = np.argsort(begin + dur, kind="stable")  # slots are claimed at region end
    layout.write_records(
        buf,
        begin_word[order],
        dur_word[order],
        rng.integers(0, len(TAGS), work)[order],
        (cta * WARPS + warp)[order],
        payload=rng.integers(0, 64, work)[order],
        kind=kind[order],
        sm=sm[order],
        warp=warp[order],
    )
    cycles_end = cycles0 + np.rint(KERNEL_NS * CLOCK_HZ / 1e9).astype(np.int64)
    layout.write_records(buf, end_ns, cycles_end, 0, sms, sm=sms, kind=layout.KIND_CLOCK_SYNC)
    assert int(buf[0]) == events
    return buf


def timed(fn, repeat: int) -> tuple[float, object]:
    result = fn()  # warm-up
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--markdown", action="store_true", help="print a markdown table")
    args = parser.parse_args(argv)

    buf = build_buffer(args.events)
    tags = cute_prof.TagTable(TAGS)
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        json_path = os.path.join(scratch, "trace.json")
        seconds, trace = timed(lambda: cute_prof.decode_buffer(buf, tags), args.repeat)
        rows.append(("decode_buffer -> Trace (columnar)", seconds, len(trace)))
        seconds, pair = timed(lambda: cute_prof.decode_events(buf, tags), args.repeat)
        rows.append(("decode_events -> list[Event]", seconds, len(pair[0])))
        seconds, _ = timed(lambda: cute_prof.events_to_perfetto(trace, json_path), args.repeat)
        size_mb = os.path.getsize(json_path) / 1e6
        rows.append((f"events_to_perfetto(Trace) ({size_mb:.0f} MB)", seconds, len(trace)))
        events = pair[0]
        seconds, _ = timed(lambda: cute_prof.events_to_perfetto(events, json_path), args.repeat)
        rows.append(("events_to_perfetto(list[Event])", seconds, len(events)))

    print(
        f"# {datetime.date.today().isoformat()}  {cpu_model()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, numpy {np.__version__}"
    )
    print(
        f"# {args.events:,} records ({len(trace):,} events, {trace.clock_syncs.shape[0]} clock "
        f"sync pairs, clock fitted at {trace.metadata['clock_hz'] / 1e9:.4f} GHz); "
        f"median of {args.repeat} after one warm-up"
    )
    if args.markdown:
        print("| step | median (s) | events/s |")
        print("|---|---:|---:|")
        for name, seconds, count in rows:
            print(f"| {name} | {seconds:.3f} | {count / seconds / 1e6:.2f} M |")
    else:
        width = max(len(name) for name, _, _ in rows)
        print(f"{'step':<{width}}  {'median s':>9}  {'events/s':>10}")
        for name, seconds, count in rows:
            print(f"{name:<{width}}  {seconds:9.3f}  {count / seconds / 1e6:8.2f} M")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
