"""A small kernel with one opt-in zero-edit region and one mark (tests import it: the DSL
compiles a kernel from its source file)."""

import cutlass
import cutlass.cute as cute
from cutlass import Int32

from cute_prof.device.autoprof import mark, region


@cute.kernel
def kernel(x: cute.Tensor, n: Int32):
    tidx, _, _ = cute.arch.thread_idx()
    acc = Int32(0)
    with region("body", payload=n):
        for i in cutlass.range(n):
            acc = acc + i * tidx
    mark("done")
    x[tidx] = acc


@cute.jit
def launch(x: cute.Tensor, n: Int32):
    kernel(x, n).launch(grid=[2, 1, 1], block=[64, 1, 1])
