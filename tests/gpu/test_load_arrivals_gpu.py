"""Load-arrival probes on the GPU (``cute_prof.experimental.autoprofile_probed(
load_arrivals=N)``, an experiment): the producer of every TMA-loaded ring waits for a sample
of its loads and records when each arrived; the kernel still computes the right answer, no
probe gives up, and the latencies are loads' (hundreds of ns to a few us), on a kernel that
arms its barrier itself (ws_gemm) and one that commits after its copies (FlashAttention-4)."""

from __future__ import annotations

import numpy as np
import pytest

from gpu_required import require_gpu  # noqa: E402

torch = require_gpu("cutlass", hopper=True)

from cute_prof.experimental import autoprofile_probed  # noqa: E402
from cute_prof.analysis.load_arrivals import load_arrival_latency, load_arrival_pairs  # noqa: E402
from examples import ws_gemm as W  # noqa: E402


def _probes(trace):
    sites = trace.metadata["autoprof"]["sites"]
    tags = [int(s["tag"]) for s in sites if s["op"] == "load_arrival"]
    return trace.events[np.isin(trace.events["tag"], tags)]


def _probed_places(trace, ring: str) -> dict[int, np.ndarray]:
    """Per producer warp of the ring: the places in its loop (commit ordinals) it probed."""
    index = next(int(p["index"]) for p in trace.metadata["autoprof"]["pipelines"]
                 if p["name"] == ring)
    pairs = load_arrival_pairs(trace)
    mine = pairs["ring"] == index
    tid, position = pairs["tid"][mine], pairs["position"][mine]
    return {int(w): position[tid == w] for w in np.unique(tid)}


def _first_load_share(trace, ring: str) -> float:
    """The share of the ring's producer warps that probed their first load. Each cluster
    samples at its own place in the period (``sampling_offset``): about one CTA in the
    period, where a sample starting at the first load took it in every CTA."""
    return float(np.mean([(0 in places) for places in _probed_places(trace, ring).values()]))


def _first_probed_commit(trace, ring: str) -> dict[int, int]:
    """Per CTA (ws_gemm's CTA linear index: x fastest, the 2x1 cluster's two CTAs
    adjacent): the ordinal of the commit its producer's first probe followed."""
    from cute_prof.analysis.zero_edit import zero_edit_roles

    stride = int(zero_edit_roles(trace).tid_stride)
    return {warp // stride: int(places.min())
            for warp, places in _probed_places(trace, ring).items()}


def test_ws_gemm_probes_every_second_turn_of_its_ring():
    m, n, k = 2048, 2048, 4096
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    gemm = W.CompiledWsGemm(W.GemmConfig(recorder="slices"))
    warps = gemm.gemm.num_ctas(m, n) * (gemm.gemm.threads_per_cta // 32)
    with autoprofile_probed(per_warp=1024, max_warps=warps, load_arrivals=7) as prof:
        gemm.prepare(a, b, c, W.alloc_prof(1), 0, 0)()
    trace = prof.trace()
    torch.testing.assert_close(c.float(), (a.float() @ b.float().T), rtol=2e-2, atol=2e-1)
    assert trace.overflow == 0 and trace.metadata["slices_unclosed_warps"] == 0
    probes = _probes(trace)
    assert (probes["payload"] == 1).all()  # none gave up
    # one slot at one full-barrier parity: one load in 2 x depth, each CTA's
    period = 2 * gemm.gemm.num_stages
    assert probes.shape[0] >= gemm.gemm.num_ctas(m, n) * (gemm.gemm.k_tiles(k) // period)
    # each cluster at its own turn: the first load in about one CTA in the period, not in all
    assert 0 < _first_load_share(trace, "ab_pipe") < 2.0 / period
    # and the two CTAs of a 2x1 cluster at the same turn (a probe stalls its producer: the
    # peer would read the stall of this CTA's multicast half as its own load's latency)
    turns = _first_probed_commit(trace, "ab_pipe")
    clusters = {}
    for cta, turn in turns.items():
        clusters.setdefault(cta // 2, set()).add(turn)
    assert len(clusters) > 1 and all(len(t) == 1 for t in clusters.values())
    assert len({next(iter(t)) for t in clusters.values()}) > 1
    latency = load_arrival_latency(trace)["ab_pipe"]
    assert latency.size == probes.shape[0]
    assert 100 < np.median(latency) < 5_000 and latency.max() < 50_000


def test_flash_attention_probes_k_and_v_after_their_commits():
    pytest.importorskip("flash_attn.cute")
    from examples.flash_attention import fa4_interface, inputs, reference

    fa = fa4_interface()
    q, k, v = inputs(1, 1024, 16, 128)
    with autoprofile_probed(per_warp=4096, load_arrivals=7,
                            caches=[(fa._flash_attn_fwd, "compile_cache")]) as prof:
        out = fa._flash_attn_fwd(q, k, v, causal=False)[0]
    torch.testing.assert_close(out.float(), reference(q, k, v, False).float(), atol=2e-2, rtol=0)
    trace = prof.trace()
    assert trace.overflow == 0 and (_probes(trace)["payload"] == 1).all()
    latency = load_arrival_latency(trace)
    assert {"pipeline_k", "pipeline_v"} <= set(latency)
    for ring in ("pipeline_k", "pipeline_v"):
        assert 100 < np.median(latency[ring]) < 5_000
        # 128 CTAs, one in 7 samples at its first load (every CTA did, at count 0)
        assert 0 < _first_load_share(trace, ring) < 2.0 / 7


def _release_to_next_record(trace, ring: str) -> np.ndarray:
    """Per release of ``ring`` by a consumer warp: the time to that warp's next record."""
    sites = trace.metadata["autoprof"]["sites"]
    release = next(int(s["tag"]) for s in sites if s["name"] == f"{ring}.consumer_release")
    ev = trace.events
    order = np.lexsort((ev["start_ns"], ev["tid"]))
    tid, start, tag = ev["tid"][order], ev["start_ns"][order].astype(np.int64), ev["tag"][order]
    at = np.flatnonzero((tag[:-1] == release) & (tid[1:] == tid[:-1]))
    return start[at + 1] - start[at]


def test_a_consumer_delay_slows_every_release_and_keeps_the_result():
    """``consumer_delay_ns``: each consumer warp spins that long after its releases of the
    TMA-loaded ring, so its next record comes no sooner, and the launch runs longer."""
    m, n, k = 2048, 2048, 4096
    delay = 1024
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    traces = {}
    for ns in (0, delay):
        c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        gemm = W.CompiledWsGemm(W.GemmConfig(recorder="slices"))
        warps = gemm.gemm.num_ctas(m, n) * (gemm.gemm.threads_per_cta // 32)
        with autoprofile_probed(per_warp=1024, max_warps=warps,
                                consumer_delay_ns=ns) as prof:
            gemm.prepare(a, b, c, W.alloc_prof(1), 0, 0)()
        traces[ns] = prof.trace()
        torch.testing.assert_close(c.float(), (a.float() @ b.float().T), rtol=2e-2, atol=2e-1)
        assert traces[ns].overflow == 0
    plain = _release_to_next_record(traces[0], "ab_pipe")
    slowed = _release_to_next_record(traces[delay], "ab_pipe")
    assert plain.size == slowed.size > 0
    assert np.median(plain) < delay <= slowed.min()

    def span(trace):
        return int(np.ptp(trace.events["start_ns"]))

    # one wave of CTAs, 64 k-tiles each: every iteration waits out the part of the spin its
    # wgmma does not cover (about 350 ns of the 1024 on an H200)
    assert span(traces[delay]) > span(traces[0]) + 16 * delay
