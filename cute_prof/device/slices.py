"""Per-warp slice write path (layout format 2): the cheapest record the profiler writes.

Every warp owns a slice of the buffer whose size the host picks; lane 0 stores each record
straight to global memory as one 8-byte word (``%globaltimer_lo`` and the tag). A record
is four SASS instructions: the timer read, one compare, the store and a cursor increment.
The cursor is the low 32 bits of the record's address (the high half is a constant the
store pairs it with, so there is no address arithmetic), and the compare also folds in
whether the previous record fitted, so once a warp's slice is full no later record can be
stored, even after its cursor wraps. No atomic, no shuffle, no staging. Back-to-back
regions share their boundaries (a span starts at the previous record of the warp), so each
region costs one timer read. The warp keeps
counting past its capacity and ``close()`` stores the exact count, so overflow is exact per
warp (modulo 2**29 attempts, and the host knows when that could matter); a warp that never
closes still leaves every record that fit, and the host says so.

Owns format 2's device write path (``SliceRecorder``); zero-edit recording (:mod:`.autoprof`)
drives it, and it may not import that module nor anything on the host side above ``device``.
"""

from __future__ import annotations

from cutlass import Boolean, Int32, Int64
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import T

from .. import layout
from ..errors import ProfileBufferError
from .ptx import (
    LINEAR_TID_LINES,
    ORDER_AFTER_BARRIERS,
    buffer_address_and_words,
    inline_asm,
    is_enabled,
    resolve_tag,
    trace_time_int,
)
from .scope import check_state_reachable

_OPEN_LINES = (
    *LINEAR_TID_LINES,
    "mov.u32 nz, %ntid.z;",
    "mul.lo.u32 nt, nx, ny;",
    "mul.lo.u32 nt, nt, nz;",
    "add.u32 wpc, nt, 31;",
    "shr.u32 wpc, wpc, 5;",  # warps per CTA
    "shr.u32 w, lin, 5;",
    "mov.u32 cx, %ctaid.x;", "mov.u32 cy, %ctaid.y;", "mov.u32 cz, %ctaid.z;",
    "mov.u32 ncx, %nctaid.x;", "mov.u32 ncy, %nctaid.y;",
    "mad.lo.u32 cl, cz, ncy, cy;",
    "mad.lo.u32 cl, cl, ncx, cx;",
    "mad.wide.u32 sl, cl, wpc, 0;",
    "cvt.u64.u32 t, w;",
    "add.u64 sl, sl, t;",  # global warp index = the slice
    # a buffer that is not a slices buffer, or smaller than its header says, gets no
    # store at all (state 2); a warp past the last slice only counts (state 0)
    f"setp.eq.s64 valid, h0, {layout.SLICES_MAGIC};",
    "mov.b64 {cap, nsl}, h1;",
    "cvt.u64.u32 t, cap;",
    f"add.u64 t, t, {layout.SLICE_HEADER_WORDS};",
    "cvt.u64.u32 x64, nsl;",
    "mul.lo.u64 t, t, x64;",
    f"add.u64 t, t, {layout.SLICES_HEADER_WORDS};",
    "setp.le.and.u64 valid, t, words, valid;",
    "setp.lt.and.u64 ok, sl, x64, valid;",
    "mov.u32 lane, %laneid;",
    "setp.eq.and.u32 l0, lane, 0, ok;",
    "cvt.u64.u32 t, cap;",
    f"add.u64 t, t, {layout.SLICE_HEADER_WORDS};",
    "mul.lo.u64 a, sl, t;",
    f"add.u64 a, a, {layout.SLICES_HEADER_WORDS};",
    "shl.b64 a, a, 3;",
    "add.u64 a, a, g;",  # the slice header
    # the records: cursor = low half of their address, which must stay below
    # SLICE_WINDOW_END of its 4 GiB window (no carry into the high half, ever)
    f"add.u64 r, a, {8 * layout.SLICE_HEADER_WORDS};",
    "mov.b64 {rlo, rhi}, r;",
    "cvt.u64.u32 x64, rlo;",
    "cvt.u64.u32 t, cap;",
    "shl.b64 t, t, 3;",
    "add.u64 t, t, x64;",
    f"min.u64 t, t, {layout.SLICE_WINDOW_END};",
    "max.u64 t, t, x64;",
    "cvt.u32.u64 rend, t;",
    "sub.u64 t, t, x64;",
    "shr.u64 t, t, 3;",  # records that fit where the slice lies
    f"or.b64 fit, t, {layout.SLICE_OPEN_MAGIC << layout.SLICE_MAGIC_SHIFT};",
    "mov.u64 t, %globaltimer;",
    "mov.u32 sm, %smid;",
    "cvt.u64.u32 tw, sm;",
    f"shl.b64 tw, tw, {layout.SM_SHIFT};",
    "cvt.u64.u32 x64, w;",
    f"shl.b64 x64, x64, {layout.WARP_SHIFT};",
    "or.b64 tw, tw, x64;",
    f"or.b64 tw, tw, {layout.SLICE_OPEN_MAGIC << layout.SLICE_MAGIC_SHIFT};",
)



