"""Begin/end ordering of regions, shared by every exporter that draws tracks.

Perfetto (and the trace-event format) needs the regions of one track to nest strictly; the
picture needs the innermost open region at every moment. Both come from one ordering of
begin/end operations per track, computed here with numpy, plus the overlap lanes that make
regions of one track that overlap without nesting drawable.

Owns the begin/end order and the lanes every exporter follows; it writes no file, and may not
import the session, the CLI or the device code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import layout

__all__ = [
    "SPAN_KINDS",
    "RegionOps",
    "assign_lanes",
    "build_region_ops",
    "launch_label",
    "cluster_starts",
    "misnested_spans",
    "nesting_lanes",
    "counter_series",
    "overlap_lanes",
    "pack_or_lexsort",
    "pair_index",
    "retrack",
    "split_overlaps",
]

SPAN_KINDS = (layout.KIND_SPAN, layout.KIND_CLOCK_SPAN)


def launch_label(launches: list[dict[str, Any]], index: int) -> str:
    """Display name of kernel launch ``index``: its name (``name`` or ``kernel`` key) and index."""
    launch = launches[index] if 0 <= index < len(launches) else {}
    name = launch.get("name") or launch.get("kernel") or "launch"
    return f"{name} #{index}"


def pair_index(
    group: np.ndarray | None, leaf: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Dense index of (group, leaf) pairs in ascending numeric order, plus the pairs."""
    if group is None:
        group = np.zeros_like(leaf)
    if leaf.shape[0] == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    g0, l0 = int(group.min()), int(leaf.min())
    leaf_range = int(leaf.max()) - l0 + 1
    packed = (group - g0) * leaf_range + (leaf - l0)
    key_range = (int(group.max()) - g0 + 1) * leaf_range
    if key_range <= max(4 * packed.shape[0], 1 << 16):  # dense: a lookup table, no sort
        present = np.zeros(key_range, dtype=bool)
        present[packed] = True
        keys = np.flatnonzero(present)
        rank = np.cumsum(present) - 1
        index = rank[packed]
    else:
        keys, index = np.unique(packed, return_inverse=True)
    return index.reshape(-1), keys // leaf_range + g0, keys % leaf_range + l0


def pack_or_lexsort(keys: list[tuple[np.ndarray, int]]) -> np.ndarray:
    """Order of rows sorted by several non-negative integer keys (most significant first),
    given as ``(values, exclusive upper bound)``. One int64 argsort when the product of the
    bounds fits, ``np.lexsort`` otherwise."""
    total = 1
    for _, bound in keys:
        total *= max(1, int(bound))
    if total < (1 << 62):
        packed = np.zeros(keys[0][0].shape[0], dtype=np.int64)
        for values, bound in keys:
            packed = packed * max(1, int(bound)) + values
        return np.argsort(packed)
    return np.lexsort(tuple(values for values, _ in reversed(keys)))


@dataclass
class RegionOps:
    """All begin/end/instant operations, sorted by (track, time, tie-break)."""

    track: np.ndarray
    ts: np.ndarray
    type: np.ndarray  # 1 begin, 2 end, 3 instant (TrackEvent.Type values)
    iid: np.ndarray  # interned name id (0 for END)
    payload: np.ndarray
    span: np.ndarray  # span index for begin/end, -1 for instants


