"""Zero-edit recording's trace-time state: what one recording block found and the kernel being
traced now, and the records it emits into that kernel's slice.

Owns the recording's data (:class:`KernelRecording`, :class:`Site`, :class:`PipelineInfo`,
:class:`RecordingConfig`), the process's one :data:`STATE`, the slice's open at the kernel's
entry and its close where the body ends, a pipeline's name (the variable its ``create`` was
assigned to) and the records of one call (:func:`record_call`). It wraps nothing of
``cutlass``: :mod:`cute_prof.device.autoprof` does, and calls in here; it may not import that
module nor anything on the host side above ``device``.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import linecache
import sys
import threading
from typing import Any, Callable

from cutlass import Boolean, Int32, Int64
from cutlass._mlir import ir
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import T

from .. import layout
from ..errors import ProfileBufferError
from ..tags import TagTable
from .scope import is_library_file, on_kernel_end, user_location
from .slices import SliceConstants, SliceHeader, SliceRecorder

# a slice's state before its warp opened it: close() stores nothing (SliceConstants.state)
NEVER_OPENED = 3
LOOP_OPS = ("scf.for", "scf.while", "scf.parallel", "scf.forall")

KERNEL_OPS = ("cuda.kernel",)
FUNCTION_OPS = ("cuda.kernel", "cuda.func", "func.func", "gpu.func", "llvm.func")


@dataclasses.dataclass
class PipelineInfo:
    """One pipeline object of a kernel, as traced."""

    index: int
    name: str  # the variable its create() was assigned to, else "<class>#<index>"
    cls: str
    stages: int
    created_at: str  # file:line of the create() call
    # its producer_commit is the full barrier's own arrive on a TMA-loaded ring: the arm
    # (expect-tx) a kernel that drives the barriers itself makes before its copies, so the
    # copies issue after the commit's record, not before it
    commit_arms_copies: bool = False

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class Site:
    """What one tag of an instrumented kernel means."""

    tag: int
    name: str
    op: str  # producer_acquire, ..., barrier, barrier_arrive, sync_threads, region, mark
    kind: str  # "wait" (a region: blocked time), "signal" (an instant), "work" (opt-in region)
    pipeline: int | None  # PipelineInfo.index, None for barriers

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class KernelRecording:
    """The buffer and the meaning of the tags of one instrumented kernel."""

    def __init__(self, name: str, buffer, n_slices: int, per_warp: int, *,
                 barriers: bool = True, pool_kernel: int | None = None, mode: str = "full"):
        self.name = name
        self.mode = mode  # "full", or "light": the producer's calls alone
        self.pool_kernel = pool_kernel  # its kernel id in a run's pool (None: its own buffer)
        self.barriers = bool(barriers)  # were named barriers recorded
        self.buffer = buffer
        self.n_slices, self.per_warp = int(n_slices), int(per_warp)
        self.tags = TagTable.auto()
        self.sites: dict[int, Site] = {}
        self.pipelines: list[PipelineInfo] = []
        self.closed = False
        # light mode in a pool: every warp opens at the kernel's entry, as in full mode, for a
        # record site the whole warp may not reach together (the pool's open shares one
        # lane's claim with a full-warp shuffle)
        self.opens_at_entry = False

    def site(self, name: str, op: str, kind: str, pipeline: int | None) -> int:
        tag = self.tags.id(name)
        self.sites.setdefault(tag, Site(tag, name, op, kind, pipeline))
        return tag

    def metadata(self) -> dict[str, Any]:
        """What the host needs to name and model this kernel's records (JSON-safe)."""
        return {
            "kernel": self.name,
            "sites": [s.to_dict() for s in self.sites.values()],
            "pipelines": [p.to_dict() for p in self.pipelines],
            "barriers_recorded": self.barriers and self.mode == "full",
            "mode": self.mode,
            **({"opens_at_entry": self.opens_at_entry} if self.mode == "light" else {}),
            **({"pool_kernel": self.pool_kernel} if self.pool_kernel is not None else {}),
        }


