"""Sampled load arrivals: the loads a producer probed when their full barrier completed
(an experiment, ``cute_prof.experimental.autoprofile_probed(load_arrivals=N)``), each measured
from the commit before it, and which of several probed launches stand for a base launch.

It owns the reading of the probes. The what-if draws its load latencies from these samples
(``cute-prof analyze --arrivals``). It reads zero-edit traces only; it may not replay or
predict.
"""

from __future__ import annotations

import numpy as np

from ..errors import ProfileBufferError
from ..trace import Trace
from .grouping import tags_in
from .model import ARRIVAL_SAMPLE_DTYPE
from .zero_edit import autoprof_metadata, LOAD_ARRIVAL_OP, recorded_span_ns, sites_by_tag

__all__ = ["load_arrival_pairs", "load_arrival_latency", "load_arrival_sample"]


def load_arrival_pairs(trace: Trace) -> dict[str, np.ndarray]:
    """Every probed load that arrived (``autoprofile_probed(load_arrivals=N)``) with the commit it
    measures: the warp's latest commit of that ring before the probe (the stamp the model
    produces an item at). Columns: ``ring`` (pipeline index), ``tid`` (the producer
    warp), ``commit`` (its stamp),
    ``probe`` (the probe's first timer read) and ``arrived`` (the probe's end, when the full
    barrier had completed), ns, and ``position``, the commit's ordinal among the warp's
    commits of that ring (its place in the loop). Probes that gave up (payload 0) and probes
    with no commit before them (none yet in that warp) are left out."""
    meta = autoprof_metadata(trace)
    sites = sites_by_tag(meta)
    arrival = {t: int(s["pipeline"]) for t, s in sites.items() if s["op"] == LOAD_ARRIVAL_OP}
    commit_sites = {s["name"]: int(s["pipeline"]) for s in sites.values()
                    if s["op"] == "producer_commit" and s.get("pipeline") is not None}
    # a derived trace renames the loop's first and last calls <tag>@prologue / @epilogue
    commit = {t: commit_sites[name.split("@")[0]] for t, name in enumerate(trace.tag_names)
              if name.split("@")[0] in commit_sites}
    empty = np.zeros(0, dtype=np.int64)
    if not arrival:
        return {"ring": empty, "tid": empty, "position": empty, "commit": empty,
                "probe": empty, "arrived": empty}
    ev = trace.events
    tags = np.ascontiguousarray(ev["tag"]).astype(np.int64)
    # ring of each row's probe or commit (-1: neither), as one lookup
    ring = np.full(max([*arrival, *commit]) + 1, -1, dtype=np.int64)
    is_probe = np.zeros(ring.size, dtype=bool)
    for t, p in commit.items():
        ring[t] = p
    for t, p in arrival.items():
        ring[t], is_probe[t] = p, True
    rows = np.flatnonzero(tags_in(tags, [*arrival, *commit]))
    # per warp and ring, in time order: a probe follows the commit it measures
    key = ev["tid"][rows].astype(np.int64) * ring.size + ring[tags[rows]]
    order = np.lexsort((ev["start_ns"][rows], key))
    rows, key = rows[order], key[order]
    probe = is_probe[tags[rows]]
    after_commit = np.r_[False, (key[1:] == key[:-1]) & ~probe[:-1]]
    keep = np.flatnonzero(probe & after_commit & (ev["payload"][rows] == 1))
    at = rows[keep]
    # each commit's ordinal among its warp's commits of the ring: the commits so far, less
    # those of the warps and rings before it in this order
    commits_so_far = np.cumsum(~probe)
    new_group = np.r_[True, key[1:] != key[:-1]]
    before_group = np.r_[0, commits_so_far][np.flatnonzero(new_group)]
    position = commits_so_far[keep - 1] - before_group[np.cumsum(new_group)[keep - 1] - 1] - 1
    return {"ring": ring[tags[at]], "tid": ev["tid"][at].astype(np.int64),
            "position": position.astype(np.int64),
            "commit": ev["start_ns"][rows[keep - 1]], "probe": ev["start_ns"][at],
            "arrived": ev["start_ns"][at] + ev["dur_ns"][at]}


