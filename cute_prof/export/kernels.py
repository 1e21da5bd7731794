"""Compiled loops of the exporters (numba through :mod:`cute_prof.jit`): what both writers share.

The numpy exporters order every begin/end operation with global sorts and gather them in
random order, which bounds their speed (see docs/performance.md). The compiled loops instead
walk the records track by track (one counting sort by track, the rows of a track already in
start order), place overlapping regions into first-fit lanes, and encode the output bytes
directly into a preallocated buffer that the caller streams to the file chunk by chunk, so
memory stays bounded. They produce what the numpy paths produce (the tests parse both and
compare); callers take them only when ``jit.enabled()``.

This module owns the shared part: the chunked streaming of encoded bytes, the selection scan,
the grouping of rows by track, the dense value index, and the order and first-fit nesting
lanes of one track's regions. The pftrace writer's own loops
(lanes, protobuf packets) are :mod:`cute_prof.export.pftrace_kernels`, the JSON writer's
:mod:`cute_prof.export.json_kernels`. It may not import the writers nor anything above
``export``.
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .. import jit

__all__ = [
    "count_sort_tracks",
    "dense_index",
    "gather_by_track",
    "nest_lane",
    "region_before",
    "sort_regions",
    "plan_chunks",
    "scan_records",
    "stream_chunks",
    "tag_presence",
    "used_values",
]


def stream_chunks(handle, step, chunks: list[tuple[int, int]], chunk_bytes: int, done, *,
                  workers: int = 2) -> None:
    """Write, in order, what ``step(buffer, lo, hi) -> bytes used`` encodes for each chunk
    ``(lo, hi)``: the compiled encoders (which release the GIL) fill buffers on ``workers``
    threads while this thread writes the finished ones, so encoding and the file system's
    copy use every core. ``done(hi)`` after each chunk written."""
    free = [np.empty(chunk_bytes, np.uint8) for _ in range(workers + 1)]
    pending: deque = deque()
    upcoming = iter(chunks)
    with ThreadPoolExecutor(max_workers=workers) as pool:

        def submit() -> None:
            while free:
                chunk = next(upcoming, None)
                if chunk is None:
                    return
                buffer = free.pop()
                pending.append((pool.submit(step, buffer, *chunk), buffer, chunk[1]))

        submit()
        while pending:
            future, buffer, hi = pending.popleft()
            used = future.result()
            handle.write(memoryview(buffer)[:used])
            done(hi)
            free.append(buffer)
            submit()


def plan_chunks(sizes: np.ndarray, chunk_bytes: int) -> list[tuple[int, int]]:
    """Consecutive ranges of items whose ``sizes`` (bytes, an upper bound each) add up to at
    most ``chunk_bytes`` (an item larger than that is a chunk of its own)."""
    total = np.cumsum(sizes)
    chunks = []
    lo = 0
    while lo < sizes.shape[0]:
        before = int(total[lo - 1]) if lo else 0
        hi = max(int(np.searchsorted(total, before + chunk_bytes, side="right")), lo + 1)
        chunks.append((lo, hi))
        lo = hi
    return chunks


@jit.kernel
def scan_records(kind, start, dur, tag, span_a, span_b, instant):
    """One pass: (selected records, min time, max end, min tag, max tag) over the spans
    (kinds ``span_a``/``span_b``) and instants."""
    count = 0
    t_min = np.int64(0)
    t_max = np.int64(0)
    tag_min = np.int64(0)
    tag_max = np.int64(0)
    for i in range(kind.shape[0]):
        k = kind[i]
        if k == span_a or k == span_b:
            s = np.int64(start[i])
            d = np.int64(dur[i])
            e = s + (d if d > 0 else 0)
        elif k == instant:
            s = np.int64(start[i])
            e = s
        else:
            continue
        g = np.int64(tag[i])
        if count == 0:
            t_min, t_max, tag_min, tag_max = s, e, g, g
        else:
            t_min = min(t_min, s)
            t_max = max(t_max, e)
            tag_min = min(tag_min, g)
            tag_max = max(tag_max, g)
        count += 1
    return count, t_min, t_max, tag_min, tag_max


@jit.kernel
def tag_presence(kind, tag, span_a, span_b, instant, tag_min, size):
    """Which tags (offset by ``tag_min``) the selected records use."""
    present = np.zeros(size, np.bool_)
    for i in range(kind.shape[0]):
        k = kind[i]
        if k == span_a or k == span_b or k == instant:
            present[np.int64(tag[i]) - tag_min] = True
    return present


@jit.kernel
def count_sort_tracks(track, n_tracks):
    """Rows grouped by track (``track[i] < 0``: left out), each track's rows in row order:
    ``(offsets (n_tracks + 1), rows)``."""
    offsets = np.zeros(n_tracks + 1, np.int64)
    for i in range(track.shape[0]):
        t = track[i]
        if t >= 0:
            offsets[t + 1] += 1
    for t in range(n_tracks):
        offsets[t + 1] += offsets[t]
    rows = np.empty(offsets[n_tracks], np.int64)
    at = offsets[:n_tracks].copy()
    for i in range(track.shape[0]):
        t = track[i]
        if t >= 0:
            rows[at[t]] = i
            at[t] += 1
    return offsets, rows


@jit.kernel
def _count_by_track(track, kind, span_a, span_b, instant, n_tracks, row_lo, row_hi):
    """Regions (key 2t) and instants (key 2t + 1) of each track among rows lo..hi-1."""
    counts = np.zeros(2 * n_tracks, np.int64)
    for i in range(row_lo, row_hi):
        t = track[i]
        if t < 0:
            continue
        k = kind[i]
        if k == span_a or k == span_b:
            counts[2 * t] += 1
        elif k == instant:
            counts[2 * t + 1] += 1
    return counts


@jit.kernel
def _scatter_by_track(track, kind, start, dur, tag, payload, span_a, span_b, instant,
                      iid_of_tag, tag_min, with_payloads, override_of_row, row_lo, row_hi, at,
                      ts, end, iid, pay, override):
    """Rows lo..hi-1 into their track's places from ``at`` (per key, advanced)."""
    has_overrides = override.shape[0] > 0
    for i in range(row_lo, row_hi):
        t = track[i]
        if t < 0:
            continue
        k = kind[i]
        if k == span_a or k == span_b:
            key = 2 * t
        elif k == instant:
            key = 2 * t + 1
        else:
            continue
        p = at[key]
        at[key] = p + 1
        s = np.int64(start[i])
        ts[p] = s
        d = np.int64(dur[i]) if key == 2 * t else 0
        end[p] = s + (d if d > 0 else 0)
        iid[p] = iid_of_tag[np.int64(tag[i]) - tag_min]
        if with_payloads:
            pay[p] = payload[i]
        if has_overrides:
            override[p] = override_of_row[i]


