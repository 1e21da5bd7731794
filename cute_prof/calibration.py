"""Overhead calibration: what an empty region costs on this GPU, and traces corrected for it.

Measure once per GPU (record empty regions with the same op and guard you profile with,
e.g. ``bench/overhead.py`` does) and subtract the median from every span. Both the raw and
the corrected trace stay available: correction changes durations, never counts.

Owns the overhead correction and the GPU timing helpers of the what-if checks (stage 3); it may
not import analysis, export or anything above, and imports torch only inside its GPU functions.
"""

from __future__ import annotations

import dataclasses
import statistics

import numpy as np

from . import layout
from .errors import ProfileBufferError
from .trace import Trace


def empty_region_cost(trace: Trace, tag: int) -> dict:
    """Statistics of the spans recorded with ``tag`` (which must wrap no work)."""
    spans = trace.events[(trace.events["tag"] == tag) & (trace.events["kind"] != layout.KIND_INSTANT)]
    if len(spans) == 0:
        raise ProfileBufferError(f"no spans with tag {tag} in this trace: record empty regions first")
    dur = spans["dur_ns"].astype(np.float64)
    out = {"count": int(len(spans)), "median_ns": float(np.median(dur)), "mean_ns": float(dur.mean()),
           "min_ns": float(dur.min()), "max_ns": float(dur.max())}
    cycles = spans["dur_cycles"][spans["dur_cycles"] >= 0]
    if len(cycles):
        out.update(median_cycles=float(np.median(cycles)), min_cycles=int(cycles.min()))
    return out


def subtract_overhead(trace: Trace, overhead_ns: float) -> Trace:
    """A copy of ``trace`` with ``overhead_ns`` taken off every span (never below zero)."""
    if not np.isfinite(overhead_ns) or overhead_ns < 0:
        raise ProfileBufferError(f"overhead_ns must be a finite non-negative number, got {overhead_ns!r}")
    events = trace.events.copy()
    spans = events["kind"] != layout.KIND_INSTANT
    events["dur_ns"][spans] = np.maximum(events["dur_ns"][spans] - int(round(overhead_ns)), 0)
    metadata = dict(trace.metadata, overhead_subtracted_ns=float(overhead_ns))
    return dataclasses.replace(trace, events=events, metadata=metadata)


def cuda_kernels(prof, *, exclude: tuple[str, ...] = ()) -> list:
    """The CUDA kernel events (CUPTI) of a finished ``torch.profiler.profile`` session, in
    start order, less those whose name contains one of ``exclude`` (a bench's own
    housekeeping kernels: a buffer's zeroing, copies)."""
    import torch

    found = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
             and not any(part in e.name for part in exclude)]
    return sorted(found, key=lambda e: e.time_range.start)


def kernels_per_call(launch, *, exclude: tuple[str, ...] = ()) -> int:
    """How many kernels one call of ``launch()`` runs (after one call untimed: a first call
    may compile), as :func:`cuda_kernels` counts them."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    launch()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        launch()
        torch.cuda.synchronize()
    return len(cuda_kernels(prof, exclude=exclude))


def time_shuffled(launches: dict, *, rounds: int, warmup: int = 3, resets: dict | None = None,
                  per_block: int = 1, exclude: tuple[str, ...] = ()) -> dict:
    """``{name: [ns per round]}``: every launch (``name -> callable`` launching a kernel
    once) once per round in a fresh random order, after ``warmup`` rounds, its kernels'
    CUPTI durations (torch.profiler) summed per call, those named in ``exclude`` left out:
    CUDA events around one Python launch would time the host's launch overhead too.
    ``resets[name]`` runs before each of that launch's calls and is not timed (its kernels
    must be ones ``exclude`` names).

    ``per_block`` > 1: each round calls each launch that many times back to back and keeps
    the median of the block's second half (each call follows its own kernel, where one call
    per round follows some other kernel; both read about the same changes: see
    docs/performance.md)."""
    import random
    import torch
    from torch.profiler import ProfilerActivity, profile

    resets = resets or {}
    counts = {name: kernels_per_call(fn, exclude=exclude) for name, fn in launches.items()}
    for name, count in counts.items():
        if count == 0:
            raise ProfileBufferError(f"{name}() launched no kernel CUPTI saw")

    def run(name):
        if name in resets:
            resets[name]()
        launches[name]()

    names = list(launches)
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
    found = cuda_kernels(prof, exclude=exclude)
    want = sum(counts[name] * per_block for name in order)
    if len(found) != want:
        raise ProfileBufferError(f"CUPTI saw {len(found)} kernels in {rounds} rounds, expected "
                                 f"{want} (a call launches a varying number of kernels): "
                                 f"{sorted({e.name for e in found})[:6]}")
    times, at = {name: [] for name in launches}, 0
    for name in order:
        n = counts[name]
        block = [sum(e.time_range.elapsed_us() for e in found[at + j * n:at + (j + 1) * n]) * 1e3
                 for j in range(per_block)]
        times[name].append(statistics.median(block[per_block // 2:]))
        at += n * per_block
    return times


def round_changes(times: dict, name: str, base: str) -> list[float]:
    """``name``'s change against ``base`` in each timing round of :func:`time_shuffled`
    (both timed in every round of one call, so their lists pair up round by round)."""
    changed, plain = times[name], times[base]
    if len(changed) != len(plain):
        raise ProfileBufferError(f"{name} has {len(changed)} timed rounds, {base} "
                                 f"{len(plain)}: not one set of shuffled rounds")
    return [c / p - 1 for c, p in zip(changed, plain)]


def paired_change(times: dict, name: str, base: str) -> float:
    """The median of ``name``'s per-round changes against ``base`` (:func:`round_changes`):
    the GPU's clock moves between rounds, which a ratio of two medians reads as change; a
    change paired round by round spreads less over repeated runs (see docs/performance.md)."""
    return statistics.median(round_changes(times, name, base))


def round_spread(times: dict, name: str, base: str) -> float:
    """Half the interquartile range of ``name``'s per-round changes against ``base``
    (:func:`round_changes`): how far a change measured by :func:`paired_change` can sit from
    another of the same kernels for the GPU's own noise."""
    q1, _, q3 = statistics.quantiles(round_changes(times, name, base), n=4)
    return (q3 - q1) / 2