def build_region_ops(
    span_track: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    span_iid: np.ndarray,
    span_payload: np.ndarray,
    instant_track: np.ndarray,
    instant_ts: np.ndarray,
    instant_iid: np.ndarray,
    instant_payload: np.ndarray,
    n_tracks: int,
    t0: int,
    t_range: int,
) -> RegionOps:
    """Order every operation so each track's begin/end sequence nests when the regions do.

    Ties at one timestamp: ends of earlier regions first, then begins (longer region first,
    so the outer one opens first), a zero-length region's end right after its own begin,
    then instants. Ends at one timestamp close the most recently opened region first.
    """
    n = start.shape[0]
    dur = end - start
    max_dur = int(dur.max()) + 1 if n else 1
    span_order = pack_or_lexsort(
        [(span_track, n_tracks), (start - t0, t_range), (max_dur - 1 - dur, max_dur)]
    )
    rank = np.empty(n, dtype=np.int64)
    rank[span_order] = np.arange(n, dtype=np.int64)
    zero = dur == 0
    m = instant_ts.shape[0]
    track = np.concatenate([span_track, span_track, instant_track])
    ts = np.concatenate([start, end, instant_ts])
    tie_class = np.concatenate(
        [np.ones(n, np.int64), np.where(zero, 1, 0).astype(np.int64), np.full(m, 2, np.int64)]
    )
    # tie-break inside a class: begins by rank with each zero-length end right after its
    # begin, other ends by falling rank (later-opened first), instants in input order.
    # Listing the ops in that order first, a stable sort by (track, time, class) finishes
    # the job with one packed int64 key instead of a four-key lexsort.
    zero_by_rank = zero[span_order]
    class1 = np.stack([span_order, n + span_order], axis=1).reshape(-1)
    class1 = class1[np.stack([np.ones(n, bool), zero_by_rank], axis=1).reshape(-1)]
    class0 = (n + span_order[::-1])[~zero_by_rank[::-1]]
    pre = np.concatenate([class0, class1, 2 * n + np.arange(m, dtype=np.int64)])
    if n_tracks * t_range * 3 < (1 << 62):
        key = ((track[pre] * t_range + (ts[pre] - t0)) * 3 + tie_class[pre])
        order = pre[np.argsort(key, kind="stable")]
    else:  # extreme time ranges: the four keys, tie values shifted to be non-negative
        tie = np.concatenate([2 * rank, np.where(zero, 2 * rank + 1, -2 * rank),
                              np.zeros(m, np.int64)]) + 2 * n
        order = pack_or_lexsort(
            [(track, n_tracks), (ts - t0, t_range), (tie_class, 3), (tie, 4 * n + 2)]
        )
    span_index = np.arange(n, dtype=np.int64)
    return RegionOps(
        track=track[order],
        ts=ts[order],
        type=np.concatenate(
            [np.full(n, 1, np.int8), np.full(n, 2, np.int8), np.full(m, 3, np.int8)]
        )[order],
        iid=np.concatenate([span_iid, np.zeros(n, np.int64), instant_iid])[order],
        payload=np.concatenate([span_payload, np.zeros(n, np.int64), instant_payload])[order],
        span=np.concatenate([span_index, span_index, np.full(m, -1, np.int64)])[order],
    )


def retrack(ops: RegionOps, new_track_of_span: np.ndarray, old_to_first: np.ndarray) -> RegionOps:
    """``ops`` with spans moved to new tracks (instants to ``old_to_first`` of theirs),
    still sorted by (track, time, tie-break): the same result as building them again.

    The new track numbering keeps old tracks in order (lanes of one old track follow it),
    so a stable sort by the new track, nearly sorted already, restores the order."""
    is_instant = ops.span < 0
    track = np.where(is_instant, old_to_first[ops.track],
                     new_track_of_span[np.maximum(ops.span, 0)])
    order = np.argsort(track, kind="stable")
    return RegionOps(track=track[order], ts=ops.ts[order], type=ops.type[order],
                     iid=ops.iid[order], payload=ops.payload[order], span=ops.span[order])


def misnested_spans(ops: RegionOps, n_spans: int) -> np.ndarray:
    """Indices of spans whose begin/end do not pair up as a stack on their track.

    A begin opens level ``depth_after``; an end closes level ``depth_before``. In a sequence
    where every end follows its own begin, the stack pairs each end with its own begin
    exactly when both sit at the same level (checked exhaustively against a stack
    simulation in the tests), so no per-event loop is needed. The running depth is a plain
    cumulative sum: every track is balanced, so it returns to zero between tracks.
    """
    is_begin = ops.type == 1
    is_end = ops.type == 2
    delta = is_begin.astype(np.int64) - is_end.astype(np.int64)
    depth_after = np.cumsum(delta)
    begin_level = np.empty(n_spans, np.int64)
    end_level = np.empty(n_spans, np.int64)
    begin_level[ops.span[is_begin]] = depth_after[is_begin]
    end_level[ops.span[is_end]] = depth_after[is_end] + 1
    return np.flatnonzero(begin_level != end_level)


