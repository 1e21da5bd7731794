"""A consumer role of two staggered warpgroups (FA4's ping-pong: the second trails the first
on every item). The role needs an item when its leading warpgroup waits for it and frees
the slot when the trailing one released it, so a shallower ring pays the stagger on every
item; as one latest-warp track the leading warpgroup's waits were invisible (issue #27)."""

import dataclasses

import numpy as np
import pytest

from cute_prof.analysis.pipeline_data import match_records
from cute_prof.analysis.replay import replay
from cute_prof.analysis.what_if import what_if
from cute_prof.analysis.model import load_pipeline
from cute_prof.analysis.zero_edit import warpgroup_lead_shares
from cute_prof.errors import ProfileBufferError
from cute_prof.trace import EVENT_DTYPE, Trace

from test_pipeline_model import spec_dict

TAGS = ("w_e", "p", "w_f", "c")
STRIDE, WG1, WG2 = 12, (4, 5, 6, 7), (8, 9, 10, 11)


def spec(depth, track_group=4, async_release=False):
    """The one-ring pipeline of ``test_pipeline_model``, its consumer two warpgroups;
    ``async_release``: the release region is the async work right after the wait (FA4's K
    release, after its QK GEMM)."""
    data = spec_dict(depth)
    data["regions"][3] = {**data["regions"][3], "async": async_release}
    return load_pipeline({**data, "track_group": track_group,
                          "roles": {"tid_stride": STRIDE,
                                    "roles": {"producer": [0], "consumer": [*WG1, *WG2]}}})


def trace_of(rows):
    """A Trace of (tid, tag, payload, start, end) rows, in time order."""
    ev = np.zeros(len(rows), dtype=EVENT_DTYPE)
    for j, column in enumerate(("tid", "tag", "payload", "start_ns")):
        ev[column] = [r[j] for r in rows]
    ev["dur_ns"] = [r[4] - r[3] for r in rows]
    ev = ev[np.argsort(ev["start_ns"], kind="stable")]
    return Trace(events=ev, tag_names=TAGS, capacity=len(rows), attempted=len(rows),
                 overflow=0, incomplete=0)


def produce_item(rows, k, depth, p_end, release, wake, produce, latency):
    """Append the producer's acquire and commit of item k to ``rows``: it acquires a slot
    ``wake`` after the trailing warpgroup released it (``release``: item -> time). Returns
    the producer's next start and the item's arrival."""
    acquired = max(p_end, release[k - depth] + wake) if k >= depth else p_end
    rows.append((0, 0, k, p_end, acquired))
    rows.append((0, 1, k, acquired, acquired + produce))
    return acquired + produce, acquired + latency


def staggered(depth, iters=30, work=1000, produce=100, latency=600, wake=50, stagger=300,
              wait_cost=32):
    """The exact schedule: the producer acquires a slot ``wake`` after the trailing
    warpgroup released it; the leading warpgroup waits for each item from its own last
    release, the trailing one from ``stagger`` after the leading one's wait ended."""
    rows, release = [], {}
    p_end = r1 = r2 = 0.0
    for k in range(iters):
        p_end, arrival = produce_item(rows, k, depth, p_end, release, wake, produce, latency)
        e1 = max(r1 + wait_cost, arrival)
        s2 = max(r2, e1 + stagger)
        e2 = max(s2 + wait_cost, arrival)
        for warps, start, end in ((WG1, r1, e1), (WG2, s2, e2)):
            for w in warps:
                rows.append((w, 2, k, start, end))
                rows.append((w, 3, k, end, end + work))
        r1, r2 = e1 + work, e2 + work
        release[k] = r2
    return trace_of(rows)


def span(trace):
    ev = trace.events
    return float((ev["start_ns"] + ev["dur_ns"]).max() - ev["start_ns"].min())


def test_a_wait_is_its_leading_warpgroups_and_a_release_its_trailing_ones():
    data = match_records(staggered(3), spec(3))
    # the leading warpgroup's wait, the trailing one's release (300 ns + its own wait later)
    np.testing.assert_allclose(data.end[0, :, 3] - data.end[0, :, 2], 1000 + 300 + 32)
    merged = match_records(staggered(3), spec(3, track_group=None))
    np.testing.assert_allclose(merged.end[0, :, 3] - merged.end[0, :, 2], 1000)


