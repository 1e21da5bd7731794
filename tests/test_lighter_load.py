"""The base kernel probed again at a lighter memory load (issue #27): a slower change's loads
queue as the curve through the base's point and the lighter launches' says, instead of
Little's law at a fixed occupancy, which carries the base machine's queueing into a change
whose loads meet a nearly idle memory (bench/results/whatif/README.md, stops 61-62)."""

import numpy as np
import pytest

from cute_prof.analysis.loads import lighter_load_point, loop_queueing
from cute_prof.analysis.pipeline_data import match_records
from cute_prof.analysis.replay import queued_under_load
from cute_prof.analysis.what_if import predict_what_if, what_if
from cute_prof.analysis.model import ARRIVAL_SAMPLE_DTYPE, arrival_issue_rate, load_pipeline
from cute_prof.analysis.derived_pipeline import derive_pipeline

from test_load_arrivals import probed_trace
from test_pipeline_model import make_trace, spec_dict
from test_whatif_loaded import simulate

ITERS = 40


@pytest.mark.parametrize("queued", [0.0, 80.0, 400.0])
def test_queued_time_follows_the_curve_through_the_lighter_point(queued):
    factor, at = 0.3, 0.5
    point = (factor, at)
    # the base's own throughput: its own queue; the lighter launch's: its queue
    assert queued_under_load(queued, 500.0, 1.0, lighter=point) == pytest.approx(queued)
    assert queued_under_load(queued, 500.0, 1 / at, lighter=point) == pytest.approx(
        queued * factor)
    # straight between the two points, and from the lighter one to none at no throughput
    assert queued_under_load(queued, 500.0, 1 / 0.75, lighter=point) == pytest.approx(
        queued * (1 + factor) / 2)
    assert queued_under_load(queued, 500.0, 4.0, lighter=point) == pytest.approx(
        queued * factor / 2)
    # Little's law is the curve through (h, h); a faster change keeps Little's law
    for ratio in (1.2, 2.0, 3.0, 0.8):
        assert queued_under_load(queued, 500.0, ratio, lighter=(at, at)) == pytest.approx(
            queued_under_load(queued, 500.0, ratio))
    with pytest.raises(ValueError, match="lighter load"):
        queued_under_load(queued, 500.0, 2.0, lighter=(0.3, 1.0))
    with pytest.raises(ValueError, match="lighter load"):
        queued_under_load(queued, 500.0, 2.0, lighter=(-0.1, 0.5))


def sample(latency_of_issue, count=800, step_ns=50.0):
    """Sampled loads cycling over the loop's places, issued ``step_ns`` apart, each taking
    ``latency_of_issue(issued_ns)``."""
    s = np.zeros(count, dtype=ARRIVAL_SAMPLE_DTYPE)
    s["position"] = np.arange(count) % ITERS
    s["issued_ns"] = np.arange(count) * step_ns
    s["latency_ns"] = latency_of_issue(s["issued_ns"])
    return s


def congested(base_ns, swing_ns, period_ns=20_000.0):
    """The memory's congestion rising and falling over the launch, every load meeting it."""
    return lambda t: base_ns + swing_ns * (1 + np.sin(2 * np.pi * t / period_ns)) / 2


def test_arrival_issue_rate_is_the_sampled_loads_per_ns():
    assert arrival_issue_rate(sample(congested(900, 0), step_ns=50.0)) == pytest.approx(
        1 / 50.0, rel=0.01)
    assert arrival_issue_rate(sample(congested(900, 0), step_ns=100.0)) == pytest.approx(
        1 / 100.0, rel=0.01)
    with pytest.raises(ValueError, match="two or more"):
        arrival_issue_rate(sample(congested(900, 0), count=1))
    with pytest.raises(ValueError, match="issue times"):
        arrival_issue_rate([900.0, 950.0])


def test_the_lighter_point_is_its_loops_queueing_above_the_bases_floor():
    base = sample(congested(800, 400))
    floor, queued = loop_queueing(base, ITERS)
    assert 800 <= floor < 850 and queued > 100
    # a lighter launch that queued half as much above the base's floor
    lighter = sample(lambda t: floor + queued / 2 + 0 * t, step_ns=100.0)
    factor, at = lighter_load_point(floor, queued, [(lighter, 0.5), (lighter, 0.6)])
    assert factor == pytest.approx(0.5, abs=0.02) and at == pytest.approx(0.55)
    # a base that met no queue has nothing to scale; a lighter launch of too few loads
    # gives no point
    assert lighter_load_point(*loop_queueing(sample(congested(800, 0)), ITERS),
                              [(lighter, 0.5)]) is None
    assert lighter_load_point(floor, queued, [(lighter[:10], 0.5)]) is None
    with pytest.raises(ValueError, match="sampled loads"):
        loop_queueing(base[:10], ITERS)


