"""CTAs reading the same tiles share one L2 miss (issue #27, stop 45): in a replay whose
ring's loads draw as a miss and as a hit (``replay(leaders=)``), each group's first load of
a place waits for the memory and the others land no sooner than that line."""

from __future__ import annotations

import numpy as np

from cute_prof.analysis.pipeline_data import match_records
from cute_prof.analysis.replay import replay
from cute_prof.analysis.derived_pipeline import derive_pipeline
from cute_prof.analysis.zero_edit import finish_zero_edit_trace
from test_derived_model_terms import STEADY_SLACK, STEP
from test_derived_pipeline import CONSUMER_WARPS, _raw_trace

MISS, HIT = 5000.0, 10.0


def concurrent_gemm(ctas=4, iters=6):
    """ws_gemm's calls with every CTA running at once, CTA c starting 10c ns in."""
    rows = []
    for c in range(ctas):
        t0 = 10 * c
        for j in range(iters):
            rows += [(c, 0, 0, 0, t0 + j * STEP, 40), (c, 0, 1, 0, t0 + j * STEP + 50, 0)]
        for w in CONSUMER_WARPS:
            for j in range(iters):
                at = t0 + j * STEP + 300
                rows.append((c, w, 4, 0, at, STEADY_SLACK - 250))
                rows.append((c, w, 6, 0, at + 400, 0))
    return finish_zero_edit_trace(_raw_trace(rows))


def consumer_wait(spec):
    return next(i for i, r in enumerate(spec.regions) if "consumes" in r.relations)


def replays(group_ctas: int):
    """The concurrent GEMM replayed with every load a hit, and with its loads coupled in
    groups of ``group_ctas`` CTAs (a miss of ``MISS``, a hit of ``HIT``): (derived, both)."""
    derived = derive_pipeline(concurrent_gemm())
    data = match_records(derived.trace, derived.spec)
    i = consumer_wait(derived.spec)
    units, iters, _ = data.shape
    draws = np.stack([np.full((units, iters), MISS), np.full((units, iters), HIT)])
    return derived, i, (replay(data, item_latency={i: draws[1]}),
                        replay(data, item_latency={i: draws}, leaders={i: group_ctas}))


def test_a_groups_loads_land_with_its_first_ones_miss():
    derived, i, (hits, shared) = replays(2)
    produce = next(j for j, r in enumerate(derived.spec.regions) if "produces" in r.relations)
    issued = shared.start[:, :, produce]
    # hits alone: every wait ends right after its own load; groups of two CTAs (launch
    # order 0-1, 2-3): each waits for its group's first load of the place and its miss
    assert (hits.end[:, :, i] < issued + MISS / 2).all()
    for group in ((0, 1), (2, 3)):
        first = issued[list(group)].min(axis=0)
        for cta in group:
            np.testing.assert_array_less(first + MISS - 1e-6, shared.end[cta, :, i])


def test_a_group_of_one_cta_misses_every_load():
    _, i, (plain, grouped_by_one) = replays(1)
    # a group of one CTA is its own first load: every load a miss
    assert (grouped_by_one.end[:, 1:, i] > plain.end[:, 1:, i] + MISS / 2).all()
