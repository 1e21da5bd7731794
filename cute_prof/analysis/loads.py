"""Load latencies for a replay: the sample of loaded latencies (the waits that blocked, or
a probed launch's sampled loads), each replayed item's draw from the loads sampled near its
place in the loop, the shared miss of a group's loads, and the queueing a load meets.

It owns the latency sample and its draws. Reads matched data and the replay terms; it may
not replay or predict.
"""

from __future__ import annotations

import numpy as np

from ..errors import ProfileBufferError
from .model import (arrival_issue_times, arrival_latencies, arrival_leader_gaps,
    arrival_positions, PipelineSpec)
from .pipeline_data import cluster_index, memoized, PipelineData
from .replay_terms import infer_terms, MIN_LATENCY_SAMPLE, never_blocked, UNQUEUED_QUANTILE

__all__ = ["latency_sample", "load_congestion", "loop_queueing"]
# the seed of the per-item latency draws from a sample of arrivals (what_if): fixed, so a
# prediction repeats exactly
LATENCY_DRAW_SEED = 2027
# each replayed item draws its latency from this many sampled loads, those nearest its place
# in the loop (``draw_latencies``)
NEAREST_ARRIVALS = 64
PLACE_SAMPLE_MIN = 16  # ... unless this many were sampled at the place itself: those


def latency_sample(data: PipelineData, terms=None, *, region: str) -> tuple[np.ndarray, str]:
    """Observed latencies (ns) of the event that wait ``region`` (a ``consumes`` wait)
    waits on, and where they come from. Preferred: the first item of every unit that
    started while the machine was loaded (its first produce comes after some unit had
    finished, and it carries no ring from a previous tile): its consumer always waits for
    it, so its end - produce is the latency at the base's own memory load, unbiased by the
    consumer's slack. Else (every unit started together, e.g. a persistent kernel): the
    per-unit latencies inferred from blocked waits, capped by the unblocked ones."""
    spec = data.spec
    tags = [r.tag for r in spec.regions]
    if region not in tags:
        raise ProfileBufferError(f"latency_sample names an unknown region {region!r}")
    i = tags.index(region)
    rel = spec.regions[i].relations.get("consumes")
    if rel is None:
        raise ProfileBufferError(f"{region!r} is not a consumes wait")
    terms = terms if terms is not None else infer_terms(data)
    events, latency = terms[:2]
    produced = events[rel.resource][0]
    prev = data.unit_prev if data.unit_prev is not None else np.full(data.shape[0], -1)
    if rel.distance == 0:
        loaded = (produced[:, 0] > data.unit_last.min()) & (prev < 0)
        first = data.end[:, 0, i] - produced[:, 0]
        if loaded.sum() >= MIN_LATENCY_SAMPLE:
            return first[loaded], "first item of units started under load"
    if never_blocked(data, terms, i):
        return latency[:, i].copy(), ("no wait blocked: latency not observed (a what-if "
                                      "that depends on it gets bounds: at 0 and at the "
                                      "unblocked waits' bound)")
    return latency[:, i].copy(), "blocked waits (capped by unblocked ones), per unit"


def with_latency(terms, column: int, value: float):
    """``terms`` (``infer_terms``) with the latency of wait region ``column``'s event set to
    ``value`` ns for every unit."""
    lat = terms[1].copy()
    lat[:, column] = float(value)
    return (terms[0], lat, *terms[2:])


def _window_starts(sorted_keys: np.ndarray, at: np.ndarray) -> np.ndarray:
    """For each of ``at``, the first index of the ``NEAREST_ARRIVALS`` sorted keys nearest
    it (the windows of ``sliding_window_view``)."""
    return np.clip(np.searchsorted(sorted_keys, at) - NEAREST_ARRIVALS // 2, 0,
                   sorted_keys.size - NEAREST_ARRIVALS)