def _pool_open_lines(kernel: int) -> tuple:
    """A pooled slices buffer's open (``layout``'s "Pooled slices"): lane 0 claims the next
    slice with one atomic and loads its kernel's launch epoch; the warp shares both."""
    tables = layout.POOL_LOST_WORDS
    return (
        *LINEAR_TID_LINES,
        "shr.u32 w, lin, 5;",  # warp in the CTA (%ntid.x is a multiple of 32 where warps record)
        f"setp.eq.s64 valid, h0, {layout.SLICES_MAGIC};",
        "mov.b64 {cap, nsl}, h1;",
        f"shr.u32 x, nsl, {layout.SLICES_POOL_BIT - 32};",
        "setp.ne.and.u32 valid, x, 0, valid;",  # a pool, not a per-warp-indexed buffer
        f"and.b32 nsl, nsl, {layout.SLICES_COUNT_MASK};",
        "cvt.u64.u32 t, cap;",
        f"add.u64 t, t, {layout.SLICE_HEADER_WORDS};",
        "cvt.u64.u32 x64, nsl;",
        "mul.lo.u64 t, t, x64;",
        f"add.u64 t, t, {layout.SLICES_HEADER_WORDS};",  # words of the slices
        f"add.u64 a, t, {tables + layout.MAX_POOL_KERNELS};",
        "setp.le.and.u64 valid, a, words, valid;",
        f"add.u64 a, t, {tables + kernel};",
        "shl.b64 a, a, 3;",
        "add.u64 a, a, g;",  # this kernel's epoch word
        "mov.u32 lane, %laneid;",
        "setp.eq.and.u32 l0, lane, 0, valid;",
        "mov.u64 sl, -1;",
        "mov.u64 ep, 0;",
        "@l0 atom.global.add.u64 sl, [g+24], 1;",
        "@l0 ld.global.cg.u64 ep, [a];",
        "mov.b64 {rlo, rhi}, sl;",
        "shfl.sync.idx.b32 rlo, rlo, 0, 31, -1;",
        "shfl.sync.idx.b32 rhi, rhi, 0, 31, -1;",
        "mov.b64 sl, {rlo, rhi};",
        "cvt.u32.u64 epl, ep;",
        "shfl.sync.idx.b32 epl, epl, 0, 31, -1;",
        "setp.lt.and.u64 ok, sl, x64, valid;",
        # from here on as a per-warp-indexed open: the slice header's address, its records
        *_OPEN_LINES[_OPEN_LINES.index("setp.eq.and.u32 l0, lane, 0, ok;"):],
        # slice word 3 also names the kernel and the launch epoch
        f"and.b32 x, epl, {layout.field_mask(layout.SLICE_EPOCH_BITS)};",
        "cvt.u64.u32 x64, x;",
        f"shl.b64 x64, x64, {layout.SLICE_EPOCH_SHIFT};",
        "or.b64 fit, fit, x64;",
        f"or.b64 fit, fit, {kernel << layout.SLICE_KERNEL_SHIFT};",
    )

