"""Sampled load arrivals (issue #27): a producer that probes one load in N records when the
load's full barrier completed (``autoprofile_probed(load_arrivals=N)``). The host measures each
probed load from the commit before it; the what-if draws every item's latency from that
sample instead of one latency read from the waits that happened to block."""

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from cute_prof.analysis.pipeline_data import match_records
from cute_prof.analysis.replay import replay
from cute_prof.analysis.replay_terms import infer_terms
from cute_prof.analysis.what_if import latency_sensitivity, predict_what_if, what_if
from cute_prof.analysis.model import ARRIVAL_SAMPLE_DTYPE, load_pipeline, shifted_arrivals
from cute_prof.analysis.derived_pipeline import derive_pipeline
from cute_prof.analysis.load_arrivals import (
    load_arrival_latency, load_arrival_pairs, load_arrival_sample)
from cute_prof.analysis.zero_edit import finish_zero_edit_trace
from cute_prof.trace import EVENT_DTYPE, Trace

from test_pipeline_model import make_trace, spec_dict
from test_whatif_loaded import simulate, span

SITES = [
    {"tag": 0, "name": "pk.producer_commit", "op": "producer_commit", "kind": "signal", "pipeline": 0},
    {"tag": 1, "name": "pk.load_arrival", "op": "load_arrival", "kind": "wait", "pipeline": 0},
    {"tag": 2, "name": "pv.producer_commit", "op": "producer_commit", "kind": "signal", "pipeline": 1},
    {"tag": 3, "name": "pv.load_arrival", "op": "load_arrival", "kind": "wait", "pipeline": 1},
]


def probed_trace(rows):
    """rows: (cta, warp, tag, payload, start, dur) -> a finished zero-edit trace."""
    ev = np.zeros(len(rows), dtype=EVENT_DTYPE)
    for column, values in zip(("tid", "warp", "tag", "payload", "start_ns", "dur_ns"), zip(*rows)):
        ev[column] = values
    pipes = [{"index": i, "name": name, "cls": "PipelineTmaAsync", "stages": 2,
              "created_at": "k.py:1"} for i, name in enumerate(("pk", "pv"))]
    meta = {"autoprof": {"kernel": "k", "sites": SITES, "pipelines": pipes}}
    raw = Trace(events=ev, tag_names=tuple(s["name"] for s in SITES), capacity=len(rows),
                attempted=len(rows), overflow=0, incomplete=0, metadata=meta)
    return finish_zero_edit_trace(raw)


def test_each_probe_is_measured_from_the_commit_before_it():
    trace = probed_trace([
        # CTA 0, producer warp 0: K probed after its commit; V's probe gave up (payload 0)
        (0, 0, 0, 0, 100, 0), (0, 0, 1, 1, 132, 700),
        (0, 0, 2, 0, 900, 0), (0, 0, 3, 0, 932, 400),
        # an unprobed commit, then one probed: measured from the latest commit
        (0, 0, 0, 0, 2000, 0), (0, 0, 0, 0, 3000, 0), (0, 0, 1, 1, 3032, 500),
        # CTA 1: a probe before any commit of its ring is left out; V's probe arrived
        (1, 0, 1, 1, 50, 10), (1, 0, 0, 0, 200, 0), (1, 0, 1, 1, 240, 1000),
        (1, 0, 2, 0, 300, 0), (1, 0, 3, 1, 340, 260),
    ])
    got = load_arrival_latency(trace)
    assert sorted(got) == ["pk", "pv"]
    np.testing.assert_array_equal(np.sort(got["pk"]), [532, 732, 1040])
    np.testing.assert_array_equal(got["pv"], [300])
    # and where in its warp's loop each probed load was issued: the commit's ordinal
    sample = load_arrival_sample(trace)
    pk = sample["pk"][np.argsort(sample["pk"]["latency_ns"])]
    np.testing.assert_array_equal(pk["latency_ns"], [532, 732, 1040])
    np.testing.assert_array_equal(pk["position"], [2, 0, 0])  # CTA 0's third, each first
    np.testing.assert_array_equal(sample["pv"]["position"], [0])
    # and when: the commit's stamp (loads issued together share the memory's congestion)
    np.testing.assert_array_equal(pk["issued_ns"], [3000, 100, 200])
    np.testing.assert_array_equal(sample["pv"]["issued_ns"], [300])
    # and by which producer warp: CTA 0's and CTA 1's, one each
    pairs = load_arrival_pairs(trace)
    assert np.unique(pairs["tid"]).size == 2
    assert np.unique(pairs["tid"][pairs["commit"] == 200]).size == 1  # CTA 1's K commit


