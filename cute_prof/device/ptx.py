"""PTX plumbing shared by every device op: the global enable switch, timer reads, the
guard/cap/store snippets and :func:`emit_record`, the one inline-PTX block that writes a record.

Every record write is one ``asm volatile`` block (guard, closing timer read, one atomic on
``buf[0]``, bound check, stores), so the compiler can neither drop, merge nor hoist the timer
reads, the elected lane never has to escape an MLIR region, and the PTX is easy to check.

Owns the PTX every device op shares; it may import no other device module (they all build on
it) nor anything on the host side above ``device``.
"""

from __future__ import annotations

import os
from typing import Union

import cutlass.cute as cute
from cutlass import Int32, Int64
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import T, dsl_user_op

from .. import layout
from ..errors import ProfileBufferError
from ..tags import default_tag_table

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


def inline_asm(result_types, operands, text: str, constraints: str, *, side_effects: bool = True,
               loc=None, ip=None):
    """One inline-PTX block (AT&T dialect). ``side_effects=True`` keeps it volatile: never
    merged, hoisted or dropped."""
    return llvm.inline_asm(
        result_types, operands, text, constraints, has_side_effects=side_effects,
        is_align_stack=False, asm_dialect=llvm.AsmDialect.AD_ATT, loc=loc, ip=ip,
    )


class Asm:
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
        inline_asm(None, self.operands, text, ",".join(self.constraints + ["~{memory}"]),
                   loc=loc, ip=ip)


# On sm_90 a CTA barrier is issued as BAR.SYNC.DEFER_BLOCKING: the warp keeps issuing
# until an instruction that must wait, and a special-register read is not one, so a timer
# read right after a barrier returns a time from before the barrier was complete
# (microseconds early at worst: see docs/performance.md). A warp-level sync over the active
# lanes makes the warp wait there; it costs two instructions and is safe in divergent code.
ORDER_AFTER_BARRIERS = "activemask.b32 om; bar.warp.sync om;"


def read_special_u64(register: str, *, loc=None, ip=None) -> Int64:
    text = f"{{ .reg .b32 om; {ORDER_AFTER_BARRIERS} mov.u64 $0, {register}; }}"
    return Int64(inline_asm(T.i64(), [], text, "=l,~{memory}", loc=loc, ip=ip))


@dsl_user_op
def read_globaltimer(*, loc=None, ip=None) -> Int64:
    """``%globaltimer`` in ns. Volatile with a memory clobber: never merged, hoisted or sunk
    past the loads and stores around it."""
    return read_special_u64("%globaltimer", loc=loc, ip=ip)


@dsl_user_op
def read_clock64(*, loc=None, ip=None) -> Int64:
    """The SM's ``clock64`` cycle counter, for durations shorter than the 32 ns timer step."""
    return read_special_u64("%clock64", loc=loc, ip=ip)


@cute.jit
def spin_ns(ns: Int64):
    """Busy-wait ``ns`` nanoseconds on ``%globaltimer``: work of a known length, for demo
    and test kernels whose records must show it, and the consumers' delay of
    ``cute_prof.experimental.autoprofile_probed(consumer_delay_ns=)`` (the wait ends on the
    first timer step past ``ns``, whose size depends on the GPU)."""
    start = read_globaltimer()
    now = read_globaltimer()
    while now - start < ns:
        now = read_globaltimer()


LINEAR_TID_LINES = (
    "mov.u32 x, %tid.x;",
    "mov.u32 y, %tid.y;",
    "mov.u32 z, %tid.z;",
    "mov.u32 nx, %ntid.x;",
    "mov.u32 ny, %ntid.y;",
    "mad.lo.u32 lin, z, ny, y;",
    "mad.lo.u32 lin, lin, nx, x;",
)


def cap_lines(g, max_events, words):
    """PTX setting g (global address of the buffer) and cap = min(max_events, records that
    fit in the tensor): no store ever lands past the tensor, whatever max_events says."""
    lines = [f"cvta.to.global.u64 g, {g};"]
    if words is not None:
        return lines + [f"sub.s64 cap, {words}, 1;", "shr.s64 cap, cap, 2;", f"min.s64 cap, cap, {max_events};"]
    return lines + [f"mov.s64 cap, {max_events};"]


def store_lines(pred, words):
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


def claimed_slot_lines(slot: str, epoch: str) -> list[str]:
    """PTX splitting the value the claiming atomic returned (the whole counter word) into
    the slot (low ``layout.COUNTER_BITS``) and the launch epoch (the bits above), in place."""
    return [
        f"shr.u64 {epoch}, {slot}, {layout.LAUNCH_EPOCH_SHIFT};",
        f"and.b64 {slot}, {slot}, {layout.COUNTER_MASK};",
    ]


def guard_lines(asm: Asm, guard: str, target_warp) -> None:
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


