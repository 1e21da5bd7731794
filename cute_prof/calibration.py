"""Overhead calibration: what an empty region costs on this GPU, and traces corrected for it.

Measure once per GPU (record empty regions with the same op and guard you profile with,
e.g. ``bench/overhead.py`` does) and subtract the median from every span. Both the raw and
the corrected trace stay available: correction changes durations, never counts."""

from __future__ import annotations

import dataclasses

import numpy as np

from . import layout
from .errors import ProfileBufferError
from .trace import Trace


def empty_region_cost(trace: Trace, tag: int) -> dict:
    """Statistics of the spans recorded with ``tag`` (which must wrap no work)."""
    spans = trace.events[(trace.events["tag"] == tag) & (trace.events["kind"] != layout.KIND_INSTANT)]
    if len(spans) == 0:
        raise ProfileBufferError(f"no spans with tag {tag} in this trace: record empty regions first")
    dur = spans["dur_ns"].astype(np.float64)
    out = {"count": int(len(spans)), "median_ns": float(np.median(dur)), "mean_ns": float(dur.mean()),
           "min_ns": float(dur.min()), "max_ns": float(dur.max())}
    cycles = spans["dur_cycles"][spans["dur_cycles"] >= 0]
    if len(cycles):
        out.update(median_cycles=float(np.median(cycles)), min_cycles=int(cycles.min()))
    return out


def subtract_overhead(trace: Trace, overhead_ns: float) -> Trace:
    """A copy of ``trace`` with ``overhead_ns`` taken off every span (never below zero)."""
    if not np.isfinite(overhead_ns) or overhead_ns < 0:
        raise ProfileBufferError(f"overhead_ns must be a finite non-negative number, got {overhead_ns!r}")
    events = trace.events.copy()
    spans = events["kind"] != layout.KIND_INSTANT
    events["dur_ns"][spans] = np.maximum(events["dur_ns"][spans] - int(round(overhead_ns)), 0)
    metadata = dict(trace.metadata, overhead_subtracted_ns=float(overhead_ns))
    return dataclasses.replace(trace, events=events, metadata=metadata)
