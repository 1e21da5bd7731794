"""The persistent warp-specialised GEMM (``GemmConfig(persistent=True)`` in
examples/ws_gemm.py) on a Hopper GPU: correctness against torch.matmul (ragged shapes, more
tiles than CTAs, a CTA count forced small so each CTA runs many tiles through one ring),
bit-identical output to the non-persistent kernel and at every profile level, exact record
counts per tile at levels 1 and 2 (payload = tile_local_index * 2^16 + k).

A mis-set barrier hangs rather than fails: run under ``timeout``."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from gpu_required import require_gpu  # noqa: E402

torch = require_gpu("cutlass", hopper=True)

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from examples import ws_gemm as W  # noqa: E402

TOL = 1e-2
_runners: dict = {}


def runner(cluster=(2, 1), ctas=None, recorder="staged", persistent=True):
    key = (tuple(cluster), ctas, recorder, persistent)
    if key not in _runners:
        _runners[key] = W.CompiledWsGemm(W.GemmConfig(
            cluster_m=cluster[0], cluster_n=cluster[1], persistent=persistent,
            persistent_ctas=ctas, recorder=recorder))
    return _runners[key]


def run(r, m, n, k, level, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(m, k, device="cuda", generator=g).to(torch.bfloat16)
    b = torch.randn(n, k, device="cuda", generator=g).to(torch.bfloat16)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    exp = W.expected_counts(r.gemm, m, n, k, level)
    buf, max_events = W.alloc_prof_for(r.gemm, m, n, k, level)  # in the recorder's format
    r.prepare(a, b, c, buf, max_events, level)()
    torch.cuda.synchronize()
    recs, attempted = W.decode_records(buf.cpu().numpy())
    ref = a.float() @ b.float().T
    err = ((c.float() - ref).norm() / ref.norm().clamp_min(1e-30)).item()
    return c, err, recs, attempted, exp


# (m, n, k): tiles of 128 x 256
SIZES = [
    (300, 520, 200),  # 3 x 3 tiles, fewer than the SMs
    (1000, 1032, 520),  # ragged in M, N, K
    (1300, 712, 328),  # 11 x 3 tiles, nothing a tile multiple
    (4096, 4096, 1024),  # 32 x 16 = 512 tiles: ~4 per CTA
    (3000, 5000, 136),  # 24 x 20 = 480 tiles, ragged, 3 k-tiles (< the 4 stages)
]
CONFIGS = [((2, 1), None), ((1, 1), None), ((2, 1), 8), ((1, 1), 6)]  # (cluster, CTAs)
CONFIG_IDS = ["2x1", "1x1", "2x1-8ctas", "1x1-6ctas"]


def test_smoke():
    for cluster, ctas in CONFIGS:
        _, err, _, _, _ = run(runner(cluster, ctas), 300, 520, 200, 0)
        assert err < TOL, (cluster, ctas)


@pytest.mark.parametrize("cluster,ctas", CONFIGS, ids=CONFIG_IDS)
@pytest.mark.parametrize("m,n,k", SIZES)
def test_correct_and_equal_to_non_persistent(m, n, k, cluster, ctas):
    c, err, recs, attempted, _ = run(runner(cluster, ctas), m, n, k, 0)
    assert not torch.isnan(c.float()).any(), "unwritten (NaN) output"
    assert err < TOL, f"{m}x{n}x{k}: rel err {err:.3e}"
    assert attempted == 0
    c0, _, _, _, _ = run(runner(cluster, persistent=False), m, n, k, 0)
    assert torch.equal(c, c0), "persistent output differs from the non-persistent kernel"


@pytest.mark.parametrize("cluster,ctas,recorder",
                         [(cl, n, "staged") for cl, n in CONFIGS] + [((2, 1), None, "direct")]
                         + [((2, 1), None, "slices"), ((1, 1), 6, "slices")],
                         ids=[f"{i}-staged" for i in CONFIG_IDS] + ["2x1-direct"]
                         + ["2x1-slices", "1x1-6ctas-slices"])
@pytest.mark.parametrize("level", [1, 2])
@pytest.mark.parametrize("m,n,k", [(1000, 1032, 520), (4096, 4096, 1024)])
def test_exact_counts_per_tile(m, n, k, level, cluster, ctas, recorder):
    r = runner(cluster, ctas, recorder)
    c, err, recs, attempted, exp = run(r, m, n, k, level)
    assert err < TOL
    c0, _, _, _, _ = run(r, m, n, k, 0)
    assert torch.equal(c, c0), "profiling changed the output"
    # slices: attempted counts words, two per region (a START and a SPAN)
    assert attempted == W.words_per_region(r.gemm) * exp["total"] and len(recs) == exp["total"], (
        attempted, exp["total"], len(recs))
    errors = W.check_counts(recs, r.gemm, m, n, k, level)
    assert not errors, "\n".join(errors)
    tiles = exp["tiles_per_cta"]
    assert tiles.sum() == r.gemm.num_clusters(m, n) * r.gemm.cluster_size
    # every output tile (cluster padding included) is stored exactly once per consumer warp
    ids = W.tag_ids()
    epi = recs[recs["tag"] == ids[W.TAG_EPILOGUE]]
    pids = [(int(p) >> 16, int(p) & 0xFFFF) for p in epi["payload"]]
    pm, pn = r.gemm.padded_grid_shape(m, n)
    assert len(pids) == 8 * pm * pn and set(pids) == {(i, j) for i in range(pm) for j in range(pn)}
    if level == 2:
        # per warp and tag, (tile, k) pairs are each recorded once, in time order
        per_k = recs[np.isin(recs["tag"], [ids[W.TAG_WAIT_FULL], ids[W.TAG_WAIT_EMPTY]])]
        key = (per_k["tid"].astype(np.int64) * 64 + per_k["tag"]) * (1 << 32) + per_k["payload"]
        assert np.unique(key).size == key.size
        o = np.lexsort((per_k["start_ns"], per_k["tag"], per_k["tid"]))
        p = per_k[o]
        same = (p["tid"][1:] == p["tid"][:-1]) & (p["tag"][1:] == p["tag"][:-1])
        assert (p["payload"][1:][same] > p["payload"][:-1][same]).all()
