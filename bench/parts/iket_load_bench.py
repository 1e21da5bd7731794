"""Load time and peak memory of a large IKET capture through ``cute_prof.load_trace``.

The capture is synthesised in IKET's exact format from the real one in tests/data (same keys,
key order, nesting and value types as ``run-iket --postprocess json`` writes): its location
table is widened to ``--ctas`` CTAs of 4 warps and its first launch's ranges, markers and warp
lifetimes are repeated with shifted timestamps until ``--ranges`` ranges. The load runs in a
fresh process so its peak RSS is the reader's own.

  python bench/parts/iket_load_bench.py --ranges 1081344 --json bench/results/host_speed/iket_load.json
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = REPO / "tests" / "data" / "iket_compare.trace.json.gz"


def synthesise(path: Path, ranges: int, ctas: int) -> dict:
    real = json.loads(gzip.decompress(TEMPLATE.read_bytes()))
    launch = real["launches"][0]
    warps = 4
    locations = [{"ctaId": [c, 0, 0], "gpcId": c % 8, "smId": c % 132, "tpcId": (c % 132) // 2,
                  "warpId": w} for c in range(ctas) for w in range(warps)]
    n_loc = len(locations)
    per_loc = max(1, ranges // n_loc)
    base = launch["ranges"][0]["startTs"]
    range_parts, marker_parts, life_parts = [], [], []
    written = 0
    for loc in range(n_loc):
        count = min(per_loc, ranges - written) if loc < n_loc - 1 else ranges - written
        t = base + (loc // warps) * 1000
        for i in range(count):  # alternate the real capture's two ranges: short then long
            if i % 2 == 0:
                start, end, name, rid = t, t + 1056, 0, 3122818005
                events = (f'[{{"eventId":1,"payloadType":5,"payloadVal":{i // 2},"timestamp":{start}}},'
                          f'{{"eventId":1,"payloadType":5,"payloadVal":{i // 2},"timestamp":{end}}}]')
            else:
                start, end, name, rid = t, t + 4000, 1, 3270303571
                events = (f'[{{"eventId":2,"timestamp":{start}}},'
                          f'{{"eventId":2,"timestamp":{end}}}]')
                marker_parts.append(
                    f'{{"color":4294967295,"locIdx":{loc},"markerNameIdx":2,"payloadType":5,'
                    f'"payloadVal":{i // 2},"timestamp":{end + 32}}}')
            range_parts.append(
                f'{{"endTs":{end},"internalEvents":{events},"rangeColor":4294967295,'
                f'"rangeId":{rid},"rangeNameIdx":{name},"rangeScope":0,"rangeType":1,'
                f'"startTs":{start},"warpLocIdxs":[{loc},{loc}]}}')
            t = end + 32
        life_parts.append(f'{{"endTs":{t + 64},"locIdx":{loc},"startTs":{base - 128}}}')
        written += count
    header = {k: v for k, v in launch.items() if k not in ("ranges", "markers", "warpLifetimes")}
    header["gridDimX"] = ctas
    head = json.dumps(header, separators=(",", ":"))[:-1]  # keys are already sorted
    with open(path, "w") as out:
        out.write('{"graphLaunches":{},"launches":[')
        out.write(head + ',"markers":[' + ",".join(marker_parts) + "]")
        out.write(',"ranges":[' + ",".join(range_parts) + "]")
        out.write(',"singleClusterActive":0,"warpLifetimes":[' + ",".join(life_parts) + "]}")
        out.write('],"locationTable":' + json.dumps(locations, separators=(",", ":")))
        out.write(',"meta":{"version":1},"stringTable":["short","long","iter_done"]}')
    return {"ranges": written, "markers": len(marker_parts), "warp_lifetimes": n_loc,
            "bytes": path.stat().st_size}


LOAD = """
import resource, sys, time, json
import cute_prof
t0 = time.perf_counter()
trace = cute_prof.load_trace(sys.argv[1])
seconds = time.perf_counter() - t0
print(json.dumps({"seconds": seconds, "events": len(trace.events),
                  "launches": len(trace.launches),
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranges", type=int, default=1_081_344)
    parser.add_argument("--ctas", type=int, default=1056)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--path", default="/tmp/iket_synth.trace.json")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    path = Path(args.path)
    t0 = time.perf_counter()
    facts = synthesise(path, args.ranges, args.ctas)
    facts["synthesise_s"] = time.perf_counter() - t0
    print(f"synthesised {facts['ranges']:,} ranges, {facts['markers']:,} markers, "
          f"{facts['bytes'] / 1e6:,.0f} MB in {facts['synthesise_s']:.1f} s", flush=True)
    env = {**os.environ, "PYTHONPATH": f"{REPO}:{os.environ.get('PYTHONPATH', '')}"}
    runs = []
    for _ in range(args.repeats):
        out = subprocess.run([sys.executable, "-c", LOAD, str(path)], capture_output=True,
                             text=True, env=env, check=True)
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(runs[-1], flush=True)
    assert all(r["events"] == facts["ranges"] + facts["markers"] for r in runs)
    result = {"machine": f"{platform.node()} {os.cpu_count()} cores, Python "
                         f"{platform.python_version()}",
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "capture": facts, "runs": runs,
              "median_seconds": sorted(r["seconds"] for r in runs)[len(runs) // 2],
              "max_peak_rss_mb": max(r["peak_rss_mb"] for r in runs)}
    print(f"load: median {result['median_seconds']:.2f} s, peak RSS "
          f"{result['max_peak_rss_mb']:,.0f} MB")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    path.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
