"""Timing of the pipeline analysis on ~5 M records (issue #17: <= 5 s on the 2-core CI box).

    python bench/parts/whatif_scale.py tests/data/gemm_traces/whatif_base.npz --copies 576

A level-2 ws_gemm trace from the H100 cut to a few whole CTAs (``--spec`` for the persistent
one, ``persistent_l2.npz``) is repeated ``--copies`` times with the CTAs renumbered, then
analysed: matching, replay, critical path, blockers, occupancy, initiation interval and one
what-if.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import whatif_check  # noqa: E402
from cute_prof import storage  # noqa: E402
from cute_prof.analysis.pipeline_data import match_records
from cute_prof.analysis.pipeline_report import analyze_pipeline
from cute_prof.analysis.what_if import predict_what_if
from cute_prof.analysis.model import load_pipeline  # noqa: E402
from cute_prof.trace import Trace  # noqa: E402


def load_any(path: Path) -> Trace:
    """A cute_prof trace file, or a what-if trace saved as columns (bench/whatif_gpu.py)."""
    with np.load(path, allow_pickle=False) as z:
        columns = "meta" in z and "start_ns" in z
    return whatif_check.load_trace(path) if columns else storage.load_trace(path)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--copies", type=int, default=9)
    ap.add_argument("--spec", default=str(ROOT / "examples" / "ws_gemm_pipeline.json"))
    args = ap.parse_args(argv)
    base = load_any(Path(args.trace))
    ev = base.events
    span = (int(ev["tid"].max()) // 16 + 1) * 16  # whole CTAs: slots stay
    parts = []
    for c in range(args.copies):
        part = ev.copy()
        part["tid"] += c * span
        parts.append(part)
    events = np.concatenate(parts)
    trace = Trace(events=events, tag_names=base.tag_names, capacity=len(events),
                  attempted=len(events), overflow=0, incomplete=0)
    spec = load_pipeline(args.spec)
    print(f"{len(events):,} records, {os.cpu_count()} cores, spec {args.spec}")
    for _ in range(2):
        t0 = time.perf_counter()
        data = match_records(trace, spec)
        t1 = time.perf_counter()
        report = analyze_pipeline(trace, spec, what_ifs=[{"depth": {"smem_ab": 3}}])
        t2 = time.perf_counter()
        print(f"match_records {t1 - t0:.2f} s ({data.shape[0]} units x {data.shape[1]} "
              f"iterations, {int((data.unit_prev >= 0).sum())} following a unit of their CTA); "
              f"analyze_pipeline with one what-if (matching included) {t2 - t1:.2f} s; "
              f"units {report['units']}")
    t0 = time.perf_counter()
    pred = predict_what_if(data, {"depth": {"smem_ab": 2}})
    print(f"predict_what_if (loaded latency, interval: 3 fixed-point replays) "
          f"{time.perf_counter() - t0:.2f} s; predicted {pred['predicted_change'] * 100:+.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
