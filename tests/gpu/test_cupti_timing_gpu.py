"""CUPTI timing of launches (``calibration``): kernels counted per call and timed in shuffled
rounds, on kernels whose ratio is known (one matmul against two of the same), and the
bench's timing helpers built on them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gpu_required import require_gpu  # noqa: E402

torch = require_gpu()

from cute_prof.calibration import cuda_kernels, kernels_per_call, recorder_cost  # noqa: E402

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _matmuls(count: int):
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    out = torch.empty_like(a)

    def launch():
        for _ in range(count):
            torch.matmul(a, a, out=out)
    return launch


def test_kernels_per_call_counts_each_launch_and_leaves_out_the_excluded():
    from torch.profiler import ProfilerActivity, profile

    assert kernels_per_call(_matmuls(1)) >= 1
    assert kernels_per_call(_matmuls(3)) == 3 * kernels_per_call(_matmuls(1))
    buffer = torch.empty(1 << 20, device="cuda")
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        buffer.zero_()
        _matmuls(1)()
        torch.cuda.synchronize()
    everything = cuda_kernels(prof)
    zeroing = everything[0].name  # the buffer's zeroing came first
    kept = cuda_kernels(prof, exclude=(zeroing,))
    assert 0 < len(kept) < len(everything)
    assert [e.name for e in kept] == [e.name for e in everything if zeroing not in e.name]
    assert all(everything[i].time_range.start <= everything[i + 1].time_range.start
               for i in range(len(everything) - 1))


def test_recorder_cost_reads_a_kernel_that_does_the_work_twice_as_100_percent():
    got = recorder_cost(_matmuls(1), _matmuls(2), rounds=9)
    assert got["cost"] == pytest.approx(1.0, abs=0.15), got["cost"]
    assert len(got["plain_ns"]) == len(got["recording_ns"]) == 9


def test_the_benches_shuffled_rounds_use_the_same_counting():
    sys.path.insert(0, str(BENCH))
    from tools.cupti import time_shuffled

    times = time_shuffled({"one": _matmuls(1), "two": _matmuls(2)}, rounds=5, warmup=1)
    ratio = sorted(times["two"])[2] / sorted(times["one"])[2]
    assert ratio == pytest.approx(2.0, rel=0.15)
