"""The reference document's complete example, transcribed with only the import changed.

It compiles for sm_90a everywhere; where a GPU is present it also runs and decodes."""

import os
import tempfile

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("cutlass")

import cutlass  # noqa: E402
import cutlass.cute as cute  # noqa: E402
from cutlass import Int32  # noqa: E402
from cutlass.base_dsl.compiler import DumpDir  # noqa: E402
from cutlass.cute.runtime import from_dlpack  # noqa: E402

from cute_prof import (  # noqa: E402  (the only line that differs from the reference)
    TagTable, allocate_profile_buffer, decode_events, events_to_perfetto,
    profile_region, lane0_warp0_start, lane0_warp0_stop,
)

# Tags
TAG_OUTER = 0
TAG_INNER = 1
CTAS, THREADS = 4, 128


class MyProfiledKernel:
    @cute.kernel
    def kernel(self, output: cute.Tensor, prof_buf: cute.Tensor, max_events: Int32):
        bidx, _, _ = cute.arch.block_idx()
        tidx, _, _ = cute.arch.thread_idx()

        # Profile outer loop
        eid = lane0_warp0_start(prof_buf, max_events)

        for i in cutlass.range(4):
            # Profile inner work with context manager
            with profile_region(prof_buf, max_events, Int32(TAG_INNER), bidx):
                output[bidx * THREADS + tidx] = output[bidx * THREADS + tidx] * 2.0 + 1.0

        lane0_warp0_stop(prof_buf, eid, Int32(TAG_OUTER), bidx, max_events)

    @cute.jit()
    def __call__(self, output: cute.Tensor, prof_buf: cute.Tensor, max_events: Int32):
        self.kernel(output, prof_buf, max_events).launch(grid=(CTAS, 1, 1), block=(THREADS, 1, 1))

    def interface(self, output, prof_buf, max_events):
        self.__call__(from_dlpack(output), from_dlpack(prof_buf), Int32(max_events))


def test_reference_example_compiles_for_sm90a():
    kernel = MyProfiledKernel()
    prof = allocate_profile_buffer(256, device="cpu")
    output = torch.zeros(CTAS * THREADS)
    with tempfile.TemporaryDirectory() as dump:
        compiled = cute.compile[cute.KeepPTX(), cute.GPUArch("sm_90a"), DumpDir(dump)](
            kernel.__call__, from_dlpack(output), from_dlpack(prof.tensor), Int32(256))
        ptx = compiled.__ptx__
        if os.path.exists(ptx[:512]):
            with open(ptx) as fh:
                ptx = fh.read()
    # the outer region and the inner one, once, or four times where the compiler unrolls
    # the 4-trip loop
    assert ptx.count("atom.global.add.u64") in (2, 1 + 4)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")
def test_reference_example_runs(tmp_path):
    tag_table = TagTable(["outer", "inner"])
    prof = allocate_profile_buffer(256, device="cuda")
    output = torch.randn(CTAS * THREADS, device="cuda")
    expected = output.clone()
    for _ in range(4):
        expected = expected * 2.0 + 1.0
    kernel = MyProfiledKernel()
    kernel.interface(output, prof.tensor, 256)
    torch.cuda.synchronize()

    events, overflow = decode_events(prof, tag_table)
    events_to_perfetto(events, str(tmp_path / "trace.json"))
    assert overflow == 0 and torch.equal(output, expected)
    assert sorted(e.name for e in events) == ["inner"] * 4 * CTAS + ["outer"] * CTAS
    for cta in range(CTAS):
        outer = next(e for e in events if e.name == "outer" and e.tid == cta)
        inner = [e for e in events if e.name == "inner" and e.tid == cta]
        assert all(outer.start_ns <= e.start_ns and e.end_ns <= outer.end_ns for e in inner)
