"""Multi-wave launches: a what-if's kernel time comes from the CTAs dispatched where SMs
free (dispatch.dispatched_span), as the block scheduler hands them out."""
import numpy as np
import pytest

from cute_prof.analysis.dispatch import dispatched_span, dispatched_starts

GAP = 100.0


def waves(durations: np.ndarray, sms: int):
    """CTAs of the given durations in launch order, dispatched greedily onto ``sms`` SMs
    with ``GAP`` ns between one CTA's end and the next one's start: (first, last, sm)."""
    free = np.zeros(sms)
    first, last, sm = [], [], []
    for i, d in enumerate(durations):
        s = int(np.argmin(free))
        start = free[s] + (GAP if i >= sms else 0.0)
        first.append(start), last.append(start + d), sm.append(s)
        free[s] = start + d
    return np.array(first), np.array(last), np.array(sm)


def test_an_unchanged_launch_keeps_its_measured_span():
    rng = np.random.default_rng(3)
    first, last, sm = waves(rng.uniform(900, 1100, 64), 8)
    span = dispatched_span(first, last, sm, np.zeros(64))
    assert span == pytest.approx(last.max() - first.min())


def test_a_slow_first_wave_cta_hands_its_successors_to_other_sms():
    # 2 SMs, 6 CTAs of 1000 ns: SM 0 ran CTAs 0, 2, 4. CTA 0 taking 3000 ns longer delays
    # none of the others: CTAs 2-4 run on SM 1 meanwhile
    first, last, sm = waves(np.full(6, 1000.0), 2)
    delta = np.zeros(6)
    delta[0] = 3000.0
    base = dispatched_span(first, last, sm, np.zeros(6))
    assert base == pytest.approx(3000 + 2 * GAP)
    slowed = dispatched_span(first, last, sm, delta)
    # SM 1: CTA 1 (0-1000), then 2, 3 and 4 (ends 4300); CTA 0 ends at 4000 and SM 0
    # takes CTA 5
    assert slowed == pytest.approx(4000 + GAP + 1000)
    # the static chain on SM 0 would have ended at 4000 + 2 * (GAP + 1000)
    assert slowed < 4000 + 2 * (GAP + 1000)


def test_every_cta_slower_by_the_same_amount_moves_each_wave():
    first, last, sm = waves(np.full(12, 1000.0), 4)
    base = dispatched_span(first, last, sm, np.zeros(12))
    slowed = dispatched_span(first, last, sm, np.full(12, 250.0))
    assert slowed - base == pytest.approx(3 * 250.0)


def test_one_wave_is_its_slowest_cta():
    first, last, sm = waves(np.full(4, 1000.0), 4)
    delta = np.array([0.0, 500.0, 0.0, 200.0])
    assert dispatched_span(first, last, sm, delta) == pytest.approx(1500.0)


def test_the_unchanged_dispatch_puts_every_cta_where_it_started():
    rng = np.random.default_rng(5)
    first, last, sm = waves(rng.uniform(900, 1100, 40), 6)
    np.testing.assert_allclose(dispatched_starts(first, last, sm, np.zeros(40)), first)


def test_a_slower_first_wave_starts_the_next_wave_later():
    # 4 SMs, 8 CTAs of 1000 ns: the first wave 300 ns slower starts each of the second
    # 300 ns later, and where only CTA 0 is slower, the CTA that took its SM (the last to
    # find one) starts 300 ns later, the others where they did
    first, last, sm = waves(np.full(8, 1000.0), 4)
    later = dispatched_starts(first, last, sm, np.r_[np.full(4, 300.0), np.zeros(4)])
    np.testing.assert_allclose(later - first, np.r_[np.zeros(4), np.full(4, 300.0)])
    one = dispatched_starts(first, last, sm, np.r_[300.0, np.zeros(7)])
    np.testing.assert_allclose(one - first, np.r_[np.zeros(7), 300.0])