def test_the_replay_keeps_the_stagger_and_a_shallower_ring_pays_it_every_item():
    base = staggered(3)
    data = match_records(base, spec(3))
    sched = replay(data)
    # every wait and the producer replay exactly; the role's work ends where its leading
    # warpgroup goes on (its release, the trailing warpgroup's, lies past that end)
    np.testing.assert_allclose(sched.end[:, :, :3], data.end[:, :, :3])
    np.testing.assert_allclose(sched.start[:, :, :3], data.start[:, :, :3])
    shallow = what_if(data, depth={"ring": 1})
    assert shallow["predicted_kernel_ns"] == pytest.approx(span(staggered(1)))
    # one latest-warp track hides the leading warpgroup's waits: too fast
    merged = what_if(match_records(base, spec(3, track_group=None)), depth={"ring": 1})
    assert merged["predicted_kernel_ns"] < span(staggered(1)) - 29 * 250


def test_lead_shares_tell_staggered_warpgroups_from_peers_taking_turns():
    ev = staggered(3).events
    assert warpgroup_lead_shares(ev, [2], STRIDE) == {2: 1.0}
    turns = ev.copy()
    rows = np.flatnonzero((turns["tag"] == 2) & (turns["payload"] % 2 == 1))
    turns["tid"][rows] = np.where(np.isin(turns["tid"][rows], WG1), turns["tid"][rows] + 4,
                                  turns["tid"][rows] - 4)  # odd items: the other one first
    assert warpgroup_lead_shares(turns, [2], STRIDE)[2] == pytest.approx(0.5, abs=0.05)


def test_track_group_must_be_a_positive_int():
    with pytest.raises(ProfileBufferError, match="track_group"):
        spec(3, track_group=0)


def job_then_handoff(depth, iters=30, work=1024, produce=96, latency=1600, wake=64, job=512,
                     handoff=320, wait_cost=32, tick=64, upper=None, upper_from=0):
    """The exact schedule of a leading warpgroup that issues an async job (``job`` ns) as its
    wait starts and releases once the job is done, at least ``tick`` after the wait's end;
    the trailing warpgroup releases ``handoff`` after the leading one (its own GEMM after
    the leading one's: a named barrier), ``upper`` after it from item ``upper_from`` on
    where given (the groups' phase stepping up, as FA4's did mid-CTA). Each warpgroup's next
    wait starts ``work`` after its release. The slot is free once the trailing one released
    it. Every start is a multiple of ``tick``: the trace's timer step (``timer_step``)."""
    rows, release = [], {}
    p_end = s1 = 0
    for k in range(iters):
        p_end, arrival = produce_item(rows, k, depth, p_end, release, wake, produce, latency)
        e1 = max(s1 + wait_cost, arrival)
        r1 = max(e1 + tick, s1 + job)
        r2 = r1 + (upper if upper is not None and k >= upper_from else handoff)
        for warps, start, end, released in ((WG1, s1, e1, r1), (WG2, s1, e1, r2)):
            for w in warps:
                rows.append((w, 2, k, start, end))
                rows.append((w, 3, k, released, released))
        s1, release[k] = r1 + work, r2
    return trace_of(rows)