@dataclasses.dataclass
class RecordingConfig:
    """How :func:`~cute_prof.device.autoprof.recording` sizes the buffer of each kernel it
    instruments, and what it records."""

    per_warp: int
    max_warps: int
    allocate: Callable[[int, int], Any]  # (n_slices, per_warp) -> a slices buffer tensor
    kernels: tuple[str, ...] | None = None  # instrument only kernels whose name has one of these
    # > 0 (an experiment, cute_prof.experimental): after one producer_commit in this many of a
    # TMA-loaded ring, the producer waits for that load's full barrier and records when it
    # completed (see cute_prof.device.load_arrivals)
    load_arrivals: int = 0
    # > 0 (an experiment, cute_prof.experimental): every consumer warp spins this long (ns)
    # after each release of a TMA-loaded ring (the kernel at a slower pace on every SM: its
    # loads at a lower memory throughput)
    consumer_delay_ns: int = 0
    # False: named barriers (``barrier``, ``barrier_arrive``, ``sync_threads``) are not
    # recorded, only the pipelines (what the pipeline model reads; a kernel whose warps hand
    # off through named barriers makes about as many barrier calls as pipeline calls)
    barriers: bool = True
    # "light": only the producer's waits record (producer_acquire, producer_tail), no
    # consumer call, no signal and no barrier: the records sit where a warp-specialised
    # kernel has slack, outside its consumers' loops (autoprof.LIGHT_OPS)
    mode: str = "full"
    # a run's pool (``cute-prof record``): every kernel's slices come from its one pooled
    # buffer, claimed per warp, and each kernel gets a kernel id there; the pool provides
    # ``buffer``, ``capacity`` (slices), ``per_warp`` and ``new_kernel(name) -> id``
    pool: Any = None


class Tracing:
    """Trace-time state of the kernel being traced now."""

    def __init__(self, kernel_op, recording: KernelRecording):
        self.kernel_op = kernel_op
        self.recording = recording
        self.recorder: SliceRecorder | None = None
        self.cursor_slot = None
        self.storing_slot = None
        # light mode: the open's constants live in stack slots too, and each warp opens its
        # slice where it first records (before the outermost loop around that call), so
        # warps that never record carry nothing through the kernel
        self.lazy = False
        self.constant_slots: dict[str, Any] = {}
        self.opened_before: list = []  # the loop ops and blocks a guarded open was placed in
        self.entry_body = None  # the entry block's first op before the slots went in
        # pipeline index -> stack slot: 1 while the ring's latest full-barrier arm has had
        # no acquire after it (load_arrivals.previous_load_arrival_probe)
        self.armed_slots: dict[int, Any] = {}
        # light mode, while a producer_acquire records: the region's end is read where its
        # ring's empty-barrier wait returns, not after the whole call (acquire_wait_end)
        self.acquire: RecordedAcquire | None = None


class RecordingState:
    """The process's zero-edit recording: the active block's config (None outside one), the
    kernels it instrumented, the kernel being traced now."""

    def __init__(self):
        self.lock = threading.RLock()
        self.active: RecordingConfig | None = None
        self.recordings: list[KernelRecording] = []
        self.tracing: Tracing | None = None
        self.skipped_kernels: set = set()
        self.depth = threading.local()  # > 0 inside a recorded call (its own calls record nothing)
        self.pipeline_ids: dict[int, PipelineInfo] = {}  # id(pipeline object) -> its info
        # every buffer a compiled kernel may still write to: a framework that caches the
        # compiled kernel (FA4's compile_cache) can launch it after the recording ended
        self.live_buffers: list = []


STATE = RecordingState()


# ------------------------------------------------------------------ trace-time helpers
def current_block():
    try:
        return ir.InsertionPoint.current.block
    except (ValueError, RuntimeError):
        return None


def outermost_enclosing(block, names: tuple[str, ...], *, stop=None):
    """The outermost op named one of ``names`` around ``block`` (below ``stop``), or None."""
    found = None
    while block is not None:
        op = block.owner
        if op is None:
            break
        operation = op.operation if hasattr(op, "operation") else op
        if stop is not None and operation == stop:
            break
        if operation.name in names:
            found = operation
        if not operation.attached or operation.parent is None:
            break
        block = operation.block
    return found


def enclosing_function(block):
    """The outermost function-like op around ``block`` (kernel, device function), or None."""
    return outermost_enclosing(block, FUNCTION_OPS)


