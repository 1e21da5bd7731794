"""The warp-specialised GEMM (examples/ws_gemm.py) on a real Hopper GPU: correctness against
torch.matmul (tile multiples and not), bit-identical output at every profile level, and
exact record counts per role. Skipped without a CUDA GPU, without CuTe DSL, or on a GPU
that is not sm_90."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU", allow_module_level=True)
pytest.importorskip("cutlass")
if torch.cuda.get_device_capability()[0] != 9:
    pytest.skip("ws_gemm needs an sm_90 (Hopper) GPU", allow_module_level=True)

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from examples import ws_gemm as W  # noqa: E402

TOL = 1e-2  # relative Frobenius error (bf16 output, fp32 accumulation)

_runners: dict = {}


def runner(recorder: str = "staged") -> W.CompiledWsGemm:
    if recorder not in _runners:
        _runners[recorder] = W.CompiledWsGemm(W.GemmConfig(recorder=recorder))
    return _runners[recorder]


def inputs(m, n, k, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(m, k, device="cuda", generator=g).to(torch.bfloat16)
    b = torch.randn(n, k, device="cuda", generator=g).to(torch.bfloat16)
    return a, b


def rel_err(c, a, b):
    ref = a.float() @ b.float().T
    return ((c.float() - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def run(m, n, k, level, *, max_events=None, recorder="staged", seed=0):
    r = runner(recorder)
    a, b = inputs(m, n, k, seed)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    exp = W.expected_counts(r.gemm, m, n, k, level)
    cap = exp["total"] if max_events is None else max_events
    buf = W.alloc_prof(cap)
    r.prepare(a, b, c, buf, cap, level)()
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
    (2048, 1536, 4096),  # 8 x 6 CTAs, 64 k-tiles
]


@pytest.mark.parametrize("m,n,k", SIZES)
def test_correct_level0(m, n, k):
    a, b, c, recs, attempted, _ = run(m, n, k, 0)
    assert not torch.isnan(c.float()).any(), "output has unwritten (NaN) elements"
    err = rel_err(c, a, b)
    assert err < TOL, f"{m}x{n}x{k}: relative Frobenius error {err:.3e}"
    assert attempted == 0 and len(recs) == 0, "level 0 must record nothing"


@pytest.mark.parametrize("recorder", ["staged", "direct"])
@pytest.mark.parametrize("level", [1, 2])
@pytest.mark.parametrize("m,n,k", [(1000, 1032, 520), (256, 512, 1024)])
def test_profiled_output_bit_identical(m, n, k, level, recorder):
    _, _, c0, _, _, _ = run(m, n, k, 0)
    _, _, c1, _, _, _ = run(m, n, k, level, recorder=recorder)
    assert torch.equal(c0, c1), "profiling changed the GEMM output"


@pytest.mark.parametrize("recorder", ["staged", "direct"])
@pytest.mark.parametrize("level", [1, 2])
@pytest.mark.parametrize("m,n,k", [(300, 520, 200), (256, 512, 1024)])
def test_exact_counts(m, n, k, level, recorder):
    a, b, c, recs, attempted, exp = run(m, n, k, level, recorder=recorder)
    assert rel_err(c, a, b) < TOL
    assert attempted == exp["total"], (attempted, exp)
    errors = W.check_counts(recs, runner(recorder).gemm, m, n, k, level)
    assert not errors, "\n".join(errors)
    kt = runner().gemm.k_tiles(k)
    if level == 2:
        # producer: 2 x k_tiles (+1 mainloop) per CTA; consumer warp: 2 x k_tiles + 2
        assert sum(exp["per_producer_warp"].values()) == 2 * kt + 1
        assert sum(exp["per_consumer_warp"].values()) == 2 * kt + 2


@pytest.mark.parametrize("recorder", ["staged", "direct"])
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


@pytest.mark.parametrize("recorder", ["staged", "direct"])
def test_overflow_keeps_result_and_counter(recorder):
    m, n, k = 1000, 1032, 520
    exp = W.expected_counts(runner().gemm, m, n, k, 2)
    cap = exp["total"] // 3
    a, b, c, recs, attempted, _ = run(m, n, k, 2, max_events=cap, recorder=recorder)
    assert rel_err(c, a, b) < TOL
    assert attempted == exp["total"]
    assert len(recs) == cap and recs["complete"].all()
