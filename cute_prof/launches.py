"""Which kernel launch wrote each record: the launch column of a decoded trace.

Every record's tid word carries the low bits of the buffer's launch epoch (bumped by the
host, ``ProfileBuffer.next_launch()``, before a launch or a CUDA-graph replay) and of the
kernel's ``%gridid`` (different for every direct launch and for every kernel node of a graph,
the same on every replay of that graph). A launch is one (epoch, grid id) pair.

Epochs are unwrapped in slot order: a launch claims its slots after the epoch bump that
precedes it (both are stream-ordered), so the epoch never decreases from one claimed slot to
the next and a step of ``d`` modulo 256 is a step of ``d``. The counter word's full epoch
anchors the result, so ``Trace.launches[i]["epoch"]`` is the value the host bumped to.
Limits (documented in the README): more than 255 bumps between two recorded slots, or 32
launches of one epoch whose grid ids agree in their low 5 bits, cannot be told apart.

Owns the launch column (stage 1); it may import only ``layout`` below it, never the decoders
that call it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import layout

__all__ = ["launch_identity", "launch_keys", "launch_tag_stats", "LAUNCH_STATS_DTYPE"]

_EPOCH_MODULUS = 1 << layout.EPOCH_BITS
_GRID_MODULUS = 1 << layout.GRID_BITS


def launch_keys(tid_words: np.ndarray, counter_epoch: int) -> tuple[np.ndarray, np.ndarray]:
    """``(epoch, grid)`` per record, for tid words given in slot order.

    ``epoch`` is the full launch epoch (unwrapped, anchored at ``counter_epoch``, the
    epoch in the counter word when the buffer was read); ``grid`` the low grid id bits."""
    fields = layout.decode_launch_bits(np.asarray(tid_words, dtype=np.int64))
    low, grid = fields["epoch"], fields["grid"]
    if low.shape[0] == 0:
        return low, grid
    steps = np.diff(low) % _EPOCH_MODULUS
    unwrapped = np.concatenate(([0], np.cumsum(steps)))
    last_low = int(low[-1])
    anchor = int(counter_epoch) - ((int(counter_epoch) - last_low) % _EPOCH_MODULUS)
    if anchor < 0:  # counter word lost its epoch (reset between the launch and the read)
        anchor = last_low
    epoch = unwrapped - unwrapped[-1] + anchor
    return epoch, grid


def launch_identity(
    tid_words: np.ndarray,
    start_ns: np.ndarray,
    end_ns: np.ndarray,
    slots: np.ndarray,
    *,
    counter_epoch: int = 0,
) -> tuple[np.ndarray, list[dict[str, Any]]]:
    """Launch index per record and one dict per launch, launches ordered by first slot.

    Inputs are per record, in slot order. Each dict: ``index``, ``epoch``, ``grid_id`` (low
    5 bits of ``%gridid``), ``first_ns`` (earliest start), ``last_ns`` (latest end),
    ``records``, ``first_slot``, ``last_slot``, ``kernel`` (None; set by whoever knows the
    name, e.g. the torch.profiler merge)."""
    slots = np.asarray(slots, dtype=np.int64)
    epoch, grid = launch_keys(tid_words, counter_epoch)
    if slots.shape[0] == 0:
        return np.zeros(0, dtype=np.int32), []
    keys = epoch * _GRID_MODULUS + grid
    start_ns = np.asarray(start_ns, dtype=np.int64)
    end_ns = np.asarray(end_ns, dtype=np.int64)
    # In slot order a launch's records form a few long runs (launches interleave only where
    # kernels run concurrently), so work on runs: O(n) passes, then tiny per-run arrays.
    run_starts = np.concatenate(([0], np.flatnonzero(keys[1:] != keys[:-1]) + 1))
    run_lengths = np.diff(np.concatenate((run_starts, [keys.shape[0]])))
    run_keys = keys[run_starts]
    unique_keys, first_run, run_inverse = np.unique(run_keys, return_index=True, return_inverse=True)
    run_inverse = run_inverse.reshape(-1)
    # launches numbered by the slot of their first record (order of claiming)
    order = np.argsort(slots[run_starts[first_run]], kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(order.shape[0])
    run_launch = rank[run_inverse]
    launch = np.repeat(run_launch, run_lengths).astype(np.int32)
    count = unique_keys.shape[0]
    records = np.bincount(run_launch, weights=run_lengths, minlength=count).astype(np.int64)
    first_ns = np.full(count, np.iinfo(np.int64).max, dtype=np.int64)
    last_ns = np.full(count, np.iinfo(np.int64).min, dtype=np.int64)
    first_slot = np.full(count, np.iinfo(np.int64).max, dtype=np.int64)
    last_slot = np.full(count, -1, dtype=np.int64)
    np.minimum.at(first_ns, run_launch, np.minimum.reduceat(start_ns, run_starts))
    np.maximum.at(last_ns, run_launch, np.maximum.reduceat(end_ns, run_starts))
    np.minimum.at(first_slot, run_launch, np.minimum.reduceat(slots, run_starts))
    np.maximum.at(last_slot, run_launch, np.maximum.reduceat(slots, run_starts))
    launch_epoch = np.empty(count, dtype=np.int64)
    launch_grid = np.empty(count, dtype=np.int64)
    launch_epoch[run_launch] = epoch[run_starts]
    launch_grid[run_launch] = grid[run_starts]
    launches = [
        {
            "index": i,
            "epoch": int(launch_epoch[i]),
            "grid_id": int(launch_grid[i]),
            "first_ns": int(first_ns[i]),
            "last_ns": int(last_ns[i]),
            "records": int(records[i]),
            "first_slot": int(first_slot[i]),
            "last_slot": int(last_slot[i]),
            "kernel": None,
        }
        for i in range(count)
    ]
    return launch, launches


# per (launch, tag) duration statistics; launch -1 holds the pooled rows over every launch
LAUNCH_STATS_DTYPE = np.dtype(
    [
        ("launch", np.int32),
        ("tag", np.int32),
        ("count", np.int64),
        ("total_ns", np.int64),
        ("mean_ns", np.float64),
        ("median_ns", np.float64),
        ("min_ns", np.int64),
        ("max_ns", np.int64),
    ]
)


def _grouped_stats(keys: np.ndarray, dur: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.lexsort((dur, keys))
    keys, dur = keys[order], dur[order]
    unique, starts, counts = np.unique(keys, return_index=True, return_counts=True)
    stats = np.zeros(unique.shape[0], dtype=LAUNCH_STATS_DTYPE)
    stats["count"] = counts
    stats["total_ns"] = np.add.reduceat(dur, starts) if dur.shape[0] else 0
    stats["mean_ns"] = stats["total_ns"] / np.maximum(counts, 1)
    stats["median_ns"] = (dur[starts + (counts - 1) // 2] + dur[starts + counts // 2]) / 2
    stats["min_ns"] = dur[starts]
    stats["max_ns"] = dur[starts + counts - 1]
    return unique, stats


def launch_tag_stats(trace) -> np.ndarray:
    """Per-tag duration statistics for every launch, then pooled over launches (launch -1):
    how one iteration of a loop differs from the others, and what all of them add up to.
    Rows are ``LAUNCH_STATS_DTYPE``, sorted by launch (pooled first), then tag."""
    ev = trace.events
    dur = ev["dur_ns"].astype(np.int64)
    tag = ev["tag"].astype(np.int64)
    per_key, per = _grouped_stats(ev["launch"].astype(np.int64) * (1 << 32) + tag, dur)
    per["launch"] = per_key >> 32
    per["tag"] = per_key & 0xFFFFFFFF
    pooled_key, pooled = _grouped_stats(tag, dur)
    pooled["launch"] = -1
    pooled["tag"] = pooled_key
    return np.concatenate([pooled, per])


def outside_launch(start: np.ndarray, launch: np.ndarray) -> np.ndarray | None:
    """Rows that start far outside the trace's time window or their launch's (reason
    ``outside_launch``), or None when there are none.

    Rows not in the ``layout.TRACE_WINDOW_NS`` window of starts that holds the most of them
    (the earliest such window on a tie) are outside: a record whose launch bits are corrupt
    as well as its start is a launch of its own, which the next rule cannot judge. Of the
    rows left, per launch, the starts in order are split wherever two consecutive ones are
    more than ``layout.LAUNCH_GAP_LIMIT_NS`` apart; rows outside the largest group (the
    earliest group on a tie) are outside too. ``start`` must be >= 0. Costs two reductions
    when the whole trace spans less than both limits, which is every trace of a healthy
    buffer."""
    limit = min(layout.LAUNCH_GAP_LIMIT_NS, layout.TRACE_WINDOW_NS)
    if start.shape[0] < 2 or int(start.max()) - int(start.min()) <= limit:
        return None
    out = _outside_trace_window(start)
    if out is None:
        out = np.zeros(start.shape[0], dtype=bool)
    kept = np.flatnonzero(~out)
    out[kept[_outside_own_launch(start[kept], launch[kept])]] = True
    return out if out.any() else None


def _outside_own_launch(start: np.ndarray, launch: np.ndarray) -> np.ndarray:
    """Rows outside the largest group of their launch's starts (see :func:`outside_launch`)."""
    limit = layout.LAUNCH_GAP_LIMIT_NS
    order = np.lexsort((start, launch))
    s, lch = start[order], launch[order]
    first = np.ones(s.shape[0], dtype=bool)
    first[1:] = (np.diff(s) > limit) | (lch[1:] != lch[:-1])  # starts >= 0: no overflow
    group = np.cumsum(first) - 1
    sizes = np.bincount(group)
    group_launch = lch[first]
    ids = np.arange(sizes.shape[0])
    # per launch, the largest group; on a tie the earliest (groups are in start order)
    ranked = np.lexsort((ids, -sizes, group_launch))
    best = ranked[np.r_[True, group_launch[ranked][1:] != group_launch[ranked][:-1]]]
    chosen = np.zeros(sizes.shape[0], dtype=bool)
    chosen[best] = True
    out = np.empty(s.shape[0], dtype=bool)
    out[order] = ~chosen[group]
    return out