def test_a_trace_without_probes_has_no_arrivals():
    trace = probed_trace([(0, 0, 0, 0, 100, 0), (0, 0, 2, 0, 200, 0)])
    assert load_arrival_latency(trace) == {}


def varying_ring(latencies, depth=1, work=1000, produce=100):
    """A ring whose k-th load takes ``latencies[k]`` (the exact schedule)."""
    spans = {t: [] for t in ("w_e", "p", "w_f", "c")}
    released, p_end, c_end = [], 0.0, 0.0
    for k, latency in enumerate(latencies):
        we_end = max(p_end, released[k - depth]) if k >= depth else p_end
        spans["w_e"].append((p_end, we_end))
        spans["p"].append((we_end, we_end + produce))
        p_end = we_end + produce
        wf_end = max(c_end, we_end + latency)
        spans["w_f"].append((c_end, wf_end))
        spans["c"].append((wf_end, wf_end + work))
        c_end = wf_end + work
        released.append(c_end)
    return spans


def test_replay_takes_each_items_own_latency():
    latencies = [400, 2400, 900, 3000, 500, 1500, 700, 2000]
    data = match_records(make_trace([(0, varying_ring(latencies))]), load_pipeline(spec_dict(1)))
    wait = [r.tag for r in data.spec.regions].index("w_f")
    exact = replay(data, item_latency={wait: np.array([latencies], dtype=float)})
    np.testing.assert_allclose(exact.end[:, :, wait], data.end[:, :, wait])
    # one latency for every item (the per-unit term) cannot follow them
    assert not np.allclose(replay(data).end[:, :, wait], data.end[:, :, wait])


def test_what_if_draws_the_latency_of_every_item_from_the_arrivals():
    work, produce, iters, latency = 1000, 100, 40, 2400
    base = simulate(4, work, produce, latency, iters)  # deep ring: the consumer never waits
    data = match_records(make_trace([(0, base)]), load_pipeline(spec_dict(4)))
    # every probed load took the same time: the change is the exact shallow ring's
    got = what_if(data, depth={"ring": 1}, loaded_latency=True, arrivals={"ring": [latency] * 50})
    assert got["predicted_kernel_ns"] == pytest.approx(
        span(simulate(1, work, produce, latency, iters)))
    # a starved ring pays each load in full: its time follows the sample's mean, not one
    # quantile of it (here the median, 400 ns less than the mean)
    sample = [1200] * 30 + [3200] * 20
    drawn = what_if(data, depth={"ring": 1}, loaded_latency=True, arrivals={"ring": sample})
    at_median = what_if(data, depth={"ring": 1}, latency={"w_f": float(np.median(sample))})
    assert drawn["predicted_kernel_ns"] > at_median["predicted_kernel_ns"] + 0.1 * iters * 400


def test_shifted_arrivals_moves_every_latency_and_keeps_the_rest():
    sample = np.zeros(3, dtype=ARRIVAL_SAMPLE_DTYPE)
    sample["latency_ns"], sample["position"], sample["issued_ns"] = [500, 700, 900], [0, 1, 2], 7
    shifted = shifted_arrivals({"ring": sample, "plain": [400, 600]}, 32)
    np.testing.assert_array_equal(shifted["ring"]["latency_ns"], [532, 732, 932])
    np.testing.assert_array_equal(shifted["ring"]["position"], [0, 1, 2])
    np.testing.assert_array_equal(shifted["plain"], [432.0, 632.0])
    assert sample["latency_ns"][0] == 500  # the caller's sample is left as it was


def test_latency_sensitivity_is_what_a_starved_ring_pays_per_tick_and_a_deep_one_not():
    work, produce, iters, latency = 1000, 100, 40, 2400
    base = simulate(4, work, produce, latency, iters)  # deep ring: the consumer never waits
    data = match_records(make_trace([(0, base)]), load_pipeline(spec_dict(4)))
    arrivals = {"ring": [latency] * 50}
    base_ns = span(base)
    # one item at a time: every load's latency is on the path, iters of them per launch
    starved = latency_sensitivity(data, {"depth": {"ring": 1}}, arrivals=arrivals,
                                  shift_ns=32, loaded_latency=True)
    assert starved == pytest.approx(32 * iters / base_ns, rel=0.05)
    # three items deep, a load has two items' work to hide in, short of its 2,500 ns: the
    # ring turns once per load and three items, a third of the 1-deep ring's slope
    assert latency_sensitivity(data, {"depth": {"ring": 3}}, arrivals=arrivals, shift_ns=32,
                               loaded_latency=True) == pytest.approx(starved / 3, rel=0.1)
    # deeper than the base: the load is hidden, 32 ns more or less changes nothing
    assert latency_sensitivity(data, {"depth": {"ring": 5}}, arrivals=arrivals, shift_ns=32,
                               loaded_latency=True) == pytest.approx(0, abs=1e-3)
    with pytest.raises(ValueError, match="arrivals"):
        latency_sensitivity(data, {"depth": {"ring": 1}}, arrivals={}, loaded_latency=True)


