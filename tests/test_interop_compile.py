"""The kernels of the IKET comparison, the 2-GPU example and the clock probe compile for
sm_90a without a GPU, and emit what they must: IKET ops in the IKET variant only, one
%globaltimer read in the clock probe."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("cutlass")

import cuda.bindings.driver as cuda  # noqa: E402
import cutlass.cute as cute  # noqa: E402
from cutlass import Int32  # noqa: E402
from cutlass.cute.runtime import from_dlpack  # noqa: E402

from cute_prof.buffer import allocate_profile_buffer  # noqa: E402
from cute_prof.device import buffer_arg  # noqa: E402
from cute_prof.device.timer_probe import launch_timer_probe  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "gpu"))
sys.path.insert(0, str(ROOT / "examples"))
import iket_compare  # noqa: E402
import two_gpu  # noqa: E402

from test_ptx import compile_ptx  # noqa: E402


def _args(capacity=64):
    prof = allocate_profile_buffer(capacity, device="cpu")
    return buffer_arg(prof.tensor), Int32(capacity)


@pytest.mark.parametrize("mode", ["iket", "iket_plain", "ours"])
def test_iket_compare_kernel_compiles(mode):
    arg, capacity = _args()
    ptx = compile_ptx(iket_compare.launch_compare, arg, capacity, Int32(2), mode,
                      cuda.CUstream(0))
    assert "globaltimer" in ptx
    # our recorder claims slots with an atomic; the IKET variant leaves recording to IKET
    assert ("atom" in ptx) == (mode == "ours")


def test_two_gpu_kernel_and_clock_probe_compile():
    arg, capacity = _args()
    ptx = compile_ptx(two_gpu.launch_work, arg, capacity, Int32(0), cuda.CUstream(0))
    assert "globaltimer" in ptx and "atom" in ptx
    probe = compile_ptx(launch_timer_probe, from_dlpack(torch.zeros(1, dtype=torch.int64)))
    assert probe.count("%globaltimer") == 1
