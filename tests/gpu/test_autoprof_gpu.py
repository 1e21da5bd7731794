"""Zero-edit profiling on the GPU: kernels nobody instrumented (this repo's ws_gemm at level 0,
FlashAttention-4's Hopper forward) record every pipeline call of every warp, exactly, and
still compute the right answer."""

from __future__ import annotations


import numpy as np
import pytest

from gpu_required import require_gpu  # noqa: E402

torch = require_gpu("cutlass", hopper=True)

import cute_prof  # noqa: E402
from examples import ws_gemm as W  # noqa: E402



def _assert_spans_inside_one_launch(trace, limit_ns=1_000_000):
    """Every record is a span of one launch of a kernel that runs for tens of us: no negative
    duration, first start to last end well under a millisecond. (A record path that read a
    start after its end once passed every count check with 2^32 ns spans.)"""
    ev = trace.events
    assert (ev["dur_ns"] >= 0).all()
    assert (ev["start_ns"] + ev["dur_ns"]).max() - ev["start_ns"].min() < limit_ns


def _per_warp_counts(trace, name):
    tag = trace.tag_names.index(name)
    tids, counts = np.unique(trace.events["tid"][trace.events["tag"] == tag], return_counts=True)
    return dict(zip(tids.tolist(), counts.tolist()))


