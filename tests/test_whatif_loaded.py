"""What-ifs with a known answer (issue #27): a ring of depth d, load latency L, producer
work P and consumer work W runs one item per max(W, P, (L + W) / d) (release at the end of
the consumer's work); the replay of a changed depth must reproduce an exact simulation of
the changed pipeline, and the loaded latency must follow Little's law as a fixed point."""

import numpy as np
import pytest

from cute_prof.analysis.loads import latency_sample
from cute_prof.analysis.pipeline_data import match_records, timer_step
from cute_prof.analysis.what_if import predict_what_if, what_if
from cute_prof.analysis.model import load_pipeline

from test_pipeline_model import TAGS, make_trace, spec_dict


def simulate(depth, work, produce, latency, iters, start=0.0):
    """Exact schedule of the ring (waits cost nothing): {tag: [(start, end)]}."""
    spans = {t: [] for t in TAGS}
    released, p_end, c_end = [], start, start
    for k in range(iters):
        we_end = max(p_end, released[k - depth]) if k >= depth else p_end
        spans["w_e"].append((p_end, we_end))
        spans["p"].append((we_end, we_end + produce))
        p_end = we_end + produce
        arrival = we_end + latency
        wf_end = max(c_end, arrival)
        spans["w_f"].append((c_end, wf_end))
        spans["c"].append((wf_end, wf_end + work))
        c_end = wf_end + work
        released.append(c_end)
    return spans


def span(spans):
    return spans["c"][-1][1] - spans["w_e"][0][0]


@pytest.mark.parametrize("depth,latency", [(1, 400), (2, 2400), (3, 2400), (1, 3000)])
def test_replay_of_a_shallower_ring_matches_the_exact_schedule(depth, latency):
    work, produce, iters = 1000, 100, 40
    base = simulate(4, work, produce, latency, iters)  # deep ring: consumer-bound
    data = match_records(make_trace([(0, base)]), load_pipeline(spec_dict(4)))
    w = what_if(data, depth={"ring": depth})
    assert w["kernel_ns"] == span(base) == latency + iters * work
    assert w["predicted_kernel_ns"] == pytest.approx(
        span(simulate(depth, work, produce, latency, iters)))
    # the steady period is the ring's recurrence bound
    longer = what_if(match_records(make_trace([(0, simulate(4, work, produce, latency, 2 * iters))]),
                                   load_pipeline(spec_dict(4))), depth={"ring": depth})
    period = (longer["predicted_kernel_ns"] - w["predicted_kernel_ns"]) / iters
    # (whole-ns schedule: within 1% when (L + W) / d is not whole)
    assert period == pytest.approx(max(work, produce, (latency + work) / depth), rel=0.01)


def test_recorder_cost_predicts_the_plain_kernel_from_a_slowed_recording():
    """A recording whose consumer work ran 25% slow (the compiler's schedule around its
    records, FA4's cost) and the plain kernel's time: ``recorder_cost`` replays the base
    with the work that much faster, and the change is measured against the plain base, as
    the GPU measures it. In the 1-deep change the consumer waits for part of each period,
    and the recorder's schedule costs where the warps work: the change's work keeps its busy
    share of the slowdown, so the plain change lies between the one with the whole slowdown
    taken off the change and the one with none taken off it. Without ``recorder_cost`` the
    replay predicts the recorded kernel."""
    work, produce, latency, iters = 1000, 100, 700, 40
    recorded, plain = (simulate(4, w, produce, latency, iters) for w in (1.25 * work, work))
    cost = span(recorded) / span(plain) - 1
    data = match_records(make_trace([(0, recorded)]), load_pipeline(spec_dict(4)))
    got = what_if(data, depth={"ring": 1}, recorder_cost=cost)
    assert got["recorder_slowdown"] == pytest.approx(0.8, abs=2e-3)
    assert got["kernel_ns"] == pytest.approx(span(plain), rel=1e-3)
    assert got["measured_kernel_ns"] == span(recorded)
    whole = span(simulate(1, work, produce, latency, iters)) / span(plain) - 1
    recorded_change = span(simulate(1, 1.25 * work, produce, latency, iters)) / span(recorded) - 1
    none = span(simulate(1, 1.25 * work, produce, latency, iters)) / span(plain) - 1
    assert whole + 0.02 < got["predicted_change"] < none - 0.02
    # nothing changed: nothing predicted, the recorder's cost taken off base and change alike
    assert what_if(data, recorder_cost=cost)["predicted_change"] == pytest.approx(0, abs=1e-3)
    # the recorded kernel's own change is another number: the slow work hid more latency
    assert what_if(data, depth={"ring": 1})["predicted_change"] == pytest.approx(
        recorded_change, abs=2e-3)
    assert whole - recorded_change > 0.05


