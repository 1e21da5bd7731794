"""What the device ops emit, checked in PTX compiled for sm_90a on a machine without a GPU."""

from __future__ import annotations

import os
import re
import sys
import tempfile

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("cutlass")

import cutlass.cute as cute  # noqa: E402
from cutlass import Int32, Int64  # noqa: E402
from cutlass.base_dsl.compiler import DumpDir  # noqa: E402
from cutlass.cute.runtime import from_dlpack  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kernels as K  # noqa: E402

from cute_prof import layout  # noqa: E402
from cute_prof.device import buffer_arg  # noqa: E402

_ptx_cache: dict = {}
_dump_dir = tempfile.mkdtemp(prefix="cute_prof_ptx_")


def compile_ptx(fn, *args) -> str:
    """PTX for sm_90a, whatever GPU (or none) this machine has."""
    key = (fn.__name__,) + tuple(a for a in args if isinstance(a, (str, int)))
    if key not in _ptx_cache:
        options = cute.compile[cute.KeepPTX(), cute.GPUArch("sm_90a"), DumpDir(_dump_dir)]
        ptx = options(fn, *args).__ptx__
        assert ptx, "the DSL returned no PTX"
        if os.path.exists(ptx[:512]):
            with open(ptx) as fh:
                ptx = fh.read()
        assert ".target sm_90a" in ptx
        _ptx_cache[key] = ptx
    return _ptx_cache[key]


def probe_ptx(variant: str) -> str:
    buf = torch.zeros(layout.buffer_words(16), dtype=torch.int64)
    data = torch.zeros(4 * K.THREADS_PER_CTA)
    return compile_ptx(K.launch_probe, buffer_arg(buf), from_dlpack(data), Int32(16), Int64(0),
                       Int32(1), Int32(-1), variant, 4)


def asm_blocks(ptx: str) -> list[str]:
    return re.findall(r"// begin inline asm\n(.*?)// end inline asm", ptx, flags=re.S)


def record_blocks(ptx: str) -> list[str]:
    return [b for b in asm_blocks(ptx) if "atom.global.add.u64" in b]


@pytest.mark.parametrize("variant", [v for v, spec in K.VARIANTS.items() if spec and v != "staged"])
def test_timer_reads_and_atomics(variant):
    _, timer_reads, atomics = K.VARIANTS[variant]
    ptx = probe_ptx(variant)
    assert ptx.count("%globaltimer") == timer_reads
    assert ptx.count("atom.global.add.u64") == atomics
    (block,) = record_blocks(ptx)
    # bound check against min(max_events, words in the tensor), then predicated stores
    assert "setp.lt.and.s64 p, s, cap, p;" in block
    assert "min.s64 cap, cap," in block
    assert block.count("@v st.global.v2.u64") == 2
    assert block.count("@q st.global.u64") == 4
    assert re.search(r"@p atom\.global\.add\.u64 s, \[g\], 1;", block)
    # the timer read comes before the claim: the region ends as early as possible
    assert block.index("%globaltimer") < block.index("atom.global")
    # ... but never before a preceding CTA barrier completed: every timer read (start reads
    # included) is preceded by a warp sync over the active lanes
    for timed in (b for b in asm_blocks(ptx) if "%globaltimer" in b):
        assert "activemask.b32 om;" in timed
        assert timed.index("bar.warp.sync om;") < timed.index("%globaltimer")


GUARD_SIGNATURES = {
    "profile": "setp.lt.u32 p, lane, 32;",
    "cta": "setp.eq.u32 p, lin, 0;",
    "region": "setp.eq.u32 p, lin, 0;",
    "instant": "setp.eq.u32 p, lin, 0;",
    "warp": "setp.eq.u32 p, w, ",
    "elected": "elect.sync _|p, 0xffffffff;",
    "lane0": "setp.eq.u32 p, lane, 0;",
}


@pytest.mark.parametrize("variant", sorted(GUARD_SIGNATURES))
def test_guards(variant):
    (block,) = record_blocks(probe_ptx(variant))
    assert GUARD_SIGNATURES[variant] in block
    others = {sig for v, sig in GUARD_SIGNATURES.items() if sig != GUARD_SIGNATURES[variant]}
    assert not any(sig in block for sig in others)


def test_sampling_predicate_is_computed_once_and_anded_in():
    ptx = probe_ptx("sampled")
    sampling = [b for b in asm_blocks(ptx) if "rem.u32" in b]
    assert len(sampling) == 1 and "%ctaid.x" in sampling[0]
    (block,) = record_blocks(ptx)
    assert re.search(r"setp\.ne\.and\.u32 p, \S+, 0, p;", block)


def test_tag_word_is_a_constant_when_known_at_trace_time():
    (block,) = record_blocks(probe_ptx("cta"))
    assert f"mov.b64 tw, {layout.tag_word_constant(K.TAG, kind=layout.KIND_SPAN)};" in block


def test_instant_kind_in_tag_word():
    (block,) = record_blocks(probe_ptx("instant"))
    assert f"mov.b64 tw, {layout.tag_word_constant(K.TAG, kind=layout.KIND_INSTANT)};" in block
    assert "mov.u64 d, 0;" in block


def _normalise_kernel_name(ptx: str, variant: str) -> str:
    return ptx.replace(f"_{variant}_", "_VARIANT_")