def test_a_blocked_wait_runs_the_leading_groups_job_and_the_releases_come_sooner():
    base = job_then_handoff(3)
    data = match_records(base, spec(3, async_release=True))
    # the leading group's own release, kept apart from the role's (trailing) one (the first
    # item's wait blocked on its load: one tick after it)
    np.testing.assert_allclose(data.lead_end[0, 1:, 3] - data.end[0, 1:, 2], 512 - 32)
    assert data.lead_end[0, 0, 3] - data.end[0, 0, 2] == 64
    assert np.isnan(data.lead_end[0, :, :3]).all()
    # the base replays exactly: its first wait blocked on its load, and the region after it
    # already holds the job that ran meanwhile (only blocking beyond the base's is absorbed)
    np.testing.assert_allclose(replay(data).end[:, :, :3], data.end[:, :, :3])
    # at depth 1 the wait blocks longer than the job has left: both releases follow the
    # wait's end by one tick (+ the hand-off), where the base had them 480 (+ 320) after;
    # at depth 2 it blocks for part of the job
    for depth in (1, 2):
        got = what_if(data, depth={"ring": depth})["predicted_kernel_ns"]
        assert got == pytest.approx(span(job_then_handoff(depth)))
    sched = replay(data, data.spec.with_changes(depth={"ring": 1}))
    truth = match_records(job_then_handoff(1), spec(1, async_release=True))
    np.testing.assert_allclose(sched.end[:, :, 2], truth.end[:, :, 2])  # every wait's end
    # the producer's acquires waited on the trailing group's releases, as they were
    np.testing.assert_allclose(sched.dep_time[0, 1:, 0], truth.end[0, :-1, 3])
    # one merged track keeps the base's offsets: every item 416 ns late at depth 1
    merged = replay(dataclasses.replace(data, lead_end=None),
                    data.spec.with_changes(depth={"ring": 1}))
    truth = match_records(job_then_handoff(1), spec(1, async_release=True))
    late = merged.dep_time[0, 1:, 0] - truth.end[0, :-1, 3]
    assert (late[1:] >= 416).all()


def test_a_blocked_waits_leading_release_keeps_the_roles_least_wait_to_stamp_time():
    """FA4's consumers wait for K, then for V: the time between K's wait ending and V's
    starting (the QK GEMM's issue and a record) is the least a warp takes from a wait's end
    to its next stamp. A blocked V wait cannot bring the leading release closer than that
    (FA4's 1-deep variants: 96-128 ns, their bases' gap); a role with no wait right after
    another has only the timer's step."""
    from cute_prof.analysis.pipeline_data import timer_step
    from cute_prof.analysis.replay_terms import after_wait_floor
    from cute_prof.analysis.derived_pipeline import derive_pipeline
    from test_derived_pipeline import software_pipelined

    derived = derive_pipeline(software_pipelined())
    data = match_records(derived.trace, derived.spec)
    tags = [r.tag for r in derived.spec.regions]
    # the fixture's V wait starts 400 ns after K's, which lasts 20
    assert after_wait_floor(data, tags.index("pk.consumer_release")) == 380
    assert after_wait_floor(data, tags.index("pk.producer_commit")) == timer_step(data)


def test_a_trailing_groups_lag_in_its_upper_state_is_phase_that_a_starved_ring_drops(
        monkeypatch):
    """The trailing group's lag behind the leading group's release steps up mid-CTA (FA4
    causal: 480-512 ns, then 736-800); a 1-deep ring makes both groups wait for the same
    load and holds them at the lower state, which the replay keeps (``trailing_lag``: the
    lag's 25th percentile), so the upper state's items do not slow the starved ring."""
    from cute_prof.analysis.replay_terms import trailing_lag

    stepped = job_then_handoff(3, upper=576, upper_from=10)
    data = match_records(stepped, spec(3, async_release=True))
    assert trailing_lag(data, 3) == 320  # a third of the items in the lower state
    assert trailing_lag(data, 2) is None  # the wait has no leading group's release
    got = what_if(data, depth={"ring": 1})["predicted_kernel_ns"]
    # the lower state's 1-deep schedule, plus the base's own last release 256 ns later
    # (the kernel is measured, and moved by the replayed change)
    extra = span(stepped) - span(job_then_handoff(3))
    assert got == pytest.approx(span(job_then_handoff(1)) + extra)
    # kept item by item (the lag's largest), the replay runs the upper state on into the
    # starved ring, as a ring that kept the step would: 19 items x 256 ns later
    import cute_prof.analysis.replay_terms as replay_terms
    monkeypatch.setattr(replay_terms, "TRAILING_LAG_QUANTILE", 1.0)
    kept = what_if(match_records(stepped, spec(3, async_release=True)),
                   depth={"ring": 1})["predicted_kernel_ns"]
    assert kept == pytest.approx(span(job_then_handoff(1, upper=576, upper_from=10)))
    assert kept - got == pytest.approx(19 * 256)
    # no leading group's release (one merged track): nothing to hold
    assert trailing_lag(dataclasses.replace(data, lead_end=None), 3) is None
