"""Device ops: called inside ``@cute.kernel`` code, they append records to a profile buffer.

Every record write is one inline-PTX block: the guard (which thread records), the closing
timer read, one atomic on ``buf[0]`` to claim a slot, the bound check, and the stores. Keeping
it in one ``asm volatile`` block means the compiler can neither drop, merge nor hoist the timer
reads, the elected lane never has to escape an MLIR region, and the PTX is easy to check.
Start ops only read the timer: the start time lives in a register until the matching stop.

Seed-compatible functions keep the reference's positional order; every addition is a
keyword-only option. Profiling can be compiled out per call (``enabled=False``), per kernel
(a ``cutlass.Constexpr`` passed through as ``enabled``) or for the whole process
(``CUTE_PROF_ENABLE=0`` or :func:`set_enabled`): then no op emits anything at all.
"""

from __future__ import annotations

import os
from typing import Union

from cutlass import Int32, Int64
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import T, dsl_user_op

from . import layout
from .errors import ProfileBufferError
from .tags import default_tag_table

__all__ = [
    "read_globaltimer",
    "read_clock64",
    "profile_start",
    "profile_stop",
    "lane0_warp0_start",
    "lane0_warp0_stop",
    "warp_start",
    "warp_stop",
    "elected_start",
    "elected_stop",
    "profile_region",
    "instant",
    "clock_sync",
    "PhaseSequence",
    "Profiler",
    "WarpRecorder",
    "set_enabled",
    "is_enabled",
    "GUARDS",
    "buffer_arg",
]

GUARDS = ("all", "lane0", "elected", "cta", "warp")

_ENABLED = os.environ.get("CUTE_PROF_ENABLE", "1").strip().lower() not in ("0", "false", "off", "no")


def set_enabled(flag: bool) -> None:
    """Switch every op on or off for kernels traced from now on. A kernel already compiled
    keeps what it was compiled with: compile again after flipping this."""
    global _ENABLED
    _ENABLED = bool(flag)


def is_enabled(enabled=None) -> bool:
    """Resolve a per-call/per-kernel ``enabled`` (None, bool, or Constexpr bool) against the
    process-wide switch."""
    if enabled is None:
        return _ENABLED
    if not isinstance(enabled, (bool, int)):
        raise ProfileBufferError(
            f"enabled must be a compile-time bool (Python bool or cutlass.Constexpr), got "
            f"{type(enabled).__name__}; pass a dynamic condition as sampling instead"
        )
    return bool(enabled) and _ENABLED


# ----------------------------------------------------------------------------------------
# inline PTX plumbing


class _Asm:
    """Collects operands and PTX lines for one inline-asm block."""

    def __init__(self):
        self.operands: list = []
        self.constraints: list[str] = []
        self.lines: list[str] = []

    def operand(self, value, bits: int) -> str:
        if bits == 64:
            self.operands.append(Int64(value).ir_value())
            self.constraints.append("l")
        else:
            self.operands.append(Int32(value).ir_value())
            self.constraints.append("r")
        return f"${len(self.operands) - 1}"

    def emit(self, *lines: str) -> None:
        self.lines.extend(lines)

    def build(self, *, loc=None, ip=None):
        text = "{\n" + "\n".join(self.lines) + "\n}"
        llvm.inline_asm(
            None,
            self.operands,
            text,
            ",".join(self.constraints + ["~{memory}"]),
            has_side_effects=True,
            is_align_stack=False,
            asm_dialect=llvm.AsmDialect.AD_ATT,
            loc=loc,
            ip=ip,
        )


# On sm_90 a CTA barrier is issued as BAR.SYNC.DEFER_BLOCKING: the warp keeps issuing
# until an instruction that must wait, and a special-register read is not one, so a timer
# read right after a barrier returns a time from before the barrier was complete
# (measured on an H200: up to 5.8 us early). A warp-level sync over the active lanes makes
# the warp wait there; it costs two instructions and is safe in divergent code.
_ORDER_AFTER_BARRIERS = "activemask.b32 om; bar.warp.sync om;"