def _outside_trace_window(start: np.ndarray) -> np.ndarray | None:
    """Rows (starts >= 0) outside the ``layout.TRACE_WINDOW_NS`` window ``[s, s + window]``
    that holds the most starts, the earliest such window on a tie; None: all are inside."""
    window = layout.TRACE_WINDOW_NS
    if start.shape[0] < 2 or int(start.max()) - int(start.min()) <= window:
        return None
    ordered = np.sort(start).astype(np.uint64)  # starts >= 0: + window stays below 2**64
    reach = np.searchsorted(ordered, ordered + np.uint64(window), side="right")
    first = int(np.argmax(reach - np.arange(ordered.shape[0])))  # argmax: the earliest
    low = int(ordered[first])
    high = min(low + window, np.iinfo(np.int64).max)
    return (start < low) | (start > high)


def drop_outside_launch(trace):
    """``trace`` with the events of :func:`outside_launch` counted invalid, not decoded, and
    the launches' first/last times, slots and record counts taken from the events kept."""
    events = trace.events
    outside = outside_launch(events["start_ns"], events["launch"])
    if outside is None:
        return trace
    trace.events = events = events[~outside]
    hit = int(np.count_nonzero(outside))
    trace.invalid += hit
    trace.invalid_reasons = {**trace.invalid_reasons,
                             "outside_launch": trace.invalid_reasons.get("outside_launch", 0) + hit}
    for index, launch in enumerate(trace.launches):
        rows = events[events["launch"] == index]
        if rows.shape[0] == 0:  # every record of it was outside the trace's window
            launch.update(records=0)
            continue
        launch.update(records=int(rows.shape[0]), first_ns=int(rows["start_ns"].min()),
                      last_ns=int((rows["start_ns"] + rows["dur_ns"]).max()))
        if "first_slot" in launch:
            launch.update(first_slot=int(rows["slot"].min()), last_slot=int(rows["slot"].max()))
    return trace
