"""bench/parts/cluster_gap_gpu.py (bench/whatif.py cluster-gap) reads an SM's gap between one CTA and the next from a trace:
each CTA's first record less the end of the last record of the CTA before it on that SM."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np

from cute_prof.trace import EVENT_DTYPE, Trace

ROOT = Path(__file__).resolve().parents[1]


def load():
    spec = importlib.util.spec_from_file_location("bench_cluster_launch_gap",
                                                  ROOT / "bench" / "parts" / "cluster_gap_gpu.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def trace_of(rows):
    """rows: (cta, warp, sm, start, end); tid = cta * 2 + warp (two warps per CTA)."""
    ev = np.zeros(len(rows), dtype=EVENT_DTYPE)
    for i, (cta, warp, sm, start, end) in enumerate(rows):
        ev[i]["tid"], ev[i]["sm"] = cta * 2 + warp, sm
        ev[i]["start_ns"], ev[i]["dur_ns"] = start, end - start
    ev.sort(order="start_ns")
    return Trace(events=ev, tag_names=(), capacity=len(rows), attempted=len(rows), overflow=0,
                 incomplete=0)


def test_gaps_run_from_a_ctas_last_record_to_the_next_ctas_first_on_its_sm():
    gaps = load().sm_gaps(trace_of([
        # SM 0: CTA 0 (its two warps end at 900 and 1000), then CTA 2 from 1400, then CTA 4
        (0, 0, 0, 0, 900), (0, 1, 0, 100, 1000), (2, 0, 0, 1400, 2000), (2, 1, 0, 1500, 2100),
        (4, 1, 0, 2600, 3000),
        # SM 1: CTA 1, then CTA 3 500 ns after it
        (1, 0, 1, 0, 1200), (3, 1, 1, 1700, 2500),
    ]), 2)
    assert sorted(gaps.tolist()) == [400, 500, 500]


def test_ctas_resident_together_on_an_sm_leave_no_gap():
    gaps = load().sm_gaps(trace_of([(0, 0, 5, 0, 1000), (1, 0, 5, 200, 1200),
                                    (2, 0, 5, 1500, 2000)]), 2)
    # CTA 1 started before CTA 0 ended (no gap), CTA 2 300 ns after CTA 1
    assert gaps.tolist() == [300]


def test_a_ctas_span_runs_from_its_first_warps_start_to_its_last_warps_end():
    first, last, sm = load().cta_spans(trace_of([(0, 0, 3, 100, 900), (0, 1, 3, 50, 1000),
                                                 (1, 1, 4, 200, 700)]), 2)
    assert first.tolist() == [50, 200] and last.tolist() == [1000, 700]
    assert sm.tolist() == [3, 4]