def buffer_address_and_words(buf, max_events):
    """(address, words) of a cute.Tensor or Pointer profile buffer (or a positive int: a
    device address fixed at compile time). ``words`` bounds every
    store even when the caller passes a ``max_events`` larger than the buffer."""
    iterator = getattr(buf, "iterator", None)
    if iterator is not None:
        from cutlass import cute

        return iterator.toint(), cute.size(buf)
    if hasattr(buf, "toint"):
        return buf.toint(), None
    if isinstance(buf, int) and not isinstance(buf, bool) and buf > 0:
        return buf, None  # a device address known while tracing (mapped host memory)
    raise ProfileBufferError(
        f"profile buffer must be a cute.Tensor (from_dlpack(prof.tensor)) or a cute.Pointer, "
        f"got {type(buf).__name__}"
    )


def trace_time_int(value):
    """A Python int for values known while tracing (ints, and Int32(5)-style constants),
    else the DSL value unchanged: constants fold into the PTX instead of taking registers."""
    inner = getattr(value, "value", None)
    if not isinstance(value, bool) and hasattr(value, "ir_value") and isinstance(inner, int):
        return inner
    return value


def resolve_tag(tag) -> Union[int, Int32]:
    tag = trace_time_int(tag)
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


def emit_record(
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
    tag = resolve_tag(tag)
    address, words = buffer_address_and_words(buf, max_events)
    asm = Asm()
    a_buf = asm.operand(address, 64)
    a_max = asm.operand(max_events, 64)
    a_words = asm.operand(words, 64) if words is not None else None
    a_tid = asm.operand(tid, 32)
    asm.emit(
        ".reg .pred p, v, q;",
        ".reg .u64 g, t, c, s, a, d, cap, st, tw, w3, hi, al, ep, gid;",
        ".reg .u32 x, y, z, nx, ny, lin, lane, w, sm;",
    )
    asm.emit(*LINEAR_TID_LINES)  # the warp index goes into every record's tid word
    guard_lines(asm, guard, target_warp)
    if sample_flag is not None:
        asm.emit(f"setp.ne.and.u32 p, {asm.operand(sample_flag, 32)}, 0, p;")
    if open_flag is not None:
        asm.emit(f"setp.ne.and.s64 p, {asm.operand(open_flag, 64)}, 0, p;")

    # timer(s) first: as close to the end of the region as the guard allows, and never
    # before a barrier that precedes the op has completed
    if end is None:
        asm.emit(".reg .b32 om;", ORDER_AFTER_BARRIERS)
    if end is not None:
        asm.emit(f"mov.u64 t, {asm.operand(end, 64)};")
    elif kind == layout.KIND_CLOCK_SPAN:
        asm.emit("@p mov.u64 c, %clock64;", "@p mov.u64 t, %globaltimer;")
    elif kind == layout.KIND_CLOCK_SYNC:
        asm.emit("@p mov.u64 t, %globaltimer;", "@p mov.u64 c, %clock64;")
    else:
        asm.emit("@p mov.u64 t, %globaltimer;")

    asm.emit(*cap_lines(a_buf, a_max, a_words))
    asm.emit("@p atom.global.add.u64 s, [g], 1;", *claimed_slot_lines("s", "ep"),
             "setp.lt.and.s64 p, s, cap, p;")

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
    payload = trace_time_int(payload)
    if isinstance(tag, int) and isinstance(payload, int):
        asm.emit(f"mov.b64 tw, {layout.tag_word_constant(tag, kind=kind, payload=payload)};")
    else:
        constant = layout.tag_word_constant(0, kind=kind)
        a_tag = asm.operand(tag, 32)
        a_payload = asm.operand(payload, 32)
        asm.emit(
            f"cvt.u64.u32 tw, {a_tag};",
            f"and.b64 tw, tw, {layout.field_mask(layout.TAG_BITS)};",
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
        "mov.u64 gid, %gridid;",
        f"bfi.b64 w3, gid, w3, {layout.GRID_SHIFT}, {layout.GRID_BITS};",
        f"bfi.b64 w3, ep, w3, {layout.EPOCH_SHIFT}, {layout.EPOCH_BITS};",
    )

    asm.emit(*store_lines("p", ("st", "d", "tw", "w3")))
    asm.build(loc=loc, ip=ip)



@dsl_user_op
def sampling_flag(every_cta, warp_mask, *, loc=None, ip=None) -> Int32:
    """1 in threads whose CTA (linear index) is a multiple of ``every_cta`` and whose warp is
    set in ``warp_mask``, else 0. Computed once per kernel, ANDed into every record's guard."""
    asm_text = "\n".join(
        [
            "{",
            ".reg .pred p;",
            ".reg .u32 x, y, z, nx, ny, lin, w, m, cx, cy, cz, ncx, ncy, cl, r;",
            *LINEAR_TID_LINES,
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
    operands = [Int32(every_cta).ir_value(loc=loc, ip=ip), Int32(warp_mask).ir_value(loc=loc, ip=ip)]
    return Int32(inline_asm(T.i32(), operands, asm_text, "=r,r,r", side_effects=False,
                            loc=loc, ip=ip))
