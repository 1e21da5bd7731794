"""Whole-kernel overviews: per SM, per role or per CTA, how many tracks were busy and how
many waited over time, as counter tracks instead of every region.

A 50 M-record trace is far past what the Perfetto UI loads, but its shape fits in a few
hundred counters: for each group, over each of ``bins`` equal time bins, the mean number of
the group's tracks (tids) that were *busy* (inside a region, and not inside a wait region)
and *waiting* (inside a region whose tag means ``wait`` in the role spec, or one of
``wait_tags``). Overlapping regions of one track count once (their union).

Exact: per track, the union of its regions (and of its wait regions) is a set of disjoint
intervals, whose overlap with every bin is added to the bin. With numba (:mod:`cute_prof.jit`)
one compiled pass over the records in start order, keeping each track's open interval;
without it, numpy sorts and prefix sums give the same numbers.

Owns the counter-track overviews (stage 5); it may read the analysis's role specs, and may not
import the session, the CLI or the device code.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from .. import jit
from ..analysis.roles import TAG_KINDS, load_role_spec
from ..errors import ProfileBufferError
from ..trace import Trace
from ..views import cta_of
from .regions import SPAN_KINDS, pair_index

__all__ = ["AGGREGATE_BY", "aggregate_counters", "aggregated_trace", "bin_edges",
           "union_intervals"]

AGGREGATE_BY = ("sm", "role", "cta")
DEFAULT_BINS = 1000


def bin_edges(t0: int, t1: int, bins: int) -> np.ndarray:
    """``bins + 1`` integer ns edges from ``t0`` to ``t1`` (each bin at least 1 ns wide
    where the trace is shorter than ``bins`` ns)."""
    span = max(int(t1) - int(t0), 1)
    bins = min(bins, span)
    return int(t0) + np.round(np.linspace(0, span, bins + 1)).astype(np.int64)


def union_intervals(track: np.ndarray, start: np.ndarray, end: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Disjoint intervals covering the union of ``[start, end)`` per track:
    ``(track, start, end)`` of each, sorted by track and time (numpy)."""
    n = start.shape[0]
    if n == 0:
        empty = np.zeros(0, np.int64)
        return empty, empty, empty
    t0 = int(start.min())
    rel_start, rel_end = start - t0, np.maximum(end, start) - t0
    stride = int(rel_end.max()) + 1
    order = np.lexsort((rel_start, track))
    track, rel_start, rel_end = track[order], rel_start[order], rel_end[order]
    first = np.r_[True, track[1:] != track[:-1]]
    group = np.cumsum(first) - 1
    if stride * (int(group[-1]) + 2) < (1 << 62):
        offset = group * stride
        running = np.maximum.accumulate(rel_end + offset) - offset
    else:  # absurd time ranges: one accumulate per track
        running = np.empty_like(rel_end)
        bounds = np.r_[np.flatnonzero(first), n]
        for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
            running[lo:hi] = np.maximum.accumulate(rel_end[lo:hi])
    opens = first.copy()
    opens[1:] |= rel_start[1:] > running[:-1]
    cluster_first = np.flatnonzero(opens)
    cluster_last = np.r_[cluster_first[1:], n] - 1
    return (track[cluster_first], rel_start[cluster_first] + t0, running[cluster_last] + t0)


def _binned_numpy(group: np.ndarray, a: np.ndarray, b: np.ndarray, n_groups: int,
                  edges: np.ndarray) -> np.ndarray:
    """Per group and bin: total overlap of the group's intervals ``[a, b)`` with the bin.
    The covered time below x is ``sum(x - a, a < x) - sum(x - b, b < x)``, read at every
    edge with one sorted search and prefix sums."""
    below = np.zeros((n_groups, edges.shape[0]), np.float64)
    if a.shape[0]:
        t0 = int(edges[0])
        span = int(max(int(b.max()), int(edges[-1])) - t0) + 2
        queries_group = np.repeat(np.arange(n_groups, dtype=np.int64), edges.shape[0])
        queries_x = np.tile(edges - t0, n_groups)
        for points, sign in ((a - t0, 1.0), (b - t0, -1.0)):
            keys = group * span + points
            order = np.argsort(keys, kind="stable")
            keys, sorted_points = keys[order], points[order]
            prefix = np.r_[0, np.cumsum(sorted_points)]
            first = np.searchsorted(keys, np.arange(n_groups, dtype=np.int64) * span)
            count_below = np.searchsorted(keys, queries_group * span + queries_x)
            count = count_below - first[queries_group]
            total = prefix[count_below] - prefix[first[queries_group]]
            below += sign * (queries_x * count - total).reshape(n_groups, -1)
    return np.diff(below, axis=1)


