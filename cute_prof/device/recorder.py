"""Staged write path: one warp keeps up to 32 records in its lanes' registers and writes
them with one atomic and two coalesced 16-byte stores per lane.

Owns ``WarpRecorder`` and ``RoleRecorder``; the slices path is :mod:`.slices`'s. It may not
import zero-edit recording (:mod:`.autoprof`) nor anything on the host side above ``device``.
"""

from __future__ import annotations

from cutlass import Int32, Int64
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import T

from .. import layout
from ..errors import ProfileBufferError
from .flight import flight_enter, flight_leave
from .ops import profile_start, profile_stop
from .scope import Ledger, check_state_reachable
from .slices import SliceRecorder
from .ptx import (
    LINEAR_TID_LINES,
    ORDER_AFTER_BARRIERS,
    buffer_address_and_words,
    cap_lines,
    claimed_slot_lines,
    inline_asm,
    is_enabled,
    read_globaltimer,
    resolve_tag,
    store_lines,
    trace_time_int,
)

# The lanes executing this code and the lowest of them: the whole warp when converged
# (lead 0); in divergent code only the active lanes take part (see flush_lines).
ACTIVE_LANES_LINES = (
    "activemask.b32 am;",
    "neg.s32 lead, am;",
    "and.b32 lead, lead, am;",
    "bfind.u32 lead, lead;",
)

def flush_lines(*, active_lanes: bool) -> tuple:
    """PTX writing the staged chunk: the lowest lane claims ``n`` slots, the lanes learn
    the base and those below n store their record. ``active_lanes``: for a ``flush()`` that
    may run in divergent code, only the active lanes take part; an inactive lane's record
    is never stored and its slot stays claimed and empty, which the decoder counts as
    lost, exactly. (The flush inside a stage runs converged: lane 0, full mask.)"""
    if active_lanes:
        claim = (*ACTIVE_LANES_LINES, "setp.eq.u32 l0, lane, lead;")
        source, mask = "lead", "am"
    else:
        claim = ("setp.eq.u32 l0, lane, 0;",)
        source, mask = "0", "0xffffffff"
    return (
        # staged records hold their end time in w1: the duration is computed here, once
        # per chunk, not once per record
        "sub.s64 w1, w1, w0;",
        *claim,
        "@l0 atom.global.add.u64 base, [g], n64;",
        "mov.b64 {blo, bhi}, base;",
        f"shfl.sync.idx.b32 blo, blo, {source}, 31, {mask};",
        f"shfl.sync.idx.b32 bhi, bhi, {source}, 31, {mask};",
        "mov.b64 base, {blo, bhi};",
        # the counter word's high bits are the launch epoch: into the tid word, out of the slot
        *claimed_slot_lines("base", "ep"),
        f"bfi.b64 w3, ep, w3, {layout.EPOCH_SHIFT}, {layout.EPOCH_BITS};",
        "cvt.u64.u32 s, lane;",
        "add.u64 s, s, base;",
        "setp.lt.u32 mine, lane, n;",
        "setp.lt.and.s64 mine, s, cap, mine;",
        *store_lines("mine", ("w0", "w1", "w2", "w3")),
    )


