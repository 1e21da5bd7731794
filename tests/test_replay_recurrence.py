"""The replayed ring keeps the two stamp offsets that lie on a shallow ring's recurrence
(issue #27): the produce's stamp after the acquire's end (the load's issue; the latency is
read from that stamp) and an async release's stamp after its wait's end when the release
did not wait for its job. Dropping either made every item of a 1- or 2-deep ring shorter
in the replay than on the GPU (ws_gemm, persistent, quack)."""

import numpy as np
import pytest

from cute_prof.analysis.replay_terms import region_drains
from cute_prof.analysis.pipeline_data import match_records
from cute_prof.analysis.replay import replay
from cute_prof.analysis.what_if import what_if
from cute_prof.analysis.model import load_pipeline
from tests.test_pipeline_model import make_trace, spec_dict

LATENCY, WAKE = 500, 200  # load: commit stamp -> data; release -> producer's acquire end


def shallow_ring(issue_gap):
    """Depth 1, consumer 1000 ns per item: the producer's commit stamp ``issue_gap`` ns after
    its acquire ends; every item waits for the one before to be released."""
    w_e, p, w_f, c = [(0, 0)], [], [], []
    for k in range(5):
        acquired = w_e[-1][1]
        p.append((acquired + issue_gap, acquired + issue_gap + 36))
        data_at = p[-1][0] + LATENCY
        wait_from = c[-1][1] if c else 500
        w_f.append((wait_from, max(wait_from, data_at)))
        c.append((w_f[-1][1], w_f[-1][1] + 1000))
        w_e.append((p[-1][1], c[-1][1] + WAKE))
    return {"w_e": w_e[:5], "p": p, "w_f": w_f, "c": c}


@pytest.mark.parametrize("issue_gap", [0, 64])
def test_replay_keeps_the_produce_stamp_after_the_acquire(issue_gap):
    data = match_records(make_trace([(0, shallow_ring(issue_gap))]), load_pipeline(spec_dict(1)))
    sched = replay(data)
    np.testing.assert_allclose(sched.end, data.end)
    # the gap is on the recurrence: each item takes it once
    assert np.diff(sched.end[0, :, 2]).tolist() == [1000 + WAKE + issue_gap + LATENCY] * 4


def wgmma_like(depth, iters=24, job=600, release_after=128, wake=96, issue=32, latency=600):
    """One CTA of a ws_gemm-like kernel, simulated: the consumer issues each item's async job
    (``job`` ns on its engine) when its wait ends, then releases item k - 1 once that item's
    job is done and at least ``release_after`` ns have passed (an instant record), and
    reaches its next wait 64 ns later. The producer acquires ``wake`` ns after the release,
    commits ``issue`` ns after that, and the data come ``latency`` ns after the commit."""
    w_e, p, w_f, c = [], [], [], []
    release, job_end = {}, -np.inf
    for k in range(iters):
        start = p[-1][1] + 32 if p else 0
        acquired = start if k < depth else max(start, release[k - depth] + wake)
        w_e.append((start, acquired))
        p.append((acquired + issue, acquired + issue))
        wait_from = c[-1][1] + 64 if c else 0
        w_f.append((wait_from, max(wait_from + 32, p[-1][0] + latency)))
        done_before, job_end = job_end, max(w_f[-1][1], job_end) + job
        at = max(w_f[-1][1] + release_after, done_before)
        c.append((at, at))
        if k >= 1:
            release[k - 1] = at
    return {"w_e": w_e, "p": p, "w_f": w_f, "c": c}


def test_shallow_ring_what_if_matches_the_simulated_kernel():
    # base: 4 stages, the consumer bound by its jobs (600 ns per item: each release waits
    # for the job before; only the first did not); at 2 stages the ring starves: one item
    # per 128 + 96 + 32 + 600 ns, each release 128 ns after its wait as in that first one
    d = spec_dict(4, release_distance=1)
    d["regions"][3]["async"] = True
    base = match_records(make_trace([(0, wgmma_like(4))]), load_pipeline(d))
    shallow = wgmma_like(2)
    assert np.diff([e for _, e in shallow["w_f"]])[4:].tolist() == [856] * 19
    got = what_if(base, depth={"ring": 2}, latency={"w_f": 600})
    assert got["predicted_kernel_ns"] == pytest.approx(shallow["c"][-1][1], rel=0.005)


def tiled_wgmma(depth, tiles=4, tile=8, job=600, release_after=128, wake=96, issue=32,
                latency=600, epilogue=2000):
    """``wgmma_like`` over a persistent CTA's tiles: at each tile's end the consumer waits
    for every job, releases the tile's last item (the drain: its record lands in the next
    tile's first iteration, before that iteration's wait, as zero-edit traces number calls
    per warp) and runs the epilogue (``epilogue`` ns) before the next tile's first wait."""
    w_e, p, w_f, c = [], [], [], []
    release, job_end, next_wait = {}, -np.inf, 0
    for k in range(tiles * tile):
        start = p[-1][1] + 32 if p else 0
        acquired = start if k < depth else max(start, release[k - depth] + wake)
        w_e.append((start, acquired))
        p.append((acquired + issue, acquired + issue))
        tile_start = k > 0 and k % tile == 0
        if tile_start:
            drain = max(job_end, c[-1][1] + 32)
            release[k - 1] = drain
            next_wait = drain + epilogue
        w_f.append((next_wait, max(next_wait + 32, p[-1][0] + latency)))
        done_before, job_end = job_end, max(w_f[-1][1], job_end) + job
        at = drain if tile_start else max(w_f[-1][1] + release_after, done_before)
        c.append((at, at))
        if k >= 1 and not tile_start:
            release[k - 1] = at
        next_wait = (w_f[-1][1] if tile_start else at) + 64
    return {"w_e": w_e, "p": p, "w_f": w_f, "c": c}


def test_a_tiles_drain_and_epilogue_stay_the_consumers_own_work(monkeypatch):
    # the drain's record comes before its iteration's wait; the epilogue after it is the
    # consumer's own work, not the job's: at 2 stages every tile's end keeps it whole
    d = spec_dict(4, release_distance=1)
    d["regions"][3]["async"] = True
    data = match_records(make_trace([(0, tiled_wgmma(4))]), load_pipeline(d))
    drained, tail = region_drains(data, 3)
    assert np.flatnonzero(drained[0]).tolist() == [8, 16, 24]
    np.testing.assert_allclose(tail[0, [7, 15, 23]], 2000)
    truth = tiled_wgmma(2)["c"][-1][1]
    got = what_if(data, depth={"ring": 2}, latency={"w_f": 600})
    assert got["predicted_kernel_ns"] == pytest.approx(truth, rel=0.005)
    # the epilogue taken as job time (no drains): short by most of a wait's blocking per tile
    from cute_prof.analysis import replay as replay_module, replay_terms

    def no_drains(data, i):
        return np.zeros(data.shape[:2], dtype=bool), np.zeros(data.shape[:2])

    for module in (replay_module, replay_terms):
        monkeypatch.setattr(module, "region_drains", no_drains)
    data = match_records(make_trace([(0, tiled_wgmma(4))]), load_pipeline(d))
    worse = what_if(data, depth={"ring": 2}, latency={"w_f": 600})
    assert abs(worse["predicted_kernel_ns"] - truth) > 3 * abs(got["predicted_kernel_ns"] - truth)