@jit.kernel
def _add_to_bins(out, which, group, a, b, edges):
    """Add the overlap of ``[a, b)`` with every bin to ``out[which, group]``."""
    n_bins = edges.shape[0] - 1
    k = np.searchsorted(edges, a, side="right") - 1
    k = min(max(k, 0), n_bins - 1)
    while k < n_bins and edges[k] < b:
        lo = max(a, edges[k])
        hi = min(b, edges[k + 1]) if k < n_bins - 1 else b
        if hi > lo:
            out[which, group, k] += hi - lo
        k += 1


@jit.kernel
def _binned_compiled(track, kind, start, dur, tag, is_wait, group_of_track, n_groups, edges,
                     span_a, span_b):
    """Per (all regions, wait regions), group and bin: the overlap of each track's union
    of regions with the bin, summed over the group's tracks. One pass over the records in
    start order, keeping each track's open union interval (rows not in start order are
    sorted first)."""
    n = kind.shape[0]
    ordered = True
    for i in range(1, n):
        if start[i] < start[i - 1]:
            ordered = False
            break
    order = np.empty(0, np.int64) if ordered else np.argsort(start, kind="mergesort")
    n_tracks = group_of_track.shape[0]
    out = np.zeros((2, n_groups, edges.shape[0] - 1), np.float64)
    open_a = np.zeros((2, n_tracks), np.int64)
    open_b = np.zeros((2, n_tracks), np.int64)
    is_open = np.zeros((2, n_tracks), np.bool_)
    for q in range(n):
        r = q if ordered else order[q]
        k = kind[r]
        if k != span_a and k != span_b:
            continue
        t = track[r]
        s = np.int64(start[r])
        e = s + max(np.int64(dur[r]), 0)
        g = np.int64(tag[r])
        waiting = 0 <= g < is_wait.shape[0] and is_wait[g]
        for which in range(2 if waiting else 1):
            if is_open[which, t] and s <= open_b[which, t]:
                open_b[which, t] = max(open_b[which, t], e)
                continue
            if is_open[which, t]:
                _add_to_bins(out, which, group_of_track[t], open_a[which, t], open_b[which, t],
                             edges)
            open_a[which, t] = s
            open_b[which, t] = e
            is_open[which, t] = True
    for which in range(2):
        for t in range(n_tracks):
            if is_open[which, t]:
                _add_to_bins(out, which, group_of_track[t], open_a[which, t], open_b[which, t],
                             edges)
    return out


def _groups(trace: Trace, tid: np.ndarray, sm: np.ndarray, by: str, role_spec):
    """Group key per record and a label per key."""
    if by == "sm":
        return sm, lambda value: f"SM {value}"
    if by == "cta":
        return cta_of(trace, tid), lambda value: f"CTA {value}"
    if role_spec is None:
        raise ProfileBufferError("aggregating by role needs a role spec: apply one first "
                                 "(cute_prof.analysis.roles.apply_roles, or --roles SPEC.json)")
    names = role_spec.role_names
    return (role_spec.role_of(tid).astype(np.int64),
            lambda value: names[value] if value >= 0 else "no role")


def _wait_table(trace: Trace, role_spec, wait_tags) -> np.ndarray:
    """Per tag id: whether it means waiting."""
    size = max(len(trace.tag_names), 1)
    if wait_tags is None:
        if role_spec is None:
            return np.zeros(size, bool)
        return role_spec.tag_kinds(trace) == TAG_KINDS.index("wait")
    index = {name: i for i, name in enumerate(trace.tag_names)}
    unknown = [t for t in wait_tags if t not in index]
    if unknown:
        raise ProfileBufferError(f"unknown wait tags {unknown}; tags are {list(trace.tag_names)}")
    table = np.zeros(size, bool)
    table[[index[t] for t in wait_tags]] = True
    return table