def kernel_name(kernel_op) -> str:
    try:
        return ir.StringAttr(kernel_op.attributes["sym_name"]).value
    except (KeyError, ValueError):
        return "kernel"


def in_call() -> bool:
    """Inside a recorded call: the calls it makes itself record nothing."""
    return getattr(STATE.depth, "value", 0) > 0


@contextlib.contextmanager
def outermost():
    STATE.depth.value = getattr(STATE.depth, "value", 0) + 1
    try:
        yield
    finally:
        STATE.depth.value -= 1


def tracing_here() -> Tracing | None:
    """The state of the kernel whose body is being traced at the current insertion point,
    creating it (and its buffer) at the kernel's first record; None where nothing records."""
    active = STATE.active
    if active is None or in_call():
        return None
    block = current_block()
    if block is None:
        return None
    function = enclosing_function(block)
    if function is None:
        return None
    if function.name not in KERNEL_OPS:
        raise ProfileBufferError(
            f"zero-edit recording met a pipeline or barrier call at {user_location()} inside a "
            f"separately compiled device function ({function.name}); only calls traced into a "
            f"@cute.kernel body can be recorded. Profile this kernel with hand-placed "
            f"SliceRecorder regions, or inline the function")
    if STATE.tracing is not None and STATE.tracing.kernel_op == function:
        return STATE.tracing
    name = kernel_name(function)
    if active.kernels is not None and not any(k in name for k in active.kernels):
        STATE.skipped_kernels.add(name)
        return None
    if active.pool is not None:
        recording = KernelRecording(name, active.pool.buffer, active.pool.capacity,
                                    active.pool.per_warp, barriers=active.barriers,
                                    pool_kernel=active.pool.new_kernel(name), mode=active.mode)
    else:
        buffer = active.allocate(active.max_warps, active.per_warp)
        STATE.live_buffers.append(buffer)
        recording = KernelRecording(name, buffer, active.max_warps, active.per_warp,
                                    barriers=active.barriers, mode=active.mode)
    STATE.recordings.append(recording)
    STATE.pipeline_ids.clear()
    STATE.tracing = Tracing(function, recording)
    STATE.tracing.lazy = active.mode == "light"
    return STATE.tracing


def cta_linear_index() -> Int32:
    from cutlass import cute

    bx, by, bz = cute.arch.block_idx()
    gx, gy, _ = cute.arch.grid_dim()
    return Int32(bx) + Int32(gx) * (Int32(by) + Int32(gy) * Int32(bz))


def cluster_linear_index() -> Int32:
    """The launch's cluster this CTA is in, linear (a launch without clusters: its CTA)."""
    from cutlass import cute

    cx, cy, cz = cute.arch.cluster_idx()
    nx, ny, _ = cute.arch.cluster_dim()
    return Int32(cx) + Int32(nx) * (Int32(cy) + Int32(ny) * Int32(cz))


# ------------------------------------------------------------------ the kernel's slice
def open_slice(state: Tracing) -> None:
    """At the kernel's entry: the two stack slots of the cursor and the slice's open."""
    rec = state.recording
    entry = state.kernel_op.regions[0].blocks[0]
    address = int(rec.buffer.data_ptr())
    dims = layout.slices_header(rec.n_slices, rec.per_warp,
                                pooled=rec.pool_kernel is not None)[1]
    with ir.InsertionPoint.at_block_begin(entry):
        one = Int32(1).ir_value()
        pointer = llvm.PointerType.get()
        state.cursor_slot = llvm.alloca(pointer, one, T.i32(), alignment=4)
        state.storing_slot = llvm.alloca(pointer, one, T.bool(), alignment=1)
        header = SliceHeader(Int64(layout.SLICES_MAGIC), Int64(dims))
        recorder = SliceRecorder(address, cta_linear_index(), ordered=False, header=header,
                                 pool_kernel=rec.pool_kernel)
        cursor, storing = recorder.cursor_state()
        llvm.store(cursor.ir_value(), state.cursor_slot)
        llvm.store(storing.ir_value(), state.storing_slot)
    state.recorder = recorder