class WarpRecorder:
    """Per-warp staged recording: the cheap path for hot loops.

    Every lane of the warp calls ``stop``/``instant`` together; record k of the warp's
    current chunk lives in lane k's registers. Called from divergent code (some lanes
    inactive), a record is written directly by the lowest active lane instead (one atomic),
    and a ``flush()`` there stores the active lanes' records and leaves the others' claimed
    slots empty, so the decoder reports exactly those as lost. ``converged=True`` drops
    the divergence check (three instructions and a few registers per record) where the
    caller guarantees whole warps, e.g. a register-starved producer warp. The 32nd record, or
    ``flush()``, writes the chunk: one atomic claims the slots and each lane stores its
    record with two 16-byte stores, so the warp writes 1 KiB contiguously. The buffer stays
    the same flat, atomic-indexed array and the counter stays exact. The tid (and the SM and
    warp ids) are fixed per recorder, so a record costs a handful of register moves.

    Call ``flush()`` once after the recording loop, before the warp exits: a kernel whose
    recorder has records staged after its last flush (outside a loop) fails to compile with
    the line that created the recorder (``cute_prof.device.scope``). Carries its state
    through dynamic loops like any DSL value; handed to a helper that records inside a
    loop, it must come back: ``rec = helper(rec, ...)``."""

    def __init__(self, buf, max_events, tid, *, enabled=None, converged: bool = False, _state=None,
                 _const=None, _ledger=None):
        self.buf, self.max_events, self.tid = buf, max_events, tid
        self.enabled = is_enabled(enabled)
        self.converged = bool(converged)
        if not self.enabled:
            return
        self._ledger = _ledger if _ledger is not None else Ledger("WarpRecorder")
        self._lane, self._tidword = _const if _const is not None else self._warp_constants(tid)
        if _state is None:
            zero = Int64(0)
            _state = (Int32(0), zero, zero, zero)
        self._cursor, self._w0, self._w1, self._w2 = _state

    @staticmethod
    def _warp_constants(tid):
        """(lane id, tid word = tid | smid | warp | grid id bits), read once per recorder."""
        text = "\n".join([
            "{", ".reg .u32 x, y, z, nx, ny, lin, w, sm;", ".reg .u64 hi, t, gid;", *LINEAR_TID_LINES,
            "shr.u32 w, lin, 5;", "mov.u32 sm, %smid;", "mov.u32 $0, %laneid;",
            "cvt.u64.u32 hi, sm;", f"shl.b64 hi, hi, {layout.SM_SHIFT};",
            "cvt.u64.u32 t, w;", f"shl.b64 t, t, {layout.WARP_SHIFT};",
            "or.b64 hi, hi, t;", "cvt.u64.u32 t, $2;", "or.b64 hi, hi, t;",
            # %gridid is fixed per launch: folded in once here, not per record
            "mov.u64 gid, %gridid;",
            f"bfi.b64 $1, gid, hi, {layout.GRID_SHIFT}, {layout.GRID_BITS};", "}",
        ])
        struct = llvm.StructType.get_literal([T.i32(), T.i64()])
        res = inline_asm(struct, [Int32(tid).ir_value()], text, "=r,=l,r")
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
                            converged=self.converged, _state=state, _const=const,
                            _ledger=self._ledger if self.enabled else None)

    def start(self):
        return read_globaltimer() if self.enabled else 0

    def _flush_operands(self):
        """Operands and PTX that set g (global address) and cap (records that fit)."""
        address, words = buffer_address_and_words(self.buf, self.max_events)
        values = [Int64(address), Int64(self.max_events), self._tidword]
        if words is not None:
            values.append(Int64(words))
        return values, words is not None

    def _stage(self, start, tag, payload, kind, end=None):
        check_state_reachable(self._cursor, "WarpRecorder")
        self._ledger.staged()
        tag = resolve_tag(tag)
        payload = trace_time_int(payload)
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
            ".reg .pred m, f, l0, mine, v, q, dv;",
            ".reg .u64 t, g, base, s, a, al, cap, n64, w0, w1, w2, w3, tw, x3, ep, rs, rt, rd;",
            ".reg .u32 lane, c, n, blo, bhi, am, lead;",
            f"mov.u32 c, {idx['c']};", f"mov.u64 w0, {idx['w0']};", f"mov.u64 w1, {idx['w1']};",
            f"mov.u64 w2, {idx['w2']};",
            # ordered after a preceding barrier, as every timer read
            f".reg .b32 om;\n{ORDER_AFTER_BARRIERS}\nmov.u64 t, %globaltimer;" if end is None
            else f"mov.u64 t, {op(Int64(end))};",
        ]
        # the record: start rs, end t, tag word rt
        if kind == layout.KIND_INSTANT:
            lines.append("mov.u64 rs, t;")
        else:
            lines.append(f"mov.u64 rs, {op(Int64(start))};")
        if isinstance(tag, int) and isinstance(payload, int):
            lines.append(f"mov.b64 rt, {layout.tag_word_constant(tag, kind=kind, payload=payload)};")
        else:
            a_tag, a_pl = op(Int32(tag)), op(Int32(payload))
            lines += [
                f"cvt.u64.u32 tw, {a_tag};", f"and.b64 tw, tw, {layout.field_mask(layout.TAG_BITS)};",
                f"cvt.u64.u32 x3, {a_pl};", f"shl.b64 x3, x3, {layout.PAYLOAD_SHIFT};",
                "or.b64 tw, tw, x3;", f"or.b64 rt, tw, {layout.tag_word_constant(0, kind=kind)};",
            ]
        if not self.converged:
            lines += [
                # called from divergent code: lane c may be inactive, so staging would lose
                # the record; the lowest active lane writes it directly instead (one atomic)
                "activemask.b32 am;",
                "setp.ne.u32 dv, am, -1;",
                "@dv bra DIV_${:uid};",
            ]
        lines += [
            f"setp.eq.u32 m, {idx['lane']}, c;",
            # w1 holds the end time until the flush turns it into a duration
            "@m mov.u64 w0, rs;", "@m mov.u64 w1, t;", "@m mov.b64 w2, rt;",
        ]
        lines += [
            "add.u32 c, c, 1;",
            "setp.eq.u32 f, c, 32;",
            "@!f bra.uni DONE_${:uid};",
            f"mov.u32 lane, {idx['lane']};", f"mov.u64 w3, {idx['w3']};",
            "mov.u32 n, c;", "cvt.u64.u32 n64, n;",
            *cap_lines(idx["g"], idx["max"], idx.get("words")),
            *flush_lines(active_lanes=False),
            "mov.u32 c, 0;", "DONE_${:uid}:",
        ]
        if not self.converged:
            lines += self._divergent_record_lines(idx)
        lines += [
            "mov.u32 $0, c;", "mov.u64 $1, w0;", "mov.u64 $2, w1;", "mov.u64 $3, w2;", "}",
        ]
        operands = [v.ir_value() for v in ins + extra]
        cons = ["r", "l", "l", "l", "r"] + ["l"] * (len(ins) - 5) + [
            "l" if isinstance(v, Int64) else "r" for v in extra]
        struct = llvm.StructType.get_literal([T.i32(), T.i64(), T.i64(), T.i64()])
        res = inline_asm(struct, operands, "\n".join(lines),
                          "=r,=l,=l,=l," + ",".join(cons) + ",~{memory}")
        self._cursor = Int32(llvm.extractvalue(T.i32(), res, [0]))
        self._w0, self._w1, self._w2 = (Int64(llvm.extractvalue(T.i64(), res, [i])) for i in range(1, 4))

    @staticmethod
    def _divergent_record_lines(idx) -> list:
        """PTX after the staging path: the record (rs, t, rt) written directly by the lowest
        active lane when the stage runs in divergent code (branch DIV taken)."""
        return [
            "bra.uni OUT_${:uid};",
            "DIV_${:uid}:",
            f"mov.u32 lane, {idx['lane']};", f"mov.u64 w3, {idx['w3']};",
            *cap_lines(idx["g"], idx["max"], idx.get("words")),
            *ACTIVE_LANES_LINES,
            "setp.eq.u32 l0, lane, lead;",
            "@l0 atom.global.add.u64 s, [g], 1;",
            *claimed_slot_lines("s", "ep"),
            f"bfi.b64 w3, ep, w3, {layout.EPOCH_SHIFT}, {layout.EPOCH_BITS};",
            "sub.s64 rd, t, rs;",
            "setp.lt.and.s64 mine, s, cap, l0;",
            *store_lines("mine", ("rs", "rd", "rt", "w3")),
            "OUT_${:uid}:",
        ]

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
        check_state_reachable(self._cursor, "WarpRecorder")
        self._ledger.flushed()
        flush_values, has_words = self._flush_operands()
        text = "\n".join([
            "{",
            ".reg .pred f, l0, mine, v, q;",
            ".reg .u64 g, base, s, a, al, cap, n64, w0, w1, w2, w3, ep;",
            ".reg .u32 lane, n, blo, bhi, am, lead;",
            "mov.u32 n, $0;", "mov.u64 w0, $1;", "mov.u64 w1, $2;", "mov.u64 w2, $3;",
            "mov.u32 lane, $4;", "mov.u64 w3, $7;",
            "setp.eq.u32 f, n, 0;", "@f bra.uni DONE_${:uid};",
            "cvt.u64.u32 n64, n;",
            *cap_lines("$5", "$6", "$8" if has_words else None),
            *flush_lines(active_lanes=True),
            "DONE_${:uid}:", "}",
        ])
        values = [self._cursor, self._w0, self._w1, self._w2, self._lane] + flush_values
        cons = ",".join(["r", "l", "l", "l", "r"] + ["l"] * len(flush_values))
        inline_asm(None, [v.ir_value() for v in values], text, cons + ",~{memory}")
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