@pytest.mark.parametrize("mnk", [(1000, 1032, 520), (2048, 2048, 4096)])
def test_ws_gemm_level0_records_every_pipeline_call(mnk):
    m, n, k = mnk
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    gemm = W.CompiledWsGemm(W.GemmConfig(recorder="slices"))
    warps = gemm.gemm.num_ctas(m, n) * (gemm.gemm.threads_per_cta // 32)
    with cute_prof.autoprofile(per_warp=512, max_warps=warps) as prof:
        gemm.prepare(a, b, c, W.alloc_prof(1), 0, 0)()
    trace = prof.trace()
    torch.testing.assert_close(c.float(), (a.float() @ b.float().T), rtol=2e-2, atol=2e-1)
    meta = trace.metadata
    assert trace.overflow == 0 and meta["slices_unclosed_warps"] == 0
    assert meta["slices_diverged_warps"] == 0
    _assert_spans_inside_one_launch(trace)
    waits = _per_warp_counts(trace, "ab_pipe.consumer_wait")
    releases = _per_warp_counts(trace, "ab_pipe.consumer_release")
    acquires = _per_warp_counts(trace, "ab_pipe.producer_acquire")
    ctas = gemm.gemm.num_ctas(m, n)
    # every consumer warp of every CTA waited for and released every k-tile; each CTA's
    # producer acquired a stage per k-tile, then waited on every stage once more (ws_gemm's
    # producer drains the ring on the empty barriers itself before it exits)
    assert len(waits) == ctas * 8 and len(acquires) == ctas
    assert set(waits.values()) == set(releases.values()) == {gemm.gemm.k_tiles(k)}
    assert set(acquires.values()) == {gemm.gemm.k_tiles(k) + gemm.gemm.num_stages}
    roles = meta["autoprof"]["roles"]["roles"]
    assert any(name.startswith("producer") for name in roles)
    assert any(name.startswith("consumer") for name in roles)
    # the 2x1 launch's cluster barrier after ab_pipe's init (PipelineTmaAsync.create): every
    # warp arrives and waits once, before it makes its first pipeline call
    arrives = _per_warp_counts(trace, "cluster.arrive_relaxed")
    cluster_waits = _per_warp_counts(trace, "cluster.wait")
    assert len(arrives) == len(cluster_waits) == warps
    assert set(arrives.values()) == set(cluster_waits.values()) == {1}
    ev = trace.events
    names = np.asarray(trace.tag_names)[ev["tag"]]
    tid = ev["tid"].astype(np.int64)
    ends = ev["start_ns"] + ev["dur_ns"]
    first_pipeline = np.full(tid.max() + 1, np.iinfo(np.int64).max)
    on_ring = np.char.startswith(names.astype(str), "ab_pipe.")
    np.minimum.at(first_pipeline, tid[on_ring], ev["start_ns"][on_ring])
    waited = names == "cluster.wait"
    arrived = names == "cluster.arrive_relaxed"
    assert (ends[waited] <= first_pipeline[tid[waited]]).all()
    arrive_at = np.zeros(tid.max() + 1, dtype=np.int64)
    arrive_at[tid[arrived]] = ev["start_ns"][arrived]
    assert (arrive_at[tid[waited]] <= ends[waited]).all()


def test_zero_edit_leaves_no_trace_outside_the_block():
    m = n = k = 512
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    plain = W.CompiledWsGemm(W.GemmConfig(recorder="slices"))
    with cute_prof.autoprofile(per_warp=64, max_warps=4096) as prof:
        pass
    assert prof.recordings == []
    launch = plain.prepare(a, b, c, W.alloc_prof(1), 0, 0)  # compiled after the block
    # launched inside a later block, a kernel compiled outside one records nothing (the
    # byte-identical PTX itself is checked on the CPU: tests/test_autoprof_ptx.py)
    with cute_prof.autoprofile(per_warp=64, max_warps=4096) as later:
        launch()
    torch.cuda.synchronize()
    assert later.recordings == [] and later.kernels == []
    torch.testing.assert_close(c.float(), a.float() @ b.float().T, rtol=2e-2, atol=2e-1)


@pytest.mark.parametrize("causal", [False, True])
def test_flash_attention_forward_zero_edit(causal):
    pytest.importorskip("flash_attn.cute")
    from examples.flash_attention import completeness, inputs, profile_forward, reference

    q, k, v = inputs(1, 1024, 16, 128)
    out, prof = profile_forward(q, k, v, causal=causal)
    torch.testing.assert_close(out.float(), reference(q, k, v, causal).float(), atol=2e-2, rtol=0)
    trace = prof.trace()
    assert trace.overflow == 0 and trace.metadata["slices_unclosed_warps"] == 0
    _assert_spans_inside_one_launch(trace)
    check = completeness(trace)
    assert check["mismatched_ctas"] == 0 and check["pipeline_k_waits"] > 0
    roles = trace.metadata["autoprof"]["roles"]["roles"]
    consumers = [r for r in roles if r.startswith("consumer")]
    assert len(consumers) == 2, roles  # two consumer warpgroups, told apart
    names = set(trace.tag_names)
    assert {"pipeline_k.consumer_wait", "pipeline_v.consumer_wait",
            "pipeline_k.producer_acquire"} <= names


def test_recorder_cost_of_flash_attention_forward():
    """``calibration.recorder_cost`` times the plain and the recording kernel in shuffled
    rounds: FA4's forward pays for its records (12-16% on an H100, bench/results/whatif), the
    figure its what-ifs take to predict the plain kernel."""
    pytest.importorskip("flash_attn.cute")
    from cute_prof.calibration import recorder_cost
    from examples.flash_attention import fa4_interface, inputs

    fa = fa4_interface()
    q, k, v = inputs(1, 1024, 16, 128)
    plain_cache = fa._flash_attn_fwd.compile_cache
    fa._flash_attn_fwd(q, k, v, causal=False)  # the plain kernel, in FA4's own cache
    with cute_prof.autoprofile(per_warp=4096,
                               caches=[(fa._flash_attn_fwd, "compile_cache")]) as prof:
        fa._flash_attn_fwd(q, k, v, causal=False)

    def with_cache(cache):
        def launch():
            fa._flash_attn_fwd.compile_cache = cache
            fa._flash_attn_fwd(q, k, v, causal=False)
        return launch

    try:
        got = recorder_cost(with_cache(plain_cache), with_cache(prof.caches[0]), rounds=15)
    finally:
        fa._flash_attn_fwd.compile_cache = plain_cache
    print(f"FA4 b1 s1024 recorder cost {got['cost']:+.2%}: plain "
          f"{sorted(got['plain_ns'])[7] / 1e3:.2f} us, recording "
          f"{sorted(got['recording_ns'])[7] / 1e3:.2f} us (medians of 15 rounds)")
    assert len(got["plain_ns"]) == len(got["recording_ns"]) == 15
    assert 5_000 < min(got["plain_ns"]) < 100_000  # one b1 s1024 forward: ~16 us
    assert 0.03 < got["cost"] < 0.4, got["cost"]


def test_flash_attention_records_without_naming_its_cache():
    """FA4 compiled its kernel before the block: the block empties FA4's compile caches
    itself (``framework_caches``), so the kernel compiles again and records, and the plain
    kernel is back in the cache afterwards."""
    pytest.importorskip("flash_attn.cute")
    from examples.flash_attention import fa4_interface, inputs

    fa = fa4_interface()
    q, k, v = inputs(1, 1024, 16, 128)
    fa._flash_attn_fwd(q, k, v, causal=True)
    before = dict(fa._flash_attn_fwd.compile_cache.cache)
    with cute_prof.autoprofile() as prof:
        fa._flash_attn_fwd(q, k, v, causal=True)
    trace = prof.trace()
    assert len(trace) > 0 and trace.overflow == 0
    assert "pipeline_k.consumer_wait" in set(trace.tag_names)
    assert dict(fa._flash_attn_fwd.compile_cache.cache) == before