def gather_by_track(track, kind, start, dur, tag, payload, span_a, span_b, instant,
                    n_tracks, iid_of_tag, tag_min, with_payloads, override_of_row, *,
                    workers: int = 2):
    """The columns the pftrace needs, grouped by track: track ``t``'s regions at
    ``[offsets[2t], offsets[2t+1])``, its instants up to ``offsets[2t+2]``, each in row
    order. The rows are split into ``workers`` ranges, counted and scattered in parallel
    (each range's rows of a track follow the previous range's: row order is kept); the
    reads go in row order, the writes one stream per track. Returns ``(offsets, time,
    end, name id, payload, flow template)``; the last is empty without flows."""
    n = kind.shape[0]
    bounds = [n * w // workers for w in range(workers + 1)]
    ranges = list(zip(bounds[:-1], bounds[1:]))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        counts = list(pool.map(lambda r: _count_by_track(
            track, kind, span_a, span_b, instant, n_tracks, r[0], r[1]), ranges))
        total_per_key = np.sum(counts, axis=0)
        offsets = np.zeros(2 * n_tracks + 1, np.int64)
        np.cumsum(total_per_key, out=offsets[1:])
        starts, at = [], offsets[:-1].copy()
        for count in counts:
            starts.append(at.copy())
            at += count
        total = int(offsets[-1])
        ts = np.empty(total, np.int64)
        end = np.empty(total, np.int64)
        iid = np.empty(total, np.int32)
        pay = np.zeros(total, np.int32)
        override = np.empty(total if override_of_row.shape[0] else 0, np.int32)
        list(pool.map(lambda job: _scatter_by_track(
            track, kind, start, dur, tag, payload, span_a, span_b, instant, iid_of_tag,
            tag_min, with_payloads, override_of_row, job[0][0], job[0][1], job[1], ts, end,
            iid, pay, override), zip(ranges, starts)))
    return offsets, ts, end, iid, pay, override


@jit.kernel
def used_values(values, lo, size):
    """Which of ``lo .. lo + size - 1`` occur in ``values``."""
    present = np.zeros(size, np.bool_)
    for i in range(values.shape[0]):
        present[np.int64(values[i]) - lo] = True
    return present


@jit.kernel
def dense_index(values, max_range):
    """Rank of each value among the distinct values (ascending), by a lookup table over
    the value range, and the distinct values; an empty index when the range exceeds
    ``max_range`` (then the caller sorts)."""
    n = values.shape[0]
    if n == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    lo = np.int64(values[0])
    hi = lo
    for i in range(n):
        v = np.int64(values[i])
        lo = min(lo, v)
        hi = max(hi, v)
    if hi - lo + 1 > max_range:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    rank = np.full(hi - lo + 1, -1, np.int64)
    for i in range(n):
        rank[np.int64(values[i]) - lo] = 0
    distinct = 0
    for v in range(hi - lo + 1):
        if rank[v] == 0:
            rank[v] = distinct
            distinct += 1
    keys = np.empty(distinct, np.int64)
    for v in range(hi - lo + 1):
        if rank[v] >= 0:
            keys[rank[v]] = v + lo
    index = np.empty(n, np.int64)
    for i in range(n):
        index[i] = rank[np.int64(values[i]) - lo]
    return index, keys


@jit.kernel
def region_before(s_a, e_a, r_a, s_b, e_b, r_b):
    """Region order: earlier start, then longer (later end), then record order."""
    if s_a != s_b:
        return s_a < s_b
    if e_a != e_b:
        return e_a > e_b
    return r_a < r_b


@jit.kernel
def nest_lane(j, s, e, end, lane_top, below, n_lanes):
    """First-fit nesting lane of span j = [s, e) among the spans before it (start-ordered):
    the lowest lane whose innermost still-open span contains it, else a new lane. Each
    lane keeps a stack of open spans (``lane_top``, linked through ``below``; indices into
    ``end``). Returns (lane, lane count)."""
    placed = -1
    for number in range(n_lanes):
        top = lane_top[number]
        while top >= 0 and end[top] <= s:
            top = below[top]
        lane_top[number] = top
        if top < 0 or e <= end[top]:
            placed = number
            break
    if placed < 0:
        placed = n_lanes
        lane_top[placed] = -1
        n_lanes += 1
    below[j] = lane_top[placed]
    lane_top[placed] = j
    return placed, n_lanes


@jit.kernel
def sort_regions(lo, hi, ts, end, iid, pay, override, perm, scratch, values):
    """Order positions ``lo:hi`` by (time, later end first, position) in place, moving
    every column along. Ordered parts (decoded traces are start-sorted) cost one check."""
    ordered = True
    for p in range(lo + 1, hi):
        if not region_before(ts[p - 1], end[p - 1], p - 1, ts[p], end[p], p):
            ordered = False
            break
    if ordered:
        return
    m = hi - lo
    src = perm[:m]
    dst = scratch[:m]
    for q in range(m):
        src[q] = lo + q
    width = 1
    while width < m:
        for left in range(0, m, 2 * width):
            mid = min(left + width, m)
            right = min(left + 2 * width, m)
            i, j, k = left, mid, left
            while i < mid and j < right:
                a = src[i]
                b = src[j]
                if region_before(ts[b], end[b], b, ts[a], end[a], a):
                    dst[k] = b
                    j += 1
                else:
                    dst[k] = a
                    i += 1
                k += 1
            while i < mid:
                dst[k] = src[i]
                i += 1
                k += 1
            while j < right:
                dst[k] = src[j]
                j += 1
                k += 1
        src, dst = dst, src
        width *= 2
    for column in (ts, end):
        for q in range(m):
            values[q] = column[src[q]]
        for q in range(m):
            column[lo + q] = values[q]
    for q in range(m):
        values[q] = iid[src[q]]
    for q in range(m):
        iid[lo + q] = values[q]
    for q in range(m):
        values[q] = pay[src[q]]
    for q in range(m):
        pay[lo + q] = values[q]
    if override.shape[0]:
        for q in range(m):
            values[q] = override[src[q]]
        for q in range(m):
            override[lo + q] = values[q]