def test_disabled_ops_emit_nothing():
    """Every op called with enabled=False: PTX byte-identical to the kernel with no ops."""
    plain = _normalise_kernel_name(probe_ptx("none"), "none")
    disabled = _normalise_kernel_name(probe_ptx("disabled"), "disabled")
    assert "%globaltimer" not in disabled and "atom" not in disabled
    assert disabled == plain


def test_disabled_recorder_emits_nothing():
    plain = _normalise_kernel_name(probe_ptx("staged_off"), "staged_off")
    assert "%globaltimer" not in plain and "atom" not in plain and "shfl" not in plain


def test_process_switch_compiles_ops_out(monkeypatch):
    import cute_prof.device as cp

    _ptx_cache.clear()
    cp.set_enabled(False)
    try:
        off = _normalise_kernel_name(probe_ptx("region"), "region")
    finally:
        cp.set_enabled(True)
        _ptx_cache.clear()
    plain = _normalise_kernel_name(probe_ptx("none"), "none")
    assert off == plain


def test_timing_kernel_clock_and_phases():
    buf = torch.zeros(layout.buffer_words(16), dtype=torch.int64)
    ptx = compile_ptx(K.launch_timing, buffer_arg(buf), Int32(16), Int64(1), Int32(1), 2)
    blocks = record_blocks(ptx)
    clock_kind = f"or.b64 tw, tw, {layout.tag_word_constant(0, kind=layout.KIND_CLOCK_SPAN)};"
    clock_spans = [b for b in blocks if clock_kind in b]
    assert len(clock_spans) == 1 and "@p mov.u64 c, %clock64;" in clock_spans[0]
    syncs = [b for b in blocks if f"mov.b64 tw, {layout.tag_word_constant(0, kind=layout.KIND_CLOCK_SYNC)};" in b]
    assert len(syncs) == 2 and all("mov.u64 d, c;" in b for b in syncs)
    # phase records use the timestamp read by next(): no timer read inside, an open check
    phase_blocks = [b for b in blocks if "setp.ne.and.s64 p," in b]
    assert phase_blocks and all("%globaltimer" not in b for b in phase_blocks)


def test_staged_recorder_one_atomic_per_chunk_and_wide_stores():
    ptx = probe_ptx("staged")
    blocks = record_blocks(ptx)
    stages = [b for b in blocks if "setp.eq.u32 f, c, 32;" in b]
    flushes = [b for b in blocks if "setp.eq.u32 f, n, 0;" in b]
    # the compiler may unroll the recording loop: one stage block per unrolled iteration
    assert len(flushes) == 1 and len(stages) in (1, K.STAGED_ITERS)
    assert len(blocks) == len(stages) + 1
    _, timer_reads, atomics = K.VARIANTS["staged"]
    assert ptx.count("%globaltimer") == len(stages) * timer_reads
    stage, flush = stages[0], flushes[0]
    # staging: the claim and the stores sit behind a branch taken once per 32 records
    assert "setp.eq.u32 f, c, 32;" in stage and "@!f bra.uni DONE_" in stage
    assert stage.index("bar.warp.sync om;") < stage.index("%globaltimer")
    assert stage.index("@!f bra.uni") < stage.index("atom.global.add.u64")
    # a staged record is 6 predicated moves: start, end and tag word; the duration is
    # computed once per chunk, at the flush
    assert stage.count("@m mov.") == 3 and "@m sub" not in stage
    # one lane claims the whole chunk and broadcasts the base; each lane stores 2 x 16 bytes
    for block in (stage, flush):
        assert "sub.s64 w1, w1, w0;" in block
        assert "@l0 atom.global.add.u64 base, [g], n64;" in block
        assert block.count("shfl.sync.idx.b32") == 2
        assert "setp.lt.and.s64 mine, s, cap, mine;" in block
    assert flush.count("@v st.global.v2.u64") == 2
    # flush() may run in divergent code: only the active lanes claim and broadcast
    assert "shfl.sync.idx.b32 blo, blo, lead, 31, am;" in flush
    assert "shfl.sync.idx.b32 blo, blo, 0, 31, 0xffffffff;" in stage
    # a stage from divergent code branches to a direct record by the lowest active lane:
    # the chunk's 2 wide stores plus the direct record's 2
    assert stage.count("@v st.global.v2.u64") == 4
    assert stage.index("@dv bra DIV_") < stage.index("@m mov.")
    assert "@l0 atom.global.add.u64 s, [g], 1;" in stage.split("DIV_")[-1]
    assert "setp.eq.u32 f, n, 0;" in flush  # nothing staged: nothing claimed


def test_spin_ns_rereads_the_timer_until_its_time_is_up():
    """``spin_ns`` is a loop: one read before it, one inside it, and a branch back while
    the timer has not moved ``ns`` past the first read."""
    ptx = compile_ptx(K.launch_spin, Int64(1000))
    body = ptx[ptx.index(".entry"):]
    assert body.count("%globaltimer") >= 2
    # a conditional branch back to a label above it, taken while now - start < ns
    backward = [label for label in re.findall(r"@%p\d+ bra\s+(\$L__\w+);", body)
                if body.index(f"{label}:") < body.index(f"bra \t{label};")]
    assert backward and "setp.lt.s64" in body
    loop = body[body.index(f"{backward[0]}:"):body.index(f"bra \t{backward[0]};")]
    assert "%globaltimer" in loop