CONSTANT_FIELDS = ("start", "high", "end", "state", "opened")
# light mode's region not stored yet: its start and end times and its SPAN record's high word
# (tag and kind packed while tracing; pending: 1 while there is one). A wait's region is
# stored at the warp's next record, not right after the call: the stores wait for the timer
# reads, and right after a producer's acquire they would hold back the copy it issues next.
# The packed word (not the tag) keeps the tag's packing out of the producer's loop
PENDING_FIELDS = ("pending", "pending_start", "pending_end", "pending_high")


def lazy_slots(state: Tracing) -> None:
    """Light mode, at the kernel's entry: the cursor's and the open's stack slots, holding
    "never opened" (a warp that never records stores nothing, not even at its close)."""
    if state.cursor_slot is not None:
        return
    entry = state.kernel_op.regions[0].blocks[0]
    state.entry_body = entry.operations[0]
    with ir.InsertionPoint.at_block_begin(entry):
        one = Int32(1).ir_value()
        pointer = llvm.PointerType.get()
        state.cursor_slot = llvm.alloca(pointer, one, T.i32(), alignment=4)
        state.storing_slot = llvm.alloca(pointer, one, T.bool(), alignment=1)
        llvm.store(Int32(0).ir_value(), state.cursor_slot)
        llvm.store(Boolean(False).ir_value(), state.storing_slot)
        for name in CONSTANT_FIELDS + PENDING_FIELDS:
            state.constant_slots[name] = llvm.alloca(pointer, one, T.i32(), alignment=4)
            value = NEVER_OPENED if name == "state" else 0
            llvm.store(Int32(value).ir_value(), state.constant_slots[name])


def outermost_loop(block, kernel_op):
    """The outermost loop op of the kernel around ``block`` (None: the block is in none)."""
    return outermost_enclosing(block, LOOP_OPS, stop=kernel_op)


# where a value comes from, for it to hold alike in a warp's 32 threads: a constant, a value
# made warp-uniform, the CTA's or cluster's place in the launch (and arith on those)
WARP_UNIFORM_SOURCES = ("arith.constant", "cute_nvgpu.arch.make_warp_uniform")
WARP_UNIFORM_REGISTERS = ("ctaid", "nctaid", "clusterid", "nclusterid", "cluster.ctaid",
                          "cluster.nctaid", "cluster.ctarank", "cluster.nctarank")


def warp_uniform(value, kernel_op, depth: int = 0) -> bool:
    """``value`` provably holds alike in all of a warp's threads (False: not shown so)."""
    owner = value.owner
    if isinstance(owner, ir.Block):  # a kernel argument
        return owner == kernel_op.regions[0].blocks[0]
    op = getattr(owner, "operation", owner)
    name = op.name
    if name in WARP_UNIFORM_SOURCES:
        return True
    if name.startswith("nvvm.read.ptx.sreg."):
        return name[len("nvvm.read.ptx.sreg."):].rsplit(".", 1)[0] in WARP_UNIFORM_REGISTERS
    return (name.startswith("arith.") and depth < 64
            and all(warp_uniform(v, kernel_op, depth + 1) for v in op.operands))


def only_ifs_around(block, stop, condition: Callable[[Any], bool]) -> bool:
    """Between ``block`` and ``stop`` (an enclosing block, or the op whose region holds the
    walk's last block) lie only ``scf.if`` ops, each on a condition ``condition`` accepts."""
    while not (isinstance(stop, ir.Block) and block == stop):
        op = getattr(block.owner, "operation", block.owner)
        if op is None:
            return False
        if not isinstance(stop, ir.Block) and op == stop:
            return True
        if op.name != "scf.if" or not condition(op.operands[0]):
            return False
        block = op.block
    return True


def whole_warp_reaches(block, kernel_op) -> bool:
    """Every ``scf.if`` around ``block`` (up to the kernel) branches alike for a warp's
    threads, and nothing else encloses it: a warp reaching it arrives with all its threads."""
    return only_ifs_around(block, kernel_op, lambda cond: warp_uniform(cond, kernel_op))


