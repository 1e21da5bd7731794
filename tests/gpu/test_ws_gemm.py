"""The warp-specialised GEMM (examples/ws_gemm.py) on a real Hopper GPU: correctness against
torch.matmul (tile multiples and not), bit-identical output at every profile level, and
exact record counts per role, for the cluster configurations 1x1 (no cluster) and 2x1
(the default: two CTAs along M share B by TMA multicast; 1x2 for correctness only).
Skipped without a CUDA GPU, without CuTe DSL, or on a GPU that is not sm_90.

A mis-set barrier count hangs the GPU rather than failing: run under ``timeout``, e.g.
``timeout 900 python -m pytest -x -q tests/gpu/test_ws_gemm.py``."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from gpu_required import require_gpu  # noqa: E402

torch = require_gpu("cutlass", hopper=True)

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from cute_prof.decode import decode_buffer  # noqa: E402
from cute_prof.decode_slices import allocate_slices_buffer  # noqa: E402
from examples import ws_gemm as W  # noqa: E402
from tests.ws_gemm_slices import prefix_mismatches  # noqa: E402

TOL = 1e-2  # relative Frobenius error (bf16 output, fp32 accumulation)

RECORDERS = ["staged", "direct", "slices"]
CLUSTERS = [(1, 1), (2, 1)]
CLUSTER_IDS = ["1x1", "2x1"]
DEFAULT = (W.GemmConfig.cluster_m, W.GemmConfig.cluster_n)

_runners: dict = {}


def runner(recorder: str = "staged", cluster=DEFAULT) -> W.CompiledWsGemm:
    key = (recorder, tuple(cluster))
    if key not in _runners:
        _runners[key] = W.CompiledWsGemm(
            W.GemmConfig(recorder=recorder, cluster_m=cluster[0], cluster_n=cluster[1])
        )
    return _runners[key]


def inputs(m, n, k, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(m, k, device="cuda", generator=g).to(torch.bfloat16)
    b = torch.randn(n, k, device="cuda", generator=g).to(torch.bfloat16)
    return a, b


def rel_err(c, a, b):
    ref = a.float() @ b.float().T
    return ((c.float() - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def run(m, n, k, level, *, prof=None, recorder="staged", seed=0, cluster=DEFAULT):
    """One launch; ``prof``: a ``(buffer, max_events)`` to record into instead of
    ``alloc_prof_for``'s (which has room for every record, in the recorder's format)."""
    r = runner(recorder, cluster)
    a, b = inputs(m, n, k, seed)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    exp = W.expected_counts(r.gemm, m, n, k, level)
    buf, max_events = W.alloc_prof_for(r.gemm, m, n, k, level) if prof is None else prof
    r.prepare(a, b, c, buf, max_events, level)()
    torch.cuda.synchronize()
    recs, attempted = W.decode_records(buf.cpu().numpy())
    return a, b, c, recs, attempted, exp




SIZES = [
    (128, 256, 64),  # exactly one tile, one k-tile
    (256, 512, 1024),  # tile multiples
    (1000, 1032, 520),  # none of M, N, K a multiple of the tile
    (129, 264, 72),  # one past a tile edge in M, N and K
    (100, 200, 40),  # smaller than one tile in every dimension
    (1001, 136, 8),  # odd M, K = 8 (one mostly zero-filled k-tile)
    (384, 256, 64),  # 3 M tiles: a 2x1 cluster pads to 4 (one CTA wholly past the edge)
    (1300, 712, 328),  # 11 x 3 tiles, nothing a tile multiple
    (2048, 1536, 4096),  # 8 x 6 CTAs, 64 k-tiles
]


def test_smoke():
    """One small launch of each cluster config first (a hang shows up here, under timeout)."""
    for cl in CLUSTERS:
        a, b, c, _, _, _ = run(300, 520, 200, 0, cluster=cl)
        assert rel_err(c, a, b) < TOL, cl


@pytest.mark.parametrize("cluster", CLUSTERS + [(1, 2)], ids=CLUSTER_IDS + ["1x2"])
@pytest.mark.parametrize("m,n,k", SIZES)
def test_correct_level0(m, n, k, cluster):
    a, b, c, recs, attempted, _ = run(m, n, k, 0, cluster=cluster)
    assert not torch.isnan(c.float()).any(), "output has unwritten (NaN) elements"
    err = rel_err(c, a, b)
    assert err < TOL, f"{m}x{n}x{k}: relative Frobenius error {err:.3e}"
    assert attempted == 0 and len(recs) == 0, "level 0 must record nothing"


@pytest.mark.parametrize("cluster", [(2, 1), (1, 2)], ids=["2x1", "1x2"])
@pytest.mark.parametrize("m,n,k", [(1000, 1032, 520), (384, 256, 64), (1300, 712, 328)])
def test_cluster_bit_identical_to_1x1(m, n, k, cluster):
    """Multicast only changes where the tiles come from, not the MMA order."""
    _, _, c0, _, _, _ = run(m, n, k, 0, cluster=(1, 1))
    _, _, c1, _, _, _ = run(m, n, k, 0, cluster=cluster)
    assert torch.equal(c0, c1), "the cluster config changed the GEMM output"


@pytest.mark.parametrize("cluster", CLUSTERS, ids=CLUSTER_IDS)
@pytest.mark.parametrize("recorder", RECORDERS)
@pytest.mark.parametrize("level", [1, 2])
@pytest.mark.parametrize("m,n,k", [(1000, 1032, 520), (256, 512, 1024), (384, 256, 64)])
def test_profiled_output_bit_identical(m, n, k, level, recorder, cluster):
    _, _, c0, _, _, _ = run(m, n, k, 0, cluster=cluster)
    _, _, c1, _, _, _ = run(m, n, k, level, recorder=recorder, cluster=cluster)
    assert torch.equal(c0, c1), "profiling changed the GEMM output"


@pytest.mark.parametrize("cluster", CLUSTERS, ids=CLUSTER_IDS)
@pytest.mark.parametrize("recorder", RECORDERS)
@pytest.mark.parametrize("level", [1, 2])
@pytest.mark.parametrize("m,n,k", [(300, 520, 200), (256, 512, 1024), (1300, 712, 328)])
def test_exact_counts(m, n, k, level, recorder, cluster):
    a, b, c, recs, attempted, exp = run(m, n, k, level, recorder=recorder, cluster=cluster)
    gemm = runner(recorder, cluster).gemm
    assert rel_err(c, a, b) < TOL
    assert attempted == W.words_per_region(runner(recorder, cluster).gemm) * exp["total"], (attempted, exp)
    errors = W.check_counts(recs, gemm, m, n, k, level)
    assert not errors, "\n".join(errors)
    # every launched CTA records, cluster padding included (300 and 1300 rows: an odd
    # number of M tiles, so 2x1 launches one more CTA row than there are tiles)
    gm, gn = gemm.grid_shape(m, n)
    cm, cn = cluster
    assert exp["producers"] == gemm.num_ctas(m, n) == (-(-gm // cm) * cm) * (-(-gn // cn) * cn)
    cta, slot = W.split_tid(recs["tid"].astype(np.int64))
    assert set(np.unique(cta).tolist()) == set(range(gemm.num_ctas(m, n)))
    # the epilogue payloads name every (pid_m, pid_n) of the padded grid exactly once per
    # consumer warp
    epi = recs[recs["tag"] == W.tag_ids()[W.TAG_EPILOGUE]]
    pids = {(int(p) >> 16, int(p) & 0xFFFF) for p in epi["payload"]}
    pm, pn = gemm.padded_grid_shape(m, n)
    assert pids == {(i, j) for i in range(pm) for j in range(pn)}
    kt = gemm.k_tiles(k)
    if level == 2:
        # producer: 2 x k_tiles (+1 mainloop) per CTA; consumer warp: 2 x k_tiles + 2
        assert sum(exp["per_producer_warp"].values()) == 2 * kt + 1
        assert sum(exp["per_consumer_warp"].values()) == 2 * kt + 2


@pytest.mark.parametrize("recorder", RECORDERS)
def test_region_sanity_level2(recorder):
    m, n, k = 512, 1024, 2048
    _, _, _, recs, _, _ = run(m, n, k, 2, recorder=recorder)
    ids = W.tag_ids()
    assert (recs["dur_ns"] >= 0).all()
    cta, slot = W.split_tid(recs["tid"].astype(np.int64))
    # regions of one warp and tag never overlap, and k-tiles run in order
    for name in (W.TAG_WAIT_EMPTY, W.TAG_TMA_ISSUE, W.TAG_WAIT_FULL, W.TAG_MMA_KTILE):
        sel = recs["tag"] == ids[name]
        r = recs[sel]
        order = np.lexsort((r["start_ns"], r["tid"]))
        r = r[order]
        same = r["tid"][1:] == r["tid"][:-1]
        assert (r["start_ns"][1:][same] >= (r["start_ns"] + r["dur_ns"])[:-1][same]).all(), name
        assert (r["payload"][1:][same] > r["payload"][:-1][same]).all(), name
    # per-k-tile regions of a consumer warp lie inside its mainloop region
    main = recs[recs["tag"] == ids[W.TAG_CONSUMER_MAINLOOP]]
    lo = dict(zip(main["tid"].tolist(), main["start_ns"].tolist()))
    hi = dict(zip(main["tid"].tolist(), (main["start_ns"] + main["dur_ns"]).tolist()))
    mma = recs[recs["tag"] == ids[W.TAG_MMA_KTILE]]
    starts = np.array([lo[t] for t in mma["tid"].tolist()])
    ends = np.array([hi[t] for t in mma["tid"].tolist()])
    assert (mma["start_ns"] >= starts).all() and (mma["start_ns"] + mma["dur_ns"] <= ends).all()
    # a consumer warp's mma periods abut exactly (one timestamp per boundary), and the wait
    # for stage k >= 1 nests inside period k - 1
    wf = recs[recs["tag"] == ids[W.TAG_WAIT_FULL]]
    mma = mma[np.lexsort((mma["payload"], mma["tid"]))]
    wf = wf[np.lexsort((wf["payload"], wf["tid"]))]
    assert np.array_equal(mma["tid"], wf["tid"]) and np.array_equal(mma["payload"], wf["payload"])
    same = mma["tid"][1:] == mma["tid"][:-1]
    mma_end = mma["start_ns"] + mma["dur_ns"]
    assert (mma["start_ns"][1:][same] == mma_end[:-1][same]).all()
    assert (wf["start_ns"][1:][same] >= mma["start_ns"][:-1][same]).all()
    assert ((wf["start_ns"] + wf["dur_ns"])[1:][same] == mma["start_ns"][1:][same]).all()


@pytest.mark.parametrize("recorder", ["staged", "direct"])
def test_overflow_keeps_result_and_counter(recorder):
    m, n, k = 1000, 1032, 520
    exp = W.expected_counts(runner().gemm, m, n, k, 2)
    cap = exp["total"] // 3
    a, b, c, recs, attempted, _ = run(m, n, k, 2, prof=(W.alloc_prof(cap), cap), recorder=recorder)
    assert rel_err(c, a, b) < TOL
    assert attempted == exp["total"]
    assert len(recs) == cap  # an incomplete slot would be missing here


# 1000 x 1032 x 520 on the default 2x1 cluster: 8 x 5 tiles padded to 8 x 5 CTAs of 12 warps,
# 9 k-tiles; at level 2 the producer warp records 2 x 9 + 1 = 19 regions (38 words), each
# consumer warp 2 x 9 + 2 = 20 (40 words)
@pytest.mark.parametrize("per_warp", [39, 13], ids=["one-word-short", "odd-and-far-short"])
def test_slices_overflow_keeps_result_and_exact_count(per_warp):
    """Slices too small for the warps' regions: the output is unchanged, the decoder counts
    exactly the words each warp could not store, and each warp kept its first regions (at
    an odd capacity the last START is stored without its SPAN: no event)."""
    m, n, k = 1000, 1032, 520
    gemm = runner("slices").gemm
    exp = W.expected_counts(gemm, m, n, k, 2)
    ctas, warps = gemm.num_ctas(m, n), gemm.threads_per_cta // 32
    kt = gemm.k_tiles(k)
    assert (ctas, warps, kt) == (40, 12, 9)
    producer_words, consumer_words = 2 * (2 * kt + 1), 2 * (2 * kt + 2)
    assert exp["total"] == ctas * (producer_words + 8 * consumer_words) // 2

    _, _, c0, _, _, _ = run(m, n, k, 0, recorder="slices")
    full_buf, full_max = W.alloc_prof_for(gemm, m, n, k, 2)
    run(m, n, k, 2, prof=(full_buf, full_max), recorder="slices")
    full = decode_buffer(full_buf.cpu().numpy())
    assert full.overflow == 0 and len(full.events) == exp["total"]

    small = allocate_slices_buffer(ctas * warps, per_warp)
    a, b, c, recs, attempted, _ = run(m, n, k, 2, prof=(small, 0), recorder="slices")
    assert torch.equal(c, c0), "overflowing slices changed the GEMM output"
    trace = decode_buffer(small.cpu().numpy())
    stored = ctas * (min(producer_words, per_warp) + 8 * min(consumer_words, per_warp))
    assert attempted == trace.attempted == 2 * exp["total"]
    assert trace.overflow == trace.attempted - stored
    assert trace.incomplete == 0 and trace.metadata["slices_unclosed_warps"] == 0
    assert trace.metadata["slices_opened"] == 9 * ctas  # warps 1..3 record nothing
    kept = min(producer_words, per_warp) // 2 + 8 * (min(consumer_words, per_warp) // 2)
    assert len(recs) == len(trace.events) == ctas * kept
    assert prefix_mismatches(trace.events, full.events) == []