def burst_then_steady(iters: int, burst: int, per_place: int):
    """A 4-deep ring whose first ``burst`` loads take 4 us (a CTA's start burst) and the
    rest 600 ns, and ``per_place`` sampled loads at each place, from CTAs that ran one
    after another (a burst is the CTA's own, not the memory's congestion then): (latencies,
    data, sample)."""
    latencies = [4000.0] * burst + [600.0] * (iters - burst)
    data = match_records(make_trace([(0, varying_ring(latencies, depth=4))]),
                         load_pipeline(spec_dict(4)))
    sample = np.zeros(per_place * iters, dtype=ARRIVAL_SAMPLE_DTYPE)
    sample["position"] = np.tile(np.arange(iters), per_place)
    sample["latency_ns"] = np.asarray(latencies)[sample["position"]]
    sample["issued_ns"] = (sample["position"] * 1000.0
                           + np.repeat(np.arange(per_place) * iters * 1000.0, iters))
    return latencies, data, sample


def test_each_item_draws_from_the_loads_sampled_near_its_place_in_the_loop():
    """A CTA's first four loads meet its start burst (4 us), the rest take 600 ns. Drawn
    anywhere in the loop, the slow loads land everywhere and a 3-deep ring stalls on each;
    drawn from the loads sampled near each item's place, they stay at the start, as on the
    GPU: the prediction lands near the exact 3-deep schedule."""
    latencies, data, sample = burst_then_steady(iters=40, burst=4, per_place=5)
    exact = varying_ring(latencies, depth=3)
    exact_ns = exact["c"][-1][1] - exact["w_e"][0][0]
    near, anywhere = (what_if(data, depth={"ring": 3}, loaded_latency=True,
                              arrivals={"ring": x})["predicted_kernel_ns"]
                      for x in (sample, sample["latency_ns"]))
    assert abs(near - exact_ns) < 0.02 * exact_ns < abs(anywhere - exact_ns)


def test_a_place_sampled_often_enough_draws_from_its_own_loads_alone():
    """Twenty loads sampled at each place, the first two places in the start burst (4 us):
    the 64 nearest a later place reached into the burst, and the 1-deep change, which
    waits for every load, stalled on burst latencies at its third and fourth items. Each
    place's own loads keep them at the start, as the exact 1-deep schedule has them."""
    from cute_prof.analysis import loads

    latencies, data, sample = burst_then_steady(iters=24, burst=2, per_place=20)
    wait = [r.tag for r in data.spec.regions].index("w_f")

    def third_and_fourth_waits():
        s = what_if(data, depth={"ring": 1}, loaded_latency=True, arrivals={"ring": sample},
                    schedules=True)["changed_schedule"]
        return (s.end - s.start)[0, 2:4, wait]
    own = third_and_fourth_waits()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(loads, "PLACE_SAMPLE_MIN", 10 ** 9)
        nearest = third_and_fourth_waits()
    # the exact 1-deep ring waits 600 ns there, for its 600 ns loads
    exact = varying_ring(latencies, depth=1)
    assert [e - s for s, e in exact["w_f"][2:4]] == [600.0, 600.0]
    np.testing.assert_allclose(own, 600.0)
    assert nearest.max() > 1200.0


def test_a_congested_stretch_of_the_base_is_not_carried_into_the_change():
    """Two samples of one latency distribution: in one the slow loads were all issued in
    one stretch of time (the memory congested for every CTA then), in the other they are
    spread over the launch (each load's own path). A load's congestion is taken as the
    typical one at its place in the loop, so a 1-deep ring replays the congested sample as
    if every load were fast, and pays the scattered slow loads (the GPU's 3-deep rings did
    not meet their 4-deep bases' congested stretches: README)."""
    work, produce, iters, count = 1000, 100, 40, 400
    data = match_records(make_trace([(0, simulate(4, work, produce, 1200, iters))]),
                         load_pipeline(spec_dict(4)))
    sample = np.zeros(count, dtype=ARRIVAL_SAMPLE_DTYPE)
    sample["position"] = np.arange(count) % iters
    sample["issued_ns"] = np.arange(count) * 50.0
    slow = np.zeros(count, dtype=bool)
    slow[100:200] = True  # one stretch of 5 us
    scattered_slow = np.random.default_rng(0).permutation(slow)

    def predict(latency):
        arrivals = sample.copy()
        arrivals["latency_ns"] = latency
        return what_if(data, depth={"ring": 1}, loaded_latency=True,
                       arrivals={"ring": arrivals})["predicted_change"]

    fast = predict(np.full(count, 1000.0))
    assert predict(np.where(slow, 3000.0, 1000.0)) == pytest.approx(fast)
    assert predict(np.where(scattered_slow, 3000.0, 1000.0)) > fast + 0.2