def lazy_open(state: Tracing) -> None:
    """Light mode, at a record site: open the warp's slice before the outermost loop around
    the site (here when there is none), guarded so that a warp opens once, whichever of the
    kernel's record sites it reaches first. In a pool, where the whole warp may not reach
    that place together, every warp opens at the kernel's entry instead."""
    from cutlass._mlir.dialects import scf

    lazy_slots(state)
    block = current_block()
    anchor = outermost_loop(block, state.kernel_op)
    # one guarded open per loop nest, and per block for the sites outside any loop (a
    # later site of the same block follows an open already placed above it)
    key = anchor if anchor is not None else block
    rec = state.recording
    if rec.opens_at_entry or any(key == seen for seen in state.opened_before):
        return
    where = anchor.operation.block if anchor is not None else block
    if rec.pool_kernel is not None and not whole_warp_reaches(where, state.kernel_op):
        rec.opens_at_entry = True
        place = ir.InsertionPoint(state.entry_body)
    else:
        place = ir.InsertionPoint(anchor) if anchor is not None else contextlib.nullcontext()
    dims = layout.slices_header(rec.n_slices, rec.per_warp, pooled=rec.pool_kernel is not None)[1]
    with place:
        never = Int32(llvm.load(T.i32(), state.constant_slots["state"])) == NEVER_OPENED
        guard = scf.IfOp(Boolean(never).ir_value())
        with ir.InsertionPoint(guard.then_block):
            header = SliceHeader(Int64(layout.SLICES_MAGIC), Int64(dims))
            opened = SliceRecorder(int(rec.buffer.data_ptr()), cta_linear_index(), ordered=False,
                                   header=header, pool_kernel=rec.pool_kernel)
            constants = opened.constants()
            for name in CONSTANT_FIELDS:
                llvm.store(getattr(constants, name).ir_value(), state.constant_slots[name])
            cursor, storing = opened.cursor_state()
            llvm.store(cursor.ir_value(), state.cursor_slot)
            llvm.store(storing.ir_value(), state.storing_slot)
            scf.YieldOp([])
    state.opened_before.append(key)


def lazy_recorder(state: Tracing) -> SliceRecorder:
    """The warp's recorder at this point, every value loaded from the slots."""
    rec = state.recording
    constants = SliceConstants(*(Int32(llvm.load(T.i32(), state.constant_slots[name]))
                                 for name in CONSTANT_FIELDS))
    cursor = Int32(llvm.load(T.i32(), state.cursor_slot))
    storing = Boolean(llvm.load(T.bool(), state.storing_slot))
    return SliceRecorder(int(rec.buffer.data_ptr()), Int32(0), ordered=False,
                         enabled=True, pool_kernel=rec.pool_kernel, _state=(cursor, storing),
                         _const=constants)


@contextlib.contextmanager
def slice_recorder(state: Tracing):
    """The kernel's recorder with its cursor loaded from the stack slots here, stored back
    after the records of one call."""
    if state.lazy:
        rec = lazy_recorder(state)
        yield rec
        cursor, storing = rec.cursor_state()
        llvm.store(cursor.ir_value(), state.cursor_slot)
        llvm.store(storing.ir_value(), state.storing_slot)
        return
    if state.recorder is None:
        open_slice(state)
    rec = state.recorder
    cursor = Int32(llvm.load(T.i32(), state.cursor_slot))
    storing = Boolean(llvm.load(T.bool(), state.storing_slot))
    rec.set_cursor_state(cursor, storing)
    yield rec
    cursor, storing = rec.cursor_state()
    llvm.store(cursor.ir_value(), state.cursor_slot)
    llvm.store(storing.ir_value(), state.storing_slot)


def kernel_end() -> None:
    """Where a kernel's body ends (scope's hook): close its slice."""
    state = STATE.tracing
    if state is None or STATE.active is None:
        return
    function = enclosing_function(current_block())
    if function is None or function != state.kernel_op:
        return
    STATE.tracing = None
    if state.recorder is None and not (state.lazy and state.cursor_slot is not None):
        return
    flush_pending(state)
    with slice_recorder(state) as rec:
        rec.close()
    state.recording.closed = True


on_kernel_end(kernel_end)


# ------------------------------------------------------------------ records of one call
def span_start(state: Tracing):
    """A region's start: a timer read only (the cursor stays put).

    Light mode reads the timer before it stores the warp's pending region, not after: ptxas
    moves no instruction across a ``%globaltimer`` read, so the stores' address and bounds
    arithmetic stays below it, after the copies the warp issued since its previous acquire,
    instead of being hoisted above them (onto the path from that acquire's wait to its
    copy). The region then also covers those few stores, before its wait."""
    if state.lazy:
        lazy_open(state)
        start = lazy_recorder(state).now()
        flush_pending(state)
        return start
    if state.recorder is None:
        open_slice(state)
    return state.recorder.now()


