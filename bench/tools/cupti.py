"""Kernel times from CUPTI (torch.profiler), variants shuffled every round: the GPU benches' one
timing method. CUDA events around one Python launch also time the host's launch overhead
(tens of microseconds for a CuTe DSL kernel), which differs from variant to variant. Where
CUPTI cannot run (under ``run-iket``, whose injection library holds it), ``time_batches``
times batches of launches enqueued behind a sleep kernel, so they run back to back."""

from __future__ import annotations

from cute_prof import calibration
from cute_prof.calibration import cuda_kernels

# kernels the benches launch themselves between variants (a flat buffer's counter reset)
HOUSEKEEPING = ("fill", "elementwise", "emset", "Memcpy", "at::")


def device_kernels(prof) -> list:
    """CUPTI kernel events in start order, less the housekeeping kernels."""
    return cuda_kernels(prof, exclude=HOUSEKEEPING)


def time_shuffled(variants: dict, *, rounds: int, warmup: int = 3, resets: dict | None = None,
                  per_block: int = 1) -> dict:
    """``{name: [ms per round]}``: ``calibration.time_shuffled`` without the housekeeping
    kernels (``resets[name]`` runs before each launch, untimed). With ``per_block`` > 1 each
    launch follows its own kernel, as a traced launch does (``traced_launches``)."""
    times = calibration.time_shuffled(variants, rounds=rounds, warmup=warmup, resets=resets,
                                      per_block=per_block, exclude=HOUSEKEEPING)
    return {name: [ns / 1e6 for ns in values] for name, values in times.items()}


def time_batches(variants: dict, *, rounds: int, batch: int = 10, warmup: int = 3) -> dict:
    """``{name: [ms per launch, per round]}`` from CUDA events around ``batch`` launches
    enqueued behind a ~10 ms sleep kernel (longer than enqueueing them), shuffled each round."""
    import random

    import torch

    names = list(variants)
    for _ in range(warmup):
        for name in names:
            variants[name]()
    torch.cuda.synchronize()
    times = {name: [] for name in names}
    for _ in range(rounds):
        random.shuffle(names)
        for name in names:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(20_000_000)
            start.record()
            for _ in range(batch):
                variants[name]()
            end.record()
            end.synchronize()
            times[name].append(start.elapsed_time(end) / batch)
    return times


def traced_launches(prof, launch, count: int, *, warm: int = 10):
    """``count`` traces of ``prof``'s kernel (an ``autoprofile()`` block's result), each of a
    launch that followed ``warm`` of its own (``AutoProfile.trace_warm``), its CUPTI time
    in the trace's metadata (``launch_cupti_ns``; the buffer's zeroing and read-back are
    housekeeping kernels): one launch's trace carries that launch's noise, so the check
    predicts from several. Nothing runs before the ``warm`` launches: seconds of launches
    heat the GPU past the state the timing rounds run in."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(count):
        with profile(activities=[ProfilerActivity.CUDA]) as timed:
            trace = prof.trace_warm(launch, warm=warm)
        kernels = device_kernels(timed)
        per_call = max(len(kernels) // (warm + 1), 1)
        trace.metadata["launch_cupti_ns"] = sum(
            e.time_range.elapsed_us() for e in kernels[-per_call:]) * 1e3
        yield trace


def add_traced_base_options(parser, base: str) -> None:
    """``--load-arrivals`` and ``--traces``, as every what-if GPU part takes them."""
    parser.add_argument("--load-arrivals", type=int, default=7, metavar="N",
                        help=f"one more base trace ({base}_arrivals.npz) whose producer probes "
                             "one load in N (autoprofile_probed(load_arrivals=N)); 0: none")
    parser.add_argument("--traces", type=int, default=3, metavar="K",
                        help="traced launches of the base (and of the probed base), each after "
                             f"ten of its own: {base}.npz, {base}.launch1.npz, ...")