def _read_special_u64(register: str, *, loc=None, ip=None) -> Int64:
    return Int64(
        llvm.inline_asm(
            T.i64(),
            [],
            f"{{ .reg .b32 om; {_ORDER_AFTER_BARRIERS} mov.u64 $0, {register}; }}",
            "=l,~{memory}",
            has_side_effects=True,
            is_align_stack=False,
            asm_dialect=llvm.AsmDialect.AD_ATT,
            loc=loc,
            ip=ip,
        )
    )


@dsl_user_op
def read_globaltimer(*, loc=None, ip=None) -> Int64:
    """``%globaltimer`` in ns. Volatile with a memory clobber: never merged, hoisted or sunk
    past the loads and stores around it."""
    return _read_special_u64("%globaltimer", loc=loc, ip=ip)


@dsl_user_op
def read_clock64(*, loc=None, ip=None) -> Int64:
    """The SM's ``clock64`` cycle counter, for durations shorter than the 32 ns timer step."""
    return _read_special_u64("%clock64", loc=loc, ip=ip)


_LINEAR_TID = (
    "mov.u32 x, %tid.x;",
    "mov.u32 y, %tid.y;",
    "mov.u32 z, %tid.z;",
    "mov.u32 nx, %ntid.x;",
    "mov.u32 ny, %ntid.y;",
    "mad.lo.u32 lin, z, ny, y;",
    "mad.lo.u32 lin, lin, nx, x;",
)


def _cap_lines(g, max_events, words):
    """PTX setting g (global address of the buffer) and cap = min(max_events, records that
    fit in the tensor): no store ever lands past the tensor, whatever max_events says."""
    lines = [f"cvta.to.global.u64 g, {g};"]
    if words is not None:
        return lines + [f"sub.s64 cap, {words}, 1;", "shr.s64 cap, cap, 2;", f"min.s64 cap, cap, {max_events};"]
    return lines + [f"mov.s64 cap, {max_events};"]


def _store_lines(pred, words):
    """PTX storing the record ``words`` (4 registers) into slot ``s`` under ``pred``: two
    16-byte stores when the record is 16-byte aligned (the buffer pointer is 8 mod 16, as
    ``allocate_profile_buffer`` arranges), else four 8-byte ones with the tag word (and its
    complete marker) last."""
    w0, w1, w2, w3 = words
    return [
        "shl.b64 a, s, 5;",
        "add.s64 a, a, g;",
        f"add.s64 a, a, {8 * layout.HEADER_WORDS};",
        "and.b64 al, g, 15;",
        f"setp.eq.and.u64 v, al, 8, {pred};",
        f"setp.ne.and.u64 q, al, 8, {pred};",
        f"@v st.global.v2.u64 [a], {{{w0}, {w1}}};",
        f"@v st.global.v2.u64 [a+16], {{{w2}, {w3}}};",
        f"@q st.global.u64 [a], {w0};",
        f"@q st.global.u64 [a+8], {w1};",
        f"@q st.global.u64 [a+24], {w3};",
        f"@q st.global.u64 [a+16], {w2};",
    ]


def _guard_lines(asm: _Asm, guard: str, target_warp) -> None:
    """Set predicate ``p`` for the thread(s) that record under ``guard``."""
    if guard == "all":
        asm.emit("mov.u32 lane, %laneid;", "setp.lt.u32 p, lane, 32;")
    elif guard == "lane0":
        asm.emit("mov.u32 lane, %laneid;", "setp.eq.u32 p, lane, 0;")
    elif guard == "elected":
        asm.emit("elect.sync _|p, 0xffffffff;")
    elif guard == "cta":
        asm.emit("setp.eq.u32 p, lin, 0;")
    elif guard == "warp":
        target = asm.operand(target_warp, 32)
        asm.emit(
            "shr.u32 w, lin, 5;",
            f"setp.eq.u32 p, w, {target};",
            "and.b32 lane, lin, 31;",
            "setp.eq.and.u32 p, lane, 0, p;",
        )
    else:
        raise ProfileBufferError(f"guard must be one of {GUARDS}, got {guard!r}")