def load_arrival_sample(trace: Trace) -> dict[str, np.ndarray]:
    """Per TMA-loaded ring: each load the producer probed, as a record of
    ``ARRIVAL_SAMPLE_DTYPE``: its latency (ns, from its commit's stamp to its arrival:
    :func:`load_arrival_pairs`), its place in the loop (the commit's ordinal in its warp)
    and when it was issued (the commit's stamp).
    A sample of every load, not only those a consumer waited for: a deep ring's consumers
    seldom wait, and a wait shows the latency only when the load was late. A load's latency
    depends on where in the loop it is issued (a CTA's first loads meet its start burst):
    the what-if draws each item's latency from the loads sampled nearest its place. Empty
    when nothing was probed."""
    pairs = load_arrival_pairs(trace)
    latency = (pairs["arrived"] - pairs["commit"]).astype(np.float64)
    out: dict[str, np.ndarray] = {}
    commits = ring_commits(trace) if pairs["ring"].size else {}
    for p in autoprof_metadata(trace)["pipelines"]:
        here = pairs["ring"] == int(p["index"])
        if here.any():
            sample = np.zeros(int(here.sum()), dtype=ARRIVAL_SAMPLE_DTYPE)
            sample["latency_ns"], sample["position"] = latency[here], pairs["position"][here]
            sample["issued_ns"] = pairs["commit"][here]
            gaps, group = leader_gaps(commits, pairs, here, latency)
            sample["leader_gap_ns"], sample["group_ctas"] = gaps, group
            out[p["name"]] = sample
    return out


# probed launches whose spans against the base differ by less than this ran alike: it is
# the spread of the probes' own cost over launches of one kernel, so a larger difference is
# the memory system's state, not the probes (set from the what-if check's probed launches;
# bench/results/whatif/probes.txt at d2970b0)
PROBED_SPAN_TIE = 0.016


def probed_launches_like(trace: Trace, probed: list[Trace], *,
                         tie: float = PROBED_SPAN_TIE) -> list[int]:
    """Which of several probed launches (``autoprofile_probed(load_arrivals=N)``) stand for the
    base launch ``trace``, nearest first: the one whose span is nearest its own, and those
    within ``tie`` of it (the probes' own cost spreads that much). Where the probes cost a
    launch little, a probed launch that ran much longer than its base met a slower memory
    system than the base did, and its sampled latencies are that state's. Where the probes
    cost more (a dense probe on a GEMM), the nearest can instead be the one launch whose
    memory ran fast, with latencies below the base's. Each alike launch's sample is one
    draw of the base's memory state, and one draw alone can put a prediction on either
    side of the measured change: read them all."""
    if not probed:
        raise ProfileBufferError("no probed launch to choose from")
    if tie < 0:
        raise ValueError(f"tie must be >= 0, got {tie!r}")
    span = recorded_span_ns(trace)
    off = np.abs([recorded_span_ns(p) / span - 1 for p in probed])
    order = np.argsort(off, kind="stable")
    return [int(k) for k in order if off[k] <= off[order[0]] + tie]


# group sizes tried (CTAs in launch order) for the loads that share an L2 miss
LEADER_GROUPS = (2, 4, 8, 16, 32, 64, 128)


def _average_ranks(a: np.ndarray) -> np.ndarray:
    """Ranks of ``a`` with ties sharing their mean rank (timer ticks make many ties)."""
    values, inverse, counts = np.unique(a, return_inverse=True, return_counts=True)
    upto = np.cumsum(counts)
    return (upto - (counts - 1) / 2.0)[inverse]