def test_ctas_that_came_late_for_another_reason_keep_their_starts():
    """gemm_like's CTAs follow one another 100 us apart on one SM: the dispatch reproduces
    that launch, and a longer CTA 0 starts the others later. Put on four SMs, the same
    starts are no block scheduler's (an SM stood free), so the what-if keeps them."""
    import dataclasses

    from cute_prof.analysis.dispatch import dispatch_shift
    from cute_prof.analysis.pipeline_data import match_records
    from cute_prof.analysis.derived_pipeline import derive_pipeline
    from test_derived_model_terms import gemm_like

    derived = derive_pipeline(gemm_like(ctas=4))
    one_sm = match_records(derived.trace, derived.spec)
    slower_first = np.r_[500.0, np.zeros(3)]
    np.testing.assert_allclose(dispatch_shift(one_sm, slower_first), [0, 500, 500, 500])
    four_sms = dataclasses.replace(one_sm, unit_sm=np.arange(4))
    np.testing.assert_array_equal(dispatch_shift(four_sms, slower_first), np.zeros(4))


def test_the_unchanged_span_is_measured_only_where_the_dispatch_reproduces_the_launch():
    """What a change's dispatched span is set against: on one SM the dispatch replays
    gemm_like's CTAs 100 us apart (its launch gap), so the unchanged span is the measured
    one. Put on four SMs, no SM shows a gap and only CTA 0 ran before one ended (a wave of
    one): the dispatch runs them back to back, four CTAs long, not the measured span."""
    import dataclasses

    from cute_prof.analysis.dispatch import unchanged_span
    from cute_prof.analysis.pipeline_data import match_records
    from cute_prof.analysis.derived_pipeline import derive_pipeline
    from test_derived_model_terms import gemm_like

    derived = derive_pipeline(gemm_like(ctas=4))
    one_sm = match_records(derived.trace, derived.spec)
    measured = float(one_sm.unit_last.max() - one_sm.unit_first.min())
    assert unchanged_span(one_sm) == pytest.approx(measured)
    four_sms = dataclasses.replace(one_sm, unit_sm=np.arange(4))  # a fresh memo
    back_to_back = float((four_sms.unit_last - four_sms.unit_first).sum())
    assert unchanged_span(four_sms) == pytest.approx(back_to_back)
    assert back_to_back < measured / 2


def test_a_shorter_launch_gap_starts_every_later_wave_sooner():
    # 4 SMs, 3 waves of 1000 ns CTAs: each SM waits two launch gaps, so a gap 60 ns
    # shorter (a cluster shape's launch cost dropped) ends the launch 120 ns sooner; one
    # wave has no gap to shorten
    first, last, sm = waves(np.full(12, 1000.0), 4)
    base = dispatched_span(first, last, sm, np.zeros(12))
    shorter = dispatched_span(first, last, sm, np.zeros(12), gap_change_ns=-60.0)
    assert base - shorter == pytest.approx(2 * 60.0)
    assert dispatched_span(first, last, sm, np.zeros(12), gap_change_ns=-10 * GAP) \
        == pytest.approx(3 * 1000.0)  # a gap never below zero
    first, last, sm = waves(np.full(4, 1000.0), 4)
    assert dispatched_span(first, last, sm, np.zeros(4), gap_change_ns=-60.0) \
        == pytest.approx(1000.0)


def test_a_what_if_of_the_launch_gap_moves_the_kernel_by_its_later_ctas():
    """gemm_like's four CTAs run one after another on one SM: a change that only shortens
    the launch gap (``gap_change_ns``) predicts the three gaps' saving and nothing else, its
    interval one timer tick each way; the same change with no gap to shorten predicts none."""
    from cute_prof.analysis.pipeline_data import match_records, timer_step
    from cute_prof.analysis.what_if import predict_what_if, what_if
    from cute_prof.analysis.derived_pipeline import derive_pipeline
    from test_derived_model_terms import gemm_like

    derived = derive_pipeline(gemm_like(ctas=4))
    data = match_records(derived.trace, derived.spec)
    latency = {"pk.consumer_wait": 300.0}  # its consumer never waited: a latency named
    unchanged = what_if(data, latency=latency)
    shorter = what_if(data, latency=latency, gap_change_ns=-500.0)
    assert unchanged["predicted_change"] == pytest.approx(0.0, abs=1e-12)
    assert shorter["predicted_kernel_ns"] == pytest.approx(unchanged["predicted_kernel_ns"]
                                                           - 3 * 500.0)
    pred = predict_what_if(data, {"gap_change_ns": -500.0, "latency": latency})
    assert pred["modelled"] and pred["predicted_change"] == pytest.approx(
        shorter["predicted_change"])
    tick = timer_step(data)
    lo, hi = pred["interval"]
    span = unchanged["predicted_kernel_ns"]
    assert lo <= -3 * (500.0 + tick) / span + 1e-9 and hi >= -3 * (500.0 - tick) / span - 1e-9
