"""Compiled loops of the exporters (numba through :mod:`cute_prof.jit`).

The numpy exporters order every begin/end operation with global sorts and gather them in
random order, which bounds them near 1 M records/s. These loops instead walk the records
track by track (one counting sort by track, the rows of a track already in start order),
place overlapping regions into first-fit lanes, and encode the output bytes directly into a
preallocated buffer that the caller streams to the file chunk by chunk, so memory stays
bounded. They produce what the numpy paths produce (the tests parse both and compare);
callers take them only when ``jit.enabled()``.

Ordering rules (the same as :func:`cute_prof.export.regions.build_region_ops`): on a track,
operations go by time; at one timestamp, ends of non-empty regions first (the most recently
opened first), then begins (longer region first, then record order), each zero-length
region's end right after its begin, then instants in record order.
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .. import jit

__all__ = [
    "PACKET_BOUND",
    "plan_chunks",
    "stream_chunks",
    "count_sort_tracks",
    "dense_index",
    "encode_pftrace_tracks",
    "encode_counter_packets",
    "gather_by_track",
    "order_and_lanes",
    "scan_records",
    "tag_presence",
    "encode_json_events",
    "lanes_by_row",
    "parents_first_order",
    "used_values",
]

# Upper bound of one event packet's bytes without a flow template: framing 3, timestamp 11,
# sequence 11, track_event (type, name, payload annotation) 32, flags 2.
PACKET_BOUND = 64


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
def _before(s_a, e_a, r_a, s_b, e_b, r_b):
    """Region order: earlier start, then longer (later end), then record order."""
    if s_a != s_b:
        return s_a < s_b
    if e_a != e_b:
        return e_a > e_b
    return r_a < r_b


@jit.kernel
def _nest_lane(j, s, e, end, lane_top, below, n_lanes):
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
def _sort_part(lo, hi, ts, end, iid, pay, override, perm, scratch, values):
    """Order positions ``lo:hi`` by (time, later end first, position) in place, moving
    every column along. Ordered parts (decoded traces are start-sorted) cost one check."""
    ordered = True
    for p in range(lo + 1, hi):
        if not _before(ts[p - 1], end[p - 1], p - 1, ts[p], end[p], p):
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
                if _before(ts[b], end[b], b, ts[a], end[a], a):
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


@jit.kernel
def _grow(values, size):
    bigger = np.empty(max(2 * values.shape[0], size, 16), values.dtype)
    bigger[: values.shape[0]] = values
    return bigger


@jit.kernel
def _order_and_lanes(offsets, ts, end, iid, pay, override, n_names, lane, lanes_of, t_lo,
                     t_hi):
    """:func:`order_and_lanes` for tracks ``t_lo .. t_hi - 1``; ``lane`` and ``lanes_of``
    are filled in place, final tracks are numbered from 0 within the range."""
    longest = 0
    for key in range(2 * t_lo, 2 * t_hi):
        longest = max(longest, offsets[key + 1] - offsets[key])
    perm = np.empty(longest, np.int64)
    scratch = np.empty(longest, np.int64)
    values = np.empty(longest, np.int64)
    lane_top = np.empty(longest + 1, np.int64)
    below = np.empty(longest, np.int64)
    first_ts = np.empty(16, np.int64)
    has_payload = np.empty(16, np.bool_)
    pair_track = np.empty(16, np.int64)
    pair_iid = np.empty(16, np.int64)
    n_final = 0
    n_pairs = 0
    used = np.zeros(n_names + 1, np.bool_)
    for t in range(t_lo, t_hi):
        lo = offsets[2 * t]
        mid = offsets[2 * t + 1]
        hi = offsets[2 * t + 2]
        _sort_part(lo, mid, ts, end, iid, pay, override, perm, scratch, values)
        _sort_part(mid, hi, ts, end, iid, pay, override, perm, scratch, values)
        n_lanes = 0
        for p in range(lo, mid):
            s = ts[p]
            placed, n_lanes = _nest_lane(p - lo, s, end[p], end[lo:], lane_top, below, n_lanes)
            lane[p] = placed
        if n_lanes == 0:
            n_lanes = 1  # a track of instants only
        lanes_of[t] = n_lanes
        for number in range(n_lanes):
            if n_final == first_ts.shape[0]:
                first_ts = _grow(first_ts, n_final + 1)
                has_payload = _grow(has_payload, n_final + 1)
            first = np.int64(0)
            seen = False
            payload_used = False
            last = hi if number == 0 else mid
            for p in range(lo, last):
                if p < mid and lane[p] != number:
                    continue
                if not seen or ts[p] < first:
                    first = ts[p]
                    seen = True
                used[iid[p]] = True
                if pay[p] != 0:
                    payload_used = True
            first_ts[n_final] = first
            has_payload[n_final] = payload_used
            for name in range(1, n_names + 1):
                if used[name]:
                    used[name] = False
                    if n_pairs == pair_track.shape[0]:
                        pair_track = _grow(pair_track, n_pairs + 1)
                        pair_iid = _grow(pair_iid, n_pairs + 1)
                    pair_track[n_pairs] = n_final
                    pair_iid[n_pairs] = name
                    n_pairs += 1
            n_final += 1
    return first_ts[:n_final], has_payload[:n_final], pair_track[:n_pairs], pair_iid[:n_pairs]


def order_and_lanes(offsets, ts, end, iid, pay, override, n_names, *, workers: int = 2):
    """Sort each track's regions by (start, longer first, record order) and its instants by
    (time, record order), and put its regions into first-fit lanes: a region goes into the
    first lane whose open regions it nests in (a track whose regions nest has one lane).
    Tracks are independent: ``workers`` threads take a range of them each.

    Returns ``(lane per region position, lanes per track, per final track (track, lane) in
    order: its first timestamp and whether a payload is used, and the (final track, name
    id) pairs that each final track's sequence interns, in order)``."""
    n_tracks = (offsets.shape[0] - 1) // 2
    lane = np.zeros(ts.shape[0], np.int32)
    lanes_of = np.zeros(n_tracks, np.int64)
    # split where about half the records are done
    cut = [0] + [min(int(np.searchsorted(offsets[::2], offsets[-1] * w // workers)), n_tracks)
                 for w in range(1, workers)] + [n_tracks]
    ranges = [(lo, max(lo, hi)) for lo, hi in zip(cut[:-1], cut[1:])]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        parts = list(pool.map(lambda r: _order_and_lanes(
            offsets, ts, end, iid, pay, override, n_names, lane, lanes_of, r[0], r[1]),
            ranges))
    first_ts = np.concatenate([p[0] for p in parts])
    has_payload = np.concatenate([p[1] for p in parts])
    finals_before = np.cumsum([0] + [p[0].shape[0] for p in parts[:-1]])
    pair_track = np.concatenate([p[2] + base for p, base in zip(parts, finals_before)])
    pair_iid = np.concatenate([p[3] for p in parts])
    return lane, lanes_of, first_ts, has_payload, pair_track, pair_iid


@jit.kernel
def _put_varint(out, at, value):
    v = np.uint64(value)
    while v >= 0x80:
        out[at] = np.uint8((v & np.uint64(0x7F)) | np.uint64(0x80))
        v >>= np.uint64(7)
        at += 1
    out[at] = np.uint8(v)
    return at + 1


@jit.kernel
def _varint_length(value):
    v = np.uint64(value)
    n = 1
    while v >= 0x80:
        v >>= np.uint64(7)
        n += 1
    return n


@jit.kernel
def _put_event(out, at, ts, sequence, kind, iid, payload, override, templates, template_at):
    """One ``Trace.packet`` entry: timestamp, sequence id and the TrackEvent (type, name
    id, payload annotation) with its flags, as the official protos serialise them; or,
    with ``override >= 0``, that prepared template after the two varints."""
    if override >= 0:
        length = template_at[override + 1] - template_at[override]
    else:
        annotation = 0
        if payload != 0:
            annotation = 3 + _varint_length(np.int64(payload))
        event = (2 + annotation if annotation else 0) + 2
        if iid != 0:
            event += 1 + _varint_length(iid)
        length = 1 + _varint_length(event) + event + (2 if iid != 0 else 0)
    body = 2 + _varint_length(ts) + _varint_length(sequence) + length
    out[at] = 0x0A
    at = _put_varint(out, at + 1, body)
    out[at] = 0x40
    at = _put_varint(out, at + 1, ts)
    out[at] = 0x50
    at = _put_varint(out, at + 1, sequence)
    if override >= 0:
        for b in range(template_at[override], template_at[override + 1]):
            out[at] = templates[b]
            at += 1
        return at
    out[at] = 0x5A
    at = _put_varint(out, at + 1, event)
    if annotation:
        out[at] = 0x22
        out[at + 1] = np.uint8(annotation)
        out[at + 2] = 0x08
        out[at + 3] = 0x01
        out[at + 4] = 0x20
        at = _put_varint(out, at + 5, np.int64(payload))
    out[at] = 0x48
    out[at + 1] = np.uint8(kind)
    at += 2
    if iid != 0:
        out[at] = 0x50
        at = _put_varint(out, at + 1, iid)
        out[at] = 0x68
        out[at + 1] = 0x02
        at += 2
    return at


@jit.kernel
def encode_pftrace_tracks(out, track_lo, track_hi, offsets, ts, end, iid, pay, override, lane,
                          lanes_of, first_final, offset, first_sequence, templates,
                          template_at):
    """Event packets of tracks ``track_lo .. track_hi - 1`` into ``out`` (sized by the
    caller: ``PACKET_BOUND`` plus the longest flow template per operation). Returns the
    bytes used."""
    longest = 0
    for t in range(track_lo, track_hi):
        longest = max(longest, offsets[2 * t + 1] - offsets[2 * t])
    stack = np.empty(longest + 1, np.int64)
    has_overrides = override.shape[0] > 0
    at = 0
    for t in range(track_lo, track_hi):
        lo = offsets[2 * t]
        mid = offsets[2 * t + 1]
        hi = offsets[2 * t + 2]
        for number in range(lanes_of[t]):
            sequence = first_sequence + first_final[t] + number
            depth = 0
            j = lo  # next region
            i = mid if number == 0 else hi  # next instant
            while True:
                while j < mid and lane[j] != number:
                    j += 1
                if j == mid and i == hi and depth == 0:
                    break
                # the next operation by (time, class): end 0, begin 1, instant 2
                best = -1
                best_ts = np.int64(0)
                if depth > 0:
                    best_ts = end[stack[depth - 1]]
                    best = 0
                if j < mid and (best < 0 or ts[j] < best_ts):
                    best, best_ts = 1, ts[j]
                if i < hi and (best < 0 or ts[i] < best_ts):
                    best, best_ts = 2, ts[i]
                if best == 0:
                    depth -= 1
                    at = _put_event(out, at, best_ts + offset, sequence, 2, 0, 0, -1,
                                    templates, template_at)
                elif best == 1:
                    code = override[j] if has_overrides else -1
                    at = _put_event(out, at, best_ts + offset, sequence, 1, iid[j], pay[j],
                                    code, templates, template_at)
                    if end[j] == ts[j]:
                        at = _put_event(out, at, best_ts + offset, sequence, 2, 0, 0, -1,
                                        templates, template_at)
                    else:
                        stack[depth] = j
                        depth += 1
                    j += 1
                else:
                    at = _put_event(out, at, best_ts + offset, sequence, 3, iid[i], pay[i], -1,
                                    templates, template_at)
                    i += 1
    return at


@jit.kernel
def encode_counter_packets(out, ts, value, uuid, sequence):
    """Counter samples: ``timestamp``, sequence id and a TYPE_COUNTER TrackEvent with the
    counter track's uuid and a double value, as the official protos serialise them.
    ``out`` must hold 48 bytes per sample. Returns the bytes used."""
    at = 0
    bits = value.view(np.uint64)
    for k in range(ts.shape[0]):
        event = 2 + 1 + _varint_length(uuid[k]) + 2 + 8
        t = max(ts[k], 0)
        body = 2 + _varint_length(t) + _varint_length(sequence) + 1 + _varint_length(event) + event
        out[at] = 0x0A
        at = _put_varint(out, at + 1, body)
        out[at] = 0x40
        at = _put_varint(out, at + 1, t)
        out[at] = 0x50
        at = _put_varint(out, at + 1, sequence)
        out[at] = 0x5A
        at = _put_varint(out, at + 1, event)
        out[at] = 0x48
        out[at + 1] = 0x04
        out[at + 2] = 0x58
        at = _put_varint(out, at + 3, uuid[k])
        out[at] = 0xE1
        out[at + 1] = 0x02
        b = bits[k]
        for q in range(8):
            out[at + 2 + q] = np.uint8((b >> np.uint64(8 * q)) & np.uint64(0xFF))
        at += 10
    return at


# ------------------------------------------------------------------------ Chrome JSON


@jit.kernel
def parents_first_order(start, dur):
    """Row order for the JSON file: by start, equal starts longer first, then row order
    (importers nest by file order). Returns an empty array when the rows are in that
    order already."""
    n = start.shape[0]
    ordered = True
    by_start = True
    for i in range(1, n):
        if start[i] < start[i - 1]:
            ordered = False
            by_start = False
            break
        if start[i] == start[i - 1] and dur[i] > dur[i - 1]:
            ordered = False
    if ordered:
        return np.empty(0, np.int64)
    if by_start:  # decoded traces: only runs of equal start need reordering
        order = np.arange(n)
    else:
        order = np.argsort(start, kind="mergesort")
    i = 0
    while i < n:  # runs of equal start: longer first, stable (insertion sort, runs are short)
        j = i + 1
        while j < n and start[order[j]] == start[order[i]]:
            j += 1
        for a in range(i + 1, j):
            row = order[a]
            b = a
            while b > i and dur[order[b - 1]] < dur[row]:
                order[b] = order[b - 1]
                b -= 1
            order[b] = row
        i = j
    return order


@jit.kernel
def lanes_by_row(offsets, rows, kind, start, dur, instant):
    """First-fit nesting lane of every region row (0 for instants), its track's regions
    taken by (start, longer first, row). ``offsets``/``rows``: rows grouped by track in
    row order (:func:`count_sort_tracks`)."""
    n_tracks = offsets.shape[0] - 1
    lane = np.zeros(kind.shape[0], np.int32)
    longest = 0
    for t in range(n_tracks):
        longest = max(longest, offsets[t + 1] - offsets[t])
    ts = np.empty(longest, np.int64)
    end = np.empty(longest, np.int64)
    iid = np.zeros(longest, np.int32)
    pay = np.zeros(longest, np.int32)
    own = np.empty(longest, np.int64)
    perm = np.empty(longest, np.int64)
    scratch = np.empty(longest, np.int64)
    values = np.empty(longest, np.int64)
    lane_top = np.empty(longest + 1, np.int64)
    below = np.empty(longest, np.int64)
    no_override = np.empty(0, np.int32)
    lanes_of = np.ones(n_tracks, np.int64)
    for t in range(n_tracks):
        m = 0
        for p in range(offsets[t], offsets[t + 1]):
            r = rows[p]
            if kind[r] == instant:
                continue
            s = np.int64(start[r])
            d = np.int64(dur[r])
            ts[m] = s
            end[m] = s + (d if d > 0 else 0)
            pay[m] = m  # original position, carried through the sort
            own[m] = r
            m += 1
        _sort_part(0, m, ts, end, iid, pay, no_override, perm, scratch, values)
        n_lanes = 0
        for j in range(m):
            s = ts[j]
            placed, n_lanes = _nest_lane(j, s, end[j], end, lane_top, below, n_lanes)
            lane[own[pay[j]]] = placed
        lanes_of[t] = max(n_lanes, 1)
    return lane, lanes_of


_INT64_MIN_TEXT = np.frombuffer(b"-9223372036854775808", np.uint8).copy()
_TWO_DIGITS = np.frombuffer(b"".join(b"%02d" % k for k in range(100)), np.uint8).copy()


@jit.kernel
def _put_digits(out, at, m):
    """Decimal digits of an int64 >= 0, two at a time from the right (int64 arithmetic
    throughout: numba turns mixed uint64/int64 arithmetic into floating point)."""
    digits = 1
    probe = m
    if probe >= 10000000000000000:
        digits += 16
        probe //= 10000000000000000
    if probe >= 100000000:
        digits += 8
        probe //= 100000000
    if probe >= 10000:
        digits += 4
        probe //= 10000
    if probe >= 100:
        digits += 2
        probe //= 100
    if probe >= 10:
        digits += 1
    pos = at + digits
    while m >= 100:
        q = m // 100
        r = m - q * 100
        pos -= 2
        out[pos] = _TWO_DIGITS[2 * r]
        out[pos + 1] = _TWO_DIGITS[2 * r + 1]
        m = q
    if m >= 10:
        out[pos - 2] = _TWO_DIGITS[2 * m]
        out[pos - 1] = _TWO_DIGITS[2 * m + 1]
    else:
        out[pos - 1] = np.uint8(48 + m)
    return at + digits


@jit.kernel
def _put_int(out, at, value):
    v = np.int64(value)
    if v < 0:
        if v == -9223372036854775807 - 1:
            for b in range(_INT64_MIN_TEXT.shape[0]):
                out[at + b] = _INT64_MIN_TEXT[b]
            return at + _INT64_MIN_TEXT.shape[0]
        out[at] = 45  # '-'
        return _put_digits(out, at + 1, -v)
    return _put_digits(out, at, v)


@jit.kernel
def _put_micros(out, at, value):
    """ns as µs with three decimals, plus a fourth decimal 1 where Perfetto's importer
    would read the text 1 ns short (see chrome_json's module docstring)."""
    v = np.int64(value)
    if v < 0:
        out[at] = 45
        at += 1
        if v == -9223372036854775807 - 1:  # |v| does not fit: 9223372036854775.808
            whole = np.int64(9223372036854775)
            remainder = np.int64(808)
            exact = 9223372036854775808.0
        else:
            whole = (-v) // 1000
            remainder = (-v) - whole * 1000
            exact = np.float64(-v)
    else:
        whole = v // 1000
        remainder = v - whole * 1000
        exact = np.float64(v)
    at = _put_digits(out, at, whole)
    out[at] = 46
    out[at + 1] = np.uint8(48 + remainder // 100)
    out[at + 2] = _TWO_DIGITS[2 * (remainder % 100)]
    out[at + 3] = _TWO_DIGITS[2 * (remainder % 100) + 1]
    at += 4
    as_read = np.float64(whole) + np.float64(remainder) / 1000.0
    if np.floor(as_read * 1000.0) != exact:
        out[at] = 49
        at += 1
    return at


@jit.kernel
def _put_bytes(out, at, table, table_at, index):
    for b in range(table_at[index], table_at[index + 1]):
        out[at] = table[b]
        at += 1
    return at


# The constant texts of a JSON event, as tuples of bytes: numba compiles a copy of a tuple
# constant into constant stores (~30 ns for all of them; a loop over a byte table took ~150).
_OPEN = tuple(b'{"name":')
_TS = tuple(b',"ts":')
_DUR = tuple(b',"dur":')
_INSTANT_SCOPE = tuple(b',"s":"t"')
_PID = tuple(b',"pid":')
_TID = tuple(b',"tid":')
_ARGS_START = tuple(b',"args":{"start_ns":')
_ARGS_DUR = tuple(b',"dur_ns":')
_ARGS_TID = tuple(b',"tid":')
_ARGS_PAYLOAD = tuple(b',"payload":')
_ARGS_SM = tuple(b',"sm":')
_ARGS_WARP = tuple(b',"warp":')
_ARGS_CYCLES = tuple(b',"dur_cycles":')
_CLOSE = tuple(b'}},\n')
_CLOSE_LAST = tuple(b'}}\n')
_SPAN_KIND = tuple(b',"cat":"span","ph":"X"')
_INSTANT_KIND = tuple(b',"cat":"instant","ph":"i"')
_CLOCK_SPAN_KIND = tuple(b',"cat":"clock_span","ph":"X"')


@jit.kernel(inline="always")
def _put_text(out, at, text):
    for k in range(len(text)):
        out[at + k] = text[k]
    return at + len(text)


@jit.kernel
def encode_json_events(out, k_lo, k_hi, count, row_of, start, dur, tag, tid, payload, kind, sm,
                       warp, dur_cycles, origin, name_of_tag, tag_min, names, name_at, kinds,
                       kind_at, span, instant, clock_span, with_cycles, pid, track, lane,
                       first_lane, tid_base):
    """Chrome JSON events ``k_lo .. k_hi - 1`` (file order; ``row_of`` maps it to rows,
    empty for the identity) into ``out`` (sized by the caller). Each event ends with
    ``,\n`` except the last of all ``count``. ``names``/``kinds``: the name text per tag
    and the category/phase text per kind code, as byte tables. Returns the bytes used."""
    at = 0
    k = k_lo
    identity = row_of.shape[0] == 0
    while k < k_hi:
        r = k if identity else row_of[k]
        code = kind[r]
        at = _put_text(out, at, _OPEN)
        at = _put_bytes(out, at, names, name_at, name_of_tag[np.int64(tag[r]) - tag_min])
        if code == span:
            at = _put_text(out, at, _SPAN_KIND)
        elif code == instant:
            at = _put_text(out, at, _INSTANT_KIND)
        elif code == clock_span:
            at = _put_text(out, at, _CLOCK_SPAN_KIND)
        else:
            at = _put_bytes(out, at, kinds, kind_at, code)
        at = _put_text(out, at, _TS)
        at = _put_micros(out, at, np.int64(start[r]) - origin)
        if code == instant:
            at = _put_text(out, at, _INSTANT_SCOPE)
        else:
            at = _put_text(out, at, _DUR)
            at = _put_micros(out, at, dur[r])
        at = _put_text(out, at, _PID)
        at = _put_int(out, at, pid[r] if pid.shape[0] else 1)
        at = _put_text(out, at, _TID)
        at = _put_int(out, at, first_lane[track[r]] + lane[r] + tid_base)
        at = _put_text(out, at, _ARGS_START)
        at = _put_int(out, at, start[r])
        at = _put_text(out, at, _ARGS_DUR)
        at = _put_int(out, at, dur[r])
        at = _put_text(out, at, _ARGS_TID)
        at = _put_int(out, at, tid[r])
        at = _put_text(out, at, _ARGS_PAYLOAD)
        at = _put_int(out, at, payload[r])
        at = _put_text(out, at, _ARGS_SM)
        at = _put_int(out, at, sm[r])
        at = _put_text(out, at, _ARGS_WARP)
        at = _put_int(out, at, warp[r])
        if with_cycles and code == clock_span:
            at = _put_text(out, at, _ARGS_CYCLES)
            at = _put_int(out, at, dur_cycles[r])
        k += 1
        if k < count:
            at = _put_text(out, at, _CLOSE)
        else:
            at = _put_text(out, at, _CLOSE_LAST)
    return at


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
