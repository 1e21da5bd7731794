"""Host-side speed of looking at a big trace: summary, Perfetto protobuf, Chrome JSON, PNG.

Builds a realistic 1 M-record buffer on the CPU (10,000 tids on 132 SMs; per tid a
mainloop region holding load/mma iterations with a payload, an instant per iteration, an
epilogue and an exit instant), decodes it with the real decoder, then times each stage
after one warm-up run and reports the median. Needs no GPU.

    python bench/parts/analysis_bench.py [--records 1000000] [--tids 10000] [--repeats 5]
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

from cute_prof import layout  # noqa: E402
from cute_prof.analysis import summarize  # noqa: E402
from cute_prof.decode import decode_buffer  # noqa: E402
from cute_prof.export.chrome_json import events_to_perfetto  # noqa: E402
from cute_prof.export.pftrace_writer import write_pftrace  # noqa: E402
from cute_prof.export.picture import plot_timeline  # noqa: E402

TAGS = ["mainloop", "load", "mma", "epilogue", "iter_done", "exit", "cta_start"]
TARGETS_S = {"summary": 1.0, "pftrace": 3.0, "pftrace (1 process)": None, "json": 3.0,
             "png": 5.0}


def realistic_buffer(records: int, tids: int, *, sms: int = 132, seed: int = 0) -> np.ndarray:
    """Per tid: a start instant, mainloop [load, mma] x k with an instant after each
    iteration, epilogue, exit instant; CTAs start staggered in waves like a real grid."""
    rng = np.random.default_rng(seed)
    per_tid = records // tids
    iterations = (per_tid - 4) // 3
    per_tid = 3 * iterations + 4
    launch = rng.integers(0, 50_000, tids) + (np.arange(tids) // (sms * 4)) * 20_000
    load = rng.integers(200, 800, (tids, iterations))
    mma = rng.integers(300, 1200, (tids, iterations))
    step = load + mma + rng.integers(0, 100, (tids, iterations))
    iteration_start = launch[:, None] + 50 + np.cumsum(step, axis=1) - step
    main_end = iteration_start[:, -1] + step[:, -1]

    start = np.empty((tids, per_tid), np.int64)
    dur = np.zeros((tids, per_tid), np.int64)
    tag = np.empty((tids, per_tid), np.int64)
    kind = np.full((tids, per_tid), layout.KIND_SPAN, np.int64)
    payload = np.zeros((tids, per_tid), np.int64)
    its = slice(1, 1 + iterations)
    mmas = slice(1 + iterations, 1 + 2 * iterations)
    marks = slice(1 + 2 * iterations, 1 + 3 * iterations)
    start[:, 0], dur[:, 0], tag[:, 0] = launch + 10, main_end - launch - 10, 0
    start[:, its], dur[:, its], tag[:, its], payload[:, its] = (
        iteration_start, load, 1, np.arange(iterations))
    start[:, mmas], dur[:, mmas], tag[:, mmas], payload[:, mmas] = (
        iteration_start + load, mma, 2, np.arange(iterations))
    start[:, marks], tag[:, marks], kind[:, marks] = (
        iteration_start + load + mma, 4, layout.KIND_INSTANT)
    start[:, -3], dur[:, -3], tag[:, -3] = main_end + 20, rng.integers(500, 2000, tids), 3
    start[:, -2], tag[:, -2], kind[:, -2] = main_end + 5, 5, layout.KIND_INSTANT
    start[:, -1], tag[:, -1], kind[:, -1] = launch, 6, layout.KIND_INSTANT
    tid = np.repeat(np.arange(tids), per_tid)
    # the device appends in claim order, roughly by time: shuffle within small windows
    order = np.argsort(start.ravel() + rng.integers(0, 500, start.size), kind="stable")
    buf = np.zeros(layout.buffer_words(tid.shape[0]), np.int64)
    base = 1_760_000_000_000_000_000
    layout.write_records(
        buf, base + start.ravel()[order], dur.ravel()[order], tag.ravel()[order],
        tid[order], payload=payload.ravel()[order], kind=kind.ravel()[order],
        sm=(tid % sms)[order], warp=0,
    )
    return buf


def timed(function, repeats: int) -> list[float]:
    function()  # warm-up: imports, caches, page faults
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        function()
        times.append(time.perf_counter() - started)
    return times


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def versions() -> str:
    import google.protobuf
    import matplotlib
    from google.protobuf.internal import api_implementation

    try:
        from importlib.metadata import version

        perfetto_version = version("perfetto")
    except Exception:  # pragma: no cover
        perfetto_version = "?"
    return (f"python {platform.python_version()}, numpy {np.__version__}, protobuf "
            f"{google.protobuf.__version__} ({api_implementation.Type()}), perfetto "
            f"{perfetto_version}, matplotlib {matplotlib.__version__}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--tids", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    started = time.perf_counter()
    buf = realistic_buffer(args.records, args.tids)
    trace = decode_buffer(buf, TAGS, metadata={"device": "synthetic (bench)"})
    kinds = np.bincount(trace.events["kind"], minlength=2)
    print(f"built and decoded {len(trace.events):,} records ({kinds[0]:,} regions, "
          f"{kinds[1]:,} instants, {args.tids:,} tids, 132 SMs) in "
          f"{time.perf_counter() - started:.2f} s")
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover
        cpus = os.cpu_count()
    print(f"cpu: {cpu_model()}, {cpus} usable cores; load average {os.getloadavg()[0]:.2f} "
          "at start")
    print(versions())
    print(f"date: {datetime.date.today().isoformat()}; command: python "
          f"{' '.join(sys.argv)}")

    with tempfile.TemporaryDirectory() as directory:
        out = Path(directory)
        stages = {
            "summary": lambda: summarize(trace),
            "pftrace": lambda: write_pftrace(trace, out / "t.pftrace"),
            "pftrace (1 process)": lambda: write_pftrace(trace, out / "t1.pftrace", workers=1),
            "json": lambda: events_to_perfetto(trace, out / "t.json"),
            "png": lambda: plot_timeline(trace, out / "t.png"),
        }
        results = {}
        for name, function in stages.items():
            results[name] = timed(function, args.repeats)
            print(f"  {name}: {', '.join(f'{t:.2f}' for t in results[name])} s", flush=True)
        sizes = {
            "pftrace": (out / "t.pftrace").stat().st_size,
            "pftrace (1 process)": (out / "t1.pftrace").stat().st_size,
            "json": (out / "t.json").stat().st_size,
            "png": (out / "t.png").stat().st_size,
        }

    print()
    print(f"{'stage':<20} {'median s':>9} {'min s':>7} {'target s':>9} {'ok':>4} {'output':>10}")
    for name, times in results.items():
        target = TARGETS_S[name]
        median = statistics.median(times)
        ok = "-" if target is None else ("yes" if median <= target else "NO")
        size = f"{sizes[name] / 1e6:.1f} MB" if name in sizes else ""
        print(f"{name:<20} {median:>9.2f} {min(times):>7.2f} "
              f"{'' if target is None else f'{target:.1f}':>9} {ok:>4} {size:>10}")


if __name__ == "__main__":
    main()