def resolved_pair_order(predicted, measured, noise) -> tuple[int, list[tuple[int, int]]]:
    """How well predictions rank what the GPU measured, over the pairs of changes it tells
    apart: those whose measured changes differ by more than their two ``noise`` (each one's
    :func:`round_spread`). Returns how many such pairs there are and those the predictions
    order the other way or tie (index pairs). Spearman's correlation over every change counts
    the order of changes within noise of each other (two changes that both mean "no
    change"), which no measurement fixes."""
    p, m, n = (np.asarray(x, dtype=np.float64) for x in (predicted, measured, noise))
    if not p.shape == m.shape == n.shape or p.ndim != 1:
        raise ValueError("predicted, measured and noise must be 1-D and of one length")
    i, j = np.triu_indices(p.size, 1)
    apart = np.abs(m[i] - m[j]) > n[i] + n[j]
    wrong = apart & (np.sign(p[i] - p[j]) != np.sign(m[i] - m[j]))
    return int(apart.sum()), list(zip(i[wrong].tolist(), j[wrong].tolist()))


def recorder_cost(plain, recording, *, rounds: int = 20, warmup: int = 3) -> dict:
    """What recording costs a kernel on the GPU: the figure a what-if takes to predict the
    kernel unrecorded (``DerivedPipeline.what_if_terms(recorder_cost=...)``, ``cute-prof
    analyze --recorder-cost``). Most of it is the compiler's schedule around the records
    rather than their own time (the figures: docs/performance.md).

    ``plain()`` and ``recording()`` each launch the kernel once: its plain build, and the
    one compiled inside an ``autoprofile`` block (with the block's ``caches`` in place where
    it swapped a framework's cache; every launch rewrites its slices). Both run once per
    round, in a fresh random order, after ``warmup`` rounds; CUPTI (torch.profiler's kernel
    events) times them, so the host's launch overhead stays out. Returns ``{"cost": the
    median of the rounds' recording / plain - 1 (:func:`paired_change`), "plain_ns": [...],
    "recording_ns": [...]}`` (each call's kernels summed, one value per round:
    :func:`time_shuffled`)."""
    for name, fn in (("plain", plain), ("recording", recording)):
        if not callable(fn):
            raise ProfileBufferError(f"{name} must be a callable that launches the kernel once, "
                                     f"got {type(fn).__name__}")
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 3:
        raise ProfileBufferError(f"rounds must be an int >= 3 (a median of rounds), got {rounds!r}")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ProfileBufferError(f"warmup must be an int >= 0, got {warmup!r}")
    times = time_shuffled({"plain": plain, "recording": recording}, rounds=rounds,
                          warmup=warmup)
    return {"cost": paired_change(times, "recording", "plain"),
            "plain_ns": times["plain"], "recording_ns": times["recording"]}
