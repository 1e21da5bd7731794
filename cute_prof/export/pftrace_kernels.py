"""Compiled loops (numba through :mod:`cute_prof.jit`) of the pftrace writer: each track's
records in order and in first-fit nesting lanes, and the protobuf bytes of its packets.

Ordering rules (the same as :func:`cute_prof.export.regions.build_region_ops`): on a track,
operations go by time; at one timestamp, ends of non-empty regions first (the most recently
opened first), then begins (longer region first, then record order), each zero-length
region's end right after its begin, then instants in record order.

Owns those loops only; :mod:`cute_prof.export.pftrace_writer` decides when they run (only
when ``jit.enabled()``) and streams their chunks; the loops both writers share (region
order, lanes, streaming) are :mod:`cute_prof.export.kernels`'s. It may not import the
writers nor anything above ``export``.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .. import jit
from .kernels import nest_lane, sort_regions

__all__ = ["PACKET_BOUND", "encode_counter_packets", "encode_pftrace_tracks", "order_and_lanes"]

# Upper bound of one event packet's bytes without a flow template: framing 3, timestamp 11,
# sequence 11, track_event (type, name, payload annotation) 32, flags 2.
PACKET_BOUND = 64


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
        sort_regions(lo, mid, ts, end, iid, pay, override, perm, scratch, values)
        sort_regions(mid, hi, ts, end, iid, pay, override, perm, scratch, values)
        n_lanes = 0
        for p in range(lo, mid):
            s = ts[p]
            placed, n_lanes = nest_lane(p - lo, s, end[p], end[lo:], lane_top, below, n_lanes)
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
def _put_packet_head(out, at, ts, sequence, rest):
    """A ``Trace.packet`` entry's tag and length, its timestamp and its sequence id, for a
    packet whose remaining fields take ``rest`` bytes."""
    out[at] = 0x0A
    at = _put_varint(out, at + 1, 2 + _varint_length(ts) + _varint_length(sequence) + rest)
    out[at] = 0x40
    at = _put_varint(out, at + 1, ts)
    out[at] = 0x50
    return _put_varint(out, at + 1, sequence)


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
    at = _put_packet_head(out, at, ts, sequence, length)
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
        at = _put_packet_head(out, at, t, sequence, 1 + _varint_length(event) + event)
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
