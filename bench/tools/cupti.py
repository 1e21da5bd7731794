"""Kernel times from CUPTI (torch.profiler), variants shuffled every round: the GPU benches' one
timing method. CUDA events around one Python launch also time the host's launch overhead
(tens of microseconds for a CuTe DSL kernel), which differs from variant to variant."""

from __future__ import annotations

import random
import statistics
from typing import Callable

from cute_prof import calibration
from cute_prof.calibration import cuda_kernels

# kernels the benches launch themselves between variants (a flat buffer's counter reset)
HOUSEKEEPING = ("fill", "elementwise", "emset", "Memcpy", "at::")


def device_kernels(prof) -> list:
    """CUPTI kernel events in start order, less the housekeeping kernels."""
    return cuda_kernels(prof, exclude=HOUSEKEEPING)


def kernels_per_call(launch: Callable[[], object]) -> int:
    """How many kernels one call launches (cuBLAS may launch more than one)."""
    return calibration.kernels_per_call(launch, exclude=HOUSEKEEPING)


def time_shuffled(variants: dict, *, rounds: int, warmup: int = 3, resets: dict | None = None,
                  per_block: int = 1) -> dict:
    """``{name: [ms per round]}``: every variant once per round, in a fresh random order, its
    kernels' CUPTI durations summed per call. ``resets[name]`` runs before each launch and is
    not timed (its kernels must be housekeeping ones).

    ``per_block`` > 1: every round launches each variant that many times back to back and
    keeps the median of the block's second half: each launch follows its own kernel, as a
    traced launch does (``traced_launches``), where one launch per round follows some other
    kernel. On FA4 both ways read the same changes within 1.2 points (gpu24); neither
    reproduced the traced launches' times (recording kernel, b4: 848 us traced, 936 us in
    shuffled rounds, 970 us in blocks; bench/results/whatif/state/)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    resets = resets or {}
    counts = {name: kernels_per_call(fn) for name, fn in variants.items()}

    def run(name):
        if name in resets:
            resets[name]()
        variants[name]()

    names = list(variants)
    for _ in range(warmup):
        for name in names:
            run(name)
    torch.cuda.synchronize()
    order = []
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(rounds):
            random.shuffle(names)
            for name in names:
                for _ in range(per_block):
                    run(name)
                order.append(name)
            torch.cuda.synchronize()
    kernels = device_kernels(prof)
    want = sum(counts[name] * per_block for name in order)
    if len(kernels) != want:
        raise RuntimeError(f"CUPTI saw {len(kernels)} kernels, expected {want}: "
                           f"{sorted({e.name for e in kernels})[:6]}")
    times, at = {name: [] for name in variants}, 0
    for name in order:
        n = counts[name]
        launches = [sum(e.time_range.elapsed_us() for e in kernels[at + i * n:at + (i + 1) * n]) / 1e3
                    for i in range(per_block)]
        times[name].append(statistics.median(launches[per_block // 2:]))
        at += n * per_block
    return times


def traced_launches(prof, launch, count: int, *, warm: int = 10):
    """``count`` traces of ``prof``'s kernel (an ``autoprofile()`` block's result), each of a
    launch that followed ``warm`` of its own (``AutoProfile.trace_warm``), its CUPTI time
    in the trace's metadata (``launch_cupti_ns``; the buffer's zeroing and read-back are
    housekeeping kernels): one launch's trace carries that launch's noise (quack's 4 -> 2
    predicted +94.65% from one launch, +78.37% from another run's), so the check predicts
    from several. Nothing runs before the ``warm`` launches: seconds of launches heat the
    GPU past the state the timing rounds run in (after 2 s, ws_gemm's recording kernel took
    230 us against 189 in the rounds, and its 4 -> 2 read +39.2% from those launches against
    +53.3% measured: bench/results/whatif/README.md, stop 40)."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(count):
        with profile(activities=[ProfilerActivity.CUDA]) as timed:
            trace = prof.trace_warm(launch, warm=warm)
        kernels = device_kernels(timed)
        per_call = max(len(kernels) // (warm + 1), 1)
        trace.metadata["launch_cupti_ns"] = sum(
            e.time_range.elapsed_us() for e in kernels[-per_call:]) * 1e3
        yield trace
