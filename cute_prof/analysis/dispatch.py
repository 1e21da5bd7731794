"""How CTAs reach the SMs: the block scheduler's order (an SM takes its next CTA when one
ends), the gap between one CTA and the next, and how a change per unit carries through
each SM's sequence of units to the kernel's time.

It owns the dispatch order and launch gaps. Reads matched data (:mod:`.pipeline_data`) only;
it may not replay or predict.
"""

from __future__ import annotations

import heapq

import numpy as np

from .pipeline_data import memoized, PipelineData

__all__ = ["launch_gaps", "unchanged_span"]


def cta_ranks(data: PipelineData) -> np.ndarray:
    """(units,) each unit's CTA's rank by its first start: the launch order that groups the
    CTAs reading the same tiles (``load_arrivals.leader_gaps``)."""
    def ranks():
        group, first = cta_dispatch(data)[:2]
        rank = np.empty(first.size, dtype=np.int64)
        rank[np.argsort(first, kind="stable")] = np.arange(first.size)
        return rank[group]
    return memoized(data, ("cta_rank",), ranks)


# ---------------------------------------------------------------------------- what-if
def kernel_time(data: PipelineData, unit_delta: np.ndarray,
                 keep: np.ndarray | None = None, *,
                 gap_change_ns: float = 0.0) -> tuple[float, float]:
    """Measured kernel span and the span with each unit longer by ``unit_delta``;
    ``keep``: over those units only (their SMs). A CTA's units (a persistent CTA's tiles)
    run one after another; the CTAs after the first wave start where an SM frees, as the
    block scheduler dispatches them (``dispatched_span``), not on the SM they ran on, the
    launch gap ``gap_change_ns`` longer than the trace's (a change of the cluster)."""
    group, first, last, sm, _ = cta_dispatch(data, keep)
    delta = _cta_delta(group, unit_delta if keep is None else np.asarray(unit_delta)[keep],
                       first.size)
    measured = float(last.max() - first.min())
    return measured, measured + dispatched_span(
        first, last, sm, delta, gap_change_ns=gap_change_ns) - unchanged_span(data, keep)


def unchanged_span(data: PipelineData, keep: np.ndarray | None = None) -> float:
    """The kernel's span as ``dispatched_span`` dispatches its CTAs unchanged: what a
    change's dispatched span is set against (the greedy dispatch's own error cancels)."""
    _, first, last, _, unchanged = cta_dispatch(data, keep)
    return float((unchanged + (last - first)).max() - first.min())


def _cta_delta(group: np.ndarray, unit_delta: np.ndarray, ctas: int) -> np.ndarray:
    """(ctas,) each CTA's change: its units' (a persistent CTA's tiles run in turn)."""
    return np.bincount(group, np.asarray(unit_delta, dtype=np.float64), minlength=ctas)


# the dispatch moves the CTAs' starts only where it reproduces the measured ones: their
# median distance at most this fraction of the median CTA's time. A single launch whose
# CTAs waited only for an SM lands well inside it; a trace of several launches does not
DISPATCH_MATCH = 0.05


def dispatch_shift(data: PipelineData, unit_delta: np.ndarray, *,
                   gap_change_ns: float = 0.0) -> np.ndarray:
    """(units,) how much later than measured each unit starts when each is ``unit_delta``
    longer: its CTA dispatched where an SM frees (``dispatched_starts``), so a change that
    slows the first wave starts the next one later, and its CTAs in step where the first
    wave's ended in step. Zeros where the unchanged dispatch does not put the CTAs where
    they started (``DISPATCH_MATCH``): a launch whose CTAs came late for another reason than
    waiting for an SM (a trace of several launches, a synthetic one). ``gap_change_ns``:
    as ``dispatched_starts`` takes it."""
    group, first, last, sm, unchanged = cta_dispatch(data)
    if np.median(np.abs(unchanged - first)) > DISPATCH_MATCH * np.median(last - first):
        return np.zeros(group.size)
    delta = _cta_delta(group, unit_delta, first.size)
    return (dispatched_starts(first, last, sm, delta, gap_change_ns=gap_change_ns)
            - first)[group]