def test_recorder_cost_is_not_taken_off_work_that_does_not_set_the_time():
    """Where the loads' latency sets the kernel's time, slowing the work cannot account for
    the recorder's cost: the replay leaves the work as recorded (slowdown 1) rather than
    inventing a factor."""
    work, produce, latency, iters = 300, 100, 2400, 40
    data = match_records(make_trace([(0, simulate(1, work, produce, latency, iters))]),
                         load_pipeline(spec_dict(1)))
    got = what_if(data, depth={"ring": 2}, recorder_cost=0.10)
    assert got["recorder_slowdown"] == 1.0
    assert got["predicted_change"] == pytest.approx(
        what_if(data, depth={"ring": 2})["predicted_change"])

def loaded_trace(latencies, depth=2, work=1000, produce=100, iters=12):
    """Two waves on len(latencies) SMs: the second wave starts after the first finished,
    each of its units with its own load latency (the base's spread)."""
    ctas = []
    first = [simulate(depth, work, produce, 800, iters) for _ in latencies]
    end = max(span(s) for s in first)
    for sm, s in enumerate(first):
        ctas.append((sm, s))
    for sm, lat in enumerate(latencies):
        ctas.append((sm, simulate(depth, work, produce, lat, iters, start=end + 100)))
    return match_records(make_trace(ctas), load_pipeline(spec_dict(depth)))


def test_latency_sample_prefers_first_items_of_units_started_under_load():
    lats = [600, 700, 800, 900, 1000, 1100, 1200, 1300]
    data = loaded_trace(lats)
    sample, source = latency_sample(data, region="w_f")
    assert sorted(sample.tolist()) == lats and "under load" in source
    assert timer_step(data) > 0


def test_loaded_latency_is_littles_law_fixed_point():
    lats = [600, 700, 800, 900, 1000, 1100, 1200, 1300]
    data = loaded_trace(lats, depth=4)
    fixed = what_if(data, depth={"ring": 1}, latency={"w_f": np.median(lats)})
    loaded = what_if(data, depth={"ring": 1}, loaded_latency=True)
    l_b, l_0 = np.quantile(lats, 0.5), np.quantile(lats, 0.05)
    # slower pipeline -> less in flight -> shorter loads -> a smaller slowdown
    assert 0 < loaded["predicted_change"] < fixed["predicted_change"]
    # the queued part l_b - l_0 at a fixed occupancy falls by the change's throughput
    ratio = 1 + loaded["predicted_change"]
    assert loaded["latency_ns"]["w_f"] == pytest.approx(l_0 + (l_b - l_0) / ratio, rel=1e-3)
    # the open queue shrinks it further (l_0 / (1 - rho'), rho' = (l_b - l_0) / l_b / ratio')
    # and so predicts a smaller slowdown; keeping the base's queue, the fixed latency's
    opened = what_if(data, depth={"ring": 1}, loaded_latency=True, queue_rule="open")
    ratio = 1 + opened["predicted_change"]
    rho = (l_b - l_0) / l_b / ratio
    assert opened["latency_ns"]["w_f"] == pytest.approx(l_0 / (1 - rho), rel=1e-3)
    assert opened["predicted_change"] < loaded["predicted_change"]
    kept = what_if(data, depth={"ring": 1}, loaded_latency=True, queue_rule="none")
    assert kept["latency_ns"]["w_f"] == pytest.approx(l_b)
    assert kept["predicted_change"] == pytest.approx(fixed["predicted_change"], abs=1e-3)
    with pytest.raises(ValueError, match="queue rule"):
        what_if(data, depth={"ring": 1}, loaded_latency=True, queue_rule="closed")


@pytest.mark.parametrize("queued", [0.0, 50.0, 400.0, 5000.0])
def test_queued_time_under_load(queued):
    from cute_prof.analysis.replay import queued_under_load
    w0 = 500.0
    for rule in ("little", "open", "none"):  # the base's own load
        assert queued_under_load(queued, w0, 1.0, rule=rule) == queued
    ratios = (1.2, 1.5, 2.0, 4.0)
    little = [queued_under_load(queued, w0, r) for r in ratios]
    opened = [queued_under_load(queued, w0, r, rule="open") for r in ratios]
    # the less the change loads memory, the less it queues: by the throughput at a fixed
    # occupancy, never above that with one open queue, never below 0
    assert little == pytest.approx([queued / r for r in ratios])
    assert opened == sorted(opened, reverse=True)
    for lit, got in zip(little, opened):
        assert 0.0 <= got <= lit + 1e-9
    assert queued_under_load(queued, w0, 2.0, rule="none") == queued
    # a faster change: more load, Little's law (the open queue has no steady state past 1)
    for rule in ("little", "open"):
        assert queued_under_load(queued, w0, 0.8, rule=rule) == pytest.approx(queued / 0.8)
    with pytest.raises(ValueError, match="queue rule"):
        queued_under_load(queued, w0, 2.0, rule="closed")


