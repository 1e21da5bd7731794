"""CPU-only checks of the persistent ws_gemm (``GemmConfig(persistent=True)``): it compiles
for sm_90a at profile levels 0 and 2 (all three write paths, 1x1 and the default 2x1 cluster),
its PTX keeps the non-persistent kernel's pipeline (same barriers, MMAs, record sites) inside
a tile loop strided by the grid size, and the host-side schedule facts (tiles per CTA,
expected record counts, the per-tile count check) hold on synthetic buffers.

The compile runs in a subprocess: the DSL snapshots CUTE_DSL_* when cutlass.cute loads."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("cutlass")
pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
RECORDERS = ("staged", "direct", "slices")
KEYS = [(rec, cl, level) for rec in RECORDERS for cl in ("1x1", "2x1") for level in (0, 2)]


@pytest.fixture(scope="module")
def ptx(tmp_path_factory):
    out = tmp_path_factory.mktemp("ws_gemm_persistent_ptx")
    env = dict(os.environ)
    env.update(CUTE_DSL_ARCH="sm_90a", CUTE_DSL_KEEP="ptx", CUTE_DSL_DUMP_DIR=str(out))
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run(
        [sys.executable, "-m", "examples.ws_gemm", "--emit-ptx", str(out), "--persistent"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )
    if proc.returncode != 0:
        pytest.fail(f"compile failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}")
    return {(rec, cl, level): (out / f"ws_gemm_persistent_{rec}_c{cl}_l{level}.ptx").read_text()
            for rec, cl, level in KEYS}


def count(text: str, pattern: str) -> int:
    return len(re.findall(pattern, text))


def barrier_init_counts(text: str) -> list:
    """The arrive count of every mbarrier.init (its register's mov.b32 immediate)."""
    counts = []
    for mo in re.finditer(r"mbarrier\.init\.shared\.b64\s+\[[^\]]+\],\s*(%r\d+);", text):
        movs = re.findall(rf"mov\.b32\s+{re.escape(mo.group(1))},\s*(\d+);", text[: mo.start()])
        counts.append(int(movs[-1]))
    return counts


@pytest.mark.parametrize("key", KEYS, ids=["-".join(map(str, k)) for k in KEYS])
def test_pipeline_inside_a_tile_loop(ptx, key):
    rec, cl, level = key
    text = ptx[key]
    assert ".target sm_90a" in text and "kernel_persistent" in text
    assert count(text, r"wgmma\.mma_async\.sync\.aligned\.m64n256k16\.f32\.bf16\.bf16") == 4
    assert count(text, r"cp\.async\.bulk\.tensor\.2d\.shared::(cta|cluster)\.global\.tile"
                       r"\.mbarrier::complete_tx::bytes") == 2
    assert "cp.async.bulk.tensor.2d.global.shared::cta" in text  # epilogue TMA store
    # the round-robin stride is the launched grid (the staged recorder reads it too)
    assert count(text, r"%nctaid\.x") >= 1
    # one ring for every tile: the same barriers as the non-persistent kernel
    assert barrier_init_counts(text) == [1] * 4 + [8 if cl == "1x1" else 16] * 4
    assert re.search(r"setmaxnreg\.dec\.sync\.aligned\.u32\s+40;", text)
    assert re.search(r"setmaxnreg\.inc\.sync\.aligned\.u32\s+232;", text)
    # nothing inside the wgmma issue; the level-2 records are stored after the commit
    window = text[text.index("wgmma.fence.sync.aligned"):text.index("wgmma.commit_group.sync.aligned")]
    assert "globaltimer" not in window and "atom.global" not in window and "st.global" not in window
    if level == 0:
        for op in ("globaltimer", "atom.global", "%smid"):
            assert op not in text, op
        assert count(text, r"%nctaid\.x") == 1
    else:
        # per-k-tile payload = tile_local_index << 16 | k
        assert re.search(r"shl\.b32\s+%r\d+,\s*%r\d+,\s*16;", text)
        # record sites as in the non-persistent kernel: direct = one atomic per site (8),
        # staged = 12 (stage sites with their rare flush, plus explicit flushes) + 5: the
        # consumer's stage sites also write directly when called from divergent code (the
        # producer's recorder is converged=True: it would spill on 40 registers); slices =
        # none (two plain stores per site)
        atomics = {"direct": 8, "staged": 12 + 5, "slices": 0}[rec]
        assert count(text, r"atom\.global\.add\.u64") == atomics


@pytest.mark.parametrize("cluster", ["1x1", "2x1"])
def test_slices_record_sites(ptx, cluster):
    """The slices path in the tile loop: the same sites as the non-persistent kernel (3
    producer, 5 consumer regions, two 8-byte stores each), no atomic, no shuffle, and each
    warp closes its slice once, after its last tile."""
    from ws_gemm_slices import check_slices_record_sites

    text = ptx[("slices", cluster, 2)]
    check_slices_record_sites(text, ptx[("slices", cluster, 0)], producer_sites=3,
                              consumer_sites=5)
    assert count(text, r"%globaltimer_lo") == 11


@pytest.mark.parametrize("cluster", ["1x1", "2x1"])
def test_level0_identical_across_recorders(ptx, cluster):
    body = lambda t: re.sub(r"//.*", "", t[t.index(".entry"):])  # noqa: E731
    for rec in ("direct", "slices"):
        assert body(ptx[(rec, cluster, 0)]) == body(ptx[("staged", cluster, 0)]), rec


def test_ptxas_staged_and_slices_no_spills(ptx, tmp_path):
    import shutil

    ptxas = shutil.which("ptxas")
    if ptxas is None:
        pytest.skip("ptxas not installed")
    for (rec, cl, level), text in ptx.items():
        if rec == "direct":
            continue  # direct at level 2 spills a few bytes (documented in the report)
        src = tmp_path / f"{rec}_{cl}_l{level}.ptx"
        src.write_text(text)
        proc = subprocess.run([ptxas, "-arch=sm_90a", "-v", str(src), "-o",
                               str(tmp_path / f"{rec}_{cl}_l{level}.cubin")],
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-4000:]
        log = proc.stdout + proc.stderr
        assert "0 bytes spill stores, 0 bytes spill loads" in log, log[-2000:]
        assert re.search(r"Used 168 registers", log), log[-2000:]


# ------------------------------------------------------------------ host-side facts
def gemm(cluster=(2, 1), ctas=None, recorder="staged"):
    from examples import ws_gemm as W

    return W, W.WsGemm(W.GemmConfig(cluster_m=cluster[0], cluster_n=cluster[1],
                                    persistent=True, persistent_ctas=ctas, recorder=recorder))


def test_schedule_facts():
    W, g = gemm(ctas=8)  # 4 clusters of 2
    # 300 x 520: 3 x 3 tiles, padded to 4 x 3 CTAs = 6 cluster work units; cluster c runs
    # units c, c + 4: clusters 0, 1 two tiles, 2, 3 one
    assert g.num_clusters(300, 520) == 6 and g.launched_clusters(300, 520) == 4
    assert g.num_ctas(300, 520) == 8
    assert g.tiles_per_cta(300, 520).tolist() == [2, 2, 2, 2, 1, 1, 1, 1]
    # fewer work units than CTAs allowed: one tile each, grid = work units
    W, g = gemm(ctas=132)
    assert g.num_ctas(300, 520) == 12 and g.tiles_per_cta(300, 520).tolist() == [1] * 12
    W, g = gemm(cluster=(1, 1), ctas=132)
    # 4096 x 4096: 32 x 16 = 512 tiles on 132 CTAs: 116 CTAs run 4, 16 run 3
    t = g.tiles_per_cta(4096, 4096)
    assert t.sum() == 512 and (t == 4).sum() == 116 and (t == 3).sum() == 16
    exp = W.expected_counts(g, 4096, 4096, 1024, 2)
    # per tile: producer 2 x 16 + 1, each of 8 consumer warps 2 x 16 + 2
    assert exp["total"] == 512 * (33 + 8 * 34)
    with pytest.raises(ValueError, match="epi_stages"):
        W.WsGemm(W.GemmConfig(persistent=True, epi_stages=3))


def synthetic_words(W, g, m, n, k, level, *, fmt="flat"):
    """A buffer laid out as the persistent kernel writes it: per CTA its tiles one after
    another, per-k-tile payload = tile * 2^16 + k; ``fmt="slices"``: as the slices recorder
    writes it (each warp's regions in order in its slice, sized by ``alloc_prof_for``)."""
    from cute_prof import layout

    ids = W.tag_ids()
    exp = W.expected_counts(g, m, n, k, level)
    kt = g.k_tiles(k)
    rows = []
    for cta, tiles in enumerate(exp["tiles_per_cta"].tolist()):
        t = 100_000 * cta
        for i in range(tiles):
            for slot in range(9):
                warp = 0 if slot == 0 else 3 + slot
                s = t
                for kk in range(kt if level >= 2 else 0):
                    p = i * W.PERSISTENT_TILE_MODULO + kk
                    if slot == 0:
                        rows += [(s, 30, W.TAG_WAIT_EMPTY, cta, slot, warp, p),
                                 (s + 30, 40, W.TAG_TMA_ISSUE, cta, slot, warp, p)]
                    else:
                        rows += [(s, 20, W.TAG_WAIT_FULL, cta, slot, warp, p),
                                 (s + 20, 500, W.TAG_MMA_KTILE, cta, slot, warp, p)]
                    s += 520
                if slot == 0:
                    rows.append((t, s - t + 1, W.TAG_PRODUCER_MAINLOOP, cta, slot, warp, i))
                else:
                    rows += [(t, s - t + 1, W.TAG_CONSUMER_MAINLOOP, cta, slot, warp, i),
                             (s + 1, 900, W.TAG_EPILOGUE, cta, slot, warp, cta * 16 + i)]
            t += kt * 520 + 1000
    if fmt == "slices":
        from ws_gemm_slices import slices_words

        prof, _ = W.alloc_prof_for(g, m, n, k, level, device="cpu")
        warps = g.threads_per_cta // 32
        return slices_words([(start, dur, ids[tag], cta, W.tid_of(cta, slot), warp, payload, cta)
                             for start, dur, tag, cta, slot, warp, payload in rows],
                            n_slices=g.num_ctas(m, n) * warps,
                            per_warp=int(prof[1]) & 0xFFFFFFFF, warps_per_cta=warps)
    buf = np.zeros(layout.buffer_words(exp["total"]), dtype=np.int64)
    for start, dur, tag, cta, slot, warp, payload in rows:
        layout.write_records(buf, [start], dur, ids[tag], W.tid_of(cta, slot), payload=payload,
                             sm=cta, warp=warp)
    return buf


@pytest.mark.parametrize("level", [1, 2])
@pytest.mark.parametrize("fmt", ["flat", "slices"])
def test_per_tile_counts_on_synthetic_buffer(fmt, level):
    W, g = gemm(ctas=8, recorder="staged" if fmt == "flat" else "slices")
    m, n, k = 300, 520, 200  # 4 k-tiles; CTAs 0..3 run 2 tiles, 4..7 one
    recs, attempted = W.decode_records(synthetic_words(W, g, m, n, k, level, fmt=fmt))
    total = W.expected_counts(g, m, n, k, level)["total"]
    # slices count words, two per region
    assert attempted == (2 if fmt == "slices" else 1) * total and len(recs) == total
    if fmt == "slices":
        # the slices are sized for the busiest warp's tiles: 2 tiles x (2 x 4 + 2) regions x
        # 2 words, 12 warps of 8 CTAs; the payloads keep their tile index above bit 13
        prof, _ = W.alloc_prof_for(g, m, n, k, level, device="cpu")
        assert int(prof[1]) == ((8 * 12) << 32) | (2 * 2 * (2 * 4 + 2 if level == 2 else 2))
        flat, _ = W.decode_records(synthetic_words(W, g, m, n, k, level))
        key = lambda r: sorted(zip(r["tid"].tolist(), r["tag"].tolist(), r["payload"].tolist(),  # noqa: E731
                                   r["start_ns"].tolist(), r["dur_ns"].tolist()))
        assert key(recs) == key(flat)
    assert W.check_counts(recs, g, m, n, k, level) == []
    ids = W.tag_ids()
    # a CTA with one tile too few or too many is caught
    cta, _ = W.split_tid(recs["tid"].astype(np.int64))
    assert any("count" in e for e in W.check_counts(recs[cta != 0], g, m, n, k, level))
    if level == 2:
        # a record of a tile the CTA does not run (CTA 5 runs one tile: tile index 1 is out)
        bad = recs.copy()
        row = np.flatnonzero((cta == 5) & (bad["tag"] == ids[W.TAG_WAIT_FULL]))[0]
        bad["payload"][row] += W.PERSISTENT_TILE_MODULO
        assert "tile index (payload // tile modulo) out of range" in W.check_counts(
            bad, g, m, n, k, level)
