"""What one slices record costs in SASS, compiled for sm_90a without a GPU: the instructions a
record adds to an FMA loop (the cost that matters when the loop is issue-bound)."""

from __future__ import annotations

import os
import tempfile

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("cutlass")

from cute_prof.sass import disassemble, find_nvdisasm, loop_instructions  # noqa: E402

if find_nvdisasm() is None:
    pytest.skip("nvdisasm not found (pip install nvidia-cuda-nvdisasm)", allow_module_level=True)

import cutlass  # noqa: E402
import cutlass.cute as cute  # noqa: E402
from cutlass.base_dsl.compiler import DumpDir  # noqa: E402
from cutlass.cute.runtime import from_dlpack  # noqa: E402

from cute_prof.decode_slices import allocate_slices_buffer  # noqa: E402
from cute_prof.device import buffer_arg  # noqa: E402
from cute_prof.device.slices import SliceRecorder  # noqa: E402


@cute.kernel
def _loop(buf: cute.Tensor, data: cute.Tensor, variant: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    x = data[tidx]
    y = x + 1.0
    rec = SliceRecorder(buf, tidx // 32, ordered=variant == "ordered", enabled=variant != "none")
    for _ in cutlass.range(256, unroll=1):
        for _ in cutlass.range_constexpr(8):
            x = x * 0.999 + 0.001
            y = y * 0.998 + 0.002
        if cutlass.const_expr(variant in ("ordered", "unordered")):
            rec.end(1)
        if cutlass.const_expr(variant == "span"):
            rec.span(rec.now(), 1)
    rec.close()
    data[tidx] = x + y


@cute.jit
def _launch(buf: cute.Tensor, data: cute.Tensor, variant: cutlass.Constexpr):
    _loop(buf, data, variant).launch(grid=(4, 1, 1), block=(128, 1, 1))


def _loop_size(variant: str) -> int:
    buf = allocate_slices_buffer(16, 512, device="cpu")
    data = torch.zeros(128)
    d = tempfile.mkdtemp()
    cute.compile[cute.KeepCUBIN(), cute.GPUArch("sm_90a"), DumpDir(d)](
        _launch, buffer_arg(buf), from_dlpack(data), variant)
    (cubin,) = [os.path.join(d, f) for f in os.listdir(d) if f.endswith(".cubin")]
    return loop_instructions(disassemble(cubin))


@pytest.fixture(scope="module")
def bare():
    return _loop_size("none")


def test_an_unordered_record_is_four_instructions(bare):
    # timer read, the latched capacity compare, the store, the cursor increment
    assert _loop_size("unordered") - bare == 4


def test_an_ordered_record_adds_only_the_warp_barrier(bare):
    assert _loop_size("ordered") - bare == 6  # + activemask and bar.warp.sync


def test_a_span_pair_is_eight_instructions(bare):
    # two timer reads, two compares, two stores, the second slot's address and the increment
    assert _loop_size("span") - bare == 8
