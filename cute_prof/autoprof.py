"""Profile a CuTe DSL kernel you did not write: no edit to its source, no spec.

::

    with cute_prof.autoprofile() as prof:   # compile and run the unmodified kernel inside
        out = flash_attn_func(q, k, v)
    trace = prof.trace()                    # one track per warp, named by its role
    print(cute_prof.summarize(trace))

Kernels traced (compiled) inside the block record every ``cutlass.pipeline`` acquire, wait,
commit and release and every named barrier (see :mod:`cute_prof.device.autoprof`); each gets
its own slices buffer, whose address is compiled into the kernel. The trace holds the last
launch of each kernel in the block. Kernels compiled before the block, or served from a
framework's own cache of compiled kernels, record nothing: compile them inside it.
A framework cache may keep the recording kernel after the block; it keeps writing into its
buffer, which stays allocated for that reason.

This module owns the user's entry point (:func:`autoprofile`, its options and their checks)
and :class:`AutoProfile`, which decodes the buffers into traces. The wrapping of the kernel's
calls is :mod:`cute_prof.device.autoprof`'s, imported only when a block opens (``import
cute_prof`` needs no CUTLASS DSL); it may not take the what-if experiments' options, which are
:mod:`cute_prof.experimental`'s.
"""

from __future__ import annotations

import contextlib
import sys

from .analysis.zero_edit import finish_zero_edit_trace
from .decode_slices import allocate_slices_buffer, decode_slices, reset_slices
from .errors import ProfileBufferError
from .trace import Trace

__all__ = ["AutoProfile", "autoprofile", "framework_caches"]

DEFAULT_PER_WARP = 1024
DEFAULT_MAX_WARPS = 32768


class AutoProfile:
    """What one ``autoprofile()`` block recorded: one buffer per instrumented kernel."""

    def __init__(self, recordings: list, *, synchronize: bool = True):
        self.recordings = recordings
        self._synchronize = synchronize
        self.caches: list = []  # the block's framework caches (autoprofile's caches=)

    @property
    def kernels(self) -> list[str]:
        return [r.name for r in self.recordings]

    def _pick(self, kernel: str | None):
        if not self.recordings:
            raise ProfileBufferError(
                "no kernel recorded: none was compiled inside the autoprofile() block, or none "
                "calls a cutlass.pipeline or a named barrier (a framework may have served a "
                "kernel it compiled earlier from its own cache: clear that cache, or run in a "
                "fresh process)")
        if kernel is None:
            if len(self.recordings) > 1:
                raise ProfileBufferError(
                    f"{len(self.recordings)} kernels recorded ({self.kernels}); name one with "
                    f"trace(kernel=...), or use traces()")
            return self.recordings[-1]
        found = [r for r in self.recordings if kernel in r.name]
        if len(found) != 1:
            raise ProfileBufferError(f"{kernel!r} matches {len(found)} of {self.kernels}")
        return found[0]

    def trace(self, kernel: str | None = None) -> Trace:
        """The last launch of ``kernel`` (a substring of its name; optional when only one
        kernel recorded), decoded, with tracks named by role."""
        recording = self._pick(kernel)
        if self._synchronize:
            import torch

            if recording.buffer.is_cuda:
                torch.cuda.synchronize(recording.buffer.device)
        if not recording.closed:
            raise ProfileBufferError(
                f"kernel {recording.name} never finished tracing, so its slices have no close: "
                f"its compile failed")
        meta = {"autoprof": recording.metadata(), "kernel": recording.name}
        trace = decode_slices(recording.buffer, recording.tags, metadata=meta)
        return finish_zero_edit_trace(trace)

    def trace_warm(self, launch, *, warm: int = 10, kernel: str | None = None) -> Trace:
        """After the block: zero the buffers, call ``launch()`` (one call of the kernel's
        entry point, which must run the recording kernel: a framework that keeps compiled
        kernels in-process, such as quack's plan cache, does; one whose cache the block
        swapped, such as FA4's, needs the block's ``caches`` put in place) ``warm`` + 1 times
        back to back and trace the last call. The
        launch right after a compile follows an idle GPU and a zeroed buffer, which evicts
        the kernel's inputs from L2: its loads are slower than in warm launches (see
        docs/performance.md), and a what-if from that trace carries the cold state. Each
        launch rewrites its slices from the start, so the trace is the last launch's alone."""
        if not callable(launch):
            raise ProfileBufferError(f"launch must be a callable that launches the kernel once, "
                                     f"got {type(launch).__name__}")
        if isinstance(warm, bool) or not isinstance(warm, int) or warm < 0:
            raise ProfileBufferError(f"warm must be an int >= 0 (launches before the traced "
                                     f"one), got {warm!r}")
        recording = self._pick(kernel)  # a clear error before any launch
        self.reset()
        for _ in range(warm + 1):
            launch()
        trace = self.trace(kernel)
        if len(trace) == 0:
            raise ProfileBufferError(
                f"{recording.name}: the {warm + 1} launches recorded nothing, so launch() did "
                f"not run the recording kernel (a framework cache the block swapped back: put "
                f"the block's caches, AutoProfile.caches, in place first)")
        return trace

    def traces(self) -> dict[str, Trace]:
        return {r.name: self.trace(r.name) for r in self.recordings}

    def reset(self) -> None:
        """Zero every buffer (the next launch starts an empty trace). Zeroing a large buffer
        evicts the kernel's inputs from L2: trace a launch that follows launches of its own
        kernel, not the one right after this (each launch rewrites its slices from the
        start, and the trace reads each slice's own count)."""
        for recording in self.recordings:
            reset_slices(recording.buffer)