def span_end(state: Tracing, start, tag: int, payload) -> None:
    if state.lazy:  # light: only the times now, the stores at the next record (flush_pending)
        end = lazy_recorder(state).now()
        # light records carry no payload (pipeline calls only): the SPAN's high word is a
        # trace-time constant, as a signed 32-bit value
        high = layout.slice_record_high(tag, kind=layout.SLICE_KIND_SPAN, payload=0)
        high -= (1 << 32) if high >> 31 else 0
        for name, value in (("pending", Int32(1)), ("pending_start", Int32(start)),
                            ("pending_end", Int32(end)), ("pending_high", Int32(high))):
            llvm.store(value.ir_value(), state.constant_slots[name])
        return
    with slice_recorder(state) as rec:
        rec.span(start, tag, payload=payload)


def flush_pending(state: Tracing) -> None:
    """Light mode: store the region still pending, if the warp has one (a START and a SPAN,
    as ``span_end`` would have stored them; nothing, and the cursor unmoved, where none)."""
    from cutlass._mlir.dialects import arith

    if not state.lazy or state.cursor_slot is None:
        return
    slot = state.constant_slots
    pending = Int32(llvm.load(T.i32(), slot["pending"])) != 0
    with slice_recorder(state) as rec:
        cursor, storing = rec.cursor_state()
        rec.set_cursor_state(cursor, Boolean(storing) & pending)
        rec.span(Int32(llvm.load(T.i32(), slot["pending_start"])), 0,
                 end=Int32(llvm.load(T.i32(), slot["pending_end"])),
                 high=Int32(llvm.load(T.i32(), slot["pending_high"])))
        moved, stored = rec.cursor_state()
        flag = Boolean(pending).ir_value()
        rec.set_cursor_state(Int32(arith.select(flag, moved.ir_value(), cursor.ir_value())),
                             Boolean(arith.select(flag, stored.ir_value(), storing.ir_value())))
    llvm.store(Int32(0).ir_value(), slot["pending"])


def instant(state: Tracing, tag: int, payload) -> None:
    if state.lazy:
        lazy_open(state)
        flush_pending(state)
    with slice_recorder(state) as rec:
        rec.instant(tag, payload=payload & layout.MAX_SLICE_PAYLOAD
                    if isinstance(payload, int) else payload)


def constant_int(value) -> int | None:
    """The int an ``arith.constant`` MLIR value holds, else None."""
    try:
        op = getattr(value.owner, "operation", value.owner)
        if op.name != "arith.constant":
            return None
        return int(op.opview.attributes["value"].value)
    except (AttributeError, KeyError, TypeError, ValueError):
        return None


def runs_with(block, outer) -> bool:
    """``block`` is ``outer``, or inside it through ``scf.if`` ops on a constant true alone
    (``if_generate(True, ...)``, which the compiler folds away): code placed there runs
    exactly when code placed in ``outer`` would."""
    return only_ifs_around(block, outer, lambda cond: bool(constant_int(cond)))


@dataclasses.dataclass
class RecordedAcquire:
    """Light mode, a ``producer_acquire`` being recorded: the wait on ``sync`` (its ring's
    empty barriers) made in ``block`` ends its region (:func:`acquire_wait_end`)."""

    sync: Any
    block: Any
    start: Any
    tag: int
    payload: Any
    ended: bool = False


def acquire_wait_end(sync, call):
    """Light mode, a pipeline's barrier array's ``wait`` about to be made: where it is the
    empty-barrier wait of the ``producer_acquire`` being recorded, placed unconditionally in
    that call's block, make it and end the acquire's region right after it. Returns
    ``(True, result)``, or ``(False, None)`` where the caller should make the wait itself.

    The region then ends where the wait returns, before the acquire's own arrive on the full
    barrier (the expect-tx of a TMA ring): ptxas moves no instruction across the timer read,
    and read after that arrive it held the arrive and the copy's set-up apart, on the path
    from the consumers' release to the next copy."""
    state = STATE.tracing
    acquire = state.acquire if state is not None else None
    if (acquire is None or acquire.ended or sync is not acquire.sync
            or not runs_with(current_block(), acquire.block)):
        return False, None
    result = call()
    span_end(state, acquire.start, acquire.tag, acquire.payload)
    acquire.ended = True
    return True, result