def rank_correlation(a, b) -> float:
    """Spearman's rank correlation of the pairs where both are finite (ties share their
    mean rank); nan where fewer than two pairs, or either side constant."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    finite = np.isfinite(a) & np.isfinite(b)
    a, b = a[finite], b[finite]
    if a.size < 2 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return float("nan")
    return float(np.corrcoef(_average_ranks(a), _average_ranks(b))[0, 1])


def leader_gaps(commits: dict, pairs: dict, sampled: np.ndarray, latency: np.ndarray
                ) -> tuple[np.ndarray, int]:
    """For the sampled loads ``sampled`` of one ring (a mask over ``pairs``; ``commits``:
    ``ring_commits`` of the same trace): how long after
    the first CTA of its group issued the load of the same place each was issued, and the
    group's size, (zeros, 0) where no grouping explains the latencies.

    CTAs that read the same tile at once share one L2 miss: the first waits for the memory,
    those right behind it for the same line, the later ones hit the L2. On FA4's forward the
    CTAs of one head are consecutive in launch order, and the first of a head's CTAs to
    load a tile takes about twice as long as those well behind it. The group size is the
    one (``LEADER_GROUPS``, CTAs ranked by their
    first commit) whose gaps rank the latencies best (most negative rank correlation), past
    each CTA's first ``LEADER_START`` loads (its start burst)."""
    none = (np.zeros(int(sampled.sum())), 0)
    if not sampled.any():
        return none
    ring = int(pairs["ring"][sampled][0])
    if ring not in commits:
        return none
    tid, start, place, cta = commits[ring]
    # the sampled loads among the ring's commits (sorted by warp, then time)
    key = tid * (1 << 42) + start.astype(np.int64)
    want = (pairs["tid"][sampled].astype(np.int64) * (1 << 42)
            + pairs["commit"][sampled].astype(np.int64))
    at = np.minimum(np.searchsorted(key, want), key.size - 1)
    found = key[at] == want
    steady = found & (pairs["position"][sampled] >= LEADER_START)
    lat = latency[sampled]
    # sorted by place, then CTA: every group of a place is one run, whatever its size
    by_place = np.lexsort((cta, place))
    place_sorted, cta_sorted, start_sorted = place[by_place], cta[by_place], start[by_place]
    best, best_group, best_gaps = 0.0, 0, none[0]
    for group in LEADER_GROUPS:
        cell = cta_sorted // group
        heads = np.flatnonzero(np.r_[True, (place_sorted[1:] != place_sorted[:-1])
                                     | (cell[1:] != cell[:-1])])
        first = np.minimum.reduceat(start_sorted, heads)
        behind = np.empty_like(start)
        behind[by_place] = start_sorted - np.repeat(first, np.diff(np.r_[heads, start.size]))
        gap = np.where(found, behind[at], np.inf)
        score = rank_correlation(gap[steady], lat[steady])
        if score < best:  # nan (no ranking) never is
            best, best_group, best_gaps = score, group, gap
    return best_gaps, best_group


def ring_commits(trace: Trace) -> dict[int, tuple]:
    """Per ring (pipeline index): its commits as (producer warp, stamp (ns, float), place
    (the commit's ordinal in its warp), the warp's CTA rank by first commit of any ring),
    sorted by warp, then time."""
    ev = trace.events
    sites = sites_by_tag(autoprof_metadata(trace))
    ring_of = {s["name"]: int(s["pipeline"]) for s in sites.values()
               if s["op"] == "producer_commit" and s.get("pipeline") is not None}
    tag_ring = np.full(len(trace.tag_names), -1, dtype=np.int64)
    for t, name in enumerate(trace.tag_names):
        tag_ring[t] = ring_of.get(name.split("@")[0], -1)
    rows = np.flatnonzero(tag_ring[np.ascontiguousarray(ev["tag"]).astype(np.int64)] >= 0)
    if not rows.size:
        return {}
    tid = ev["tid"][rows].astype(np.int64)
    start = ev["start_ns"][rows].astype(np.float64)
    warps, warp = np.unique(tid, return_inverse=True)
    first = np.full(warps.size, np.inf)
    np.minimum.at(first, warp, start)
    rank = np.empty(warps.size, dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(warps.size)
    ring = tag_ring[ev["tag"][rows].astype(np.int64)]
    out = {}
    for r in np.unique(ring):
        mine = np.flatnonzero(ring == r)
        mine = mine[np.lexsort((ev["start_ns"][rows[mine]], tid[mine]))]
        t = tid[mine]
        new = np.r_[True, t[1:] != t[:-1]]
        place = np.arange(t.size) - np.flatnonzero(new)[np.cumsum(new) - 1]
        out[int(r)] = (t, start[mine], place, rank[warp[mine]])
    return out


LEADER_START = 3  # each CTA's first loads meet its start burst, not a shared miss


def load_arrival_latency(trace: Trace) -> dict[str, np.ndarray]:
    """Per TMA-loaded ring: the latency (ns) of each load the producer probed
    (:func:`load_arrival_sample` without the places)."""
    return {ring: x["latency_ns"].copy() for ring, x in load_arrival_sample(trace).items()}
