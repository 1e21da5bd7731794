"""Timing of the pipeline analysis of a persistent kernel on ~5 M records (issue #17:
<= 5 s on the 2-core CI box), tiles as units (``tile_modulo``) with carried rings.

    python bench/persistent_scale.py bench/results/persistent_h100/trace_persistent_l2.npz --copies 35

The H100 level-2 trace of the persistent ws_gemm (156,160 records, 132 CTAs, 512 tiles) is
repeated ``--copies`` times with the CTAs renumbered (as many times more SMs), then
analysed: record matching, replay, critical path, blockers, occupancy, initiation
interval, one what-if.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cute_prof.analysis.critical_path import analyze_pipeline, match_records  # noqa: E402
from cute_prof.analysis.model import load_pipeline  # noqa: E402
from cute_prof.storage import load_trace  # noqa: E402
from cute_prof.trace import Trace  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--copies", type=int, default=35)
    args = ap.parse_args(argv)
    base = load_trace(Path(args.trace))
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
    spec = load_pipeline(ROOT / "examples" / "ws_gemm_persistent_pipeline.json")
    print(f"{len(events):,} records, {os.cpu_count()} cores")
    for _ in range(2):
        t0 = time.perf_counter()
        data = match_records(trace, spec)
        t1 = time.perf_counter()
        report = analyze_pipeline(trace, spec, what_ifs=[{"depth": {"smem_ab": 3}}])
        t2 = time.perf_counter()
        print(f"match_records {t1 - t0:.2f} s ({data.shape[0]} tiles x {data.shape[1]} "
              f"iterations, {int((data.unit_prev >= 0).sum())} following a tile of their "
              f"CTA); analyze_pipeline with one what-if (matching included) {t2 - t1:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
