"""Flight-recorder ops: mark where each warp *is* (region entered, region left) in a
position region that lives in pinned, device-mapped host memory (``cute_prof.flight``
allocates it), so the host can read it while the kernel hangs or after it has trapped.

Lane 0 of every calling warp writes; call them from whole warps. ``depth`` is the static
nesting level (0 .. ``layout.FLIGHT_DEPTH - 1``) of the region: each level has its own slot,
so an enter never overwrites the open region around it. Stores are ``st.volatile``
(system-scope relaxed); ``fence=True`` adds ``fence.sc.sys`` after them (cost in
``bench/flight_cost.py``).

Owns the flight recorder's device ops; allocating and reading the position region is
:mod:`cute_prof.flight`'s, which this module may not import (nor anything on the host side
above ``device``).
"""

from __future__ import annotations

from cutlass.cutlass_dsl import dsl_user_op

from .. import layout
from ..errors import ProfileBufferError
from .ptx import LINEAR_TID_LINES, Asm, buffer_address_and_words, is_enabled, resolve_tag

_REGS = (
    ".reg .pred p;",
    ".reg .b32 om, lane, x, y, z, nx, ny, nz, lin, w, nw, cx, cy, cz, ncx, ncy, cta, slot, sm, pl;",
    ".reg .b64 g, a, t, tw, ww, s64, f;",
)


def _slot_lines(asm: Asm, address, slots, depth: int) -> None:
    """PTX setting ``p`` (lane 0 and slot in range) and ``a`` (the slot's address)."""
    if not 0 <= int(depth) < layout.FLIGHT_DEPTH:
        raise ProfileBufferError(f"depth must be in 0..{layout.FLIGHT_DEPTH - 1}, got {depth}")
    g = asm.operand(address, 64)
    n = asm.operand(slots, 32)
    asm.emit(
        *_REGS,
        "mov.u32 lane, %laneid;",
        "setp.eq.u32 p, lane, 0;",
        *LINEAR_TID_LINES,
        "mov.u32 nz, %ntid.z;",
        "mul.lo.u32 nw, nx, ny;",
        "mul.lo.u32 nw, nw, nz;",
        "add.u32 nw, nw, 31;",
        "shr.u32 nw, nw, 5;",
        "shr.u32 w, lin, 5;",
        "mov.u32 cx, %ctaid.x;",
        "mov.u32 cy, %ctaid.y;",
        "mov.u32 cz, %ctaid.z;",
        "mov.u32 ncx, %nctaid.x;",
        "mov.u32 ncy, %nctaid.y;",
        "mad.lo.u32 cta, cz, ncy, cy;",
        "mad.lo.u32 cta, cta, ncx, cx;",
        "mad.lo.u32 slot, cta, nw, w;",
        f"mad.lo.u32 slot, slot, {layout.FLIGHT_DEPTH}, {int(depth)};",
        f"setp.lt.and.u32 p, slot, {n}, p;",
        f"cvta.to.global.u64 g, {g};",
        "mul.wide.u32 a, slot, 32;",
        "add.s64 a, a, g;",
        f"add.s64 a, a, {8 * layout.FLIGHT_HEADER_WORDS};",
    )


def _fence_lines(fence: bool):
    return ["@p fence.sc.sys;"] if fence else []


@dsl_user_op
def flight_enter(fbuf, slots, tag, *, payload=0, depth: int = 0, fence: bool = False,
                 enabled=None, loc=None, ip=None) -> None:
    """Mark region ``tag`` (with ``payload``: k-tile, stage) entered at ``depth``.
    ``fbuf``: the position region as a ``cute.Pointer``/``Tensor``; ``slots``: its slot count."""
    if not is_enabled(enabled):
        return
    address, _ = buffer_address_and_words(fbuf, slots)
    asm = Asm()
    _slot_lines(asm, address, slots, depth)
    tag_value = resolve_tag(tag)
    base = layout.tag_word_constant(0, kind=layout.KIND_SPAN)
    a_tag = asm.operand(tag_value, 32)
    a_payload = asm.operand(payload, 32)
    asm.emit(
        f"cvt.u64.u32 tw, {a_tag};",
        f"and.b64 tw, tw, {layout.field_mask(layout.TAG_BITS)};",
        f"mov.u32 pl, {a_payload};",
        "cvt.u64.u32 s64, pl;",
        f"shl.b64 s64, s64, {layout.PAYLOAD_SHIFT};",
        "or.b64 tw, tw, s64;",
        f"or.b64 tw, tw, {base};",
        "mov.u32 sm, %smid;",
        "cvt.u64.u32 ww, cta;",
        "cvt.u64.u32 s64, sm;",
        f"shl.b64 s64, s64, {layout.FLIGHT_SM_SHIFT};",
        "or.b64 ww, ww, s64;",
        "cvt.u64.u32 s64, w;",
        f"shl.b64 s64, s64, {layout.FLIGHT_WARP_SHIFT};",
        "or.b64 ww, ww, s64;",
        "mov.u64 f, 0;",
        "@p st.volatile.global.v2.u64 [a+16], {tw, ww};",
        "mov.u64 t, %globaltimer;",
        "@p st.volatile.global.v2.u64 [a], {t, f};",
        *_fence_lines(fence),
    )
    asm.build(loc=loc, ip=ip)


@dsl_user_op
def flight_leave(fbuf, slots, *, depth: int = 0, fence: bool = False, enabled=None, loc=None, ip=None) -> None:
    """Mark the region open at ``depth`` left (stamps its leave time)."""
    if not is_enabled(enabled):
        return
    address, _ = buffer_address_and_words(fbuf, slots)
    asm = Asm()
    _slot_lines(asm, address, slots, depth)
    asm.emit(
        "mov.u64 t, %globaltimer;",
        "@p st.volatile.global.u64 [a+8], t;",
        *_fence_lines(fence),
    )
    asm.build(loc=loc, ip=ip)