def cta_dispatch(data: PipelineData, keep: np.ndarray | None = None):
    """(each kept unit's CTA, each CTA's first start, last end and SM, and its start as
    ``dispatched_starts`` dispatches the CTAs unchanged), memoised per ``keep``."""
    def compute():
        kept = slice(None) if keep is None else keep
        _, group = np.unique(data.unit_group[kept], return_inverse=True)
        first = np.full(group.max() + 1, np.inf)
        np.minimum.at(first, group, data.unit_first[kept])
        last = np.full(group.max() + 1, -np.inf)
        np.maximum.at(last, group, data.unit_last[kept])
        sm = np.zeros(group.max() + 1, dtype=np.int64)
        sm[group] = data.unit_sm[kept]
        return group, first, last, sm, dispatched_starts(first, last, sm, np.zeros(first.size))
    return memoized(data, ("dispatch", None if keep is None else keep.tobytes()), compute)


def dispatched_span(first: np.ndarray, last: np.ndarray, sm: np.ndarray,
                    delta: np.ndarray, *, gap_change_ns: float = 0.0) -> float:
    """The span of CTAs that ran ``first`` -> ``last`` (ns) on ``sm``, each ``delta``
    longer, dispatched as the block scheduler does: the first wave (the CTAs that started
    before any ended) where they started, each later one, in the order they started, on
    the slot that frees first, after the launch gap the trace shows between one CTA's end
    and the next one's start on an SM. The greedy order reproduces the measured schedule of
    a launch of many waves. A static chain per SM would pile a slower CTA's delay onto the
    CTAs that followed it there, where the GPU hands them to the SMs that free first.
    ``gap_change_ns``: as ``dispatched_starts`` takes it."""
    starts = dispatched_starts(first, last, sm, delta, gap_change_ns=gap_change_ns)
    return float((starts + (last - first) + delta).max() - first.min())


def launch_gaps(first: np.ndarray, last: np.ndarray, sm: np.ndarray) -> np.ndarray:
    """Of CTAs that ran ``first`` -> ``last`` (ns) on ``sm``: each SM's gaps from one CTA's
    end to the next CTA's start there, in the order they started (CTAs resident together on
    one SM overlap: no gap between them)."""
    order = np.lexsort((first, sm))
    same = sm[order][1:] == sm[order][:-1]
    gaps = (first[order][1:] - last[order][:-1])[same]
    return gaps[gaps >= 0]


def dispatched_starts(first: np.ndarray, last: np.ndarray, sm: np.ndarray,
                      delta: np.ndarray, *, gap_change_ns: float = 0.0) -> np.ndarray:
    """Each CTA's start as ``dispatched_span`` dispatches them (ns, the first wave's
    unchanged): where a change that slows some CTAs starts the later ones.
    ``gap_change_ns``: the launch gap that much longer than the trace's (a change of the
    cluster shape moves what the block scheduler spends between one CTA and the next on an
    SM, which the base's trace cannot show: ``bench/whatif.py cluster-gap`` measures it)."""
    order = np.argsort(first, kind="stable")
    wave = max(int(np.count_nonzero(first < last.min())), 1)
    starts = np.asarray(first, dtype=np.float64).copy()
    if wave >= first.size:
        return starts
    gaps = launch_gaps(first, last, sm)
    gap = max((float(np.median(gaps)) if gaps.size else 0.0) + gap_change_ns, 0.0)
    slots = (last + delta)[order[:wave]].tolist()
    heapq.heapify(slots)
    later = order[wave:]
    begun = np.empty(later.size)
    # one Python float per later CTA: the loop is the launch's CTAs, not its events
    for n, duration in enumerate((last - first + delta)[later].tolist()):
        begun[n] = slots[0] + gap
        heapq.heapreplace(slots, begun[n] + duration)
    starts[later] = begun
    return starts


# replays of a what-if that re-dispatch its CTAs (``dispatch_shift``) until no start moves
# by a timer tick (``%globaltimer`` steps 32 ns): a smaller move is below what the trace
# resolves
DISPATCH_ROUNDS, DISPATCH_TOLERANCE_NS = 24, 32.0