def _buffer_address_and_words(buf, max_events):
    """(address, words) of a cute.Tensor or Pointer profile buffer. ``words`` bounds every
    store even when the caller passes a ``max_events`` larger than the buffer."""
    iterator = getattr(buf, "iterator", None)
    if iterator is not None:
        from cutlass import cute

        return iterator.toint(), cute.size(buf)
    if hasattr(buf, "toint"):
        return buf.toint(), None
    raise ProfileBufferError(
        f"profile buffer must be a cute.Tensor (from_dlpack(prof.tensor)) or a cute.Pointer, "
        f"got {type(buf).__name__}"
    )


def _trace_time_int(value):
    """A Python int for values known while tracing (ints, and Int32(5)-style constants),
    else the DSL value unchanged: constants fold into the PTX instead of taking registers."""
    inner = getattr(value, "value", None)
    if not isinstance(value, bool) and hasattr(value, "ir_value") and isinstance(inner, int):
        return inner
    return value


def _resolve_tag(tag) -> Union[int, Int32]:
    tag = _trace_time_int(tag)
    if isinstance(tag, str):
        return default_tag_table().id(tag)
    if isinstance(tag, bool):
        raise ProfileBufferError("tag must be a name, an int or an Int32, not a bool")
    if isinstance(tag, int):
        if not 0 <= tag <= layout.MAX_TAG_ID:
            raise ProfileBufferError(
                f"tag id {tag} is out of range 0..{layout.MAX_TAG_ID}; use TagTable ids"
            )
        return tag
    return tag


