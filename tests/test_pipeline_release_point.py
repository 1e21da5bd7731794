"""Release point of a ``releases`` relation (issue #17): ws_gemm's consumer releases stage
k-1 right after issuing k-tile k's wgmma, i.e. at the START of mma_ktile(k); taking the
region's end instead holds every slot one k-tile too long (occupancy above the depth)."""

from pathlib import Path

import numpy as np
import pytest

from cute_prof.analysis.critical_path import ring_occupancy
from cute_prof.analysis.pipeline_data import match_records, prologue_slots
from cute_prof.analysis.replay import replay
from cute_prof.analysis.replay_terms import infer_terms
from cute_prof.analysis.what_if import what_if
from cute_prof.analysis.model import load_pipeline
from cute_prof.errors import ProfileBufferError
from tests.test_pipeline_model import CONSUMER_BOUND, make_trace, spec_dict

ROOT = Path(__file__).resolve().parents[1]


def release_spec(at, depth=2):
    d = spec_dict(depth, release_distance=1)
    rel = {"resource": "ring", "distance": 1}
    if at is not None:
        rel["at"] = at
    d["regions"][3]["releases"] = rel
    return load_pipeline(d)


def occupancy_steps(at):
    data = match_records(make_trace([(0, CONSUMER_BOUND)]), release_spec(at))
    stats, _, t, occ = ring_occupancy(data, resource="ring")
    return stats, list(zip(t.tolist(), occ.tolist()))


def test_release_at_end_is_the_default_and_clipped_by_causality():
    # takes (end of w_e) 0, 100, 1100, 2100; at end: item j freed at end of c(j+1):
    # 2100, 3100, then the last c (4100) frees items 2 and 3. Items 0 and 1 were re-acquired
    # (item j + 2) at 1100 and 2100, so they were free by then: releases 1100, 2100
    stats, steps = occupancy_steps(None)
    assert steps == [(0, 1), (100, 2), (1100, 1), (1100, 2), (2100, 1), (2100, 2),
                     (4100, 1), (4100, 0)]
    assert stats["peak"] == 2 and occupancy_steps("end")[1] == steps


def test_release_next_is_the_start_of_the_roles_next_region():
    # "next": item j freed when w_f(j + 2) starts (c is the consumer's last region):
    # w_f starts 100, 1100, 2100, 3100 -> item 0 at 2100, item 1 at 3100 (clipped by the
    # takes to 1100, 2100), items 2, 3 at the last c's end 4100
    data = match_records(make_trace([(0, CONSUMER_BOUND)]), release_spec("next"))
    stats, _, t, occ = ring_occupancy(data, resource="ring")
    assert list(zip(t.tolist(), occ.tolist()))[-2:] == [(4100, 1), (4100, 0)]
    assert stats["peak"] == 2


def test_release_at_start_keeps_occupancy_within_depth():
    # at start: item j freed at start of c(j+1): 1100, 2100, 3100; item 3 at the end 4100
    stats, steps = occupancy_steps("start")
    assert steps == [(0, 1), (100, 2), (1100, 1), (1100, 2), (2100, 1), (2100, 2),
                     (3100, 1), (4100, 0)]
    assert stats["peak"] == 2


def test_replay_of_the_measured_schedule_with_release_at_start_is_exact():
    data = match_records(make_trace([(0, CONSUMER_BOUND)]), release_spec("start"))
    sched = replay(data)
    np.testing.assert_allclose(sched.end, data.end)
    np.testing.assert_allclose(sched.start, data.start)


# ws_gemm as its zero-edit trace has it: the consumer waits for item P before the loop,
# each loop iteration's c releases the item before (distance 1; c(0) releases P), depth 2,
# producer 100 ns, load latency 100, consumer 1000. P holds a slot until c(0) ends, so
# the producer's second acquire (item 1) waits for it.
PROLOGUE_HELD = {
    "w_e": [(0, 0), (100, 1200), (1300, 2400), (2500, 3600)],
    "p": [(0, 100), (1200, 1300), (2400, 2500), (3600, 3700)],
    "w_f": [(100, 200), (1200, 1400), (2400, 2600), (3600, 3800)],
    "c": [(200, 1200), (1400, 2400), (2600, 3600), (3800, 4800)],
}


