"""A one-thread kernel that stores ``%globaltimer`` into ``dst[0]``: the GPU side of the
host/GPU clock pairs that :func:`cute_prof.distributed.measure_clock` fits.

Owns that kernel only; the fit is :mod:`cute_prof.distributed`'s, which it may not import.
"""

from __future__ import annotations

import cutlass.cute as cute

from .ptx import read_globaltimer


@cute.kernel
def timer_probe_kernel(dst: cute.Tensor):
    dst[0] = read_globaltimer()


@cute.jit
def launch_timer_probe(dst: cute.Tensor):
    timer_probe_kernel(dst).launch(grid=(1, 1, 1), block=(1, 1, 1))