class SliceConstants:
    """What the open computes once per warp: the low halves of the records' first address
    (``start``) and of the end of what fits (``end``), the high half shared by every record
    (``high``), whether the warp has a slice (``state``: 1 yes, 0 no slice, 2 not a slices
    buffer, 3 never opened: close() stores nothing) and the open time in 2**28 ns units
    (``opened``, for close()'s long-open flag). Zero-edit recording keeps them in stack
    slots where a warp may record without having opened (``SliceRecorder(_const=...)``)."""

    def __init__(self, start, high, end, state, opened):
        self.start, self.high, self.end, self.state, self.opened = start, high, end, state, opened


class SliceHeader:
    """A slices buffer's header words, loaded ahead of :class:`SliceRecorder`'s open (see
    :func:`prefetch_header`)."""

    def __init__(self, magic, dims):
        self.magic, self.dims = magic, dims


def prefetch_header(buf) -> SliceHeader:
    """Issue the loads of the buffer's header now and return them (registers whose loads may
    still be in flight). ``SliceRecorder(buf, tid, header=h)`` then opens without waiting for
    memory, provided the loads have landed by then: place this before a kernel's set-up (its
    barrier init, its cluster sync), where the round trip overlaps work the warp waits on
    anyway. A warp-specialised producer that opened its slice right before its first TMA
    load delayed that load by a memory round trip in every CTA (see docs/performance.md)."""
    address, _ = buffer_address_and_words(buf, 0)
    text = "{ .reg .u64 g; cvta.to.global.u64 g, $2; ld.global.u64 $0, [g]; ld.global.u64 $1, [g+8]; }"
    struct = llvm.StructType.get_literal([T.i64(), T.i64()])
    res = inline_asm(struct, [Int64(address).ir_value()], text, "=l,=l,l,~{memory}")
    return SliceHeader(Int64(llvm.extractvalue(T.i64(), res, [0])), Int64(llvm.extractvalue(T.i64(), res, [1])))


