"""A unit's own work departs from the iteration's median over the units; the change's
replay keeps that departure (at its busy share) only in iterations whose waits block as
they did in the base's replay (issue #27). Where the change blocks a wait the base did not
(a ring made shallower), the iteration runs in a schedule the base never showed, and the
departure measured there is the base's situation, not the unit's work: on an H100 the
consumer work of FA4 b1 s1024's CTAs spread 258-267 ns over their loop in three traced
launches of the base, correlating 0.05-0.25 between launches, and 75 ns in its 1-deep
variant, correlating 0.12-0.18 with the base's."""

import numpy as np
import pytest

from cute_prof.analysis.pipeline_data import match_records
from cute_prof.analysis.replay import replay
from cute_prof.analysis.what_if import blocked_as_base, what_if
from cute_prof.analysis.model import load_pipeline
from tests.test_pipeline_model import make_trace, spec_dict

PRODUCE, LATENCY, ITERATIONS = 100, 100, 8
WORKS = (900, 1000, 1100)  # each unit's consumer work per item: departures of -100, 0, +100


def consumer_bound(work, depth=2):
    """One unit's hand schedule: the producer's 100 ns copies, loads landing 100 ns after
    their commit stamp, the consumer's ``work`` ns per item; a slot frees when the consumer
    ends the item (release at the end, distance 0). Consumer-bound: no consumes wait blocks."""
    w_e, p, w_f, c = [], [], [], []
    for k in range(ITERATIONS):
        ready = p[-1][1] if p else 0
        freed = c[k - depth][1] if k >= depth else 0
        w_e.append((ready, max(ready, freed)))
        p.append((w_e[-1][1], w_e[-1][1] + PRODUCE))
        data_at = p[-1][0] + LATENCY
        waiting_from = c[-1][1] if c else 0
        w_f.append((waiting_from, max(waiting_from, data_at)))
        c.append((w_f[-1][1], w_f[-1][1] + work))
    return {"w_e": w_e, "p": p, "w_f": w_f, "c": c}


def three_units():
    """The three units on SMs 0-2, a 2-deep ring."""
    return match_records(make_trace([(sm, consumer_bound(work)) for sm, work in enumerate(WORKS)]),
                         load_pipeline(spec_dict(2)))


def consumer_work(schedule) -> np.ndarray:
    """(units, iterations) the consumer's work region as replayed."""
    return schedule.end[:, :, 3] - schedule.start[:, :, 3]


def test_the_hand_schedule_is_consumer_bound():
    data = three_units()
    np.testing.assert_array_equal(consumer_work(data), np.repeat([WORKS], ITERATIONS, 0).T)
    # no consumes wait outlasts its own cost: each ended as it began, or at its data
    waited = data.end[:, :, 2] - data.start[:, :, 2]
    assert waited[:, 1:].max() == 0


def test_no_change_keeps_every_departure_and_predicts_the_base():
    data = three_units()
    got = what_if(data, schedules=True)
    assert got["predicted_change"] == 0
    np.testing.assert_allclose(consumer_work(got["changed_schedule"]), consumer_work(data))
    assert blocked_as_base(data, got["base_schedule"], got["changed_schedule"]).all()


def test_a_deeper_ring_blocks_as_the_base_did_and_keeps_the_departures():
    data = three_units()
    got = what_if(data, depth={"ring": 3}, schedules=True)
    assert got["predicted_change"] == pytest.approx(0.0)
    np.testing.assert_allclose(consumer_work(got["changed_schedule"]), consumer_work(data))


def test_a_ring_that_starves_runs_the_median_work_where_its_waits_now_block():
    data = three_units()
    got = what_if(data, depth={"ring": 1}, schedules=True)
    # the first item's wait did not block in either; every later one blocks in the change
    kept = blocked_as_base(data, got["base_schedule"], got["changed_schedule"])
    assert kept[:, 0].all() and not kept[:, 1:].any()
    work = consumer_work(got["changed_schedule"])
    np.testing.assert_allclose(work[:, 1:], np.median(WORKS))
    # the first iteration keeps each unit's own departure at its busy share (below 1:
    # the starved consumer waits for part of its time)
    assert work[0, 0] < np.median(WORKS) < work[2, 0]
    # past it every unit runs the same recurrence: the median work, then the next item's
    # load (its copy stamped as the release frees the slot). The 900 ns unit's release,
    # stamped at its work's end, stays at the end of the longer median work
    steps = np.diff(got["changed_schedule"].end[:, :, 3], axis=1)[:, 1:]
    np.testing.assert_allclose(steps, np.median(WORKS) + LATENCY)


def test_the_replay_takes_the_departure_per_unit_and_iteration():
    data = three_units()
    ones = np.ones(data.shape[0])
    np.testing.assert_allclose(replay(data, load_share=ones).end, data.end)
    dropped = np.zeros(data.shape[:2])
    dropped[:, :2] = 1.0  # the first two iterations keep theirs
    work = consumer_work(replay(data, load_share=ones, departure_kept=dropped))
    np.testing.assert_allclose(work[:, :2], consumer_work(data)[:, :2])
    np.testing.assert_allclose(work[:, 2:], np.median(WORKS))