def test_a_change_meets_the_loops_typical_congestion_not_the_bases_places():
    """The base met a congested memory at the loop's first places (its ring refilling as
    a tile starts, every CTA in step). A change sends its loads out at other times: every
    item meets the loop's typical congestion, the first places no more than the last (a
    persistent GEMM's 2-stage variant waited as long over either half of a tile: README)."""
    work, produce, iters, per_place = 1000, 100, 40, 70
    count = iters * per_place
    data = match_records(make_trace([(0, simulate(4, work, produce, 1200, iters))]),
                         load_pipeline(spec_dict(4)))
    sample = np.zeros(count, dtype=ARRIVAL_SAMPLE_DTYPE)
    sample["position"] = np.arange(count) % iters
    # each place's loads went out together (more of them than a load's congestion is the
    # median of), place after place: the first half's met the congestion, and a load's own
    # path adds nothing to it
    sample["issued_ns"] = sample["position"] * 10_000.0 + np.arange(count) // iters
    sample["latency_ns"] = np.where(sample["position"] < iters // 2, 2000.0, 1000.0)
    changed = what_if(data, depth={"ring": 1}, loaded_latency=True, arrivals={"ring": sample},
                      schedules=True)["changed_schedule"]
    tags = [r["tag"] for r in spec_dict()["regions"]]
    # a 1-deep ring waits for every load: the wait ends where its item's latency does
    latency = changed.end[0, :, tags.index("w_f")] - changed.end[0, :, tags.index("p")]
    first, last = latency[1:iters // 2].mean(), latency[iters // 2 + 1:].mean()
    assert first == pytest.approx(last, abs=1.0) and 1000.0 < last < 2000.0


def test_the_reported_latency_is_the_one_the_replay_waited_on():
    """With sampled loads every replayed item draws its own latency: the what-if reports
    their mean, not the one scalar latency (the sample's 5th percentile plus its scaled
    median) that the replay overrides."""
    iters, count = 40, 400
    spans = simulate(4, 1000, 100, 1200, iters)
    data = match_records(make_trace([(sm, spans) for sm in range(8)]),
                         load_pipeline(spec_dict(4)))
    sample = np.zeros(count, dtype=ARRIVAL_SAMPLE_DTYPE)
    sample["position"] = np.arange(count) % iters
    # the loop's late loads met more congestion, and one load in five a slow path of its own
    sample["issued_ns"] = sample["position"] * 1000.0 + np.arange(count) // iters
    slow_path = np.random.default_rng(1).random(count) < 0.2
    sample["latency_ns"] = 600.0 + 40.0 * sample["position"] + np.where(slow_path, 3000.0, 0.0)
    unchanged = what_if(data, loaded_latency=True, arrivals={"ring": sample})
    reported = unchanged["latency_ns"]["w_f"]
    # no change: the draws keep the sample's level (its mean, give or take the draws)
    assert reported == pytest.approx(sample["latency_ns"].mean(), rel=0.1)
    assert reported != pytest.approx(np.median(sample["latency_ns"]), rel=0.1)
    # a 1-deep ring loads memory less: its draws' queued part shrinks, and so does the figure
    shallow = what_if(data, depth={"ring": 1}, loaded_latency=True, arrivals={"ring": sample})
    assert shallow["latency_ns"]["w_f"] < reported


def test_a_latency_no_wait_showed_is_predicted_once_loads_were_sampled():
    work, produce, latency, iters, depth = 1000, 100, 800, 24, 4
    spans = {t: list(v) for t, v in simulate(depth, work, produce, latency, iters).items()}
    # the consumer begins 2000 ns late: every wait finds its item there (never blocked)
    c_end, spans["w_f"], spans["c"] = 2000, [], []
    for _ in range(iters):
        spans["w_f"].append((c_end, c_end))
        spans["c"].append((c_end, c_end + work))
        c_end += work
    data = match_records(make_trace([(sm, spans) for sm in range(8)]),
                         load_pipeline(spec_dict(depth)))
    terms = infer_terms(data)
    unobserved = predict_what_if(data, {"depth": {"ring": 1}}, terms=terms)
    assert unobserved["modelled"] is False and "bounds" in unobserved
    sampled = predict_what_if(data, {"depth": {"ring": 1}}, terms=terms,
                              arrivals={"ring": np.full(40, float(latency))})
    assert sampled["modelled"] is True
    at_latency = what_if(data, terms=terms, depth={"ring": 1}, latency={"w_f": latency})
    assert sampled["predicted_change"] == pytest.approx(at_latency["predicted_change"])
    assert unobserved["bounds"][0] < sampled["predicted_change"] <= unobserved["bounds"][1]


def test_what_if_terms_hand_on_a_probed_launchs_latencies():
    from test_derived_pipeline import software_pipelined

    derived = derive_pipeline(software_pipelined())
    assert derived.what_if_terms()["arrivals"] == {}
    probed = probed_trace([(0, 0, 0, 0, 100, 0), (0, 0, 1, 1, 132, 868)] * 1)
    terms = derived.what_if_terms(arrivals_from=probed)
    np.testing.assert_array_equal(terms["arrivals"]["pk"]["latency_ns"], [900])
    # the warp's first K commit is the loop's prologue: its load is no iteration's item
    np.testing.assert_array_equal(terms["arrivals"]["pk"]["position"], [-1])


def test_a_sampled_loads_place_is_the_loop_iteration_whose_item_it_loads():
    """FA4 loads its first K tile before the loop (derive_pipeline's ``@prologue``), so
    iteration k consumes the warp's K commit k + 1 and V commit k: each sampled load's
    place (its commit's ordinal in the warp) is shifted to the iteration that consumes it."""
    from test_derived_pipeline import software_pipelined

    derived = derive_pipeline(software_pipelined(ctas=1, blocks=6))
    assert derived.commits_before_loop() == {"pk": 1}
    data = match_records(derived.trace, derived.spec)
    tags = [r.tag for r in derived.spec.regions]
    events = derived.trace.events
    for ring, shift in (("pk", 1), ("pv", 0)):
        commit = [t for t, name in enumerate(derived.trace.tag_names)
                  if name.split("@")[0] == f"{ring}.producer_commit"]
        stamps = np.sort(events["start_ns"][np.isin(events["tag"], commit)])
        loop = data.start[0, :, tags.index(f"{ring}.producer_commit")]
        k = np.flatnonzero(np.isfinite(loop))
        np.testing.assert_array_equal(loop[k], stamps[k + shift])
    # one probe after each of six commits per ring
    rows = [(0, 0, tag, payload, 100 + 1000 * j + 30 * payload + 500 * (tag > 1), 300 * payload)
            for j in range(6) for tag, payload in ((0, 0), (1, 1), (2, 0), (3, 1))]
    arrivals = derived.what_if_terms(arrivals_from=probed_trace(rows))["arrivals"]
    np.testing.assert_array_equal(arrivals["pk"]["position"], np.arange(6) - 1)
    np.testing.assert_array_equal(arrivals["pv"]["position"], np.arange(6))


def test_a_ring_armed_before_its_copies_loses_one_record_off_its_latencies():
    """ws_gemm arms its full barrier (its commit) and stores that commit's record before it
    issues the copies: its loads, read from the commit's stamp, hold that record, which the
    kernel without recording does not. A ring whose copies come before its commit
    (PipelineTmaAsync's own acquire arms it) keeps its latencies, as does a trace recorded
    before the flag existed."""
    from test_derived_pipeline import software_pipelined

    plain = derive_pipeline(software_pipelined())
    meta = plain.trace.metadata["autoprof"]
    pipes = [dict(p, commit_arms_copies=p["name"] == "pk") for p in meta["pipelines"]]
    armed = dataclasses.replace(plain, trace=dataclasses.replace(
        plain.trace, metadata={**plain.trace.metadata, "autoprof": {**meta, "pipelines": pipes}}),
        record_ns=45.0)
    assert armed.copy_issue_delay_ns() == {"pk": 45.0}
    assert plain.copy_issue_delay_ns() == {}
    probed = probed_trace([(0, 0, 0, 0, 100, 0), (0, 0, 1, 1, 132, 868),
                           (0, 0, 2, 0, 1100, 0), (0, 0, 3, 1, 1132, 468)])
    terms = armed.what_if_terms(arrivals_from=probed)
    np.testing.assert_array_equal(terms["arrivals"]["pk"]["latency_ns"], [900 - 45.0])
    np.testing.assert_array_equal(terms["arrivals"]["pv"]["latency_ns"], [500])
    # each CTA's first load is read from its copies' issue too: one record after the commit
    from test_derived_model_terms import gemm_like
    unarmed = derive_pipeline(gemm_like(ctas=4))
    gemm = unarmed.trace
    pipes = [dict(p, commit_arms_copies=True) for p in gemm.metadata["autoprof"]["pipelines"]]
    armed = dataclasses.replace(unarmed, trace=dataclasses.replace(gemm, metadata={
        **gemm.metadata, "autoprof": {**gemm.metadata["autoprof"], "pipelines": pipes}}),
        record_ns=45.0)
    np.testing.assert_array_equal(armed.first_load_latency()[0],
                                  unarmed.first_load_latency()[0] - 45.0)


def test_a_derived_trace_keeps_its_probes_measured_from_renamed_commits():
    """derive_pipeline renames a loop's first calls <tag>@prologue: a probe after such a
    commit is still measured from it."""
    trace = probed_trace([(0, 0, 0, 0, 100, 0), (0, 0, 1, 1, 132, 700)])
    names = list(trace.tag_names) + ["pk.producer_commit@prologue"]
    events = trace.events.copy()
    events["tag"][events["tag"] == 0] = len(names) - 1
    renamed = dataclasses.replace(trace, events=events, tag_names=tuple(names))
    np.testing.assert_array_equal(load_arrival_latency(renamed)["pk"], [732])


def pk_pv_probed(pk_ns=900, pv_ns=300, period_ns=1000):
    """A probed launch of ``software_pipelined``'s kernel: pk's loads take ``pk_ns``, pv's
    ``pv_ns``, one load of each every ``period_ns``."""
    return probed_trace(
        [(0, 0, 0, 0, 100 + period_ns * i, 0) for i in range(10)]
        + [(0, 0, 1, 1, 132 + period_ns * i, pk_ns - 32) for i in range(10)]
        + [(0, 0, 2, 0, 600 + period_ns * i, 0) for i in range(10)]
        + [(0, 0, 3, 1, 632 + period_ns * i, pv_ns - 32) for i in range(10)])


def test_cli_takes_the_load_latencies_from_a_probed_launch(tmp_path, capsys):
    import json

    import cute_prof
    from cute_prof.cli import main
    from test_derived_pipeline import software_pipelined

    base = cute_prof.save_trace(tmp_path / "base.npz", software_pipelined())
    probed = cute_prof.save_trace(tmp_path / "probed.npz", pk_pv_probed())
    args = ["-q", "analyze", str(base), "--depth", "pk=1,pv=1", "--json"]
    assert main(args) == 0
    plain = json.loads(capsys.readouterr().out)["what_if"][0]
    assert main(args + ["--arrivals", str(probed)]) == 0
    sampled = json.loads(capsys.readouterr().out)["what_if"][0]
    # pk's loads took 900 ns each, pv's 300: the change is predicted at those latencies
    assert sampled["latency_ns"] == pytest.approx({"pk.consumer_wait": 900.0,
                                                    "pv.consumer_wait": 300.0})
    assert sampled["predicted_change"] != plain.get("predicted_change")
    # 1-deep rings pay every load: the prediction moves with the loads' latency, by as much
    # as the library's own sensitivity says, and the text report says so
    assert "latency_per_tick" not in sampled and "latency_per_tick" not in plain
    assert main(args + ["--arrivals", str(probed), "--sensitivity"]) == 0
    sampled = json.loads(capsys.readouterr().out)["what_if"][0]
    assert sampled["latency_per_tick"] > 0
    assert main(args[:-1] + ["--arrivals", str(probed), "--sensitivity"]) == 0
    text = capsys.readouterr().out
    assert f"{sampled['latency_per_tick'] * 100:.2f} points per " in text
    assert f"{sampled['timer_tick_ns']:.0f} ns of load latency" in text
    assert main(args + ["--sensitivity"]) != 0
    assert "--sensitivity needs --arrivals" in capsys.readouterr().err
    # a hand-written spec names no pipeline objects: the probes have nothing to attach to
    spec = Path(__file__).resolve().parents[1] / "examples" / "ws_gemm_pipeline.json"
    assert main(["-q", "analyze", str(base), "--pipeline", str(spec),
                 "--arrivals", str(probed)]) != 0
    assert "--arrivals needs a zero-edit trace" in capsys.readouterr().err


def test_the_probed_launches_that_ran_like_the_base_give_the_latencies(tmp_path, capsys):
    """A probed launch that ran far longer than its base met another state of the memory
    system (quack's on an H100: +4.4% and +3.3% with loads 96 ns slower, +0.1% with the
    variant's own): the what-ifs read the probed launches whose spans are as near the
    base's as the nearest one's, within the probes' own spread, and pool their draws."""
    import json

    import cute_prof
    from cute_prof.analysis.load_arrivals import probed_launches_like
    from cute_prof.analysis.zero_edit import recorded_span_ns
    from cute_prof.cli import main
    from test_derived_pipeline import software_pipelined

    base_trace = software_pipelined()
    period = round(recorded_span_ns(base_trace) / 10)
    short = pk_pv_probed()  # a twentieth of the base's span
    slow = pk_pv_probed(1200, 450, period_ns=period)
    fast = pk_pv_probed(800, 250, period_ns=period)  # the same span within 0.3%
    assert probed_launches_like(base_trace, [short]) == [0]
    assert sorted(probed_launches_like(base_trace, [short, slow, fast])) == [1, 2]
    assert len(probed_launches_like(base_trace, [short, slow, fast], tie=0.0)) == 1
    with pytest.raises(cute_prof.ProfileBufferError, match="no probed launch"):
        probed_launches_like(base_trace, [])
    with pytest.raises(ValueError, match="tie"):
        probed_launches_like(base_trace, [short], tie=-0.01)
    base = cute_prof.save_trace(tmp_path / "base.npz", base_trace)
    paths = [str(cute_prof.save_trace(tmp_path / f"probed{i}.npz", t))
             for i, t in enumerate((short, slow, fast))]
    args = ["-q", "analyze", str(base), "--depth", "pk=1,pv=1", "--json", "--arrivals"]
    got = []
    for given in (paths, paths[::-1], paths[1:2], paths[2:]):
        assert main(args + given) == 0
        got.append(json.loads(capsys.readouterr().out)["what_if"][0])
    pooled, reversed_order, slow_alone, fast_alone = got
    # the short launch is left out; the two alike pool: the median (here the mean) of each
    assert pooled["latency_ns"] == pytest.approx({"pk.consumer_wait": 1000.0,
                                                  "pv.consumer_wait": 350.0})
    assert reversed_order["predicted_change"] == pytest.approx(pooled["predicted_change"])
    each = sorted(pooled["changes_by_probed_launch"])
    assert each == pytest.approx(sorted([slow_alone["predicted_change"],
                                         fast_alone["predicted_change"]]))
    assert each[0] < each[1]
    assert pooled["predicted_change"] == pytest.approx(sum(each) / 2)
    assert "changes_by_probed_launch" not in slow_alone


def test_pooling_predictions_keeps_what_one_of_them_cannot_model():
    from cute_prof.analysis.what_if import pool_predictions

    made = {"modelled": True, "predicted_change": 0.1, "interval": (0.05, 0.2),
            "detail": {"kernel_ns": 1000.0, "latency_ns": {"w": 500.0}}}
    other = {**made, "predicted_change": 0.3, "interval": (0.1, 0.4),
             "detail": {"kernel_ns": 1000.0, "latency_ns": {"w": 700.0}}}
    pooled = pool_predictions([made, other])
    assert pooled["predicted_change"] == pytest.approx(0.2)
    assert pooled["interval"] == pytest.approx((0.075, 0.3))
    assert pooled["detail"]["predicted_kernel_ns"] == pytest.approx(1200.0)
    assert pooled["detail"]["latency_ns"] == {"w": 600.0}
    assert pool_predictions([made]) is made
    # each from another traced launch: the interval reaches every one's own change
    far = {**other, "predicted_change": 0.5, "interval": (0.45, 0.55)}
    assert pool_predictions([made, far])["interval"] == pytest.approx((0.25, 0.375))
    assert pool_predictions([made, far], widen=True)["interval"] == pytest.approx((0.1, 0.5))
    cannot = {"modelled": False, "reason": "no model term"}
    assert pool_predictions([made, cannot]) is cannot
    with pytest.raises(ValueError, match="no predictions"):
        pool_predictions([])


def test_the_ctas_of_a_cluster_draw_one_latency_per_multicast_item():
    """A ring shared by a 2x1 cluster waits for both CTAs' releases. Its item is one
    multicast load landing in both: the peers take one draw (on the GPU their latencies of
    one item correlate 0.97-0.99). Drawn apart, each item would wait for the later of two
    independent loads, and the shallow ring would pay that maximum on every item."""
    iters = 40
    spans = simulate(4, 1000, 100, 1200, iters)
    sample = np.random.default_rng(3).permutation([600.0] * 60 + [3000.0] * 40)

    def predict(ctas, shared_by):
        spec = spec_dict(4)
        spec["resources"][0]["shared_by"] = shared_by
        data = match_records(make_trace([(sm, spans) for sm in range(ctas)]), load_pipeline(spec))
        return what_if(data, depth={"ring": 1}, loaded_latency=True,
                       arrivals={"ring": sample})["predicted_kernel_ns"]

    alone = predict(1, 1)
    # the peers take the first CTA's draws: sharing the ring costs nothing more
    assert predict(2, 2) == pytest.approx(alone, rel=1e-9)
    # two CTAs that share nothing draw apart, and the kernel lasts as long as the slower
    assert predict(2, 1) > alone


def test_cli_removes_the_record_time_measured_on_a_chain(tmp_path, capsys):
    import json

    import cute_prof
    from cute_prof.cli import main
    from test_derived_pipeline import software_pipelined

    base = cute_prof.save_trace(tmp_path / "base.npz", software_pipelined())
    probed = cute_prof.save_trace(tmp_path / "probed.npz", pk_pv_probed())
    args = ["-q", "analyze", str(base), "--depth", "pk=1,pv=1", "--json",
            "--arrivals", str(probed)]
    assert main(args) == 0
    gap = json.loads(capsys.readouterr().out)["what_if"][0]["record_ns"]
    assert main(args + ["--record-chain-ns", "12.1"]) == 0
    chained = json.loads(capsys.readouterr().out)["what_if"][0]
    assert chained["record_ns"] == 12.1 != gap
    assert main(args + ["--record-chain-ns", "-3"]) != 0
    assert "--record-chain-ns: record_chain_ns must be a time" in capsys.readouterr().err
    spec = Path(__file__).resolve().parents[1] / "examples" / "ws_gemm_pipeline.json"
    assert main(["-q", "analyze", str(base), "--pipeline", str(spec),
                 "--record-chain-ns", "12.1"]) != 0
    assert "--record-chain-ns needs a zero-edit trace" in capsys.readouterr().err


def test_loads_right_behind_their_groups_first_one_share_its_miss():
    # 8 CTAs in launch order, two groups of 4 reading the same tiles; at each place the
    # group's first load misses (900 ns), the others come 700-900 ns later and hit (300).
    # Group 1 runs 950 ns behind group 0: taken as one group of 8, its first load would be
    # a late one that missed, which ranks the latencies worse than groups of 4
    offsets = [0, 700, 800, 900, 950, 1650, 1750, 1850]
    rows = []
    for cta, offset in enumerate(offsets):
        for place in range(6):
            t = 3000 * place + offset + 10
            latency = 900 if cta % 4 == 0 else 300
            rows += [(cta, 0, 0, 0, t, 0), (cta, 0, 1, 1, t + 32, latency - 32)]
    sample = load_arrival_sample(probed_trace(rows))["pk"]
    assert set(sample["group_ctas"]) == {4}
    gaps = sample["leader_gap_ns"][np.argsort(sample["issued_ns"], kind="stable")]
    np.testing.assert_array_equal(np.unique(gaps), [0, 700, 800, 900])
    from cute_prof.analysis.loads import miss_and_hit
    miss, hit = miss_and_hit(sample)
    np.testing.assert_array_equal(sample["latency_ns"][miss], 900)
    np.testing.assert_array_equal(sample["latency_ns"][hit], 300)
    assert miss.sum() == 2 * 6 and hit.sum() == 6 * 6


def test_a_few_fast_stragglers_do_not_make_groups_share_their_misses():
    """Groups whose later loads hit the L2 are coupled to their first load only where the
    hits are a real share of the sample, not a handful of fast loads among misses (ws_gemm:
    0-18 of ~1,800, whose ratio sat at the threshold and flipped with 10 ns of latency)."""
    from cute_prof.analysis.loads import MIN_HIT_SHARE, miss_and_hit

    rows = []
    for cta in range(8):
        for place in range(40):
            t = 3000 * place + 10 + (1500 if cta % 4 and place % 10 == 0 else 0)
            latency = 300 if cta % 4 and place % 10 == 0 else 900
            rows += [(cta, 0, 0, 0, t, 0), (cta, 0, 1, 1, t + 32, latency - 32)]
    sample = load_arrival_sample(probed_trace(rows))["pk"]
    hits = sample["latency_ns"] < 600
    assert 8 <= hits.sum() and hits.mean() < MIN_HIT_SHARE
    assert miss_and_hit(sample) is None


def test_a_sample_whose_latencies_no_grouping_ranks_has_no_groups():
    rows = []
    for cta in range(8):
        for place in range(6):
            t = 3000 * place + 100 * cta
            rows += [(cta, 0, 0, 0, t, 0), (cta, 0, 1, 1, t + 32, 400 - 32)]
    sample = load_arrival_sample(probed_trace(rows))["pk"]
    assert set(sample["group_ctas"]) == {0}
    from cute_prof.analysis.loads import miss_and_hit
    assert miss_and_hit(sample) is None
