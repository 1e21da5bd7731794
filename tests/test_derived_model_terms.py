"""Model terms of the derived (zero-edit) pipeline that the what-if check relies on: a
consumer that releases the previous item numbers it one iteration back, its work overlaps
its next wait, a cluster's CTAs share a TMA ring, the loaded latency comes from each CTA's
first load capped by the steady state's bound, and a wait that never blocked still bounds
its latency."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from cute_prof.analysis.critical_path import steady_bound, blockers
from cute_prof.analysis.pipeline_data import match_records
from cute_prof.analysis.pipeline_report import analyze_pipeline, perfetto_outputs
from cute_prof.analysis.replay import replay
from cute_prof.analysis.replay_terms import infer_terms
from cute_prof.analysis.what_if import what_if
from cute_prof.analysis.derived_pipeline import derive_pipeline
from cute_prof.analysis.zero_edit import finish_zero_edit_trace
from cute_prof.errors import ProfileBufferError
from test_derived_pipeline import CONSUMER_WARPS, _raw_trace

STEP = 1000
FIRST_LATENCY = 700  # the first load of a CTA (its wait blocks for it)
STEADY_SLACK = 270  # commit -> end of an unblocked steady-state wait


def gemm_like(ctas=3, iters=8, cluster=None, wait_sooner=None):
    """ws_gemm's calls: the producer acquires and commits k-tile j; the consumers wait for
    k-tile j and then release k-tile j - 1 (after the next MMA is issued); CTA c starts
    after CTA c - 1 ended, so CTAs 1.. start under load. ``wait_sooner``: (CTA, k-tile) ->
    ns that the consumers' wait starts sooner, ending where it did (the work before it is
    that much shorter)."""
    wait_sooner = wait_sooner or {}
    rows = []
    for c in range(ctas):
        t0 = c * 100 * STEP
        for j in range(iters):
            rows += [(c, 0, 0, 0, t0 + j * STEP, 40), (c, 0, 1, 0, t0 + j * STEP + 50, 0)]
        for w in CONSUMER_WARPS:
            # the first wait blocks until its load arrived; later ones find the data there
            rows.append((c, w, 4, 0, t0 + 100, FIRST_LATENCY - 50))
            for j in range(1, iters):
                at = t0 + j * STEP + 300
                sooner = wait_sooner.get((c, j), 0)
                rows.append((c, w, 4, 0, at - sooner, STEADY_SLACK - 250 + sooner))
                rows.append((c, w, 6, 0, at + 400, 0))
            rows.append((c, w, 6, 0, t0 + iters * STEP + 400, 0))
    trace = _raw_trace(rows)
    if cluster is not None:
        trace.metadata["cluster"] = cluster
    return finish_zero_edit_trace(trace)


def test_a_release_of_the_previous_item_is_one_iteration_back_and_overlaps_the_wait():
    derived = derive_pipeline(gemm_like())
    assert derived.offsets["pk.consumer_release"] == 1
    regions = {r.tag: r for r in derived.spec.regions}
    assert regions["pk.consumer_release"].relations["releases"].distance == 1
    assert regions["pk.consumer_wait"].relations["consumes"].distance == 0
    assert regions["pk.consumer_release"].asynchronous  # the work after a consumer's wait
    assert not regions["pk.producer_commit"].asynchronous  # after an acquire: not issued MMA


def test_rings_run_one_behind_together_keep_distance_zero():
    from test_derived_pipeline import software_pipelined
    derived = derive_pipeline(software_pipelined())
    assert all(rel.distance == 0 for r in derived.spec.regions for rel in r.relations.values())


def test_a_cluster_in_the_metadata_shares_the_tma_ring():
    assert derive_pipeline(gemm_like()).spec.resource("pk").shared_by == 1
    assert derive_pipeline(gemm_like(cluster=[2, 1])).spec.resource("pk").shared_by == 2
    # the launch's CTAs per cluster, as the what-if check reads them for a cluster change
    from cute_prof.analysis.zero_edit import cluster_ctas
    assert cluster_ctas(gemm_like()) == 1 and cluster_ctas(gemm_like(cluster=[2, 2])) == 4


def test_first_load_latency_of_ctas_started_under_load():
    sample, _ = derive_pipeline(gemm_like(ctas=4)).first_load_latency()
    # CTA 0 started on an idle machine: not in the sample; the others: issue -> wait end
    assert sorted(sample.tolist()) == [FIRST_LATENCY] * 3


def test_a_wait_that_never_blocked_bounds_its_latency():
    derived = derive_pipeline(gemm_like())
    data = match_records(derived.trace, derived.spec)
    b = {x["region"]: x for x in blockers(data)}["pk.consumer_wait"]
    assert b["blocked"] == 0
    # the data were there when the wait began: latency <= commit -> wait end, the bound
    i = [r.tag for r in derived.spec.regions].index("pk.consumer_wait")
    assert steady_bound(data, infer_terms(data), i).tolist() == [STEADY_SLACK] * 3


def test_loaded_latency_is_the_first_load_capped_by_the_steady_bound():
    derived = derive_pipeline(gemm_like(ctas=12))
    first, _ = derived.first_load_latency()
    data = match_records(derived.trace, derived.spec)
    # no change: the throughput ratio is 1, the latency is L_b itself
    capped = what_if(data, loaded_latency=True, first_load=first)["latency_ns"]
    assert capped["pk.consumer_wait"] == STEADY_SLACK  # min(700, 270)
    low = np.full(first.size, 120.0)
    assert what_if(data, loaded_latency=True, first_load=low)["latency_ns"][
        "pk.consumer_wait"] == 120.0


def _shifted(trace, origin):
    events = trace.events.copy()
    events["start_ns"] += origin
    return dataclasses.replace(trace, events=events)


def test_globaltimer_scale_timestamps_keep_every_nanosecond():
    """%globaltimer reads ~1.8e18 ns; a float64 of that resolves 256 ns. The model must
    see the same durations as the trace shifted to zero (it once saw 256 ns steps)."""
    origin = 1_795_523_011_643_144_160
    near_zero = derive_pipeline(gemm_like(ctas=12))
    far = derive_pipeline(_shifted(gemm_like(ctas=12), origin))
    assert far.first_load_latency()[0].tolist() == near_zero.first_load_latency()[0].tolist()
    data0 = match_records(near_zero.trace, near_zero.spec)
    data1 = match_records(far.trace, far.spec)
    assert data1.origin_ns - data0.origin_ns == origin
    np.testing.assert_array_equal(data1.end - data1.start, data0.end - data0.start)
    i = [r.tag for r in far.spec.regions].index("pk.consumer_wait")
    assert steady_bound(data1, infer_terms(data1), i).tolist() == [STEADY_SLACK] * 12
    change = {"scale": {"pk.consumer_release": 1.5}}
    assert what_if(data1, **change)["predicted_change"] == \
        what_if(data0, **change)["predicted_change"]
    # times handed to the exporters are absolute again
    _, counters0, _ = perfetto_outputs(near_zero.trace, near_zero.spec)
    _, counters1, _ = perfetto_outputs(far.trace, far.spec)
    np.testing.assert_array_equal(counters1[0]["ts"] - counters0[0]["ts"], origin)


MMA_NS = 600  # one k-tile's wgmma on the tensor pipe
RELEASE_MIN_NS = 100  # wait end -> issue, wait_group(1) on a finished wgmma, arrive


def mma_bound(ctas=2, iters=30, depth=4):
    return mma_bound_ragged([iters] * ctas, depth=depth)


def mma_bound_ragged(iterations, depth=4):
    """ws_gemm's consumer, simulated (``iterations``: k-tiles of each CTA): per k-tile it waits for the data (32 or 96 ns when
    they are there), issues the wgmma, waits for the previous one (wait_group(1)) and
    releases the previous k-tile. The tensor pipe runs one wgmma at a time (MMA_NS each);
    every sixth k-tile the producer stalls 1.5 us before its acquire, so some iterations
    wait for data and the others for the pipe."""
    rows = []
    for c, iters in enumerate(iterations):
        t0 = c * 10 * max(iterations) * MMA_NS
        freed = {}  # item -> its release time
        release, mma_end, wait_start, acquire_start = [], -np.inf, t0 + 1400, t0
        for k in range(iters):
            acquire_end = max(acquire_start + 40, freed.get(k - depth, -np.inf) + 50)
            rows += [(c, 0, 0, 0, acquire_start, acquire_end - acquire_start),
                     (c, 0, 1, 0, acquire_end, 0)]
            acquire_start = acquire_end + (1500 if k % 6 == 2 else 40)
            wait_end = max(wait_start + (96 if k % 2 else 32), acquire_end + 900)
            released = max(wait_end + RELEASE_MIN_NS, mma_end)  # item k - 1
            mma_end = max(wait_end, mma_end) + MMA_NS
            release.append((wait_start, wait_end, released))
            freed[k - 1] = released
            wait_start = released + 32
        release.append((None, None, mma_end))  # the last k-tile, after wait_group(0)
        for w in CONSUMER_WARPS:
            for k in range(iters):
                start, end, released = release[k]
                rows.append((c, w, 4, 0, start, end - start))
                if k:  # nothing to release before the first k-tile
                    rows.append((c, w, 6, 0, released, 0))
            rows.append((c, w, 6, 0, release[iters][2], 0))
    return finish_zero_edit_trace(_raw_trace(rows, stages=(depth, 2, 1)))


def test_an_async_job_the_release_waits_for_keeps_the_engine_period():
    """The release of k-tile k - 1 waits for the wgmma issued one iteration earlier, which
    started once issued and the pipe was free: the replay of the base reproduces every
    release, whether it waited for data or for the pipe (counting only the wait's cost from
    its start made the base replay too fast where a wait took longer than its shortest)."""
    derived = derive_pipeline(mma_bound())
    data = match_records(derived.trace, derived.spec)
    schedule = replay(data)
    tags = [r.tag for r in derived.spec.regions]
    i, wait = tags.index("pk.consumer_release"), tags.index("pk.consumer_wait")
    # the release region ends where the next wait starts (32 ns after the release): every
    # iteration's period is the measured one, 600 ns or longer where the data came late
    replayed = np.diff(schedule.end[:, 1:-1, i], axis=1)
    measured = np.diff(data.start[:, 2:, wait], axis=1)
    assert (measured > MMA_NS + 100).any() and (measured == MMA_NS).mean() > 0.5
    np.testing.assert_array_equal(replayed[measured == MMA_NS], MMA_NS)
    # where the data came late the replay is off by one 32 ns wait cost at most
    np.testing.assert_allclose(replayed, measured, atol=32)


def test_ctas_that_ran_fewer_iterations_stay_in_the_model():
    """A causal mask gives FA4's CTAs fewer K/V blocks than the longest (a persistent CTA
    fewer tiles): their later cells are absent, not missing. Every CTA stays in the model,
    its replay keeps its measured periods, and every figure of the analysis is a number."""
    derived = derive_pipeline(mma_bound_ragged([30, 18, 9]))
    data = match_records(derived.trace, derived.spec)
    assert data.shape[0] == 3 and data.dropped_units.shape[0] == 0 and data.missing == 0
    assert np.diff(data.iterations).tolist() == [-12, -9]
    assert np.isnan(data.start[~data.valid]).all() and np.isfinite(data.start[data.valid]).all()
    schedule = replay(data)
    tags = [r.tag for r in derived.spec.regions]
    i, wait = tags.index("pk.consumer_release"), tags.index("pk.consumer_wait")
    for unit, ran in enumerate(data.iterations):
        replayed = np.diff(schedule.end[unit, 1:ran - 1, i])
        measured = np.diff(data.start[unit, 2:ran, wait])
        np.testing.assert_allclose(replayed, measured, atol=32)
    report = analyze_pipeline(derived.trace, derived.spec, what_ifs=[{"depth": {"pk": 2}}])
    assert report["units"] == 3 and report["units_dropped"] == 0
    assert abs(sum(report["critical_path_share"].values()) - 1) < 1e-9
    assert all(np.isfinite(o["mean"]) and o["peak"] <= 4 for o in report["occupancy"])
    assert all(np.isfinite(v) for v in report["initiation_interval"]["measured_ns"].values())
    assert report["what_if"][0]["predicted_change"] > 0  # two slots for a 4-deep loop
    waits = {b["region"]: b for b in report["blockers"]}
    assert waits["pk.consumer_wait"]["instances"] == int(data.iterations.sum())
    assert all(np.isfinite(b["median_slack_ns"]) and np.isfinite(b["median_margin_ns"])
               and 0 <= b["blocked_fraction"] <= 1 for b in report["blockers"])


def test_a_trace_that_lost_records_still_drops_short_units():
    """Where records were lost, a unit that stops early may be a cut one: it is dropped and
    counted, as before."""
    trace = mma_bound_ragged([30, 18, 9])
    trace = dataclasses.replace(trace, overflow=5)
    derived = derive_pipeline(trace)
    data = match_records(derived.trace, derived.spec)
    assert data.shape[0] == 1 and data.dropped_units.shape[0] == 2 and data.iterations is None


def test_a_release_happens_at_its_record_not_at_the_end_of_its_region():
    """The consumer releases k-tile k - 1 32 ns before its next wait; the producer's acquire
    waits for that release. Replayed at the region's end, every acquire came 32 ns late and
    the ring's recurrence drifted; at the record's own place it keeps the measured one."""
    derived = derive_pipeline(mma_bound())
    data = match_records(derived.trace, derived.spec)
    schedule = replay(data)
    a = [r.tag for r in derived.spec.regions].index("pk.producer_acquire")
    np.testing.assert_allclose(np.diff(schedule.end[:, 4:-2, a], axis=1),
                               np.diff(data.end[:, 4:-2, a], axis=1), atol=1e-6)


def test_consecutive_work_regions_do_not_count_time_twice():
    """FA4's consumer releases K, then V: the V release region starts where the K release
    region ended (at the V release's record), not back at the K release's record, which
    counted K release -> V release twice and made a replayed iteration longer than the
    measured one."""
    from test_derived_pipeline import software_pipelined

    from cute_prof.analysis.pipeline_data import work_spans
    derived = derive_pipeline(software_pipelined(blocks=8))
    data = match_records(derived.trace, derived.spec)
    _, dur = work_spans(data)
    consumer = [i for i, r in enumerate(derived.spec.regions) if r.role == "consumer"]
    waits = sum(data.end[:, :, i] - data.start[:, :, i] for i in consumer
                if derived.spec.regions[i].kind == "wait")
    busy = dur[:, :, consumer].sum(-1) + waits
    period = np.diff(data.start[:, :, consumer[0]], axis=1)
    assert (busy[:, 1:-1] <= period[:, 1:] + 1e-9).all()
    # nothing blocks here: the consumer's work, waits and what lies between them is its period
    from cute_prof.analysis.critical_path import initiation_interval
    bounds = initiation_interval(data)
    assert bounds["resource_bound_ns"]["consumer"] == bounds["measured_ns"]["consumer"] == 1000


def test_one_records_time_is_read_from_back_to_back_records():
    """In the simulated ws_gemm a consumer's release record is followed 32 ns later by its
    next wait's record (nothing else in between): that is one record's own time."""
    from cute_prof.analysis.zero_edit import record_cost_ns
    assert record_cost_ns(mma_bound()) == 32.0
    assert record_cost_ns(gemm_like()) > 32.0  # there, work lies between every two records


def test_one_records_time_is_not_rounded_to_the_timers_tick():
    """Records 45 ns apart, stamped by a timer that steps every 32 ns (%globaltimer), read
    32 or 64 ns apart: the lowest gaps say 32 ns, every time. Their mean over the low tick
    and the tick above gives back the 45 ns (records fall at any phase of the tick)."""
    from cute_prof.analysis.zero_edit import record_cost_ns
    rng = np.random.default_rng(3)
    rows = []
    for warp in range(64):
        at = rng.uniform(0, 32) + 10_000 * warp
        for k in range(40):  # a commit, its next acquire 45 ns on, then 400 ns of other work
            commit = at + k * 445.0
            rows += [(0, warp, 1, 0, commit // 32 * 32, 0),
                     (0, warp, 0, 0, (commit + 45) // 32 * 32, 40 // 32 * 32)]
    cost = record_cost_ns(_raw_trace(rows))
    assert abs(cost - 45.0) < 2.0


def test_the_unrecorded_replay_takes_two_records_off_each_work_region():
    from cute_prof.analysis.pipeline_data import work_spans
    derived = derive_pipeline(mma_bound())
    data = match_records(derived.trace, derived.spec)
    _, measured = work_spans(data)
    c = 32.0
    recorded, unrecorded = replay(data), replay(data, record_ns=c)
    i = [r.tag for r in derived.spec.regions].index("pk.producer_commit")  # synchronous
    np.testing.assert_allclose(unrecorded.end[:, :, i] - unrecorded.start[:, :, i],
                               np.maximum(measured[:, :, i] - 2 * c, 0))
    np.testing.assert_allclose(recorded.end[:, :, i] - recorded.start[:, :, i], measured[:, :, i])
    # a ring too shallow for the loop: its round trip loses those records, the loop speeds up
    slow = what_if(data, depth={"pk": 2})["predicted_change"]
    assert 0 < what_if(data, depth={"pk": 2}, record_ns=c)["predicted_change"] < slow


def test_a_faster_async_job_shortens_the_engine_bound_loop():
    """Between its producer's stalls the simulated loop is bound by its wgmma: 20% faster
    wgmma, a faster kernel (the release region's work is its job on the tensor pipe; scaling
    only the region's own time changed nothing)."""
    derived = derive_pipeline(mma_bound())
    data = match_records(derived.trace, derived.spec)
    change = what_if(data, scale={"pk.consumer_release": 0.8})["predicted_change"]
    assert -0.2 < change < -0.01


def test_the_base_replay_keeps_what_lies_between_two_waits_and_each_waits_own_time():
    """FA4's consumer waits for K, issues the QK GEMM, then waits for V: the 380 ns between
    the two waits belong to no region, and a wait whose data were there takes 20 ns in one
    iteration and 84 in the next. The replay of the base keeps both (it used to start V's
    wait at K's end and give every wait its shortest time, running FA4 4-6% fast)."""
    from test_derived_pipeline import software_pipelined
    derived = derive_pipeline(software_pipelined(blocks=10, k_wait=lambda j: 84 if j % 2 else 20))
    data = match_records(derived.trace, derived.spec)
    schedule = replay(data)
    tags = [r.tag for r in derived.spec.regions]
    k, v = tags.index("pk.consumer_wait"), tags.index("pv.consumer_wait")
    middle = slice(2, -2)
    np.testing.assert_allclose(
        (schedule.end - schedule.start)[:, middle, k], (data.end - data.start)[:, middle, k])
    np.testing.assert_allclose(schedule.start[:, middle, v] - schedule.end[:, middle, k],
                               data.start[:, middle, v] - data.end[:, middle, k])


def test_analyze_pipeline_gives_the_checked_prediction_for_a_derived_model():
    """With the derived model's first loads and one record's time, a what-if of the report is
    the prediction the GPU check validates (interval included), not the plain replay."""
    from cute_prof.analysis.pipeline_report import format_pipeline_report
    from cute_prof.analysis.what_if import predict_what_if
    from cute_prof.analysis.zero_edit import record_cost_ns
    trace = mma_bound()
    derived = derive_pipeline(trace)
    first, record = derived.first_load_latency()[0], record_cost_ns(trace)
    assert derived.what_if_terms()["record_ns"] == record  # read from the trace as recorded
    change = {"depth": {"pk": 2}}
    report = analyze_pipeline(derived.trace, derived.spec, what_ifs=[change],
                              first_load=first, record_ns=record)
    data = match_records(derived.trace, derived.spec)
    expected = predict_what_if(data, change, first_load=first, record_ns=record)
    got = report["what_if"][0]
    assert got["predicted_change"] == expected["predicted_change"]
    assert got["interval"] == list(expected["interval"])
    assert "interval" in format_pipeline_report(report)
    plain = analyze_pipeline(derived.trace, derived.spec, what_ifs=[change])["what_if"][0]
    assert "interval" not in plain and plain["predicted_change"] != got["predicted_change"]


def test_what_if_terms_default_to_the_chain_cost_measured_on_the_traces_gpu():
    """A trace from a GPU whose record cost on a dependency chain was measured
    (``RECORD_CHAIN_NS``: the H100) removes that per record unless the caller gives a figure;
    any other GPU keeps the trace's own gap estimate."""
    from cute_prof.analysis.zero_edit import RECORD_CHAIN_NS, record_chain_ns_of
    trace = mma_bound()
    gap = derive_pipeline(trace).what_if_terms()["record_ns"]
    h100 = "NVIDIA H100 80GB HBM3"
    trace.metadata["device"] = h100
    derived = derive_pipeline(trace)
    assert record_chain_ns_of(derived.trace) == RECORD_CHAIN_NS[h100] == 12.1
    assert derived.what_if_terms()["record_ns"] == 12.1 != gap
    assert derived.what_if_terms(record_chain_ns=20.0)["record_ns"] == 20.0
    trace.metadata["device"] = "NVIDIA H200"
    assert record_chain_ns_of(trace) is None
    assert derive_pipeline(trace).what_if_terms()["record_ns"] == gap


def test_what_if_terms_take_a_record_cost_on_a_dependency_chain():
    """One record's cost measured on a dependency chain (``bench/record_cost.py chain``)
    replaces the trace's gap estimate as the time the model removes per record; the
    sampled loads' issue delay keeps the gap (the copies issue one whole record later)."""
    derived = derive_pipeline(mma_bound())
    gap = derived.what_if_terms()["record_ns"]
    assert gap > 12.1
    assert derived.what_if_terms(record_chain_ns=12.1)["record_ns"] == 12.1
    assert derived.what_if_terms(record_chain_ns=0)["record_ns"] == 0.0
    for bad in (-1.0, float("nan")):
        with pytest.raises(ValueError, match="record_chain_ns"):
            derived.what_if_terms(record_chain_ns=bad)


def test_one_stray_short_instance_does_not_decide_which_releases_waited_for_their_job():
    """A starved ring's release comes as soon after its wait as the base's releases that did
    not wait for their job (wgmma): which ones those were is read against the job region's
    shortest typical instance. The shortest one alone let one stray instance in a thousand
    (quack's launch 2: work after a wait 352 ns long where 416-448 were the shortest of the
    others) count every other release as one that waited, and the replayed 2-deep ring took
    the stray's release offset."""
    from cute_prof.analysis.pipeline_data import work_spans
    from cute_prof.analysis.replay_terms import (
        SHORTEST_TYPICAL, _async_jobs, shortest,
        unwaited_release_offsets)

    def unwaited(wait_sooner):
        derived = derive_pipeline(gemm_like(ctas=40, iters=32, wait_sooner=wait_sooner))
        data = match_records(derived.trace, derived.spec)
        begin, span = work_spans(data)
        i = [r.tag for r in data.spec.regions].index("pk.consumer_release")
        floor = shortest(data, span, SHORTEST_TYPICAL)
        offsets = unwaited_release_offsets(data, _async_jobs(data, span, floor), begin,
                                            span, floor)[i]
        return offsets, shortest(data, span)[i], floor[i]

    clean, clean_shortest, _ = unwaited({})
    # CTA 7's work before its wait for k-tile 20: 980 - 700 ns, below every other instance
    stray, stray_shortest, stray_typical = unwaited({(7, 20): 700})
    assert stray_shortest == pytest.approx(280.0) and clean_shortest == pytest.approx(380.0)
    assert stray_typical == pytest.approx(clean_shortest)  # but not the typical shortest
    assert stray == pytest.approx(clean)


def test_releases_whose_job_had_surely_ended_stand_for_a_starved_rings_release():
    """A starved ring releases each item as soon after its wait as the issue of the next
    job and the release allow; the base shows that only where its wait ended at least one
    job after the previous job could start (the producer's stalls here). Those releases
    come exactly RELEASE_MIN_NS after their wait; pooled with another launch's (a probed
    one starves its consumers more often), their mean is the unwaited release the replay
    takes, and a 2-deep ring replays slower with slower releases. Too few of them: the
    shortest regions' offsets, as before."""
    from cute_prof.analysis.pipeline_data import work_spans
    from cute_prof.analysis.replay_terms import (
        MIN_CLEAN_RELEASES, SHORTEST_TYPICAL, _async_jobs, shortest,
        unwaited_release_offsets, clean_releases)

    def model(trace):
        derived = derive_pipeline(trace)
        data = match_records(derived.trace, derived.spec)
        begin, span = work_spans(data)
        floor = shortest(data, span, SHORTEST_TYPICAL)
        i = [r.tag for r in data.spec.regions].index("pk.consumer_release")
        return derived, data, i, lambda sample=None: unwaited_release_offsets(
            data, _async_jobs(data, span, floor), begin, span, floor, sample)[i]

    derived, data, i, unwaited = model(mma_bound(ctas=8))
    clean = clean_releases(data)["pk.consumer_release"]
    assert clean.size >= MIN_CLEAN_RELEASES
    np.testing.assert_array_equal(clean, RELEASE_MIN_NS)
    assert unwaited() == (RELEASE_MIN_NS, RELEASE_MIN_NS)
    slower = {"pk.consumer_release": np.full(clean.size, RELEASE_MIN_NS + 300.0)}
    assert unwaited(slower) == pytest.approx((RELEASE_MIN_NS + 150.0, RELEASE_MIN_NS))
    # the public reading is the replay's; min_clean=inf reads the shortest regions alone
    from cute_prof.analysis.replay_terms import unwaited_release
    assert unwaited_release(data, release_sample=slower)["pk.consumer_release"] == \
        pytest.approx(unwaited(slower))
    assert unwaited_release(data, release_sample=slower, min_clean=np.inf)[
        "pk.consumer_release"] == (RELEASE_MIN_NS, RELEASE_MIN_NS)
    starved = {"depth": {"pk": 2}}
    assert what_if(data, release_sample=slower, **starved)["predicted_change"] > \
        what_if(data, **starved)["predicted_change"] + 0.002
    # the probed launch's clean releases come with the model's terms; none without one
    terms = derive_pipeline(mma_bound(ctas=2)).what_if_terms(arrivals_from=mma_bound(ctas=8))
    np.testing.assert_array_equal(terms["release_sample"]["pk.consumer_release"], clean)
    assert derive_pipeline(mma_bound(ctas=2)).what_if_terms()["release_sample"] == {}
    # a probed launch whose records make no loop of their own (each call once per warp)
    with pytest.raises(ProfileBufferError, match="no producer/consumer loop"):
        derive_pipeline(gemm_like(ctas=1, iters=1))
    assert derive_pipeline(mma_bound(ctas=2)).what_if_terms(
        arrivals_from=gemm_like(ctas=1, iters=1))["release_sample"] == {}
    # gemm_like's waits never block long enough: no clean release, the shortest regions'
    _, data, i, unwaited = model(gemm_like(ctas=40, iters=32))
    assert clean_releases(data)["pk.consumer_release"].size == 0
    assert unwaited() == (380.0, 380.0)


def test_a_model_without_a_job_region_does_not_derive_the_probed_launch(monkeypatch):
    """Only a region that releases an earlier item after its async job (ws_gemm's, quack's)
    pools a probed launch's releases; FA4's rings have none, and deriving its probed launch
    for nothing took 2.1 s of a 3.5 M-record trace (gpu38's b4)."""
    from cute_prof.analysis import derived_pipeline
    from cute_prof.analysis.replay_terms import job_regions
    from test_derived_pipeline import software_pipelined

    gemm = derive_pipeline(mma_bound(ctas=2))
    assert [gemm.spec.regions[i].tag for i in job_regions(gemm.spec)] == ["pk.consumer_release"]
    attention = derive_pipeline(software_pipelined())
    assert job_regions(attention.spec) == []
    derived = []
    original = derived_pipeline.derive_pipeline
    monkeypatch.setattr(derived_pipeline, "derive_pipeline",
                        lambda trace: derived.append(trace) or original(trace))
    assert attention.what_if_terms(arrivals_from=software_pipelined())["release_sample"] == {}
    assert derived == []
    assert gemm.what_if_terms(arrivals_from=mma_bound(ctas=8))["release_sample"]
    assert len(derived) == 1
