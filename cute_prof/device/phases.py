"""Phases (back-to-back regions on one track) and the sampling ``Profiler`` handle.

Owns ``PhaseSequence`` and ``Profiler``, built on :mod:`.ops`; it may not import anything on
the host side above ``device``.
"""

from __future__ import annotations

from cutlass import Int32, Int64

from .. import layout
from .ops import clock_sync, instant, profile_region, profile_start, profile_stop
from .ptx import emit_record, is_enabled, read_globaltimer, resolve_tag, sampling_flag


class PhaseSequence:
    """Back-to-back phases on one track: ``next(tag)`` ends the open phase and starts the
    next at the same timestamp; ``end()`` closes the last one (as Mori's SEQ/NEXT).

    The open phase's start and tag are runtime values carried through loops (the object
    implements the DSL's value protocol), so ``seq.next("a")`` inside a dynamic loop works:
    the first iteration finds no open phase (start == 0) and records nothing for it."""

    def __init__(self, buf, max_events, tid, *, guard: str = "cta", target_warp=None,
                 sample_flag=None, enabled=None, _state=None):
        self._buf, self._max_events, self._tid = buf, max_events, tid
        self._guard, self._target_warp = guard, target_warp
        self._sample_flag = sample_flag
        self._enabled = is_enabled(enabled)
        if _state is not None:
            self._start, self._tag, self._payload = _state
        elif self._enabled:
            self._start, self._tag, self._payload = Int64(0), Int32(0), Int32(0)
        else:
            self._start = self._tag = self._payload = None

    def __extract_mlir_values__(self):
        if not self._enabled:
            return []
        return [self._start.ir_value(), self._tag.ir_value(), self._payload.ir_value()]

    def __new_from_mlir_values__(self, values):
        state = (Int64(values[0]), Int32(values[1]), Int32(values[2])) if self._enabled else None
        return PhaseSequence(self._buf, self._max_events, self._tid, guard=self._guard,
                             target_warp=self._target_warp, sample_flag=self._sample_flag,
                             enabled=self._enabled, _state=state)

    def _close(self, now) -> None:
        emit_record(
            self._buf, self._max_events, kind=layout.KIND_SPAN, start=self._start, end=now,
            tag=self._tag, tid=self._tid, payload=self._payload, guard=self._guard,
            target_warp=self._target_warp, sample_flag=self._sample_flag, open_flag=self._start,
        )

    def next(self, tag, *, payload=0) -> "PhaseSequence":
        """End the open phase (if any) and open ``tag`` now. Returns self."""
        if not self._enabled:
            return self
        now = read_globaltimer()
        self._close(now)
        self._start, self._tag, self._payload = now, Int32(resolve_tag(tag)), Int32(payload)
        return self

    def end(self) -> "PhaseSequence":
        """Close the open phase; later ``next`` calls start a new one."""
        if not self._enabled:
            return self
        self._close(read_globaltimer())
        self._start = Int64(0)
        return self



class Profiler:
    """A kernel-local handle that fixes the buffer, sampling and defaults once:

        prof = Profiler(buf, max_events, sample_every_cta=4, warp_mask=0b1)
        with prof.region("load", tid): ...
        prof.instant("barrier", tid)
        seq = prof.phases(tid); seq.next("a"); ...; seq.end()

    ``sample_every_cta``/``warp_mask`` may be runtime values (kernel arguments): records are
    kept only from every k-th CTA and from warps whose bit is set."""

    def __init__(self, buf, max_events, *, enabled=None, guard: str = "cta", target_warp=None,
                 sample_every_cta=None, warp_mask=None):
        self.buf, self.max_events = buf, max_events
        self.enabled = is_enabled(enabled)
        self.guard, self.target_warp = guard, target_warp
        self.sample_flag = None
        if self.enabled and (sample_every_cta is not None or warp_mask is not None):
            self.sample_flag = sampling_flag(
                1 if sample_every_cta is None else sample_every_cta,
                0xFFFFFFFF if warp_mask is None else warp_mask,
            )

    def _opts(self, guard, target_warp):
        return dict(
            guard=self.guard if guard is None else guard,
            target_warp=self.target_warp if target_warp is None else target_warp,
            sample_flag=self.sample_flag,
            enabled=self.enabled,
        )

    def start(self, *, clock: bool = False):
        return profile_start(self.buf, self.max_events, enabled=self.enabled, clock=clock)

    def stop(self, eid, tag, tid, *, payload=0, clock: bool = False, guard=None, target_warp=None):
        profile_stop(self.buf, eid, tag, tid, self.max_events, payload=payload, clock=clock,
                     **self._opts(guard, target_warp))

    def region(self, tag, tid, *, payload=0, clock: bool = False, guard=None, target_warp=None):
        return profile_region(self.buf, self.max_events, tag, tid, payload=payload, clock=clock,
                              **self._opts(guard, target_warp))

    def instant(self, tag, tid, *, payload=0, guard=None, target_warp=None):
        instant(self.buf, self.max_events, tag, tid, payload=payload, **self._opts(guard, target_warp))

    def phases(self, tid, *, guard=None, target_warp=None) -> PhaseSequence:
        return PhaseSequence(self.buf, self.max_events, tid, **self._opts(guard, target_warp))

    def clock_sync(self, *, tid=0):
        clock_sync(self.buf, self.max_events, tid=tid, enabled=self.enabled)