def prologue_spec(prologue_items, depth=2):
    d = spec_dict(depth, release_distance=1)
    d["resources"][0]["prologue_items"] = prologue_items
    return load_pipeline(d)


def test_an_item_issued_before_the_loop_holds_its_slot_until_the_first_release():
    data = match_records(make_trace([(0, PROLOGUE_HELD)]), prologue_spec(1))
    assert prologue_slots(data.spec, "ring") == (1, 1)
    sched = replay(data)
    np.testing.assert_allclose(sched.end, data.end)  # the hand schedule, exactly
    # the measured terms see w_e(1) wait for c(0)'s release, as w_e(2) waits for c(1)'s
    dep = infer_terms(data)[3]
    assert dep[0, 1, 0] == 1200 and dep[0, 2, 0] == 2400
    # without the prologue's item the replay lets the producer run one item further ahead
    # at the start: item 1 is issued at 100 and lands (latency 200) long before c(0) ends,
    # so w_f(1) takes only its own cost (1200-1300) and everything after it 100 ns sooner
    free = replay(match_records(make_trace([(0, PROLOGUE_HELD)]), prologue_spec(0)))
    assert free.end[0, 1, 0] == 100 and free.end[0, 1, 2] == 1300
    assert free.end[0, -1, 3] == 4700
    # one slot deeper: P's slot is not needed before item 2's acquire, which waits for
    # P's release (item 2 - 3 = -1), not for item 0's
    deeper = what_if(data, depth={"ring": 3}, schedules=True)["changed_schedule"]
    assert deeper.end[0, 1, 0] == 100 and deeper.dep_time[0, 2, 0] == 1200
    # a 1-deep ring with a trailing release cannot run at all: P's slot is freed only
    # after the wait for item 0, which needs that slot
    with pytest.raises(ProfileBufferError, match="deadlock"):
        what_if(data, depth={"ring": 1})


def test_prologue_items_must_be_a_count():
    with pytest.raises(ProfileBufferError, match="prologue_items must be an int"):
        prologue_spec(-1)
    with pytest.raises(ProfileBufferError, match="prologue_items must be an int"):
        prologue_spec(1.5)


@pytest.mark.parametrize("at", ["middle", 1, "START"])
def test_bad_release_point(at):
    with pytest.raises(ProfileBufferError, match="'at' must be one of"):
        release_spec(at)


def test_at_start_only_for_releases():
    d = spec_dict(2)
    d["regions"][1]["produces"] = {"resource": "ring", "at": "start"}
    with pytest.raises(ProfileBufferError, match="only .releases. takes another"):
        load_pipeline(d)


def test_unknown_relation_key():
    d = spec_dict(2)
    d["regions"][3]["releases"] = {"resource": "ring", "when": "start"}
    with pytest.raises(ProfileBufferError, match="unknown keys"):
        load_pipeline(d)


# Level-2 ws_gemm traces from the H100 what-if runs (bench/results/whatif_h100,
# bench/results/persistent_h100), cut to their first CTAs by bench/tools/trace_fixture.py
FIXTURES = "tests/data/gemm_traces/"
TRACES = [
    ("examples/ws_gemm_pipeline.json", FIXTURES + "whatif_base.npz", {}),
    ("examples/ws_gemm_pipeline.json", FIXTURES + "whatif_stages2.npz", {"smem_ab": 2}),
    ("examples/ws_gemm_persistent_pipeline.json", FIXTURES + "persistent_l2.npz", {}),
    ("examples/ws_gemm_persistent_pipeline.json", FIXTURES + "p_stages3_l2.npz", {"smem_ab": 3}),
    ("examples/ws_gemm_persistent_pipeline.json", FIXTURES + "p_stages2_l2.npz", {"smem_ab": 2}),
]


@pytest.mark.parametrize("spec_path,trace_path,depth", TRACES)
def test_committed_gpu_traces_never_exceed_the_ring_depth(spec_path, trace_path, depth):
    from cute_prof.storage import load_trace

    spec = load_pipeline(ROOT / spec_path).with_changes(depth=depth)
    data = match_records(load_trace(ROOT / trace_path), spec)
    stats = ring_occupancy(data, resource="smem_ab")[0]
    assert data.unit_group.size >= 4  # whole CTAs (and their tiles) survived the cut
    assert stats["peak"] == spec.resource("smem_ab").depth