class SliceRecorder:
    """One warp's recorder on a slices buffer (``decode_slices.allocate_slices_buffer``).

    ``SliceRecorder(buf, tid)`` opens the warp's slice (reads the full 64-bit timer once);
    ``rec.end(tag, payload=k)`` closes the span that began at the warp's previous record (or
    at the open, or at ``rec.begin()``) and starts the next: back-to-back regions cost one
    record each. ``rec.instant(tag)``; ``rec.close()`` before the warp exits stores the exact
    count (forgetting it loses no written record, only the overflow count; the decoder warns).
    Every lane of the warp calls every method (the warp must be converged); lane 0 stores.
    ``ordered=False`` drops the warp barrier before each timer read: cheaper, but a read
    right after a CTA barrier can then return a time from before the barrier completed.
    ``end()`` payloads keep their low 13 bits, ``span()`` payloads 32. ``header=`` takes
    :func:`prefetch_header`'s result, so the open does not wait for memory. State travels
    through dynamic loops like any DSL value.
    """

    def __init__(self, buf, tid, *, ordered: bool = True, enabled=None, header=None,
                 pool_kernel: int | None = None, _state=None, _const=None):
        self.buf, self.tid, self.ordered = buf, tid, bool(ordered)
        self.pool_kernel = pool_kernel
        self.enabled = is_enabled(enabled)
        if not self.enabled:
            return
        if pool_kernel is not None and not (
                isinstance(pool_kernel, int) and 0 <= pool_kernel < layout.MAX_POOL_KERNELS):
            raise ProfileBufferError(f"pool_kernel must be an int in 0..{layout.MAX_POOL_KERNELS - 1}, "
                                     f"got {pool_kernel!r}")
        if header is not None and not isinstance(header, SliceHeader):
            raise ProfileBufferError("header= takes what cute_prof.device.slices.prefetch_header(buf) returns")
        if _const is None:
            _const, opened_state = self._open(tid, header or prefetch_header(buf))
            _state = _state if _state is not None else opened_state
        self._const, self._state = _const, _state

    def _address(self):
        address, _ = buffer_address_and_words(self.buf, 0)
        return Int64(address)

    def _open(self, tid, header: SliceHeader):
        pooled = self.pool_kernel is not None
        text = "\n".join([
            "{",
            ".reg .pred ok, l0, valid;",
            ".reg .u32 x, y, z, nx, ny, nz, nt, lin, w, wpc, cx, cy, cz, ncx, ncy, cl, cap, nsl, "
            "lane, sm, rlo, rhi, rend;",
            ".reg .u64 g, sl, t, h0, h1, a, r, tw, x64, words, fit;",
            *([".reg .u32 epl;", ".reg .u64 ep;"] if pooled else []),
            "cvta.to.global.u64 g, $6;",
            "mov.u64 words, $8;",
            "mov.u64 h0, $9;",
            "mov.u64 h1, $10;",
            *(_pool_open_lines(self.pool_kernel) if pooled else _OPEN_LINES),
            "cvt.u64.u32 x64, $7;",
            "or.b64 tw, tw, x64;",
            "@l0 st.global.u64 [a], t;",  # slices are 8-byte aligned only
            "@l0 st.global.u64 [a+8], tw;",
            "@l0 st.global.u64 [a+24], fit;",
            "mov.u32 $0, rlo;",
            "mov.u32 $1, rhi;",
            "mov.u32 $2, rend;",
            "selp.u32 $3, 0, 2, valid;",
            "selp.u32 $3, 1, $3, ok;",
            # a pool's state also keeps the launch epoch, for close()'s lost table
            *([f"and.b32 x, epl, {layout.field_mask(layout.SLICE_EPOCH_BITS)};",
               "shl.b32 x, x, 2;", "or.b32 $3, $3, x;"] if pooled else []),
            f"shr.u64 t, t, {layout.SLICE_LONG_OPEN_SHIFT};",
            "cvt.u32.u64 $4, t;",
            "mov.pred $5, l0;",  # only lane 0 of a warp with a slice ever stores
            "}",
        ])
        struct = llvm.StructType.get_literal([T.i32()] * 5 + [T.bool()])
        address, words = buffer_address_and_words(self.buf, 0)
        if words is None:  # a bare pointer: trust the header's size
            words = (1 << 62)
        res = inline_asm(struct, [Int64(address).ir_value(), Int32(tid).ir_value(), Int64(words).ir_value(),
                                  header.magic.ir_value(), header.dims.ir_value()],
                         text, "=r,=r,=r,=r,=r,=b,l,r,l,l,l,~{memory}")
        start, high, end, state, opened = [Int32(llvm.extractvalue(T.i32(), res, [i])) for i in range(5)]
        storing = Boolean(llvm.extractvalue(T.bool(), res, [5]))
        return SliceConstants(start, high, end, state, opened), (start, storing)  # the cursor starts at start

    def __extract_mlir_values__(self):
        if not self.enabled:
            return []
        cursor, storing = self._state
        return [cursor.ir_value(), storing.ir_value()]

    def __new_from_mlir_values__(self, values):
        if not self.enabled:
            return SliceRecorder(self.buf, self.tid, ordered=self.ordered, enabled=False)
        return SliceRecorder(self.buf, self.tid, ordered=self.ordered, enabled=True,
                             pool_kernel=self.pool_kernel,
                             _state=(Int32(values[0]), Boolean(values[1])), _const=self._const)

    def constants(self) -> SliceConstants:
        return self._const

    def cursor_state(self) -> tuple:
        """(cursor, storing): the values a kernel carries between records. Zero-edit
        recording keeps them in a stack slot instead of threading them through loops."""
        return self._state

    def set_cursor_state(self, cursor, storing) -> None:
        """Continue from a (cursor, storing) pair that :meth:`cursor_state` handed out."""
        self._state = (Int32(cursor), Boolean(storing))

    def _state_operands(self, operands: list, cons: list) -> None:
        """Append the cursor and the storing predicate (inputs ``$1``, ``$2``, after the one
        output, the new predicate) and the constant high address half and end (``$3``, ``$4``)."""
        cursor, storing = self._state
        check_state_reachable(cursor, "SliceRecorder")
        operands += [cursor.ir_value(), storing.ir_value(), self._const.high.ir_value(),
                     self._const.end.ir_value()]
        cons += ["=b", "r", "b", "r", "r"]

    def _update(self, text: str, operands: list, cons: list, *, advance: int) -> None:
        """Run one record's PTX; the cursor advances outside it, as plain arithmetic the
        compiler can see and merge with the record's own ``cursor + 8``."""
        storing = inline_asm(T.bool(), operands, text, ",".join(cons) + ",~{memory}")
        self._state = (self._state[0] + advance, Boolean(storing))

    def _write(self, tag, payload, kind):
        tag = resolve_tag(tag)
        payload = trace_time_int(payload)
        if isinstance(payload, int) and not 0 <= payload <= layout.MAX_SLICE_PAYLOAD:
            raise ProfileBufferError(
                f"payload {payload} does not fit the slices format's 13 bits "
                f"(0..{layout.MAX_SLICE_PAYLOAD}); use the staged path for wider payloads")
        operands, cons = [], []
        self._state_operands(operands, cons)
        lines = ["{", ".reg .u32 lo, hi, c;", ".reg .u64 a;",
                 *_high_word_lines(tag, payload, kind, operands, cons)]
        lines += [
            *self._timer_lines("lo"),
            # stores while this record fits and every earlier one did (a latch: a cursor
            # that wraps after the slice filled never passes again)
            "setp.lt.and.u32 $0, $1, $4, $2;",
            # address the record from the advanced cursor (the same add as the DSL's, which
            # the compiler merges): the increment then does not wait for the store to read
            # its address registers
            "add.u32 c, $1, 8;",
            "mov.b64 a, {c, $3};",
            "@$0 st.global.v2.u32 [a+-8], {lo, hi};",
            "}",
        ]
        self._update("\n".join(lines), operands, cons, advance=8)

    def _timer_lines(self, register: str) -> list:
        order = [".reg .b32 om;", ORDER_AFTER_BARRIERS] if self.ordered else []
        return [*order, f"mov.u32 {register}, %globaltimer_lo;"]

    def now(self):
        """``%globaltimer_lo`` now (an Int32): a timestamp for :meth:`span`'s ``start`` or
        ``end``; nothing is stored. Several regions that share a boundary share one read."""
        if not self.enabled:
            return Int32(0)
        text = "\n".join(["{", *self._timer_lines("$0"), "}"])
        return Int32(inline_asm(T.i32(), [], text, "=r,~{memory}"))

    def span(self, start, tag, *, payload=0, end=None, high=None):
        """Record the region [``start``, ``end``] (timestamps from :meth:`now`; ``end=None``
        reads the timer): a START and a SPAN record, stored together. Unlike :meth:`end`,
        regions written this way may overlap or nest in any order (a warp-specialised
        consumer's MMA k-tile spans its next wait), and the payload keeps 32 bits.
        ``high``: the SPAN record's high word packed already (an Int32 holding
        ``layout.slice_record_high(tag, kind=SLICE_KIND_SPAN)``, payload 0); ``tag`` and
        ``payload`` are then not read."""
        if not self.enabled:
            return
        tag = resolve_tag(tag) if high is None else 0
        payload = trace_time_int(payload) if high is None else 0
        if isinstance(payload, int) and not 0 <= payload <= layout.MAX_SLICE_REGION_PAYLOAD:
            raise ProfileBufferError(
                f"payload {payload} does not fit 32 bits (0..{layout.MAX_SLICE_REGION_PAYLOAD})")
        operands, cons = [], []
        self._state_operands(operands, cons)
        operands.append(_low_word(start).ir_value())
        cons.append("r")
        if high is not None:
            operands.append(Int32(high).ir_value())
            cons.append("r")
            words = [f"mov.u32 hi, ${len(operands)};", f"mov.u32 shi, {layout.slice_start_high(0)};"]
        else:
            words = _high_word_lines(tag, payload, layout.SLICE_KIND_SPAN, operands, cons,
                                     start_word="shi")
        lines = ["{", ".reg .pred p0;", ".reg .u32 lo, hi, shi, c1;", ".reg .u64 a;", *words]
        if end is None:
            lines += self._timer_lines("lo")
        else:
            operands.append(_low_word(end).ir_value())
            cons.append("r")
            lines.append(f"mov.u32 lo, ${len(operands)};")  # the output is $0
        lines += [
            "setp.lt.and.u32 p0, $1, $4, $2;",
            "add.u32 c1, $1, 8;",
            "setp.lt.and.u32 $0, c1, $4, $2;",
            # addressed from cursor + 8, as in _write (not + 16: with the START in the window's
            # last usable slot, cursor + 16 wraps to 0 and would address the window below)
            "mov.b64 a, {c1, $3};",
            "@p0 st.global.v2.u32 [a+-8], {$5, shi};",
            "@$0 st.global.v2.u32 [a], {lo, hi};",
            "}",
        ]
        self._update("\n".join(lines), operands, cons, advance=16)

    def begin(self):
        """A boundary: the next ``end()`` measures from here (no event of its own)."""
        if self.enabled:
            self._write(0, 0, layout.SLICE_KIND_MARK)

    def end(self, tag, *, payload=0):
        """Close the span since the warp's previous record (or open/begin); it starts the next."""
        if self.enabled:
            self._write(tag, payload, layout.SLICE_KIND_SPAN)

    def instant(self, tag, *, payload=0):
        if self.enabled:
            self._write(tag, payload, layout.SLICE_KIND_INSTANT)

    def region(self, tag, *, payload=0):
        """``with rec.region(tag):`` = ``begin()`` then ``end(tag)``: two records; chain
        ``end()`` calls instead for back-to-back regions."""
        return _SliceRegion(self, tag, payload)

    def close(self):
        """Store the warp's exact record count (all lanes call it, once, at the end).

        Lane 0 stores every record, so a record made while lane 0 sat out a branch is lost;
        the lanes' counts then disagree, and close() marks the slice (the decoder warns)."""
        if not self.enabled:
            return
        cursor, _ = self._state
        check_state_reachable(cursor, "SliceRecorder")
        const = self._const
        pooled = self.pool_kernel is not None
        text = "\n".join([
            "{", ".reg .pred l0, ok, w, n, dv, lg;", ".reg .u32 lane, am, mn, mx, cnt, e;",
            ".reg .u64 c, g, r, t;",
            *([".reg .u32 st, cap, nsl;", ".reg .u64 h1, x64;"] if pooled else []),
            "mov.u32 lane, %laneid;",
            *(["and.b32 st, $2, 3;"] if pooled else []),
            f"setp.eq.u32 ok, {'st' if pooled else '$2'}, 1;",
            "setp.eq.and.u32 l0, lane, 0, ok;",
            "setp.eq.u32 n, lane, 0;",
            # a valid buffer, but no slice for this warp
            f"setp.eq.and.u32 n, {'st' if pooled else '$2'}, 0, n;",
            # recorded from divergent code: the active lanes' counts differ, or close() itself
            # runs in a partial warp
            "activemask.b32 am;",
            "redux.sync.min.u32 mn, $0, am;",
            "redux.sync.max.u32 mx, $0, am;",
            "setp.ne.u32 dv, mn, mx;",
            "setp.ne.or.b32 dv, am, -1, dv;",
            # open across two 2**28 ns boundaries: 2**28 ns or more, so the count may have wrapped
            "mov.u64 t, %globaltimer;",
            f"shr.u64 t, t, {layout.SLICE_LONG_OPEN_SHIFT};",
            "cvt.u32.u64 e, t;",
            "sub.u32 e, e, $5;",
            "setp.ge.u32 lg, e, 2;",
            "sub.u32 cnt, $0, $4;",
            "shr.u32 cnt, cnt, 3;",
            "cvt.u64.u32 c, cnt;",
            f"or.b64 c, c, {layout.SLICE_CLOSED_MAGIC << layout.SLICE_MAGIC_SHIFT};",
            f"@dv or.b64 c, c, {1 << layout.SLICE_DIVERGED_BIT};",
            f"@lg or.b64 c, c, {1 << layout.SLICE_LONG_OPEN_BIT};",
            "mov.b64 r, {$4, $1};",
            "@l0 st.global.u64 [r+-16], c;",
            "cvta.to.global.u64 g, $3;",
            "cvt.u64.u32 c, cnt;",
            *(_pool_lost_lines(self.pool_kernel) if pooled else ["@n red.global.add.u64 [g+16], c;"]),
            "}",
        ])
        operands = [cursor.ir_value(), const.high.ir_value(), const.state.ir_value(),
                    self._address().ir_value(), const.start.ir_value(), const.opened.ir_value()]
        inline_asm(None, operands, text, "r,r,r,l,r,r,~{memory}")


