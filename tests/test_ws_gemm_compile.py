"""CPU-only checks of the warp-specialised GEMM (examples/ws_gemm.py): it compiles for
sm_90a without a GPU, and its PTX has the instructions the design relies on, for the
cluster configurations 1x1 (no cluster), 2x1 (the default: B multicast) and 1x2 (A
multicast), with each of the three write paths (``GemmConfig.recorder``: staged, direct,
slices).

The compile runs in a subprocess because the DSL snapshots CUTE_DSL_* environment variables
when ``cutlass.cute`` is imported."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("cutlass")
pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
CLUSTERS = ("1x1", "2x1", "1x2")
RECORDERS = ("staged", "direct", "slices")


@pytest.fixture(scope="module")
def ptx(tmp_path_factory):
    out = tmp_path_factory.mktemp("ws_gemm_ptx")
    env = dict(os.environ)
    env.update(CUTE_DSL_ARCH="sm_90a", CUTE_DSL_KEEP="ptx", CUTE_DSL_DUMP_DIR=str(out))
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run(
        [sys.executable, "-m", "examples.ws_gemm", "--emit-ptx", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )
    if proc.returncode != 0:
        pytest.fail(f"compile failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}")
    texts = {
        (rec, cl, level): (out / f"ws_gemm_{rec}_c{cl}_l{level}.ptx").read_text()
        for rec in RECORDERS
        for cl in CLUSTERS
        for level in (0, 1, 2)
    }
    # the default configuration is also written without the cluster suffix
    texts.update({
        (rec, "default", level): (out / f"ws_gemm_{rec}_l{level}.ptx").read_text()
        for rec in RECORDERS
        for level in (0, 1, 2)
    })
    return texts


def _count(text: str, pattern: str) -> int:
    return len(re.findall(pattern, text))


def _init_counts(text: str) -> list:
    """The arrive count of every mbarrier.init (its register's mov.b32 immediate)."""
    counts = []
    for mo in re.finditer(r"mbarrier\.init\.shared\.b64\s+\[[^\]]+\],\s*(%r\d+);", text):
        reg = re.escape(mo.group(1))
        movs = re.findall(rf"mov\.b32\s+{reg},\s*(\d+);", text[: mo.start()])
        counts.append(int(movs[-1]))
    return counts


@pytest.mark.parametrize("cluster", CLUSTERS)
@pytest.mark.parametrize("recorder", RECORDERS)
@pytest.mark.parametrize("level", [0, 1, 2])
def test_core_instructions(ptx, level, recorder, cluster):
    text = ptx[(recorder, cluster, level)]
    assert ".target sm_90a" in text
    # 4 x m64n256k16 per k-tile (tile_k 64), bf16 in, fp32 accumulate
    assert _count(text, r"wgmma\.mma_async\.sync\.aligned\.m64n256k16\.f32\.bf16\.bf16") == 4
    assert "wgmma.fence.sync.aligned" in text
    assert "wgmma.commit_group.sync.aligned" in text
    assert "wgmma.wait_group.sync.aligned" in text
    # TMA loads (A and B; one of them multicast in a cluster) arrive on an mbarrier; the
    # epilogue stores with TMA
    assert _count(text, r"cp\.async\.bulk\.tensor\.2d\.shared::(cta|cluster)\.global\.tile\.mbarrier::complete_tx::bytes") == 2
    assert "cp.async.bulk.tensor.2d.global.shared::cta" in text
    # the mbarrier pipeline: init, expect_tx arrive (producer) of the whole stage
    # (128x64 + 256x64 bf16 = 49152 bytes, also when half of it comes from a peer),
    # consumer release arrive (remote in a cluster), parity waits
    for op in ("mbarrier.init.shared.b64", "mbarrier.arrive.expect_tx.shared.b64",
               "mbarrier.try_wait.parity.shared.b64"):
        assert op in text, op
    assert re.search(r"mov\.b32\s+%r\d+,\s*49152;", text)
    release = "mbarrier.arrive.shared.b64" if cluster == "1x1" else "mbarrier.arrive.shared::cluster.b64"
    assert _count(text, re.escape(release)) == 2  # in the loop and after it
    # warp specialisation: producer gives registers back, consumers take them
    assert re.search(r"setmaxnreg\.dec\.sync\.aligned\.u32\s+40;", text)
    assert re.search(r"setmaxnreg\.inc\.sync\.aligned\.u32\s+232;", text)
    assert "stmatrix.sync.aligned" in text


def test_default_is_2x1(ptx):
    from examples import ws_gemm as W

    assert (W.GemmConfig.cluster_m, W.GemmConfig.cluster_n) == (2, 1)
    for rec in RECORDERS:
        for level in (0, 1, 2):
            assert ptx[(rec, "default", level)] == ptx[(rec, "2x1", level)]


@pytest.mark.parametrize("level", [0, 1, 2])
@pytest.mark.parametrize("cluster", CLUSTERS)
def test_cluster_multicast_and_barriers(ptx, cluster, level):
    text = ptx[("staged", cluster, level)]
    mcast = r"cp\.async\.bulk\.tensor\.2d\.shared::cluster\.global\.tile\.mbarrier::complete_tx::bytes\.multicast::cluster"
    local = r"cp\.async\.bulk\.tensor\.2d\.shared::cta\.global\.tile\.mbarrier::complete_tx::bytes"
    waits = _count(text, r"mbarrier\.try_wait\.parity")
    if cluster == "1x1":
        # the plain launch: no cluster ops at all
        assert _count(text, local) == 2 and _count(text, mcast) == 0
        for op in ("barrier.cluster", "mapa", "%cluster_ctarank", "shared::cluster"):
            assert op not in text, op
        # 4 full barriers (1 producer arrive), 4 empty barriers (one per consumer warp)
        assert _init_counts(text) == [1] * 4 + [8] * 4
        assert waits == 2  # producer empty wait, consumer full wait
        return
    # one operand is multicast to both CTAs of the cluster (mask 0b11), the other local
    assert _count(text, mcast) == 1 and _count(text, local) == 1
    assert re.search(r"mov\.b16\s+%rs\d+,\s*3;", text)
    # the multicast load carries the shared operand: B for 2x1, A for 1x2 (A's stage
    # ring starts at +1024 in the SharedStorage, B's after it)
    mline = next(line for line in text.splitlines() if "multicast::cluster" in line)
    if cluster == "2x1":
        assert "+1024]" not in mline
    else:
        assert "+1024]" in mline
    # barrier init is made visible cluster-wide and followed by a cluster barrier
    assert "fence.mbarrier_init.release.cluster" in text
    assert "barrier.cluster.arrive.relaxed" in text and "barrier.cluster.wait" in text
    assert text.index("fence.mbarrier_init.release.cluster") < text.index("barrier.cluster.wait")
    assert "%cluster_ctarank" in text
    # consumer release: remote arrives (mapa to the peer's barrier) from lanes 0 and 1;
    # the empty barriers count 8 warps x 2 CTAs
    assert _count(text, r"mapa\.shared::cluster") == 2
    assert _count(text, r"mbarrier\.arrive\.shared::cluster\.b64") == 2
    assert "mbarrier.arrive.shared.b64" not in text
    assert _init_counts(text) == [1] * 4 + [16] * 4
    # producer tail: 4 more empty waits (one per stage) before the producer exits
    assert waits == 2 + 4


@pytest.mark.parametrize("cluster", CLUSTERS)
@pytest.mark.parametrize("recorder", RECORDERS)
def test_level0_has_no_profiling(ptx, recorder, cluster):
    text = ptx[(recorder, cluster, 0)]
    assert "globaltimer" not in text
    assert "atom.global" not in text  # the profile counter is the only global atomic
    assert not re.search(r"(?<![\w.])red\.", text)  # nor a reduction (slices' close)
    assert "%smid" not in text and "st.global" not in text


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_level0_identical_across_recorders(ptx, cluster):
    """Level 0 compiles the recorder away: the kernel is the same text whatever the write
    path (comments aside)."""
    strip = lambda t: re.sub(r"//.*", "", t)  # noqa: E731
    body = lambda t: strip(t[t.index(".entry"):])  # noqa: E731
    staged = body(ptx[("staged", cluster, 0)])
    for rec in ("direct", "slices"):
        assert body(ptx[(rec, cluster, 0)]) == staged, rec


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_direct_record_sites(ptx, cluster):
    l1, l2 = ptx[("direct", cluster, 1)], ptx[("direct", cluster, 2)]
    assert "%globaltimer" in l1 and "%globaltimer" in l2
    # one atomic per record site: level 1 = producer mainloop, consumer mainloop, epilogue;
    # level 2 adds wait_empty, tma_issue, wait_full and mma_ktile (twice: in the loop for
    # the previous k-tile, after it for the last)
    assert _count(l1, r"atom\.global\.add\.u64") == 3
    assert _count(l2, r"atom\.global\.add\.u64") == 8
    assert _count(l2, r"%globaltimer") > _count(l1, r"%globaltimer")


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_staged_record_sites(ptx, cluster):
    l1, l2 = ptx[("staged", cluster, 1)], ptx[("staged", cluster, 2)]
    # WarpRecorder: every staging site carries a (rarely taken) flush and a direct record
    # for divergent callers (2 atomics), plus explicit flushes: level 1 = producer 1 stage
    # + 1 flush, consumer 2 stages + 1 flush; level 2 = producer 3 stages + 2 flushes,
    # consumer 5 stages + 2 flushes
    assert _count(l1, r"atom\.global\.add\.u64") == 2 * 3 + 2
    assert _count(l2, r"atom\.global\.add\.u64") == 2 * 8 + 4
    assert "shfl.sync.idx.b32" in l2  # the flush broadcasts the claimed base slot
    assert _count(l2, r"%globaltimer") > _count(l1, r"%globaltimer")


@pytest.mark.parametrize("cluster", CLUSTERS)
@pytest.mark.parametrize("level", [1, 2])
def test_slices_record_sites(ptx, cluster, level):
    text = ptx[("slices", cluster, level)]
    # regions: level 1 = producer mainloop | consumer mainloop, epilogue; level 2 adds
    # wait_empty, tma_issue | wait_full and mma_ktile (twice: in the loop for the previous
    # k-tile, after it for the last)
    producer, consumer = {1: (1, 2), 2: (3, 5)}[level]
    from ws_gemm_slices import check_slices_record_sites

    check_slices_record_sites(text, ptx[("slices", cluster, 0)], producer_sites=producer,
                              consumer_sites=consumer)
    # timer reads of region boundaries: level 1 = producer start + end, consumer start,
    # epilogue start, 2 ends; level 2 adds 2 producer and 3 consumer reads (t_b, t_a |
    # t_w, t_m, t_done), as many as the direct path's 64-bit reads
    assert _count(text, r"%globaltimer_lo") == {1: 6, 2: 11}[level]
    assert _count(ptx[("direct", cluster, level)], r"%globaltimer;") == {1: 6, 2: 11}[level]


def test_no_profiling_inside_the_wgmma_issue(ptx):
    """Between wgmma.fence and wgmma.commit_group nothing but the MMAs (no timer reads, no
    records), at every level and with every recorder. The level-2 records are stored after
    the commit, while the k-tile's wgmma runs: off the tensor cores' critical path."""
    for key, text in ptx.items():
        window = text[text.index("wgmma.fence.sync.aligned"):text.index("wgmma.commit_group.sync.aligned")]
        assert "globaltimer" not in window, key
        assert "atom.global" not in window and "st.global" not in window, key
        if key[2] == 2:
            after = text[text.index("wgmma.commit_group.sync.aligned"):text.index("wgmma.wait_group.sync.aligned")]
            assert ("st.global" in after or "atom.global" in after), key


def test_ptxas_no_spills(ptx, tmp_path):
    """When ptxas is on the machine: assemble and check register use / spills."""
    import shutil

    ptxas = shutil.which("ptxas")
    if ptxas is None:
        pytest.skip("ptxas not installed")
    for (rec, cl, level), text in ptx.items():
        if cl == "default":
            continue  # a copy of 2x1
        src = tmp_path / f"{rec}_{cl}_l{level}.ptx"
        src.write_text(text)
        proc = subprocess.run(
            [ptxas, "-arch=sm_90a", "-v", str(src), "-o", str(tmp_path / f"{rec}_{cl}_l{level}.cubin")],
            capture_output=True, text=True, timeout=300,
        )
        assert proc.returncode == 0, proc.stderr[-4000:]
        log = proc.stdout + proc.stderr
        assert "0 bytes spill stores, 0 bytes spill loads" in log, log[-2000:]
        assert "serialized" not in log, log[-2000:]  # wgmma serialisation warning
        # setmaxnreg budget: 384 threads launched at 168 registers = 64512; the producer
        # warpgroup drops to 40 and the consumers rise to 232: 128*40 + 256*232 = 64512
        used = re.search(r"Used (\d+) registers", log)
        assert used and int(used.group(1)) == 168, log[-2000:]


# ------------------------------------------------------------------ host-side logic
# The checks the GPU test and the profile script run, exercised on a synthetic buffer
# laid out exactly as the kernel writes it (same tids, warps, tags, payloads), in the flat
# format (staged, direct) and the slices format (each warp's regions in program order).


def _synthetic_regions(W, gemm, m, n, k, level, *, mma_ns=500, wait_ns=20, fill_ns=800,
                       epoch=0):
    """Rows (start, dur, tag id, cta, tid, warp, payload, sm), each warp's in the order the
    kernel records them."""
    ids = W.tag_ids()
    kt = gemm.k_tiles(k)
    rows = []

    def put(start, dur, tag, cta, slot, warp, payload=0):
        rows.append((epoch + start, dur, ids[tag], cta, W.tid_of(cta, slot), warp, payload, cta % 132))

    pm, pn = gemm.padded_grid_shape(m, n)
    for cta in range(gemm.num_ctas(m, n)):
        t0 = 10_000 * cta
        # producer warp 0: wait empty k, issue TMA k, ..., then its mainloop
        t = t0
        for kk in range(kt if level >= 2 else 0):
            put(t, 30, W.TAG_WAIT_EMPTY, cta, 0, 0, kk)
            put(t + 30, 40, W.TAG_TMA_ISSUE, cta, 0, 0, kk)
            t += 70
        put(t0, max(t - t0, 70), W.TAG_PRODUCER_MAINLOOP, cta, 0, 0, kt)
        for s in gemm.recording_slots:
            # as the kernel records: "mma k-tile" kk runs from the issue of its wgmma to
            # the next issue (the last: to retirement), the next "wait full" nests inside;
            # wait k is recorded, then mma k - 1 (ending at the same read)
            t = t0
            issues = []
            for kk in range(kt if level >= 2 else 0):
                w = fill_ns if kk == 0 else wait_ns
                put(t, w, W.TAG_WAIT_FULL, cta, s, 3 + s, kk)
                if kk:
                    put(issues[-1], t + w - issues[-1], W.TAG_MMA_KTILE, cta, s, 3 + s, kk - 1)
                issues.append(t + w)
                t += w + mma_ns
            if issues:
                put(issues[-1], t - issues[-1], W.TAG_MMA_KTILE, cta, s, 3 + s, kt - 1)
            end = t if level >= 2 else t0 + kt * (mma_ns + wait_ns)
            put(t0, end - t0, W.TAG_CONSUMER_MAINLOOP, cta, s, 3 + s, kt)
            # the epilogue's payload: pid_m * 2^16 + pid_n, wider than a slice record's 13 bits
            put(end, 900, W.TAG_EPILOGUE, cta, s, 3 + s, (cta % pm) * 65536 + cta // pm % pn)
    return rows


def _synthetic_words(W, gemm, m, n, k, level, *, fmt="flat", per_warp=None, epoch=0):
    """The buffer the kernel would leave: ``fmt="flat"`` (staged, direct) or ``"slices"``
    (one slice per warp of every CTA, ``per_warp`` words each: by default exactly
    ``alloc_prof_for``'s)."""
    import numpy as np

    from cute_prof import layout

    rows = _synthetic_regions(W, gemm, m, n, k, level, epoch=epoch)
    if fmt == "slices":
        import ws_gemm_slices

        warps = gemm.threads_per_cta // 32
        if per_warp is None:
            buf, _ = W.alloc_prof_for(gemm, m, n, k, level, device="cpu")
            per_warp = int(buf[1]) & 0xFFFFFFFF
        return ws_gemm_slices.slices_words(rows, n_slices=gemm.num_ctas(m, n) * warps,
                                           per_warp=per_warp, warps_per_cta=warps)
    buf = np.zeros(layout.buffer_words(len(rows)), dtype=np.int64)
    for start, dur, tag, cta, tid, warp, payload, sm in rows:
        layout.write_records(buf, [start], dur, tag, tid, payload=payload, sm=sm, warp=warp)
    return buf


@pytest.mark.parametrize("cluster", [(1, 1), (2, 1), (1, 2)])
@pytest.mark.parametrize("level", [1, 2])
@pytest.mark.parametrize("fmt", ["flat", "slices"])
def test_host_checks_on_synthetic_buffer(fmt, level, cluster):
    import numpy as np

    from examples import ws_gemm as W
    from examples import ws_gemm_profile as P

    gemm = W.WsGemm(W.GemmConfig(cluster_m=cluster[0], cluster_n=cluster[1],
                                 recorder="staged" if fmt == "flat" else "slices"))
    m, n, k = 300, 520, 200  # 3 x 3 output tiles, 4 k-tiles
    # clusters round the grid up: 2x1 launches 4 x 3 CTAs, 1x2 3 x 4
    assert gemm.grid_shape(m, n) == (3, 3)
    want = {(1, 1): 9, (2, 1): 12, (1, 2): 12}[cluster]
    assert gemm.num_ctas(m, n) == want
    # slices: the low 32 timer bits wrap in the middle of the launch
    epoch = (5 << 32) - 50_000 if fmt == "slices" else 0
    words = _synthetic_words(W, gemm, m, n, k, level, fmt=fmt, epoch=epoch)
    recs, attempted = W.decode_records(words)
    total = W.expected_counts(gemm, m, n, k, level)["total"]
    # slices count words: a region is a START and a SPAN
    assert attempted == (2 if fmt == "slices" else 1) * total and len(recs) == total
    assert W.check_counts(recs, gemm, m, n, k, level) == []
    assert P.overlaps(recs) == 0
    ids = W.tag_ids()
    if level == 2:
        cov = P.mma_coverage(W, gemm, recs, ids)
        assert cov["warps"] == want * len(gemm.recording_slots)
        # 4 k-tiles: a span of 800 (fill) + 4 x 500 + 3 x 20 (waits); the mma periods
        # cover all but the fill, the waits are 800 + 3 x 20
        assert abs(cov["mma_over_span"]["median"] - 2060 / 2860) < 1e-9
        assert abs(cov["wait_full_over_span"]["median"] - 860 / 2860) < 1e-9
    if fmt == "slices":
        # the same regions as the flat buffer holds, 64-bit times and 32-bit payloads included
        flat, _ = W.decode_records(_synthetic_words(W, gemm, m, n, k, level))
        cols = ["start_ns", "dur_ns", "tag", "tid", "warp", "sm", "payload"]
        as_rows = lambda r: sorted(zip(*(r[c].astype(np.int64).tolist() for c in cols)))  # noqa: E731
        shifted = recs.copy()
        shifted["start_ns"] -= epoch
        assert as_rows(shifted) == as_rows(flat)

    # a missing record, a stray warp and an overlap are all caught
    bad = recs[1:]
    assert W.check_counts(bad, gemm, m, n, k, level)
    moved = recs.copy()
    moved["warp"][0] = 7
    assert W.check_counts(moved, gemm, m, n, k, level)
    dup = np.concatenate([recs, recs[:1]])
    dup["start_ns"][-1] += 1
    assert P.overlaps(dup) >= 1


@pytest.mark.parametrize("per_warp", [19, 12])
def test_slices_overflow_on_synthetic_buffer(per_warp):
    """What the GPU overflow test asserts, on a buffer with the kernel's layout: with slices
    too small, the count of lost words is exact and each warp keeps its first regions."""
    import numpy as np

    from cute_prof.decode import decode_buffer
    from examples import ws_gemm as W
    from ws_gemm_slices import prefix_mismatches

    gemm = W.WsGemm(W.GemmConfig(recorder="slices"))
    m, n, k = 300, 520, 200  # 12 CTAs (2x1), 4 k-tiles: 9 and 10 regions per warp
    full = decode_buffer(_synthetic_words(W, gemm, m, n, k, 2, fmt="slices"))
    short = decode_buffer(_synthetic_words(W, gemm, m, n, k, 2, fmt="slices", per_warp=per_warp))
    # per CTA: the producer writes 18 words, 8 consumer warps 20 each
    assert short.attempted == full.attempted == 12 * (18 + 8 * 20)
    stored = 12 * (min(18, per_warp) + 8 * min(20, per_warp))
    assert short.overflow == short.attempted - stored and full.overflow == 0
    # an odd capacity keeps a last START whose SPAN was lost: no event from it
    assert len(short.events) == 12 * (min(9, per_warp // 2) + 8 * min(10, per_warp // 2))
    assert short.incomplete == 0
    assert prefix_mismatches(short.events, full.events) == []
    # a warp's regions out of order are caught
    swapped = short.events.copy()
    first, second = np.flatnonzero(swapped["tid"] == swapped["tid"][0])[:2]
    swapped["slot"][[first, second]] = swapped["slot"][[second, first]]
    assert prefix_mismatches(swapped, full.events) == [int(swapped["tid"][0])]


def test_flight_positions_marked_only_when_configured(tmp_path):
    """GemmConfig(flight_address=...) adds the position marks (both mainloops at depth 0,
    wait_empty and wait_full at depth 1) at level 2; without it the PTX has none (the other
    tests' PTX)."""
    env = dict(os.environ)
    env.update(CUTE_DSL_ARCH="sm_90a", CUTE_DSL_KEEP="ptx", CUTE_DSL_DUMP_DIR=str(tmp_path))
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    code = ("import sys; from examples.ws_gemm import emit_ptx; "
            "emit_ptx(sys.argv[1], levels=(2,), cluster=(1, 1), suffix='_flight', "
            "flight_address=0x7f0000000000, flight_slots=4096)")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    text = (tmp_path / "ws_gemm_staged_flight_l2.ptx").read_text()
    assert _count(text, r"st\.volatile\.global\.v2\.u64") == 2 * 4  # 4 enter sites, 2 stores each
    assert _count(text, r"st\.volatile\.global\.u64") == 4  # 4 leave sites
    assert "0x7f0000000000" in text or str(0x7f0000000000) in text


def test_no_flight_marks_without_flight(ptx):
    for key, text in ptx.items():
        assert "st.volatile.global" not in text, key
