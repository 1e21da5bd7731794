"""CPU-only checks of the warp-specialised GEMM (examples/ws_gemm.py): it compiles for
sm_90a without a GPU, and its PTX has the instructions the design relies on.

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
    return {
        (rec, level): (out / f"ws_gemm_{rec}_l{level}.ptx").read_text()
        for rec in ("staged", "direct")
        for level in (0, 1, 2)
    }


def _count(text: str, pattern: str) -> int:
    return len(re.findall(pattern, text))


@pytest.mark.parametrize("recorder", ["staged", "direct"])
@pytest.mark.parametrize("level", [0, 1, 2])
def test_core_instructions(ptx, level, recorder):
    text = ptx[(recorder, level)]
    assert ".target sm_90a" in text
    # 4 x m64n256k16 per k-tile (tile_k 64), bf16 in, fp32 accumulate
    assert _count(text, r"wgmma\.mma_async\.sync\.aligned\.m64n256k16\.f32\.bf16\.bf16") == 4
    assert "wgmma.fence.sync.aligned" in text
    assert "wgmma.commit_group.sync.aligned" in text
    assert "wgmma.wait_group.sync.aligned" in text
    # TMA loads (A and B) arrive on an mbarrier; the epilogue stores with TMA
    assert _count(text, r"cp\.async\.bulk\.tensor\.2d\.shared::cta\.global\.tile\.mbarrier::complete_tx::bytes") == 2
    assert "cp.async.bulk.tensor.2d.global.shared::cta" in text
    # the mbarrier pipeline: init, expect_tx arrive (producer), plain arrive (consumer
    # release), parity waits
    for op in ("mbarrier.init.shared.b64", "mbarrier.arrive.expect_tx.shared.b64",
               "mbarrier.arrive.shared.b64", "mbarrier.try_wait.parity.shared.b64"):
        assert op in text, op
    # warp specialisation: producer gives registers back, consumers take them
    assert re.search(r"setmaxnreg\.dec\.sync\.aligned\.u32\s+40;", text)
    assert re.search(r"setmaxnreg\.inc\.sync\.aligned\.u32\s+232;", text)
    assert "stmatrix.sync.aligned" in text


@pytest.mark.parametrize("recorder", ["staged", "direct"])
def test_level0_has_no_profiling(ptx, recorder):
    text = ptx[(recorder, 0)]
    assert "globaltimer" not in text
    assert "atom.global" not in text  # the profile counter is the only global atomic
    assert "%smid" not in text


def test_level0_identical_across_recorders(ptx):
    strip = lambda t: re.sub(r"//.*", "", t)  # noqa: E731
    body = lambda t: strip(t[t.index(".entry"):])  # noqa: E731
    assert _count(body(ptx[("staged", 0)]), r"\n") == _count(body(ptx[("direct", 0)]), r"\n")


def test_direct_record_sites(ptx):
    l1, l2 = ptx[("direct", 1)], ptx[("direct", 2)]
    assert "%globaltimer" in l1 and "%globaltimer" in l2
    # one atomic per record site: level 1 = producer mainloop, consumer mainloop, epilogue;
    # level 2 adds wait_empty, tma_issue, wait_full, mma_ktile
    assert _count(l1, r"atom\.global\.add\.u64") == 3
    assert _count(l2, r"atom\.global\.add\.u64") == 7
    assert _count(l2, r"%globaltimer") > _count(l1, r"%globaltimer")


def test_staged_record_sites(ptx):
    l1, l2 = ptx[("staged", 1)], ptx[("staged", 2)]
    # WarpRecorder: every staging site carries a (rarely taken) flush, plus explicit
    # flushes: level 1 = producer 1 stage + 1 flush, consumer 2 stages + 1 flush;
    # level 2 = producer 3 stages + 2 flushes, consumer 4 stages + 2 flushes
    assert _count(l1, r"atom\.global\.add\.u64") == 5
    assert _count(l2, r"atom\.global\.add\.u64") == 11
    assert "shfl.sync.idx.b32" in l2  # the flush broadcasts the claimed base slot
    assert _count(l2, r"%globaltimer") > _count(l1, r"%globaltimer")


def test_no_profiling_inside_wgmma_window(ptx):
    """Between wgmma.fence and wgmma.wait_group nothing but the MMAs (no timer reads,
    no records), at every level and with both recorders."""
    for key, text in ptx.items():
        window = text[text.index("wgmma.fence.sync.aligned"):text.index("wgmma.wait_group.sync.aligned")]
        assert "globaltimer" not in window, key
        assert "atom.global" not in window, key


def test_ptxas_no_spills(ptx, tmp_path):
    """When ptxas is on the machine: assemble and check register use / spills."""
    import shutil

    ptxas = shutil.which("ptxas")
    if ptxas is None:
        pytest.skip("ptxas not installed")
    for (rec, level), text in ptx.items():
        src = tmp_path / f"{rec}_l{level}.ptx"
        src.write_text(text)
        proc = subprocess.run(
            [ptxas, "-arch=sm_90a", "-v", str(src), "-o", str(tmp_path / f"{rec}_l{level}.cubin")],
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
# laid out exactly as the kernel writes it (same tids, warps, tags, payloads).


def _synthetic_words(W, gemm, m, n, k, level, *, mma_ns=500, wait_ns=20, fill_ns=800):
    import numpy as np

    from cute_prof import layout

    ids = W.tag_ids()
    exp = W.expected_counts(gemm, m, n, k, level)
    buf = np.zeros(layout.buffer_words(exp["total"]), dtype=np.int64)
    kt = gemm.k_tiles(k)

    def put(start, dur, tag, cta, slot, warp, payload=0):
        W_ = layout.write_records
        W_(buf, [start], dur, ids[tag], W.tid_of(cta, slot), payload=payload, sm=cta % 132, warp=warp)

    for cta in range(gemm.num_ctas(m, n)):
        t0 = 10_000 * cta
        # producer warp 0
        t = t0
        for kk in range(kt if level >= 2 else 0):
            put(t, 30, W.TAG_WAIT_EMPTY, cta, 0, 0, kk)
            put(t + 30, 40, W.TAG_TMA_ISSUE, cta, 0, 0, kk)
            t += 70
        put(t0, max(t - t0, 70), W.TAG_PRODUCER_MAINLOOP, cta, 0, 0, kt)
        for s in gemm.recording_slots:
            t = t0
            for kk in range(kt if level >= 2 else 0):
                w = fill_ns if kk == 0 else wait_ns
                put(t, w, W.TAG_WAIT_FULL, cta, s, 3 + s, kk)
                put(t + w, mma_ns, W.TAG_MMA_KTILE, cta, s, 3 + s, kk)
                t += w + mma_ns
            end = t if level >= 2 else t0 + kt * (mma_ns + wait_ns)
            put(t0, end - t0, W.TAG_CONSUMER_MAINLOOP, cta, s, 3 + s, kt)
            put(end, 900, W.TAG_EPILOGUE, cta, s, 3 + s, 0)
    return buf


@pytest.mark.parametrize("level", [1, 2])
def test_host_checks_on_synthetic_buffer(level):
    import numpy as np

    from examples import ws_gemm as W
    from examples import ws_gemm_profile as P

    gemm = W.WsGemm()
    m, n, k = 300, 520, 200  # 3 x 3 CTAs, 4 k-tiles
    words = _synthetic_words(W, gemm, m, n, k, level)
    recs, attempted = W.decode_records(words)
    assert attempted == W.expected_counts(gemm, m, n, k, level)["total"] == len(recs)
    assert W.check_counts(recs, gemm, m, n, k, level) == []
    assert P.overlaps(recs) == 0
    ids = W.tag_ids()
    busy = P.role_busy(W, gemm, recs, ids)
    assert set(busy) == {"producer warp", "consumer warps"}
    assert all(0.0 <= d["busy_mean"] <= 1.0 for d in busy.values())
    if level == 2:
        cov = P.mma_coverage(W, gemm, recs, ids)
        assert cov["warps"] == 9 * len(gemm.recording_slots)
        # 4 k-tiles: 4 x 500 mma in a span of 4 x 500 + 800 + 3 x 20
        assert abs(cov["mma_over_span"]["median"] - 2000 / 2860) < 1e-9
        assert abs(cov["mma_plus_wait_over_span"]["median"] - 1.0) < 1e-9

    # a missing record, a stray warp and an overlap are all caught
    bad = recs[1:]
    assert W.check_counts(bad, gemm, m, n, k, level)
    moved = recs.copy()
    moved["warp"][0] = 7
    assert W.check_counts(moved, gemm, m, n, k, level)
    dup = np.concatenate([recs, recs[:1]])
    dup["start_ns"][-1] += 1
    assert P.overlaps(dup) >= 1
