"""Begin/end ordering of regions, shared by every exporter that draws tracks.

Perfetto (and the trace-event format) needs the regions of one track to nest strictly; the
picture needs the innermost open region at every moment. Both come from one ordering of
begin/end operations per track, computed here with numpy, plus the overlap lanes that make
regions of one track that overlap without nesting drawable.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cute_prof import layout

__all__ = [
    "SPAN_KINDS",
    "RegionOps",
    "assign_lanes",
    "build_region_ops",
    "misnested_spans",
    "pack_or_lexsort",
    "pair_index",
    "split_overlaps",
]

SPAN_KINDS = (layout.KIND_SPAN, layout.KIND_CLOCK_SPAN)


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
    # tie-break inside a class, shifted to be non-negative: begins 2r, zero-length ends 2r+1,
    # other ends -2r (later-opened first)
    tie = np.concatenate([2 * rank, np.where(zero, 2 * rank + 1, -2 * rank), np.zeros(m, np.int64)])
    tie += 2 * n
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

    Only runs for tracks that failed the nesting check, which real kernels rarely produce."""
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



def split_overlaps(
    span_track: np.ndarray, start: np.ndarray, end: np.ndarray, bad: np.ndarray, n_pairs: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Give every track with misnested regions extra lanes.

    Returns ``(final track per span, first final track of each pair, lanes per pair)``."""
    n_spans = span_track.shape[0]
    bad_tracks = np.unique(span_track[bad])
    lane = np.zeros(n_spans, np.int64)
    on_bad_track = np.flatnonzero(np.isin(span_track, bad_tracks))
    on_bad_track = on_bad_track[np.argsort(span_track[on_bad_track], kind="stable")]
    bounds = np.flatnonzero(np.diff(span_track[on_bad_track])) + 1
    for mine in np.split(on_bad_track, bounds):
        lane[mine] = assign_lanes(start[mine], end[mine])
    lanes_per_pair = np.zeros(n_pairs, np.int64)
    np.maximum.at(lanes_per_pair, span_track, lane)
    lanes_per_pair += 1
    first_lane_track = np.r_[0, np.cumsum(lanes_per_pair)[:-1]].astype(np.int64)
    return first_lane_track[span_track] + lane, first_lane_track, lanes_per_pair
