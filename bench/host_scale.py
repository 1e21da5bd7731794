"""Host pipeline at scale: decode, summary, JSON and pftrace export of 1 M .. 50 M records.

    python bench/host_scale.py                                 # 1 M, 5 M, 20 M, 50 M
    python bench/host_scale.py --records 1000000 --no-write    # a quick look

Each size runs in its own process. The buffer comes from ``bench/decode_speed.py``
(``build_buffer``: built through ``cute_prof.layout`` as the device writes it; 4,224 warp
tracks, four tags, ~3 us regions that sometimes overlap on a track, instants and clock
spans). Steps, each timed once after a warm-up on a small trace: ``decode_buffer``;
``summarize`` plus its text table; ``events_to_perfetto`` (Chrome JSON, nesting lanes
included); ``write_pftrace``. Outputs go to a temporary directory on the same disk and are
deleted after each step (their size is reported). Peak memory per step: the process's
peak resident set (VmHWM, reset through /proc/self/clear_refs before the step) minus the
resident set before the buffer existed; it includes the buffer and the decoded Trace.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from decode_speed import TAGS, build_buffer, cpu_model  # noqa: E402

SIZES = (1_000_000, 5_000_000, 20_000_000, 50_000_000)
CLOCK_HZ = 1.755e9
TARGETS = {"decode": 50e6, "summary": 20e6, "json": 5e6, "pftrace": 10e6}  # records/s (issue 20)


def _status_kib(key: str) -> int:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{key} not in /proc/self/status")


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")


def measure_one(records: int, steps: list[str]) -> dict:
    """In the child: build the buffer, run each step once, time it and its peak memory."""
    from cute_prof import decode_buffer
    from cute_prof.analysis.summary import summarize
    from cute_prof.export.chrome_json import events_to_perfetto
    from cute_prof.export.pftrace_writer import write_pftrace

    with tempfile.TemporaryDirectory(prefix="host_scale_") as scratch:
        warm = decode_buffer(build_buffer(20_000), TAGS, clock_hz=CLOCK_HZ)
        summarize(warm).format_table()
        events_to_perfetto(warm, Path(scratch) / "w.json")
        write_pftrace(warm, Path(scratch) / "w.pftrace")
        baseline_kib = _status_kib("VmRSS")
        buf = build_buffer(records)
        row = {"records": records, "buffer_bytes": buf.nbytes, "steps": {}}
        trace = None

        def decode():
            nonlocal trace
            trace = decode_buffer(buf, TAGS, clock_hz=CLOCK_HZ)

        def summary():
            summarize(trace).format_table()

        def json_export():
            return events_to_perfetto(trace, Path(scratch) / "t.json")

        def pftrace_export():
            return write_pftrace(trace, Path(scratch) / "t.pftrace")

        actions = {"decode": decode, "summary": summary, "json": json_export,
                   "pftrace": pftrace_export}
        for step in ["decode", *[s for s in steps if s != "decode"]]:
            _reset_peak()
            load = os.getloadavg()[0]
            start, cpu_start = time.perf_counter(), time.process_time()
            written = actions[step]()
            seconds = time.perf_counter() - start
            cpu_seconds = time.process_time() - cpu_start
            peak = (_status_kib("VmHWM") - baseline_kib) * 1024
            entry = {"seconds": round(seconds, 3), "records_per_s": round(records / seconds),
                     "cpu_seconds": round(cpu_seconds, 3),
                     "records_per_cpu_s": round(records / max(cpu_seconds, 1e-9)),
                     "load_average_before": round(load, 2),
                     "peak_bytes": peak, "peak_over_buffer": round(peak / buf.nbytes, 2)}
            if written is not None:
                entry["output_bytes"] = Path(written).stat().st_size
                Path(written).unlink()
            row["steps"][step] = entry
            print(f"  {records:>11,} {step:8s} {seconds:7.2f} s {records / seconds / 1e6:6.1f} M/s "
                  f"peak {peak / 2**30:5.2f} GiB", file=sys.stderr, flush=True)
        row["events"] = len(trace)
    return row


def markdown(result: dict) -> str:
    lines = [
        "# Host pipeline at scale", "",
        f"Machine: {result['machine']}. Date: {result['date']}. Commit: {result['commit']}.",
        f"Command: `{result['command']}`.", "",
        "Rates are records per second of the raw buffer; peak is the process's peak resident "
        "set during the step above the resident set before the buffer existed (it includes "
        "the buffer and the decoded Trace). Targets from issue 20.", "",
        "The box is shared (other jobs ran at the same time: see the load average before "
        "each step); the CPU-time rate (this process's user + system time) is the figure "
        "less disturbed by them, except for decode, which runs on two threads (its CPU time counts both).", "",
        "| records | buffer | step | wall time | rate (wall) | CPU time | rate (CPU) | target "
        "| load avg | peak memory | peak / buffer | output |",
        "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in result["rows"]:
        for step, e in row["steps"].items():
            out = f"{e['output_bytes'] / 1e6:,.0f} MB" if "output_bytes" in e else ""
            met = "met" if e["records_per_cpu_s"] >= TARGETS[step] else "**not met**"
            lines.append(
                f"| {row['records']:,} | {row['buffer_bytes'] / 2**20:,.0f} MiB | {step} | "
                f"{e['seconds']:.2f} s | {e['records_per_s'] / 1e6:.1f} M/s | "
                f"{e['cpu_seconds']:.2f} s | {e['records_per_cpu_s'] / 1e6:.1f} M/s | "
                f"{TARGETS[step] / 1e6:.0f} M/s ({met}) | {e['load_average_before']:.1f} | "
                f"{e['peak_bytes'] / 2**30:.2f} GiB | "
                f"{e['peak_over_buffer']:.2f} | {out} |")
    lines += ["", "## What bounds each step (profiles at 1 M and 5 M records, cProfile)", "",
              "- **decode** (not changed here): see `bench/results/decode_speed_cpu.md`; on this "
              "shared box the rate varies with the other jobs' load.",
              "- **summary**: two busy-union passes (tid and SM: an ordering by (track, start), "
              "now one O(n) radix sort since decoded rows are start-sorted, and a segmented "
              "running maximum) and the per-tag table (a sort by (tag, duration) for the "
              "percentiles). About 25 full-array numpy passes over the spans; peak memory ~8x "
              "the buffer: the buffer and the Trace (~3x), then int64 columns, sort "
              "permutations and running maxima per pass (copying only the needed columns "
              "instead of whole rows, after this run, gave 7.9x at 5 M). The 20 M/s target "
              "needs a single fused pass (compiled code), not numpy.",
              "- **json**: ~217 bytes of text per record, each byte written through numpy byte "
              "matrices (digits, padding, concatenation); 5 M/s means >1 GB/s of formatted "
              "text. The new nesting lanes cost one radix sort by track plus a nesting check "
              "on overlapping clusters only.",
              "- **pftrace**: encoding is now vectorised (varints and framing in numpy, ~0.2 us "
              "per packet); what remains is ordering 2 operations per region: a stable sort of "
              "2n packed keys and gathers of 2n rows in random order (memory latency), "
              "~40 % of the time at 5 M, then the per-op varint passes. The pre-vectorisation "
              "writer ran at 0.09 M/s at 5 M records (issue 20); this one at 0.7-1 M/s.",
              ""]
    for fail in result.get("failed", []):
        lines.append(f"\n{fail['records']:,} records: the run ended with status "
                     f"{fail['returncode']} (-9: killed, out of memory)")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, nargs="*", default=list(SIZES))
    parser.add_argument("--steps", nargs="*", default=["decode", "summary", "json", "pftrace"],
                        choices=["decode", "summary", "json", "pftrace"])
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure_one(args.child, args.steps)))
        return 0
    rows, failed = [], []
    for records in args.records:
        done = subprocess.run(
            [sys.executable, __file__, "--child", str(records), "--steps", *args.steps],
            stdout=subprocess.PIPE, text=True)
        if done.returncode:  # e.g. killed for memory: say so instead of losing the others
            failed.append({"records": records, "returncode": done.returncode})
            continue
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip()
    result = {
        "machine": f"{cpu_model()}, {os.cpu_count()} cores, "
                   f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB, "
                   f"Python {platform.python_version()}",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit,
        "command": "python bench/host_scale.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "rows": rows,
        "failed": failed,
    }
    text = markdown(result)
    print(text)
    if not args.no_write:
        out = ROOT / "bench" / "results"
        (out / "host_scale.json").write_text(json.dumps(result, indent=1) + "\n")
        (out / "host_scale.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