def starved_base():
    work, produce = 1000, 100
    return match_records(make_trace([(sm, simulate(4, work, produce, 1200, ITERS))
                                     for sm in range(4)]), load_pipeline(spec_dict(4)))


def test_a_slower_change_meets_the_lighter_launchs_queue():
    """A 1-deep ring runs the kernel about half as fast. Where the lighter launch queued as
    much as the base, its loads keep the base's queue (queue rule "none"); where it queued
    as Little's law says, the change is Little's; where it met no queue, the change's
    loads are the fastest of the three."""
    data = starved_base()
    base = sample(congested(800, 800))
    floor, queued = loop_queueing(base, ITERS)

    def predict(lighter_queued, **kw):
        lighter = sample(lambda t: floor + lighter_queued + 0 * t, step_ns=100.0)
        return what_if(data, depth={"ring": 1}, loaded_latency=True, arrivals={"ring": base},
                       lighter_load={"ring": [(lighter, 0.5)]}, **kw)

    def plain(rule):
        return what_if(data, depth={"ring": 1}, loaded_latency=True, arrivals={"ring": base},
                       queue_rule=rule)

    as_much = predict(queued)
    assert as_much["lighter_load_point"]["w_f"] == pytest.approx((1.0, 0.5), abs=0.02)
    assert as_much["predicted_change"] == pytest.approx(plain("none")["predicted_change"],
                                                        rel=0.02)
    as_little = predict(queued / 2)
    assert as_little["predicted_change"] == pytest.approx(plain("little")["predicted_change"],
                                                          rel=0.02)
    idle = predict(0.0)
    assert idle["latency_ns"]["w_f"] < as_little["latency_ns"]["w_f"] \
        < as_much["latency_ns"]["w_f"]
    assert idle["predicted_change"] < as_little["predicted_change"] \
        < as_much["predicted_change"]
    # a base sample too small to tell the loop's congestion gives no point, and no error
    few = what_if(data, depth={"ring": 1}, loaded_latency=True, arrivals={"ring": base[:40]},
                  lighter_load={"ring": [(sample(lambda t: floor + 0 * t), 0.5)]})
    assert few["lighter_load_point"] == {}
    # the base itself (no change) does not move with the lighter launch
    assert what_if(data, loaded_latency=True, arrivals={"ring": base},
                   lighter_load={"ring": [(sample(congested(800, 0)), 0.5)]}
                   )["predicted_change"] == pytest.approx(0.0, abs=1e-9)
    # predict_what_if hands it to every replay: the interval moves with it
    p_idle = predict_what_if(data, {"depth": {"ring": 1}}, arrivals={"ring": base},
                             lighter_load={"ring": [(sample(lambda t: floor + 0 * t), 0.5)]})
    p_plain = predict_what_if(data, {"depth": {"ring": 1}}, arrivals={"ring": base})
    assert p_idle["predicted_change"] < p_plain["predicted_change"]
    assert p_idle["interval"][1] < p_plain["interval"][1]


def probed_launch(period_ns: float, loads: int = 200, latency_ns: float = 868.0):
    """A probed launch of software_pipelined()'s kernel: one K load every ``period_ns``,
    each probed."""
    rows = []
    for k in range(loads):
        t = 100 + k * period_ns
        rows += [(0, 0, 0, 0, t, 0), (0, 0, 1, 1, t + 32, latency_ns)]
    return probed_trace(rows)


def test_lighter_load_terms_pair_each_launchs_loads_with_its_throughput():
    from test_derived_pipeline import software_pipelined

    derived = derive_pipeline(software_pipelined())
    arrivals = derived.what_if_terms(arrivals_from=probed_launch(100.0))["arrivals"]
    terms = derived.lighter_load_terms([probed_launch(200.0), probed_launch(400.0)], arrivals)
    (first, half), (second, quarter) = terms["pk"]
    assert half == pytest.approx(0.5, rel=0.01) and quarter == pytest.approx(0.25, rel=0.01)
    # the same corrections as the base's sample: latency from the copies' issue, place by
    # the loop's iteration
    np.testing.assert_array_equal(first["latency_ns"], arrivals["pk"]["latency_ns"][:1].repeat(
        first.size))
    assert first["position"].min() == arrivals["pk"]["position"].min()
    # a ring the base did not sample gets nothing
    assert derived.lighter_load_terms([probed_launch(200.0)], {}) == {}