def _pool_lost_lines(kernel: int) -> list:
    """close() of a pooled warp that found no slice: its count goes to the lost table's word of
    its kernel and launch (the epoch the open kept in the state, ``$2`` bits 2..15)."""
    return [
        "ld.global.u64 h1, [g+8];",
        "mov.b64 {cap, nsl}, h1;",
        f"and.b32 nsl, nsl, {layout.SLICES_COUNT_MASK};",
        "cvt.u64.u32 t, cap;",
        f"add.u64 t, t, {layout.SLICE_HEADER_WORDS};",
        "cvt.u64.u32 x64, nsl;",
        "mul.lo.u64 t, t, x64;",
        f"add.u64 t, t, {layout.SLICES_HEADER_WORDS + kernel * layout.POOL_LOST_EPOCHS};",
        "shr.u32 st, $2, 2;",
        f"and.b32 st, st, {layout.POOL_LOST_EPOCHS - 1};",
        "cvt.u64.u32 x64, st;",
        "add.u64 t, t, x64;",
        "shl.b64 t, t, 3;",
        "add.u64 t, t, g;",
        "@n red.global.add.u64 [t], c;",
    ]


def _high_word_lines(tag, payload, kind, operands: list, cons: list, *, start_word=None) -> list:
    """PTX setting ``hi``, a record's high word (and ``start_word``, its START record's, when
    given): one immediate when the tag and payload are known while tracing, else packed on
    the device from two operands appended to ``operands``."""
    if isinstance(tag, int) and isinstance(payload, int):
        lines = [f"mov.u32 hi, {layout.slice_record_high(tag, kind=kind, payload=payload)};"]
        if start_word:
            lines.append(f"mov.u32 {start_word}, {layout.slice_start_high(payload)};")
        return lines
    t_op, p_op = f"${len(operands) + 1}", f"${len(operands) + 2}"  # after the one output
    operands += [Int32(tag).ir_value(), Int32(payload).ir_value()]
    cons += ["r", "r"]
    lines = [
        f"and.b32 hi, {t_op}, {layout.field_mask(layout.SLICE_TAG_BITS)};",
        f"bfi.b32 hi, {p_op}, hi, {layout.SLICE_PAYLOAD_SHIFT - 32}, {layout.SLICE_PAYLOAD_BITS};",
        f"or.b32 hi, hi, {layout.slice_record_high(0, kind=kind)};",
    ]
    if start_word:
        lines += [f"shr.u32 {start_word}, {p_op}, {layout.SLICE_PAYLOAD_BITS};",
                  f"or.b32 {start_word}, {start_word}, {layout.slice_start_high(0)};"]
    return lines


def _low_word(value) -> Int32:
    """A timestamp from :meth:`SliceRecorder.now` (Int32) or a full ``%globaltimer`` (Int64):
    its low 32 bits, which is what a slice record holds."""
    return Int32(value)  # an Int64 is truncated, as in C


class _SliceRegion:
    __dsl_trace_time_ctxmgr__ = True

    def __init__(self, recorder, tag, payload):
        self._rec, self._tag, self._payload = recorder, tag, payload

    def __enter__(self):
        self._rec.begin()
        return self._rec

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self._rec.end(self._tag, payload=self._payload)
        return False