def assign_lanes(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Lane per span of one track so that each lane nests strictly (greedy, first fit).

    Spans are taken by start (longer first on ties); each goes into the first lane whose
    open regions it nests in. Only runs on clusters that failed the nesting check (see
    :func:`overlap_lanes`), which real kernels rarely produce and keep small."""
    order = np.lexsort((-(end - start), start))
    lanes: list[list[int]] = []  # per lane: stack of open region ends
    lane = np.zeros(start.shape[0], np.int64)
    for index, s, e in zip(order.tolist(), start[order].tolist(), end[order].tolist()):
        for number, stack in enumerate(lanes):
            while stack and stack[-1] <= s:
                stack.pop()
            if not stack or e <= stack[-1]:
                stack.append(e)
                lane[index] = number
                break
        else:
            lanes.append([e])
            lane[index] = len(lanes) - 1
    return lane


def cluster_starts(track: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """For spans sorted by (track, start), True where a cluster begins: a new track, or a
    start at or after the end of every earlier span of the track (a running maximum)."""
    n = track.shape[0]
    if n == 0:
        return np.zeros(0, bool)
    new_track = np.r_[True, track[1:] != track[:-1]]
    first_row = np.flatnonzero(new_track)
    low = np.minimum.reduceat(start, first_row)
    high = np.maximum.reduceat(end, first_row)
    if float((high.astype(np.float64) - low.astype(np.float64) + 1).sum()) < 2.0**61:
        # one running maximum over all tracks, each shifted above the previous one
        track_number = np.cumsum(new_track) - 1
        shift = (np.r_[0, np.cumsum(high - low + 1)[:-1]] - low)[track_number]
        running_end = np.maximum.accumulate(end + shift) - shift
    else:  # timestamps spread near the int64 limits: one running maximum per track
        running_end = np.empty_like(end)
        for lo, hi in zip(first_row.tolist(), np.r_[first_row[1:], n].tolist()):
            running_end[lo:hi] = np.maximum.accumulate(end[lo:hi])
    new_cluster = new_track
    new_cluster[1:] |= start[1:] >= running_end[:-1]
    return new_cluster


def nesting_lanes(track: np.ndarray, start: np.ndarray, end: np.ndarray,
                  n_tracks: int) -> np.ndarray:
    """Lane per span (as :func:`overlap_lanes` gives them) for spans given in start order.

    Cheaper than ordering every begin/end: spans are grouped by track with one stable
    (radix) sort, and only clusters of two or more spans, the only places where regions
    can overlap, go through the begin/end nesting check."""
    n = track.shape[0]
    lane = np.zeros(n, np.int64)
    if n < 2:
        return lane
    narrow = np.uint16 if n_tracks <= 1 << 16 else np.int64
    by_track = np.argsort(track.astype(narrow), kind="stable")
    new_cluster = cluster_starts(track[by_track], start[by_track], end[by_track])
    cluster = np.cumsum(new_cluster) - 1
    size = np.bincount(cluster)
    candidates = np.sort(by_track[size[cluster] > 1])
    if candidates.shape[0] < 2:
        return lane
    t, s, e = track[candidates], start[candidates], end[candidates]
    t0 = int(s.min())
    none = np.zeros(0, np.int64)
    zero = np.zeros_like(s)
    ops = build_region_ops(t, s, e, zero, zero, none, none, none, none, n_tracks, t0,
                           int(e.max()) - t0 + 1)
    bad = misnested_spans(ops, candidates.shape[0])
    if bad.shape[0]:
        lane[candidates] = overlap_lanes(t, s, e, bad)
    return lane


def overlap_lanes(
    span_track: np.ndarray, start: np.ndarray, end: np.ndarray, bad: np.ndarray, *,
    order: np.ndarray | None = None,
) -> np.ndarray:
    """Lane per span (0 for almost all) that makes every (track, lane) nest strictly.

    Same result as :func:`assign_lanes` run on every track, computed with numpy except
    inside the few clusters that misnest. A cluster is a maximal run of a track's spans
    (in start order) whose union is connected: at a cluster boundary every earlier region
    has ended, so first fit starts over with empty lanes and puts the first span in lane
    0. A cluster without a misnested span nests, so first fit keeps all of it in lane 0;
    a cluster of two overlapping spans puts them in lanes 0 and 1. Only larger clusters
    with a misnested span run the greedy loop, on their own spans. ``order``: the spans
    already sorted by (track, start, longer first), e.g. the begins of a ``RegionOps``."""
    n = span_track.shape[0]
    lane = np.zeros(n, np.int64)
    if n == 0 or bad.shape[0] == 0:
        return lane
    bad_track = np.zeros(int(span_track.max()) + 1, bool)
    bad_track[span_track[bad]] = True
    if order is None:
        on_bad_track = np.flatnonzero(bad_track[span_track])
        track, s, e = span_track[on_bad_track], start[on_bad_track], end[on_bad_track]
        rows = on_bad_track[np.lexsort((-(e - s), s, track))]
    else:
        rows = order[bad_track[span_track[order]]]
    track, s, e = span_track[rows], start[rows], end[rows]
    new_cluster = cluster_starts(track, s, e)
    cluster = np.cumsum(new_cluster) - 1
    is_bad = np.zeros(n, bool)
    is_bad[bad] = True
    bad_cluster = np.zeros(cluster[-1] + 1, bool)
    bad_cluster[cluster[is_bad[rows]]] = True
    cluster_start = np.flatnonzero(new_cluster)
    size = np.diff(np.r_[cluster_start, cluster.shape[0]])
    pairs = cluster_start[bad_cluster & (size == 2)]
    lane[rows[pairs + 1]] = 1
    for first in cluster_start[bad_cluster & (size > 2)].tolist():
        mine = np.sort(rows[first:first + int(size[cluster[first]])])  # ties by index
        lane[mine] = assign_lanes(start[mine], end[mine])
    return lane


def split_overlaps(
    span_track: np.ndarray, start: np.ndarray, end: np.ndarray, bad: np.ndarray, n_pairs: int,
    *, order: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Give every track with misnested regions extra lanes.

    Returns ``(final track per span, first final track of each pair, lanes per pair)``."""
    lane = overlap_lanes(span_track, start, end, bad, order=order)
    lanes_per_pair = np.zeros(n_pairs, np.int64)
    np.maximum.at(lanes_per_pair, span_track, lane)
    lanes_per_pair += 1
    first_lane_track = np.r_[0, np.cumsum(lanes_per_pair)[:-1]].astype(np.int64)
    return first_lane_track[span_track] + lane, first_lane_track, lanes_per_pair


def counter_series(counters, trace) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """``(display name, ts int64 ns, value float64)`` per entry of an exporter's ``counters=``
    option (dicts with ``name``, ``ts``, ``value`` and an optional ``tid``), checked."""
    from ..errors import ProfileBufferError

    out = []
    for counter in counters or []:
        try:
            name = str(counter["name"])
            ts = np.asarray(counter["ts"], dtype=np.int64).reshape(-1)
            value = np.asarray(counter["value"], dtype=np.float64).reshape(-1)
        except (KeyError, ValueError, TypeError) as err:
            raise ProfileBufferError("a counter is a dict with 'name', 'ts' (int64 ns) and "
                                     "'value' (float64) arrays") from err
        if ts.shape != value.shape:
            raise ProfileBufferError(f"counter {name!r}: ts and value differ in length")
        if counter.get("tid") is not None:
            name = f"{name} ({trace.track_name(int(counter['tid']))})"
        out.append((name, ts, value))
    return out