def aggregate_counters(trace: Trace, *, by: str = "sm", bins: int = DEFAULT_BINS,
                       wait_tags: list[str] | None = None) -> list[dict[str, Any]]:
    """Counter series (the exporters' ``counters=`` format) per group: ``"<group> busy"``
    and, when some tag means wait, ``"<group> wait"``: the mean number of the group's
    tracks busy (in a region, not waiting) / waiting in each of ``bins`` equal time bins,
    a sample at each bin's start and a closing 0 at the end.

    ``by``: ``"sm"``, ``"role"`` (the role spec applied to the trace) or ``"cta"`` (needs
    the spec's ``tid_stride``). ``wait_tags``: names of tags that mean waiting (default:
    the role spec's ``wait`` tags; none without a spec)."""
    if by not in AGGREGATE_BY:
        raise ProfileBufferError(f"aggregate must be one of {AGGREGATE_BY}, got {by!r}")
    if isinstance(bins, bool) or not isinstance(bins, (int, np.integer)) or bins < 1:
        raise ProfileBufferError(f"bins must be a positive int, got {bins!r}")
    events = trace.events
    kind = events["kind"]
    is_span = (kind == SPAN_KINDS[0]) | (kind == SPAN_KINDS[1])
    spec = (trace.metadata or {}).get("roles")
    role_spec = load_role_spec(spec) if isinstance(spec, dict) else None
    is_wait = _wait_table(trace, role_spec, wait_tags)
    if not is_span.any():
        return []
    span_start = events["start_ns"][is_span]
    t0 = int(span_start.min())
    t1 = int((span_start + np.maximum(events["dur_ns"][is_span], 0)).max())
    del span_start
    edges = bin_edges(t0, t1, int(bins))
    widths = np.diff(edges).astype(np.float64)
    tid = events["tid"].astype(np.int64)
    key, label = _groups(trace, tid, events["sm"].astype(np.int64), by, role_spec)
    track, track_group, _ = pair_index(key, tid)  # one track per (group, tid)
    groups, group_of_track = np.unique(track_group, return_inverse=True)
    group_of_track = group_of_track.reshape(-1).astype(np.int64)
    if jit.enabled():
        covered = _binned_compiled(track, kind, events["start_ns"], events["dur_ns"],
                                   events["tag"], is_wait, group_of_track, groups.shape[0],
                                   edges, SPAN_KINDS[0], SPAN_KINDS[1])
        covered_all, covered_wait = covered[0], covered[1]
    else:
        start = events["start_ns"][is_span].astype(np.int64)
        end = start + np.maximum(events["dur_ns"][is_span].astype(np.int64), 0)
        tag = events["tag"][is_span].astype(np.int64)
        waiting = np.zeros(tag.shape[0], bool)
        known = (tag >= 0) & (tag < is_wait.shape[0])
        waiting[known] = is_wait[tag[known]]
        span_track = track[is_span]
        tables = []
        for rows in (np.ones(tag.shape[0], bool), waiting):
            u_track, u_start, u_end = union_intervals(span_track[rows], start[rows], end[rows])
            tables.append(_binned_numpy(group_of_track[u_track], u_start, u_end,
                                        groups.shape[0], edges))
        covered_all, covered_wait = tables
    busy = np.maximum(covered_all - covered_wait, 0.0) / widths
    wait = covered_wait / widths
    series = {"busy": busy}
    if is_wait.any():
        series["wait"] = wait
    counters = []
    for index, value in enumerate(groups.tolist()):
        for name, table in series.items():
            counters.append({"name": f"{label(value)} {name}", "ts": edges.copy(),
                             "value": np.r_[np.round(table[index], 6), 0.0]})
    return counters


def aggregated_trace(trace: Trace, *, by: str = "sm", bins: int = DEFAULT_BINS,
                     wait_tags: list[str] | None = None) -> tuple[Trace, list[dict[str, Any]]]:
    """``(a trace without records, the counters)`` to export instead of every region; the
    loss counts and metadata stay, ``metadata["aggregate"]`` says what was summed."""
    counters = aggregate_counters(trace, by=by, bins=bins, wait_tags=wait_tags)
    summary = {"by": by, "bins": int(bins), "records": int(trace.events.shape[0]),
               "counters": len(counters)}
    return replace(trace, events=trace.events[:0],
                   metadata={**trace.metadata, "aggregate": summary}), counters
