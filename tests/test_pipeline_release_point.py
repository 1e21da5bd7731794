"""Release point of a ``releases`` relation (issue #17): ws_gemm's consumer releases stage
k-1 right after issuing k-tile k's wgmma, i.e. at the START of mma_ktile(k); taking the
region's end instead holds every slot one k-tile too long (occupancy above the depth)."""

from pathlib import Path

import numpy as np
import pytest

from cute_prof.analysis.critical_path import match_records, replay, ring_occupancy
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