def _emit_record(
    buf,
    max_events,
    *,
    kind: int,
    start=None,
    end=None,
    tag,
    tid,
    payload=0,
    guard: str,
    target_warp=None,
    sample_flag=None,
    open_flag=None,
    loc=None,
    ip=None,
) -> None:
    """Emit the one asm block that writes a record. ``start``: start timestamp (span), start
    cycles (clock span), or None (instant/now). ``end``: a timestamp already read (phases);
    None reads the timer inside the block. ``open_flag``: a 64-bit value that must be nonzero
    for anything to be recorded (phase sequences with no open phase)."""
    tag = _resolve_tag(tag)
    address, words = _buffer_address_and_words(buf, max_events)
    asm = _Asm()
    a_buf = asm.operand(address, 64)
    a_max = asm.operand(max_events, 64)
    a_words = asm.operand(words, 64) if words is not None else None
    a_tid = asm.operand(tid, 32)
    asm.emit(
        ".reg .pred p, v, q;",
        ".reg .u64 g, t, c, s, a, d, cap, st, tw, w3, hi, al;",
        ".reg .u32 x, y, z, nx, ny, lin, lane, w, sm;",
    )
    asm.emit(*_LINEAR_TID)  # the warp index goes into every record's tid word
    _guard_lines(asm, guard, target_warp)
    if sample_flag is not None:
        asm.emit(f"setp.ne.and.u32 p, {asm.operand(sample_flag, 32)}, 0, p;")
    if open_flag is not None:
        asm.emit(f"setp.ne.and.s64 p, {asm.operand(open_flag, 64)}, 0, p;")

    # timer(s) first: as close to the end of the region as the guard allows, and never
    # before a barrier that precedes the op has completed
    if end is None:
        asm.emit(".reg .b32 om;", _ORDER_AFTER_BARRIERS)
    if end is not None:
        asm.emit(f"mov.u64 t, {asm.operand(end, 64)};")
    elif kind == layout.KIND_CLOCK_SPAN:
        asm.emit("@p mov.u64 c, %clock64;", "@p mov.u64 t, %globaltimer;")
    elif kind == layout.KIND_CLOCK_SYNC:
        asm.emit("@p mov.u64 t, %globaltimer;", "@p mov.u64 c, %clock64;")
    else:
        asm.emit("@p mov.u64 t, %globaltimer;")

    asm.emit(*_cap_lines(a_buf, a_max, a_words))
    asm.emit("@p atom.global.add.u64 s, [g], 1;", "setp.lt.and.s64 p, s, cap, p;")

    # words 0 and 1
    if kind == layout.KIND_SPAN:
        a_start = asm.operand(start, 64)
        asm.emit(f"mov.u64 st, {a_start};", "sub.s64 d, t, st;")
    elif kind == layout.KIND_INSTANT:
        asm.emit("mov.u64 st, t;", "mov.u64 d, 0;")
    elif kind == layout.KIND_CLOCK_SPAN:
        a_start = asm.operand(start, 64)
        asm.emit("mov.u64 st, t;", f"sub.s64 d, c, {a_start};")
    elif kind == layout.KIND_CLOCK_SYNC:
        asm.emit("mov.u64 st, t;", "mov.u64 d, c;")
    else:
        raise ProfileBufferError(f"unknown record kind {kind}")

    # word 2: the tag word (constant-folded when tag and payload are known at trace time)
    payload = _trace_time_int(payload)
    if isinstance(tag, int) and isinstance(payload, int):
        asm.emit(f"mov.b64 tw, {layout.tag_word_constant(tag, kind=kind, payload=payload)};")
    else:
        constant = layout.tag_word_constant(0, kind=kind)
        a_tag = asm.operand(tag, 32)
        a_payload = asm.operand(payload, 32)
        asm.emit(
            f"cvt.u64.u32 tw, {a_tag};",
            f"and.b64 tw, tw, {layout._mask(layout.TAG_BITS)};",
            f"cvt.u64.u32 hi, {a_payload};",
            f"shl.b64 hi, hi, {layout.PAYLOAD_SHIFT};",
            "or.b64 tw, tw, hi;",
            f"or.b64 tw, tw, {constant};",
        )

    # word 3: tid | smid | warp
    asm.emit(
        f"cvt.u64.u32 w3, {a_tid};",
        "mov.u32 sm, %smid;",
        "cvt.u64.u32 hi, sm;",
        f"shl.b64 hi, hi, {layout.SM_SHIFT};",
        "or.b64 w3, w3, hi;",
        "shr.u32 w, lin, 5;",
        "cvt.u64.u32 hi, w;",
        f"shl.b64 hi, hi, {layout.WARP_SHIFT};",
        "or.b64 w3, w3, hi;",
    )

    asm.emit(*_store_lines("p", ("st", "d", "tw", "w3")))
    asm.build(loc=loc, ip=ip)


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
    _emit_record(
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
    _emit_record(buf, max_events, kind=layout.KIND_INSTANT, tag=tag, tid=tid, payload=payload,
                 guard=guard, target_warp=target_warp, sample_flag=sample_flag, loc=loc, ip=ip)


@dsl_user_op
def clock_sync(buf, max_events, *, tid=0, guard: str = "cta", enabled=None, loc=None, ip=None) -> None:
    """Record a (%globaltimer, clock64) pair on this SM. Call it at the start and the end of a
    kernel that uses ``clock=True`` regions: the host fits the SM clock from these pairs."""
    if not is_enabled(enabled):
        return
    _emit_record(buf, max_events, kind=layout.KIND_CLOCK_SYNC, tag=0, tid=tid, guard=guard, loc=loc, ip=ip)


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
        _emit_record(
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
        self._start, self._tag, self._payload = now, Int32(_resolve_tag(tag)), Int32(payload)
        return self

    def end(self) -> "PhaseSequence":
        """Close the open phase; later ``next`` calls start a new one."""
        if not self._enabled:
            return self
        self._close(read_globaltimer())
        self._start = Int64(0)
        return self


@dsl_user_op
def _sampling_flag(every_cta, warp_mask, *, loc=None, ip=None) -> Int32:
    """1 in threads whose CTA (linear index) is a multiple of ``every_cta`` and whose warp is
    set in ``warp_mask``, else 0. Computed once per kernel, ANDed into every record's guard."""
    asm_text = "\n".join(
        [
            "{",
            ".reg .pred p;",
            ".reg .u32 x, y, z, nx, ny, lin, w, m, cx, cy, cz, ncx, ncy, cl, r;",
            *_LINEAR_TID,
            "mov.u32 cx, %ctaid.x;",
            "mov.u32 cy, %ctaid.y;",
            "mov.u32 cz, %ctaid.z;",
            "mov.u32 ncx, %nctaid.x;",
            "mov.u32 ncy, %nctaid.y;",
            "mad.lo.u32 cl, cz, ncy, cy;",
            "mad.lo.u32 cl, cl, ncx, cx;",
            "rem.u32 r, cl, $1;",
            "setp.eq.u32 p, r, 0;",
            "shr.u32 w, lin, 5;",
            "shr.b32 m, $2, w;",
            "and.b32 m, m, 1;",
            "setp.ne.and.u32 p, m, 0, p;",
            "selp.u32 $0, 1, 0, p;",
            "}",
        ]
    )
    return Int32(
        llvm.inline_asm(
            T.i32(),
            [Int32(every_cta).ir_value(loc=loc, ip=ip), Int32(warp_mask).ir_value(loc=loc, ip=ip)],
            asm_text,
            "=r,r,r",
            has_side_effects=False,
            is_align_stack=False,
            asm_dialect=llvm.AsmDialect.AD_ATT,
            loc=loc,
            ip=ip,
        )
    )


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
            self.sample_flag = _sampling_flag(
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


# ----------------------------------------------------------------------------------------
# staged write path: one warp keeps up to 32 records in its lanes' registers and writes them
# with one atomic and two coalesced 16-byte stores per lane


def _inline_asm(result_types, operands, text: str, constraints: str, *, loc=None, ip=None):
    return llvm.inline_asm(
        result_types, operands, text, constraints, has_side_effects=True, is_align_stack=False,
        asm_dialect=llvm.AsmDialect.AD_ATT, loc=loc, ip=ip,
    )


_FLUSH_LINES = (
    # staged records hold their end time in w1: the duration is computed here, once per
    # chunk, not once per record
    "sub.s64 w1, w1, w0;",
    # lane 0 claims `n` slots; everyone learns the base; lanes below n store their record
    "setp.eq.u32 l0, lane, 0;",
    "@l0 atom.global.add.u64 base, [g], n64;",
    "mov.b64 {blo, bhi}, base;",
    "shfl.sync.idx.b32 blo, blo, 0, 31, 0xffffffff;",
    "shfl.sync.idx.b32 bhi, bhi, 0, 31, 0xffffffff;",
    "mov.b64 base, {blo, bhi};",
    "cvt.u64.u32 s, lane;",
    "add.u64 s, s, base;",
    "setp.lt.u32 mine, lane, n;",
    "setp.lt.and.s64 mine, s, cap, mine;",
    *_store_lines("mine", ("w0", "w1", "w2", "w3")),
)


class WarpRecorder:
    """Per-warp staged recording: the cheap path for hot loops.

    Every lane of the warp calls ``stop``/``instant`` together (the warp must be converged);
    record k of the warp's current chunk lives in lane k's registers. The 32nd record, or
    ``flush()``, writes the chunk: one atomic claims the slots and each lane stores its
    record with two 16-byte stores, so the warp writes 1 KiB contiguously. The buffer stays
    the same flat, atomic-indexed array and the counter stays exact. The tid (and the SM and
    warp ids) are fixed per recorder, so a record costs a handful of register moves.

    Call ``flush()`` before the warp exits: records still staged then are never written and
    never counted. Carries its state through dynamic loops like any DSL value."""

    def __init__(self, buf, max_events, tid, *, enabled=None, _state=None, _const=None):
        self.buf, self.max_events, self.tid = buf, max_events, tid
        self.enabled = is_enabled(enabled)
        if not self.enabled:
            return
        self._lane, self._tidword = _const if _const is not None else self._warp_constants(tid)
        if _state is None:
            zero = Int64(0)
            _state = (Int32(0), zero, zero, zero)
        self._cursor, self._w0, self._w1, self._w2 = _state

    @staticmethod
    def _warp_constants(tid):
        """(lane id, tid word = tid | smid | warp), read once per recorder."""
        text = "\n".join([
            "{", ".reg .u32 x, y, z, nx, ny, lin, w, sm;", ".reg .u64 hi, t;", *_LINEAR_TID,
            "shr.u32 w, lin, 5;", "mov.u32 sm, %smid;", "mov.u32 $0, %laneid;",
            "cvt.u64.u32 hi, sm;", f"shl.b64 hi, hi, {layout.SM_SHIFT};",
            "cvt.u64.u32 t, w;", f"shl.b64 t, t, {layout.WARP_SHIFT};",
            "or.b64 hi, hi, t;", "cvt.u64.u32 t, $2;", "or.b64 $1, hi, t;", "}",
        ])
        struct = llvm.StructType.get_literal([T.i32(), T.i64()])
        res = _inline_asm(struct, [Int32(tid).ir_value()], text, "=r,=l,r")
        return Int32(llvm.extractvalue(T.i32(), res, [0])), Int64(llvm.extractvalue(T.i64(), res, [1]))

    def __extract_mlir_values__(self):
        if not self.enabled:
            return []
        return [v.ir_value() for v in (self._cursor, self._w0, self._w1, self._w2)]

    def __new_from_mlir_values__(self, values):
        state = const = None
        if self.enabled:
            state = (Int32(values[0]),) + tuple(Int64(v) for v in values[1:])
            const = (self._lane, self._tidword)
        return WarpRecorder(self.buf, self.max_events, self.tid, enabled=self.enabled,
                            _state=state, _const=const)

    def start(self):
        return read_globaltimer() if self.enabled else 0

    def _flush_operands(self):
        """Operands and PTX that set g (global address) and cap (records that fit)."""
        address, words = _buffer_address_and_words(self.buf, self.max_events)
        values = [Int64(address), Int64(self.max_events), self._tidword]
        if words is not None:
            values.append(Int64(words))
        return values, words is not None

    def _stage(self, start, tag, payload, kind, end=None):
        tag = _resolve_tag(tag)
        payload = _trace_time_int(payload)
        # results $0..$3 = cursor, w0..w2; inputs follow
        ins = [self._cursor, self._w0, self._w1, self._w2, self._lane]
        flush_values, has_words = self._flush_operands()
        ins += flush_values
        n_fixed = len(ins)
        idx = {name: f"${4 + i}" for i, name in enumerate(
            ["c", "w0", "w1", "w2", "lane", "g", "max", "w3"] + (["words"] if has_words else []))}
        extra = []

        def op(value):
            extra.append(value)
            return f"${4 + n_fixed + len(extra) - 1}"

        lines = [
            "{",
            ".reg .pred m, f, l0, mine, v, q;",
            ".reg .u64 t, g, base, s, a, al, cap, n64, w0, w1, w2, w3, tw, x3;",
            ".reg .u32 lane, c, n, blo, bhi;",
            f"mov.u32 c, {idx['c']};", f"mov.u64 w0, {idx['w0']};", f"mov.u64 w1, {idx['w1']};",
            f"mov.u64 w2, {idx['w2']};",
            # ordered after a preceding barrier, as every timer read
            f".reg .b32 om;\n{_ORDER_AFTER_BARRIERS}\nmov.u64 t, %globaltimer;" if end is None
            else f"mov.u64 t, {op(Int64(end))};",
            f"setp.eq.u32 m, {idx['lane']}, c;",
        ]
        # w1 holds the end time until the flush turns it into a duration
        if kind == layout.KIND_INSTANT:
            lines += ["@m mov.u64 w0, t;", "@m mov.u64 w1, t;"]
        else:
            st = op(Int64(start))
            lines += [f"@m mov.u64 w0, {st};", "@m mov.u64 w1, t;"]
        if isinstance(tag, int) and isinstance(payload, int):
            lines.append(f"@m mov.b64 w2, {layout.tag_word_constant(tag, kind=kind, payload=payload)};")
        else:
            a_tag, a_pl = op(Int32(tag)), op(Int32(payload))
            lines += [
                f"cvt.u64.u32 tw, {a_tag};", f"and.b64 tw, tw, {layout._mask(layout.TAG_BITS)};",
                f"cvt.u64.u32 x3, {a_pl};", f"shl.b64 x3, x3, {layout.PAYLOAD_SHIFT};",
                "or.b64 tw, tw, x3;", f"or.b64 tw, tw, {layout.tag_word_constant(0, kind=kind)};",
                "@m mov.b64 w2, tw;",
            ]
        lines += [
            "add.u32 c, c, 1;",
            "setp.eq.u32 f, c, 32;",
            "@!f bra.uni DONE_${:uid};",
            f"mov.u32 lane, {idx['lane']};", f"mov.u64 w3, {idx['w3']};",
            "mov.u32 n, c;", "cvt.u64.u32 n64, n;",
            *_cap_lines(idx["g"], idx["max"], idx.get("words")),
            *_FLUSH_LINES,
            "mov.u32 c, 0;", "DONE_${:uid}:",
            "mov.u32 $0, c;", "mov.u64 $1, w0;", "mov.u64 $2, w1;", "mov.u64 $3, w2;", "}",
        ]
        operands = [v.ir_value() for v in ins + extra]
        cons = ["r", "l", "l", "l", "r"] + ["l"] * (len(ins) - 5) + [
            "l" if isinstance(v, Int64) else "r" for v in extra]
        struct = llvm.StructType.get_literal([T.i32(), T.i64(), T.i64(), T.i64()])
        res = _inline_asm(struct, operands, "\n".join(lines),
                          "=r,=l,=l,=l," + ",".join(cons) + ",~{memory}")
        self._cursor = Int32(llvm.extractvalue(T.i32(), res, [0]))
        self._w0, self._w1, self._w2 = (Int64(llvm.extractvalue(T.i64(), res, [i])) for i in range(1, 4))

    def stop(self, eid, tag, *, payload=0, end=None):
        """Stage a span that started at ``eid`` (from ``start()``); writes when 32 are staged.
        ``end``: a timestamp from ``start()`` to close the span at (shared boundaries)."""
        if self.enabled:
            self._stage(eid, tag, payload, layout.KIND_SPAN, end=end)

    def instant(self, tag, *, payload=0):
        if self.enabled:
            self._stage(None, tag, payload, layout.KIND_INSTANT)

    def region(self, tag, *, payload=0):
        return _RecorderRegion(self, tag, payload)

    def flush(self):
        """Write whatever is staged (all lanes call it). Required before the warp exits."""
        if not self.enabled:
            return
        flush_values, has_words = self._flush_operands()
        text = "\n".join([
            "{",
            ".reg .pred f, l0, mine, v, q;",
            ".reg .u64 g, base, s, a, al, cap, n64, w0, w1, w2, w3;",
            ".reg .u32 lane, n, blo, bhi;",
            "mov.u32 n, $0;", "mov.u64 w0, $1;", "mov.u64 w1, $2;", "mov.u64 w2, $3;",
            "mov.u32 lane, $4;", "mov.u64 w3, $7;",
            "setp.eq.u32 f, n, 0;", "@f bra.uni DONE_${:uid};",
            "cvt.u64.u32 n64, n;",
            *_cap_lines("$5", "$6", "$8" if has_words else None),
            *_FLUSH_LINES,
            "DONE_${:uid}:", "}",
        ])
        values = [self._cursor, self._w0, self._w1, self._w2, self._lane] + flush_values
        cons = ",".join(["r", "l", "l", "l", "r"] + ["l"] * len(flush_values))
        _inline_asm(None, [v.ir_value() for v in values], text, cons + ",~{memory}")
        self._cursor = Int32(0)


class _RecorderRegion:
    __dsl_trace_time_ctxmgr__ = True

    def __init__(self, recorder, tag, payload):
        self._rec, self._tag, self._payload = recorder, tag, payload

    def __enter__(self):
        self._start = self._rec.start()
        return self._rec

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self._rec.stop(self._start, self._tag, payload=self._payload)
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
