"""``profile_loop``: one profile buffer over a loop of N iterations (a training step, a
benchmark loop), recording every iteration or every k-th, exporting all, some or none of
them, and summarising per iteration and pooled.

::

    with cute_prof.profile_loop(4096, tags, "loop.json", every=2) as loop:
        for i in loop.iterations(10):
            my_kernel(x, cute_prof.buffer_arg(loop.target), loop.target.max_events)
    print(loop.stats)            # per (launch, tag) and pooled statistics
    print(loop.trace.launches)   # each launch knows its "iteration"

Each recorded iteration starts a new launch epoch (``ProfileBuffer.next_launch``, a tiny
stream-ordered add, so it also works inside a CUDA graph capture); the kernels of one
iteration share the epoch and differ by ``%gridid``. Iterations that are not recorded write
into a one-record scratch buffer (``loop.target`` is that buffer then), so the kernel needs
no extra argument and the real buffer holds only the recorded iterations.

Owns ``profile_loop`` (stage 6); it may not import the CLI.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from .buffer import ProfileBuffer, allocate_profile_buffer
from .decode import decode_buffer, warn_about_losses
from .errors import ProfileBufferError
from .launches import launch_tag_stats
from .session import export_enabled, write_trace
from .files import check_output_path
from .tags import as_tag_table
from .trace import Trace

__all__ = ["LoopProfile", "profile_loop"]


class LoopProfile:
    """The state of one ``profile_loop``: the buffer, which iterations were recorded, and,
    after the block, the decoded ``trace`` and ``stats``."""

    def __init__(self, buffer: ProfileBuffer, scratch: ProfileBuffer, every: int):
        self.buffer = buffer
        self.every = every
        self._scratch = scratch
        self.recording = False
        self.iteration = -1
        self.recorded_iterations: list[int] = []
        self.trace: Trace | None = None
        self.stats: np.ndarray | None = None

    @property
    def target(self) -> ProfileBuffer:
        """The buffer to pass to the kernel in this iteration (scratch when not recorded)."""
        return self.buffer if self.recording else self._scratch

    def iterations(self, count: int) -> Iterator[int]:
        """``range(count)`` that starts a launch epoch before every recorded iteration."""
        for i in range(int(count)):
            self.begin(i)
            yield i

    def begin(self, iteration: int) -> bool:
        """Start ``iteration`` by hand (for loops that are not a ``range``); returns whether
        it is recorded."""
        self.iteration = int(iteration)
        self.recording = self.iteration % self.every == 0
        if self.recording:
            self.buffer.next_launch()
            self.recorded_iterations.append(self.iteration)
        return self.recording


def _iteration_of_launches(trace: Trace, recorded: list[int], first_epoch: int) -> None:
    for launch in trace.launches:
        k = launch["epoch"] - first_epoch
        launch["iteration"] = recorded[k] if 0 <= k < len(recorded) else None


def _select(trace: Trace, keep: Callable[[int], bool] | Iterable[int]) -> Trace:
    """The trace with only the events of the iterations ``keep`` accepts."""
    if callable(keep):
        wanted = [l["index"] for l in trace.launches if l.get("iteration") is not None
                  and keep(l["iteration"])]
    else:
        chosen = {int(i) for i in keep}
        wanted = [l["index"] for l in trace.launches if l.get("iteration") in chosen]
    mask = np.isin(trace.events["launch"], np.array(wanted, dtype=np.int64))
    return Trace(
        events=trace.events[mask], tag_names=trace.tag_names, capacity=trace.capacity,
        attempted=trace.attempted, overflow=trace.overflow, incomplete=trace.incomplete,
        metadata=dict(trace.metadata, exported_iterations=sorted(
            trace.launches[i]["iteration"] for i in wanted)),
        invalid=trace.invalid, clock_syncs=trace.clock_syncs, launches=trace.launches,
        track_names=trace.track_names,
    )


@contextlib.contextmanager
def profile_loop(
    max_events: int,
    tag_names=None,
    trace_path=None,
    device="cuda",
    stream=None,
    *,
    every: int = 1,
    export: bool | None = None,
    export_iterations: Callable[[int], bool] | Iterable[int] | None = None,
    clock_hz: float | None = None,
    group_by: str = "device",
    metadata: dict[str, Any] | None = None,
) -> Iterator[LoopProfile]:
    """A profile buffer over a loop: record every ``every``-th iteration, decode on exit.

    ``max_events`` must hold every recorded iteration's records (they accumulate; overflow
    is counted exactly and warned about). ``export_iterations``: which recorded iterations
    go into ``trace_path`` (a predicate or a collection of iteration numbers; None: all);
    ``export`` and the global switches decide whether anything is written at all."""
    if not isinstance(every, int) or isinstance(every, bool) or every < 1:
        raise ProfileBufferError(f"every must be a positive int, got {every!r}")
    table = as_tag_table(tag_names)
    target = check_output_path(trace_path) if trace_path is not None else None
    buffer = allocate_profile_buffer(max_events, device=device, stream=stream)
    scratch = allocate_profile_buffer(1, device=device, stream=stream)
    loop = LoopProfile(buffer, scratch, every)
    yield loop
    if buffer.device.type == "cuda":
        import torch

        (stream or torch.cuda).synchronize()
    trace = decode_buffer(buffer, table, clock_hz=clock_hz, metadata=metadata)
    _iteration_of_launches(trace, loop.recorded_iterations, first_epoch=1)
    trace.metadata.update(loop_every=every, recorded_iterations=list(loop.recorded_iterations))
    buffer.remember(trace)
    loop.trace = trace
    loop.stats = launch_tag_stats(trace)
    warn_about_losses(trace, include_overflow=True, stacklevel=3)
    if target is not None and (export_enabled() if export is None else bool(export)):
        chosen = trace if export_iterations is None else _select(trace, export_iterations)
        write_trace(chosen, target, group_by=group_by)
        trace.metadata["trace_path"] = str(target)