WRITE_PATHS = ("staged", "direct", "slices")


class RoleRecorder:
    """One recording warp of a warp-specialised kernel (a producer, a consumer warp), with the
    write path picked on the host: ``"slices"`` (a :class:`~cute_prof.device.slices.SliceRecorder`
    on a slices buffer: two 8-byte stores per region, the cheapest), ``"staged"`` (a
    :class:`WarpRecorder` on a flat buffer) or ``"direct"`` (one atomic per record from lane 0,
    :func:`profile_stop`).

    Every path takes the same calls: ``t = rec.start()``; ``rec.stop(t, tag, payload=k)``;
    ``rec.stop(t, tag, end=t2)`` closes a region at a timestamp already read, so back-to-back
    regions share their boundary exactly; ``rec.flush()`` before the warp exits (slices: it
    closes the warp's slice, so call it once, at the end; direct: a no-op). Regions may
    overlap and nest in any order on every path. A timestamp from ``start()`` is an Int64
    (flat buffers) or an Int32 (slices: ``%globaltimer_lo``); pass it back unchanged. The
    recorder's state travels through dynamic loops and branches like any DSL value, so calls
    inside ``cutlass.range`` loops work. ``max_events`` is unused on the slices path (the
    buffer's header holds each warp's capacity); ``header=`` (slices only) takes
    ``cute_prof.device.slices.prefetch_header(buf)`` issued early, so the open does not wait.

    ``flight=(positions, slots)`` (a flight recorder's position region, see
    ``cute_prof.flight``) makes ``rec.enter(tag, payload=k, depth=d)`` / ``rec.leave(depth=d)``
    mark where the warp is, for hang and crash reports; without it they emit nothing."""

    def __init__(self, buf, max_events, tid, *, write_path: str = "staged", enabled=None,
                 flight=None, converged: bool = False, header=None, _rec=None):
        if flight is not None and (not isinstance(flight, tuple) or len(flight) != 2):
            raise ProfileBufferError("flight must be a (positions, slots) pair: the flight recorder's "
                                     "position region and its slot count, as kernel arguments")
        self.flight = flight
        if write_path not in WRITE_PATHS:
            raise ProfileBufferError(f"write_path must be one of {WRITE_PATHS}, got {write_path!r}")
        if header is not None and write_path != "slices":
            raise ProfileBufferError(f"header= is the slices path's prefetched buffer header; the "
                                     f"{write_path!r} path has none: leave it out")
        self.buf, self.max_events, self.tid = buf, max_events, tid
        self.write_path = write_path
        self.enabled = is_enabled(enabled)
        if _rec is not None or write_path == "direct" or not self.enabled:
            self._rec = _rec
        elif write_path == "slices":
            self._rec = SliceRecorder(buf, tid, enabled=True, header=header)
        else:
            self._rec = WarpRecorder(buf, max_events, tid, enabled=True, converged=converged)

    def __extract_mlir_values__(self):
        return [] if self._rec is None else self._rec.__extract_mlir_values__()

    def __new_from_mlir_values__(self, values):
        rec = None if self._rec is None else self._rec.__new_from_mlir_values__(values)
        return RoleRecorder(self.buf, self.max_events, self.tid, write_path=self.write_path,
                            enabled=self.enabled, flight=self.flight, _rec=rec)

    def enter(self, tag, *, payload=0, depth: int = 0):
        """Flight recorder: mark ``tag`` (payload: k-tile, stage) entered at nesting ``depth``,
        so a hang report names it. No code at all unless built with ``flight=``."""
        if self.flight is not None and self.enabled:
            flight_enter(self.flight[0], self.flight[1], tag, payload=payload, depth=depth)

    def leave(self, *, depth: int = 0):
        """Flight recorder: mark the region open at ``depth`` left."""
        if self.flight is not None and self.enabled:
            flight_leave(self.flight[0], self.flight[1], depth=depth)

    def start(self):
        """The region's start timestamp (``%globaltimer``)."""
        if self.write_path == "slices":
            return self._rec.now() if self._rec is not None else Int32(0)
        if self._rec is not None:
            return self._rec.start()
        return profile_start(self.buf, self.max_events, enabled=self.enabled)

    def stop(self, start, tag, *, payload=0, end=None):
        """Record [start, end]; ``end=None`` reads the timer now."""
        if self.write_path == "slices":
            if self._rec is not None:
                self._rec.span(start, tag, payload=payload, end=end)
        elif self._rec is not None:
            self._rec.stop(start, tag, payload=payload, end=end)
        elif self.enabled:
            profile_stop(self.buf, start, tag, self.tid, self.max_events, guard="lane0",
                         payload=payload, end=end, enabled=True)

    def region(self, tag, *, payload=0):
        """``with rec.region(tag, payload=k):`` records the body."""
        return _RecorderRegion(self, tag, payload)

    def flush(self):
        """Write staged records (staged path) or close the warp's slice (slices path, once);
        call before the warp exits."""
        if self.write_path == "slices":
            if self._rec is not None:
                self._rec.close()
        elif self._rec is not None:
            self._rec.flush()
