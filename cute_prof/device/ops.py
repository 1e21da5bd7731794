"""Record ops with one atomic per record, and the reference-compatible wrappers.

Start ops only read the timer: the start time lives in a register until the matching stop.
Seed-compatible functions keep the reference's positional order; every addition is a
keyword-only option. Profiling can be compiled out per call (``enabled=False``), per kernel
(a ``cutlass.Constexpr`` passed through as ``enabled``) or for the whole process
(``CUTE_PROF_ENABLE=0`` or :func:`set_enabled`): then no op emits anything at all.

Owns the one-atomic record ops; their PTX is :mod:`.ptx`'s. It may not import anything on the
host side above ``device``.
"""

from __future__ import annotations

from cutlass.cutlass_dsl import dsl_user_op

from .. import layout
from ..errors import ProfileBufferError
from .ptx import GUARDS, emit_record, is_enabled, read_clock64, read_globaltimer

# ----------------------------------------------------------------------------------------
# seed-compatible ops


@dsl_user_op
def profile_start(buf, max_events, *, enabled=None, clock: bool = False, loc=None, ip=None):
    """Read the start time. Every thread reads it; which thread records is the stop's guard."""
    if not is_enabled(enabled):
        return 0
    return read_clock64(loc=loc, ip=ip) if clock else read_globaltimer(loc=loc, ip=ip)


@dsl_user_op
def profile_stop(
    buf,
    eid,
    tag,
    tid,
    max_events,
    *,
    guard: str = "all",
    target_warp=None,
    payload=0,
    clock: bool = False,
    end=None,
    sample_flag=None,
    enabled=None,
    loc=None,
    ip=None,
) -> None:
    """Write one span record from every thread selected by ``guard`` (default: all threads).
    ``end``: a timestamp already read (``read_globaltimer()``) to close the span at, so that
    back-to-back regions share one boundary exactly; default: read the timer now."""
    if not is_enabled(enabled):
        return
    if end is not None and clock:
        raise ProfileBufferError("end= takes a %globaltimer timestamp; it does not combine with clock=True")
    emit_record(
        buf,
        max_events,
        kind=layout.KIND_CLOCK_SPAN if clock else layout.KIND_SPAN,
        start=eid,
        end=end,
        tag=tag,
        tid=tid,
        payload=payload,
        guard=guard,
        target_warp=target_warp,
        sample_flag=sample_flag,
        loc=loc,
        ip=ip,
    )


@dsl_user_op
def lane0_warp0_start(buf, max_events, *, enabled=None, clock: bool = False, loc=None, ip=None):
    return profile_start(buf, max_events, enabled=enabled, clock=clock, loc=loc, ip=ip)


@dsl_user_op
def lane0_warp0_stop(buf, eid, tag, tid, max_events, *, payload=0, clock=False, enabled=None, loc=None, ip=None):
    """Thread 0 of the CTA writes the record."""
    profile_stop(buf, eid, tag, tid, max_events, guard="cta", payload=payload, clock=clock, enabled=enabled, loc=loc, ip=ip)


@dsl_user_op
def warp_start(buf, max_events, target_warp=None, *, enabled=None, clock: bool = False, loc=None, ip=None):
    return profile_start(buf, max_events, enabled=enabled, clock=clock, loc=loc, ip=ip)


@dsl_user_op
def warp_stop(buf, eid, tag, tid, max_events, target_warp=0, *, payload=0, clock=False, enabled=None, loc=None, ip=None):
    """Lane 0 of warp ``target_warp`` (warp index inside the CTA) writes the record."""
    profile_stop(
        buf, eid, tag, tid, max_events, guard="warp", target_warp=target_warp, payload=payload,
        clock=clock, enabled=enabled, loc=loc, ip=ip,
    )


@dsl_user_op
def elected_start(buf, max_events, *, enabled=None, clock: bool = False, loc=None, ip=None):
    return profile_start(buf, max_events, enabled=enabled, clock=clock, loc=loc, ip=ip)


@dsl_user_op
def elected_stop(buf, eid, tag, tid, max_events, *, payload=0, clock=False, enabled=None, loc=None, ip=None):
    """One lane of every warp (``elect.sync``; the warp must be converged) writes a record."""
    profile_stop(buf, eid, tag, tid, max_events, guard="elected", payload=payload, clock=clock, enabled=enabled, loc=loc, ip=ip)


@dsl_user_op
def instant(buf, max_events, tag, tid, *, guard: str = "cta", target_warp=None, payload=0,
            sample_flag=None, enabled=None, loc=None, ip=None) -> None:
    """A point event (duration 0) stamped now."""
    if not is_enabled(enabled):
        return
    emit_record(buf, max_events, kind=layout.KIND_INSTANT, tag=tag, tid=tid, payload=payload,
                 guard=guard, target_warp=target_warp, sample_flag=sample_flag, loc=loc, ip=ip)


@dsl_user_op
def clock_sync(buf, max_events, *, tid=0, guard: str = "cta", enabled=None, loc=None, ip=None) -> None:
    """Record a (%globaltimer, clock64) pair on this SM. Call it at the start and the end of a
    kernel that uses ``clock=True`` regions: the host fits the SM clock from these pairs."""
    if not is_enabled(enabled):
        return
    emit_record(buf, max_events, kind=layout.KIND_CLOCK_SYNC, tag=0, tid=tid, guard=guard, loc=loc, ip=ip)


class profile_region:
    """``with profile_region(buf, max_events, tag, tid):`` inside ``@cute.kernel``.

    ``__enter__`` only reads the timer and ``__exit__`` writes the record; nothing opens an
    MLIR region around the body, so the body reads and writes variables from before the
    ``with`` like any other code. Default guard: thread 0 of the CTA, as in the reference."""

    __dsl_trace_time_ctxmgr__ = True

    def __init__(self, buf, max_events, tag, tid, *, guard: str = "cta", target_warp=None,
                 payload=0, clock: bool = False, sample_flag=None, enabled=None):
        if guard not in GUARDS:
            raise ProfileBufferError(f"guard must be one of {GUARDS}, got {guard!r}")
        if guard == "warp" and target_warp is None:
            raise ProfileBufferError("guard='warp' needs target_warp=")
        self._buf, self._max_events = buf, max_events
        self._tag, self._tid = tag, tid
        self._guard, self._target_warp = guard, target_warp
        self._payload, self._clock = payload, clock
        self._sample_flag = sample_flag
        self._enabled = is_enabled(enabled)
        self._start = None

    def __enter__(self):
        if self._enabled:
            self._start = read_clock64() if self._clock else read_globaltimer()
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None and self._enabled:
            profile_stop(
                self._buf, self._start, self._tag, self._tid, self._max_events,
                guard=self._guard, target_warp=self._target_warp, payload=self._payload,
                clock=self._clock, sample_flag=self._sample_flag, enabled=True,
            )
        return False



def buffer_arg(buf):
    """The kernel argument for a profile buffer (a ProfileBuffer or an int64 torch tensor):
    a cute.Tensor with a dynamic size, so one compiled kernel serves every buffer size and
    the ops can bound their stores by the real tensor size. (A static-shape tensor from
    plain ``from_dlpack`` also works; the compiled kernel then never writes past the size it
    was compiled with.)"""
    from cutlass.cute.runtime import from_dlpack

    tensor = getattr(buf, "tensor", buf)
    return from_dlpack(tensor).mark_layout_dynamic()