def test_predict_what_if_takes_the_queue_rule_to_every_replay():
    data = loaded_trace([600, 700, 800, 900, 1000, 1100, 1200, 1300], depth=4)
    little = predict_what_if(data, {"depth": {"ring": 1}})
    opened = predict_what_if(data, {"depth": {"ring": 1}}, queue_rule="open")
    kept = predict_what_if(data, {"depth": {"ring": 1}}, queue_rule="none")
    # the open queue shortens a slower change's loads most, keeping the base's queue least
    assert opened["predicted_change"] < little["predicted_change"] < kept["predicted_change"]
    for low, high in zip(opened["interval"], kept["interval"]):  # both ends move too
        assert low < high
    with pytest.raises(ValueError, match="queue rule"):
        predict_what_if(data, {"depth": {"ring": 1}}, queue_rule="closed")


def test_predict_what_if_interval_and_not_modelled():
    data = loaded_trace([600, 700, 800, 900, 1000, 1100, 1200, 1300], depth=4)
    p = predict_what_if(data, {"depth": {"ring": 1}})
    lo, hi = p["interval"]
    assert p["modelled"] and lo <= p["predicted_change"] <= hi and lo < hi
    assert predict_what_if(data, {"depth": {"nope": 2}})["modelled"] is False
    assert "no model term" in predict_what_if(data, {"overlap": False})["reason"]


def test_unobserved_latency_gives_bounds_not_a_prediction():
    """A consumer that starts after its first item arrived never waits on its ring: the
    latency is not observed, only bounded by the unblocked waits' end - produce. The model
    says it cannot predict the change, and gives bounds: the change at latency 0 and at
    that bound, which hold the exact answer at the true latency."""
    work, produce, latency, iters, depth = 1000, 100, 800, 24, 4
    regions = simulate(depth, work, produce, latency, iters)
    # the consumer begins 2000 ns late: every wait finds its item there
    late = 2000
    spans = {t: list(v) for t, v in regions.items()}
    c_end = late
    spans["w_f"], spans["c"] = [], []
    for k in range(iters):
        arrival = spans["w_e"][k][1] + latency
        assert arrival <= c_end  # never blocked (the producer keeps far enough ahead)
        spans["w_f"].append((c_end, c_end))
        spans["c"].append((c_end, c_end + work))
        c_end += work
    # the producer's acquires follow the consumer's releases (depth 4, work-bound)
    data = match_records(make_trace([(sm, spans) for sm in range(8)]),
                         load_pipeline(spec_dict(depth)))
    sample, source = latency_sample(data, region="w_f")
    assert np.all(sample == 0) and "not observed" in source
    p = predict_what_if(data, {"depth": {"ring": 1}})
    assert p["modelled"] is False and "latency is not observed" in p["reason"]
    bound = p["detail"]["latency_unobserved_bound_ns"]["w_f"]
    # bound = the smallest end - produce of an unblocked wait (item 0: 2000 - 0) + one tick
    assert bound == pytest.approx(late + timer_step(data))
    at_bound = what_if(data, depth={"ring": 1}, latency={"w_f": bound})["predicted_change"]
    at_zero = what_if(data, depth={"ring": 1}, latency={"w_f": 0.0})["predicted_change"]
    lo, hi = p["bounds"]
    assert lo <= at_zero <= hi and f"{hi:+.2%}" in p["reason"]
    assert hi == pytest.approx(at_bound) and hi > 0.5
    # the exact ring of depth 1 at the true latency: one item per L + W
    exact = (span(simulate(1, work, produce, latency, iters)) - span(spans) + late) / span(spans)
    assert lo <= exact <= hi


def test_the_interval_reaches_the_prediction_without_the_recorder_slowdown():
    """How much of a recorder's cost slows the work is the model's reading: the interval
    holds the prediction with only the records' own time removed as well."""
    work, produce, latency, iters = 1000, 100, 700, 40
    recorded, plain = (simulate(4, w, produce, latency, iters) for w in (1.25 * work, work))
    cost = span(recorded) / span(plain) - 1
    data = match_records(make_trace([(0, recorded)]), load_pipeline(spec_dict(4)))
    got = predict_what_if(data, {"depth": {"ring": 1}}, recorder_cost=cost)
    without = predict_what_if(data, {"depth": {"ring": 1}})
    low, high = got["interval"]
    assert low <= without["predicted_change"] < got["predicted_change"] <= high