def record_call(tag_of: Callable[[KernelRecording], tuple[int, str]], payload_of, call, *,
                wait_of=None):
    """Make ``call()`` with its records: a wait a region around it, a signal an instant after
    it (``tag_of(recording)`` gives the tag and the kind); the call alone where nothing
    records. ``wait_of``: light mode, a producer_acquire's ring's empty barrier array; the
    region ends where the call's own wait on it returns (:func:`acquire_wait_end`), after
    the whole call where the call makes no such wait in its own block (a wait under a
    dynamic ``try_acquire_token``, a class that waits otherwise)."""
    state = tracing_here()
    if state is None:
        return call()
    tag, kind = tag_of(state.recording)
    payload = payload_of()
    with outermost():
        if kind == "wait":
            start = span_start(state)
            acquire = None
            if state.lazy and wait_of is not None:
                acquire = state.acquire = RecordedAcquire(wait_of, current_block(), start,
                                                          tag, payload)
            try:
                result = call()
            finally:
                if acquire is not None:
                    state.acquire = None
            if acquire is None or not acquire.ended:
                span_end(state, start, tag, payload)
        else:
            result = call()
            instant(state, tag, payload)
    return result


# ------------------------------------------------------------------ naming
def assigned_name(frame) -> str | None:
    """The variable a ``x = Something.create(...)`` statement at ``frame`` assigns, if any."""
    lines = []
    lineno = frame.f_lineno
    filename = frame.f_code.co_filename
    for back in range(0, 4):  # a call split over lines: try the statement's first lines
        text = linecache.getline(filename, lineno - back)
        if not text:
            break
        lines.insert(0, text.strip())
        source = " ".join(lines)
        head = source.split("(", 1)[0]
        if "=" in head and "==" not in head:
            target = head.split("=", 1)[0].strip()
            try:
                node = ast.parse(target, mode="eval").body
            except SyntaxError:
                continue
            if isinstance(node, ast.Name):
                return node.id
            if isinstance(node, ast.Attribute):
                return node.attr
    return None


def creation_site() -> tuple[str | None, str]:
    """(variable name, file:line) of the user statement that called a pipeline create();
    a helper that ``return``s the new pipeline is followed to its caller's assignment. Call
    it from the ``create`` wrapper itself: the frame two up is the wrapper's caller."""
    frame = sys._getframe(2)
    while frame is not None and (frame.f_code.co_name == "create"
                                 or is_library_file(frame.f_code.co_filename)):
        frame = frame.f_back
    if frame is None:
        return None, "<unknown>"
    where = f"{frame.f_code.co_filename}:{frame.f_lineno}"
    for _ in range(4):
        name = assigned_name(frame)
        if name is not None:
            return name, where
        text = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
        if not text.startswith("return") or frame.f_back is None:
            break
        frame = frame.f_back
    return None, where


def pipeline_info(pipeline) -> PipelineInfo:
    """The :class:`PipelineInfo` of a pipeline object of the kernel being traced (made, and
    added to its recording, at the object's first recorded call)."""
    key = id(pipeline)
    info = STATE.pipeline_ids.get(key)
    if info is not None and info.cls == type(pipeline).__name__:
        return info
    stages = int(getattr(pipeline, "num_stages", 0) or 0)
    rec = STATE.tracing.recording if STATE.tracing is not None else None
    index = len(rec.pipelines) if rec is not None else len(STATE.pipeline_ids)
    pending = getattr(pipeline, "_cute_prof_site", None)
    name, where = pending if pending else (None, "<unknown>")
    if not name or any(p.name == name for p in (rec.pipelines if rec else [])):
        name = f"{name or type(pipeline).__name__}#{index}"
    info = PipelineInfo(index, name, type(pipeline).__name__, stages, where)
    STATE.pipeline_ids[key] = info
    if rec is not None:
        rec.pipelines.append(info)
    return info
