"""Time the conclusions (analyze, flows, diff, report) on a synthetic warp-specialised GEMM
trace of ~5 M records: per CTA one producer (issue + wait_empty per k-tile) and 8 consumer
warps (wait_full + mma per k-tile), mainloop phases. Writes bench/results/analysis_speed/analysis_scale.*

    python bench/parts/analysis_scale.py [--ctas 2200] [--k-tiles 128]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from cute_prof import layout  # noqa: E402
from cute_prof.analysis.diff import diff_traces  # noqa: E402
from cute_prof.analysis.flows import pipeline_flows  # noqa: E402
from cute_prof.analysis.waits import analyze_waits  # noqa: E402
from cute_prof.analysis.roles import load_role_spec  # noqa: E402
from cute_prof.decode import decode_buffer  # noqa: E402
from cute_prof.report import write_report  # noqa: E402

TAGS = ["ws.wait_empty", "ws.tma_issue", "ws.wait_full", "ws.mma_ktile", "ws.epilogue",
        "ws.producer_mainloop", "ws.consumer_mainloop"]


def gemm_buffer(ctas: int, k_tiles: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    k = np.arange(k_tiles)
    period = 600 + rng.integers(0, 40, size=(ctas, 1))
    base = rng.integers(0, 5_000, size=(ctas, 1)) + np.zeros((ctas, k_tiles), np.int64)
    t = base + k * period
    parts = []
    cta = np.repeat(np.arange(ctas)[:, None], k_tiles, axis=1)
    # producer: issue 70 ns, waits the rest of the period
    parts.append((t, np.full_like(t, 70), 1, cta * 16, k))
    parts.append((t + 70, period - 70 + 0 * t, 0, cta * 16, k))
    for warp in range(1, 9):
        wait = rng.integers(20, 200, size=t.shape)
        parts.append((t + 60, wait, 2, cta * 16 + warp, k))
        parts.append((t + 60 + wait, period - wait + 0 * t, 3, cta * 16 + warp, k))
    columns = [np.concatenate([np.broadcast_to(p[i], t.shape).ravel() for p in parts])
               for i in range(5)]
    n = columns[0].shape[0]
    buf = np.zeros(layout.buffer_words(n), np.int64)
    layout.write_records(buf, columns[0], columns[1], tag=columns[2], tid=columns[3],
                         payload=columns[4])
    return buf


def timed(fn):
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ctas", type=int, default=2200)
    parser.add_argument("--k-tiles", type=int, default=128)
    args = parser.parse_args(argv)
    spec = load_role_spec(ROOT / "examples" / "ws_gemm_roles.json")
    a = decode_buffer(gemm_buffer(args.ctas, args.k_tiles, 1), TAGS)
    b = decode_buffer(gemm_buffer(args.ctas, args.k_tiles, 2), TAGS)
    rows = {}
    _, rows["analyze"] = timed(lambda: analyze_waits(a, spec))
    _, rows["flows"] = timed(lambda: pipeline_flows(a, spec))
    _, rows["diff (with roles)"] = timed(lambda: diff_traces(a, b, spec=spec))
    with tempfile.TemporaryDirectory() as tmp:
        _, rows["report (with roles and diff)"] = timed(
            lambda: write_report(a, Path(tmp) / "r.html", spec=spec, compare=b))
    result = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "command": "python bench/parts/analysis_scale.py " + " ".join(argv or sys.argv[1:]),
        "records": len(a),
        "seconds": {k: round(v, 3) for k, v in rows.items()},
    }
    out = ROOT / "bench" / "results" / "analysis_speed"
    (out / "analysis_scale.json").write_text(json.dumps(result, indent=1) + "\n")
    lines = [f"# Conclusions on {len(a):,} records", "",
             f"{result['date']}, {result['machine']}; `{result['command']}`", "",
             "| step | seconds | records/s |", "|---|---:|---:|"]
    lines += [f"| {k} | {v:.2f} | {len(a) / v / 1e6:.1f} M |" for k, v in rows.items()]
    (out / "analysis_scale.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
