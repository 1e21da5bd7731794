"""What the slices write path emits, checked in PTX for sm_90a without a GPU: one timer read,
one 8-byte store, no atomic and no shuffle per record."""

from __future__ import annotations

import os
import re
import tempfile

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("cutlass")

import cutlass  # noqa: E402
import cutlass.cute as cute  # noqa: E402
from cutlass.base_dsl.compiler import DumpDir  # noqa: E402
from cutlass.cute.runtime import from_dlpack  # noqa: E402

from cute_prof.decode_slices import allocate_slices_buffer  # noqa: E402
from cute_prof.device import buffer_arg  # noqa: E402
from cute_prof.device.slices import SliceRecorder, prefetch_header  # noqa: E402
from cute_prof.errors import ProfileBufferError  # noqa: E402


@cute.kernel
def _kernel(buf: cute.Tensor, data: cute.Tensor, ordered: cutlass.Constexpr, payload: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    x = data[tidx]
    rec = SliceRecorder(buf, tidx // 32, ordered=ordered)
    for i in cutlass.range(8, unroll=1):
        x = x * 0.5 + 1.0
        rec.end(5, payload=i if cutlass.const_expr(payload) else 3)
    rec.close()
    data[tidx] = x


@cute.jit
def _launch(buf: cute.Tensor, data: cute.Tensor, ordered: cutlass.Constexpr, payload: cutlass.Constexpr):
    _kernel(buf, data, ordered, payload).launch(grid=(1, 1, 1), block=(64, 1, 1))


def _ptx(ordered, payload=False):
    buf = allocate_slices_buffer(2, 8, device="cpu")
    data = torch.zeros(64)
    opts = cute.compile[cute.KeepPTX(), cute.GPUArch("sm_90a"), DumpDir(tempfile.mkdtemp())]
    ptx = opts(_launch, buffer_arg(buf), from_dlpack(data), ordered, payload).__ptx__
    if os.path.exists(ptx[:512]):
        with open(ptx) as fh:
            ptx = fh.read()
    return ptx


def _record_blocks(ptx):
    blocks = re.findall(r"// begin inline asm\n(.*?)// end inline asm", ptx, flags=re.S)
    return [b for b in blocks if "%globaltimer_lo" in b]


@pytest.mark.parametrize("ordered", [True, False])
def test_one_record_is_one_timer_read_and_one_8_byte_store(ordered):
    (block,) = _record_blocks(_ptx(ordered))
    assert block.count("%globaltimer") == 1
    assert block.count("st.global.v2.u32") == 1 and "atom" not in block and "shfl" not in block
    assert ("bar.warp.sync" in block) == ordered
    # a constant tag and payload fold into one immediate: the record's high word
    from cute_prof import layout
    assert str(layout.slice_record_high(5, payload=3)) in block


def test_dynamic_payload_is_packed_on_the_device():
    (block,) = _record_blocks(_ptx(True, payload=True))
    assert "bfi.b32" in block


def test_payload_too_wide_for_13_bits_is_refused_while_tracing():
    rec = SliceRecorder.__new__(SliceRecorder)
    rec.enabled, rec._state, rec._const = True, None, None
    with pytest.raises(ProfileBufferError, match="13 bits"):
        rec._write(1, 1 << 13, 1)


def test_open_refuses_a_buffer_that_is_not_a_slices_buffer_or_too_small():
    from cute_prof import layout
    ptx = _ptx(True)
    (opening,) = [b for b in re.findall(r"// begin inline asm\n(.*?)// end inline asm", ptx, flags=re.S)
                  if f"setp.eq.s64 valid, h0, {layout.SLICES_MAGIC}" in b]
    # the magic and the header's size are checked before the first store
    assert opening.index(f"setp.eq.s64 valid, h0, {layout.SLICES_MAGIC}") < opening.index("st.global")
    assert "setp.le.and.u64 valid, t, words, valid" in opening


@cute.kernel
def _prefetch_kernel(buf: cute.Tensor, data: cute.Tensor):
    tidx, _, _ = cute.arch.thread_idx()
    header = prefetch_header(buf)
    x = data[tidx]
    for _ in cutlass.range_constexpr(4):
        x = x * 0.5 + 1.0
    rec = SliceRecorder(buf, tidx // 32, header=header)
    rec.end(1)
    rec.close()
    data[tidx] = x


@cute.jit
def _prefetch_launch(buf: cute.Tensor, data: cute.Tensor):
    _prefetch_kernel(buf, data).launch(grid=(1, 1, 1), block=(64, 1, 1))


def test_a_prefetched_header_is_loaded_before_the_work_and_not_again_at_the_open():
    buf = allocate_slices_buffer(2, 8, device="cpu")
    data = torch.zeros(64)
    opts = cute.compile[cute.KeepPTX(), cute.GPUArch("sm_90a"), DumpDir(tempfile.mkdtemp())]
    ptx = opts(_prefetch_launch, buffer_arg(buf), from_dlpack(data)).__ptx__
    if os.path.exists(ptx[:512]):
        with open(ptx) as fh:
            ptx = fh.read()
    blocks = re.findall(r"// begin inline asm\n(.*?)// end inline asm", ptx, flags=re.S)
    loads = [i for i, b in enumerate(blocks) if "ld.global.u64" in b]
    opens = [i for i, b in enumerate(blocks) if "setp.eq.s64 valid, h0" in b]
    assert len(loads) == 1 and len(opens) == 1 and loads[0] < opens[0]
    body = ptx[ptx.index(blocks[loads[0]]):ptx.index(blocks[opens[0]])]
    assert "fma.rn.f32" in body  # the work sits between the loads and the open


def test_header_must_come_from_prefetch_header():
    with pytest.raises(ProfileBufferError, match="prefetch_header"):
        SliceRecorder(None, 0, header=(1, 2))


def test_close_compares_the_lanes_counts():
    from cute_prof import layout
    ptx = _ptx(True)
    (closing,) = [b for b in re.findall(r"// begin inline asm\n(.*?)// end inline asm", ptx, flags=re.S)
                  if f"{layout.SLICE_CLOSED_MAGIC << layout.SLICE_MAGIC_SHIFT}" in b]
    assert "redux.sync.min.u32" in closing and "redux.sync.max.u32" in closing
    assert f"@dv or.b64 c, c, {1 << layout.SLICE_DIVERGED_BIT}" in closing
    assert closing.index("@dv or.b64") < closing.index("st.global.u64")


def test_role_recorder_refuses_a_header_on_the_flat_paths():
    from cute_prof.device import RoleRecorder

    with pytest.raises(ProfileBufferError, match="header= is the slices path's"):
        RoleRecorder(None, 0, 0, write_path="staged", header=object())