def framework_caches() -> list[tuple[object, str]]:
    """The compile caches of frameworks a block empties without being told (``caches=``):
    FlashAttention-4's, every function of ``flash_attn.cute.interface`` that keeps a
    ``compile_cache``, once that module is imported (one imported later starts empty anyway).
    quack's caches are not attributes a block can swap: pass them, or use ``cute-prof
    record``, whose fresh process compiles everything."""
    interface = sys.modules.get("flash_attn.cute.interface")
    if interface is None:
        return []
    return [(fn, "compile_cache") for fn in list(vars(interface).values())
            if callable(fn) and hasattr(fn, "compile_cache")]


# the options autoprofile() used to take for the what-if experiments
EXPERIMENT_OPTIONS = ("load_arrivals", "consumer_delay_ns")


def autoprofile(*, per_warp: int = DEFAULT_PER_WARP, max_warps: int = DEFAULT_MAX_WARPS,
                kernels: tuple[str, ...] | list[str] | str | None = None, device=None,
                caches=(), synchronize: bool = True, barriers: bool = True,
                mode: str = "full", **unknown):
    """Record every pipeline and barrier call of kernels compiled inside the block.

    ``per_warp``: records kept per warp (a wait is two, a signal one; the rest is counted
    as overflow, exactly). ``max_warps``: warps of a launch that get a slice (CTAs x warps
    per CTA; later warps only count what they lose). ``kernels``: instrument only kernels
    whose name contains one of these. ``device``: where buffers live (the current CUDA
    device by default). ``caches``: ``(owner, attribute)`` pairs naming a framework's
    cache of compiled kernels; inside the block each is an empty cache of the same type,
    so the kernel compiles again and records, and the old one is back afterwards (the
    block's caches stay on ``AutoProfile.caches``, in this order, to launch the recording
    kernel again). FlashAttention-4's are added without being named
    (:func:`framework_caches`). ``synchronize``: wait for
    the GPU before reading a buffer. ``barriers=False``: record the pipelines only, not the
    named barriers (nor a cluster's, ``cluster.wait`` / ``cluster.arrive``): a kernel whose
    warps hand off through named barriers inside their loop pays less for its recording. The
    pipeline model reads no barrier record, yet its what-ifs come out less accurate from
    such traces: record the barriers for what-ifs (the figures: docs/performance.md).
    ``mode="light"``: record the producer's waits alone (``producer_acquire``,
    ``producer_tail``), no consumer call, signal or barrier: within 2% on FA4 and 1% on
    GEMMs (an H200), and the trace still says per ring whether
    the loop is bound by its loads or its consumers, its interval per iteration and its
    stragglers (:func:`cute_prof.analysis.light.light_verdicts`); the consumers' own waits
    and the what-if model need ``mode="full"``.

    Any other keyword is a :class:`TypeError`; the load-arrival probes and the consumer delay
    of the what-if research are :func:`cute_prof.experimental.autoprofile_probed`'s.
    Returns a context manager that yields an :class:`AutoProfile`."""
    if unknown:
        name = sorted(unknown)[0]
        hint = (f": {name} is an experiment, not a profiling option; use "
                f"cute_prof.experimental.autoprofile_probed({name}=...)"
                if name in EXPERIMENT_OPTIONS else "")
        raise TypeError(f"autoprofile() got an unexpected keyword argument {name!r}{hint}")
    return recording_block(per_warp=per_warp, max_warps=max_warps, kernels=kernels,
                           device=device, caches=caches, synchronize=synchronize,
                           barriers=barriers, mode=mode)


@contextlib.contextmanager
def recording_block(*, per_warp: int = DEFAULT_PER_WARP, max_warps: int = DEFAULT_MAX_WARPS,
                    kernels: tuple[str, ...] | list[str] | str | None = None, device=None,
                    caches=(), synchronize: bool = True, barriers: bool = True,
                    mode: str = "full", experiments: dict | None = None):
    """The block behind :func:`autoprofile` (its options, with its defaults, checked here)
    and :func:`cute_prof.experimental.autoprofile_probed` (``experiments``: more fields of
    the device's ``RecordingConfig``, which that function checks). Yields an
    :class:`AutoProfile`."""
    from .device.autoprof import RecordingConfig, recording

    if isinstance(kernels, str):
        kernels = (kernels,)
    per_warp, max_warps = int(per_warp), int(max_warps)
    if per_warp < 1 or max_warps < 1:
        raise ProfileBufferError(f"per_warp and max_warps must be >= 1, got {per_warp}, {max_warps}")

    def allocate(n_slices: int, records: int):
        target = device
        if target is None:
            import torch

            target = f"cuda:{torch.cuda.current_device()}" if torch.cuda.is_available() else "cpu"
        return allocate_slices_buffer(n_slices, records, device=target)

    if not isinstance(barriers, bool):
        raise ProfileBufferError(f"barriers must be True or False, got {barriers!r}")
    if mode not in ("full", "light"):
        raise ProfileBufferError(f"mode must be 'full' or 'light', got {mode!r}")
    config = RecordingConfig(per_warp=per_warp, max_warps=max_warps, allocate=allocate,
                             kernels=tuple(kernels) if kernels is not None else None,
                             barriers=barriers, mode=mode, **(experiments or {}))
    caches = list(caches)
    caches += [(owner, name) for owner, name in framework_caches()
               if not any(owner is o and name == n for o, n in caches)]
    saved = [(owner, name, getattr(owner, name)) for owner, name in caches]
    result = None
    try:
        for owner, name, cache in saved:
            setattr(owner, name, type(cache)())
        with recording(config) as found:
            result = AutoProfile(found, synchronize=synchronize)
            yield result
    finally:
        if result is not None:
            result.caches = [getattr(owner, name) for owner, name, _ in saved]
        for owner, name, cache in saved:
            setattr(owner, name, cache)