def _place_windows(sorted_places: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each place in ``at``, (first index, count) of the sorted sampled loads (more than
    ``NEAREST_ARRIVALS`` of them) an item there draws from: those sampled at that very place
    where there are ``PLACE_SAMPLE_MIN``, else the ``NEAREST_ARRIVALS`` nearest. A CTA's
    first loads meet its start burst, and a window reaching into them from a later place
    carried their latency there (where a place holds few samples, ``NEAREST_ARRIVALS`` of
    them span several places)."""
    first = np.searchsorted(sorted_places, at, side="left")
    count = np.searchsorted(sorted_places, at, side="right") - first
    own = count >= PLACE_SAMPLE_MIN
    return (np.where(own, first, _window_starts(sorted_places, at)),
            np.where(own, count, NEAREST_ARRIVALS))


def _place_picks(rng, sorted_places: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """(units, iterations) indices into the sorted sample: each item's draw from its
    place's window (``_place_windows``)."""
    first, count = _place_windows(sorted_places, np.arange(shape[1]))
    return first[None, :] + rng.integers(0, count[None, :], size=shape)


def _place_medians(sorted_values: np.ndarray, sorted_places: np.ndarray,
                   at: np.ndarray) -> np.ndarray:
    """The median of each place's window (``_place_windows``) of ``sorted_values``."""
    first, count = _place_windows(sorted_places, at)
    # one median per place of the loop, not per load
    return np.array([np.median(sorted_values[f:f + c])
                     for f, c in zip(first.tolist(), count.tolist())])


def _window_medians(values: np.ndarray, keys: np.ndarray, at: np.ndarray) -> np.ndarray:
    """The median of the ``NEAREST_ARRIVALS`` values whose keys lie nearest each of ``at``."""
    order = np.argsort(keys, kind="stable")
    windows = np.lib.stride_tricks.sliding_window_view(values[order], NEAREST_ARRIVALS)
    return np.median(windows[_window_starts(keys[order], at)], axis=1)


def load_congestion(latency: np.ndarray, issued: np.ndarray) -> np.ndarray:
    """Each sampled load's congestion: the median latency of the ``NEAREST_ARRIVALS`` loads
    issued nearest it in time (``issued``, ns), what every CTA's loads met then."""
    return _window_medians(latency, issued, issued)


def draw_latencies(rng, sample, shape: tuple[int, int]
                    ) -> tuple[np.ndarray, np.ndarray, float]:
    """(units, iterations) one latency per replayed item from a ring's sampled loads, as
    (queued, fixed, unqueued): the part that scales with the memory's load
    (``queued_under_load``), the part that does not, and the least congested latency the
    queued part lies above; the item's latency is queued + fixed.

    With the loads' issue times (``ARRIVAL_SAMPLE_DTYPE``) a load's latency splits in two.
    Its congestion, the median latency of the ``NEAREST_ARRIVALS`` loads issued nearest it
    in time, is shared by every CTA then. Every item takes the loop's typical congestion
    (the mean over its places of the median over the loads sampled nearest each place), and
    the part of it above the least congested times' (``UNQUEUED_QUANTILE``) is queued. The
    load's own deviation from its congestion (its path, its CTA's start burst) is fixed,
    drawn from the loads sampled near the item's place.

    So the base's congested stretches are not carried into the change: a shallower ring
    meets loads as slow on average as its base's, but not the base's congested stretches,
    and independent draws of them stalled the replay and over-predicted the change. Nor are
    the places where the base's own schedule congested it: CTAs that start in step fill
    their rings together (as many loads each as the ring is deep, so the burst is the
    base's own), and a persistent GEMM refills its ring at each tile's start, so a shallower
    variant's waits follow the loop's typical congestion more closely than the base's loads
    at the same place.

    Without issue times, the part above the sample's ``UNQUEUED_QUANTILE`` is queued:
    iteration k draws from the loads sampled nearest place k, or without places from the
    whole sample."""
    latency, position = arrival_latencies(sample), arrival_positions(sample)
    issued = arrival_issue_times(sample)
    if position is None or latency.size <= NEAREST_ARRIVALS:
        drawn = rng.choice(latency, size=shape)
    else:
        order = np.argsort(position, kind="stable")
        pick = _place_picks(rng, position[order], shape)
        if issued is not None and np.ptp(issued) > 0:
            congestion = load_congestion(latency, issued)
            floor, typical = loop_queueing(sample, shape[1], congestion=congestion)
            # the loop's queued part, the same for every item (not its place's)
            queued = np.full(shape, typical)
            own = latency - congestion
            classes = miss_and_hit(sample)
            if classes is None:
                drawn = own[order][pick]
            else:  # (2, U, K): as a group's first load of the place (a miss), as an L2 hit
                drawn = np.stack([_draw_in_class(rng, own[order], c[order], shape,
                                                 position[order]) for c in classes])
            return queued, floor + drawn, float(floor)
        drawn = latency[order][pick]  # no issue times to tell congestion by
    floor = np.quantile(latency, UNQUEUED_QUANTILE)
    return np.maximum(drawn - floor, 0.0), np.minimum(drawn, floor), float(floor)


def loop_queueing(sample, places: int, *,
                  congestion: np.ndarray | None = None) -> tuple[float, float]:
    """(floor, queued) of a ring's sampled loads (with their places and issue times): the
    least congested times' congestion (``UNQUEUED_QUANTILE`` of ``load_congestion``), and
    the loop's typical queueing above it: the mean over its first ``places`` places of the
    median congestion sampled at each (``_place_windows``) less the floor, none below it."""
    latency, position = arrival_latencies(sample), arrival_positions(sample)
    issued = arrival_issue_times(sample)
    if position is None or issued is None or latency.size <= NEAREST_ARRIVALS:
        raise ValueError("the loop's queueing needs more than "
                         f"{NEAREST_ARRIVALS} sampled loads with their places and issue times")
    congestion = load_congestion(latency, issued) if congestion is None else congestion
    floor = float(np.quantile(congestion, UNQUEUED_QUANTILE))
    order = np.argsort(position, kind="stable")
    by_place = _place_medians(congestion[order], position[order], np.arange(places))
    return floor, float(np.maximum(by_place - floor, 0.0).mean())


# a sampled load issued less than this many of the sample's median latency after its
# group's first load of the same place was that first load (a miss); one issued more than
# ``HIT_AFTER`` of them after it found the line in the L2
MISS_WITHIN, HIT_AFTER = 0.1, 1.5
# the least a miss takes over a hit (medians) for a group's loads to be coupled: a memory
# miss takes about twice an L2 hit, as FA4's heads' first loads do. A GEMM shares its tiles
# along rows and columns, which one launch-order group does not describe: its ratio stays
# below this, and coupling its groups over-predicted its shallow rings. Set between the two
# from the what-if check's runs (bench/results/whatif/README.md)
MISS_OVER_HIT = 2.0
# ... and the least share of the sampled loads that hit for the groups to be real: where
# the groups are real (FA4's heads), a large share of the loads hit; a GEMM has only a few
# stragglers that look like hits, and they can put its ratio just under MISS_OVER_HIT, where
# a timer tick less latency would couple groups it does not have
MIN_HIT_SHARE = 0.1


def miss_and_hit(sample) -> tuple[np.ndarray, np.ndarray] | None:
    """Masks of a ring's sampled loads that were their group's first load of the place (the
    L2 missed) and of those issued long enough after it to hit (``load_arrivals.leader_gaps``);
    None where the sample has no groups, fewer than ``MIN_HIT_SHARE`` of its loads hit, or
    its first loads do not take ``MISS_OVER_HIT`` times the hits. The loads between waited
    for the first one's line: the replay couples them to it instead of drawing from them."""
    gaps = arrival_leader_gaps(sample)
    if gaps is None:
        return None
    latency = arrival_latencies(sample)
    typical = float(np.median(latency))
    miss, hit = gaps[0] < MISS_WITHIN * typical, gaps[0] >= HIT_AFTER * typical
    if min(int(miss.sum()), int(hit.sum())) < MIN_LATENCY_SAMPLE or (
            hit.mean() < MIN_HIT_SHARE) or (
            np.median(latency[miss]) < MISS_OVER_HIT * np.median(latency[hit])):
        return None
    return miss, hit


def _draw_in_class(rng, values: np.ndarray, member: np.ndarray, shape: tuple[int, int],
                   position: np.ndarray) -> np.ndarray:
    """(units, iterations) draws of the members' ``values`` (all sorted by ``position``):
    iteration k's from the ``NEAREST_ARRIVALS`` members sampled nearest place k (from every
    sample where fewer than ``MIN_LATENCY_SAMPLE`` are members)."""
    if int(member.sum()) < MIN_LATENCY_SAMPLE:
        member = np.ones_like(member)
    values, position = values[member], position[member]
    if values.size <= NEAREST_ARRIVALS:
        return rng.choice(values, size=shape)
    return values[_place_picks(rng, position, shape)]


def one_draw_per_cluster(data: PipelineData, spec: PipelineSpec, draws: dict) -> dict:
    """``draws`` (wait index -> (U, K) latencies) with every CTA of a cluster that shares the
    wait's ring taking its cluster's first CTA's draw: a multicast item is one load, landing
    in every peer's shared memory together, and the sampled arrivals of clustered GEMMs
    show the peers' latencies of one item nearly equal. Independent draws made the later of
    two peers far later than a real peer is, and the ring, which waits for both, paid that
    on every item of a starved pipeline."""
    out = {}
    for i, x in draws.items():
        shared = spec.resource(spec.regions[i].relations["consumes"].resource).shared_by
        if shared <= 1:
            out[i] = x
            continue
        cluster = memoized(data, ("cluster", shared), lambda: cluster_index(data, shared))
        first = np.full(int(cluster.max()) + 1, cluster.size)
        np.minimum.at(first, cluster, np.arange(cluster.size))
        out[i] = x[..., first[cluster], :]
    return out
