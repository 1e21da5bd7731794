"""Zero-edit recording: a kernel nobody instrumented records every pipeline and barrier call.

CuTe DSL runs a kernel's Python body once, while tracing, to build its IR. While
:func:`recording` is active, the methods of every ``cutlass.pipeline`` class (and of every
subclass, such as FlashAttention-4's) and ``cute.arch.barrier`` / ``barrier_arrive`` /
``sync_threads`` and the cluster barrier's ``cluster_arrive`` / ``cluster_wait`` are wrapped,
so each call the kernel makes also emits a record on the per-warp slices path
(:class:`~cute_prof.device.slices.SliceRecorder`):

* ``producer_acquire``, ``consumer_wait``, a named-barrier ``barrier``, ``sync_threads`` or
  a cluster's ``cluster_wait``: a region from just before the call to just after it (the
  blocked time), two words;
* ``producer_commit``, ``consumer_release``, ``barrier_arrive``, ``cluster_arrive`` (and
  its ``_relaxed`` form): an instant, one word.

Tags name the pipeline object (the variable its ``create`` was assigned to) and the call
(``producer_tail``, the producer's drain of the ring before it exits, is one region of its
own). Pipeline records carry no payload (the host numbers a warp's calls: iteration and
stage follow from their order); a barrier record's payload is the barrier id. Nothing is threaded through the kernel's loops: the recorder's cursor lives
in a stack slot allocated at the kernel's entry, which the compiler promotes to a register
(a loop-carried value, exactly as if the kernel had carried it). The buffer's address is a
constant of the compiled kernel, so the kernel's signature does not change either. The
slice is opened at the kernel's entry and closed (exact counts) where its body ends.

Outside :func:`recording` nothing is wrapped and a compiled kernel is what it always was.
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
from .ptx import inline_asm, spin_ns, trace_time_int
from .scope import is_library_file, on_kernel_end, user_location
from .slices import SliceHeader, SliceRecorder

# method name -> what its call records
PIPELINE_WAITS = ("producer_acquire", "consumer_wait", "producer_tail")
PIPELINE_SIGNALS = ("producer_commit", "consumer_release")
BARRIER_WAITS = ("barrier", "sync_threads")
BARRIER_SIGNALS = ("barrier_arrive",)
# a thread-block cluster's barrier (``cute.arch``; a pipeline's ``create`` calls them after
# its barriers' init where the launch has clusters, ``sync_threads`` where it has none):
# tags ``cluster.wait``, ``cluster.arrive``, ``cluster.arrive_relaxed``
CLUSTER_WAITS = ("cluster_wait",)
CLUSTER_SIGNALS = ("cluster_arrive", "cluster_arrive_relaxed")
# pipeline records carry no payload: a warp makes a pipeline's calls in order, so the host
# numbers them (iteration = ordinal per warp and call, stage = iteration mod depth); a
# dynamic payload would cost four more instructions per record
NO_PAYLOAD = 0

_KERNEL_OPS = ("cuda.kernel",)
_FUNCTION_OPS = ("cuda.kernel", "cuda.func", "func.func", "gpu.func", "llvm.func")


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
                 barriers: bool = True):
        self.name = name
        self.barriers = bool(barriers)  # were named barriers recorded
        self.buffer = buffer
        self.n_slices, self.per_warp = int(n_slices), int(per_warp)
        self.tags = TagTable.auto()
        self.sites: dict[int, Site] = {}
        self.pipelines: list[PipelineInfo] = []
        self.closed = False

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
            "barriers_recorded": self.barriers,
        }


@dataclasses.dataclass
class RecordingConfig:
    """How :func:`recording` sizes the buffer of each kernel it instruments."""

    per_warp: int
    max_warps: int
    allocate: Callable[[int, int], Any]  # (n_slices, per_warp) -> a slices buffer tensor
    kernels: tuple[str, ...] | None = None  # instrument only kernels whose name has one of these
    # > 0: after one producer_commit in this many of a TMA-loaded ring, the producer waits for
    # that load's full barrier and records when it completed (see load_arrival_probe)
    load_arrivals: int = 0
    # > 0: every consumer warp spins this long (ns) after each release of a TMA-loaded ring
    # (the kernel at a slower pace on every SM: its loads at a lower memory throughput)
    consumer_delay_ns: int = 0
    # False: named barriers (``barrier``, ``barrier_arrive``, ``sync_threads``) are not
    # recorded, only the pipelines (what the pipeline model reads; FA4's consumers make about
    # as many barrier calls as pipeline calls)
    barriers: bool = True


class _Tracing:
    """Trace-time state of the kernel being traced now."""

    def __init__(self, kernel_op, recording: KernelRecording):
        self.kernel_op = kernel_op
        self.recording = recording
        self.recorder: SliceRecorder | None = None
        self.cursor_slot = None
        self.storing_slot = None
        # pipeline index -> stack slot: 1 while the ring's latest full-barrier arm has had
        # no acquire after it (previous_load_arrival_probe)
        self.armed_slots: dict[int, Any] = {}


_lock = threading.RLock()
_active: RecordingConfig | None = None
_recordings: list[KernelRecording] = []
_tracing: _Tracing | None = None
_skipped_kernels: set = set()
_depth = threading.local()
_patches: list[tuple[Any, str, Any]] = []
_pipeline_ids: dict[int, PipelineInfo] = {}  # id(pipeline object) -> its info (this kernel)
# every buffer a compiled kernel may still write to: a framework that caches the compiled
# kernel (FA4's compile_cache) can launch it after the recording ended
_live_buffers: list = []


# ------------------------------------------------------------------ trace-time helpers
def _current_block():
    try:
        return ir.InsertionPoint.current.block
    except (ValueError, RuntimeError):
        return None


def _enclosing_function(block):
    """The outermost function-like op around ``block`` (kernel, device function), or None."""
    found = None
    while block is not None:
        op = block.owner
        if op is None:
            break
        operation = op.operation if hasattr(op, "operation") else op
        if operation.name in _FUNCTION_OPS:
            found = operation
        if not operation.attached or operation.parent is None:
            break
        block = operation.block
    return found


def _kernel_name(kernel_op) -> str:
    try:
        return ir.StringAttr(kernel_op.attributes["sym_name"]).value
    except (KeyError, ValueError):
        return "kernel"


def _in_call() -> bool:
    return getattr(_depth, "value", 0) > 0


@contextlib.contextmanager
def _outermost():
    _depth.value = getattr(_depth, "value", 0) + 1
    try:
        yield
    finally:
        _depth.value -= 1


def _tracing_here() -> _Tracing | None:
    """The state of the kernel whose body is being traced at the current insertion point,
    creating it (and its buffer) at the kernel's first record; None where nothing records."""
    global _tracing
    if _active is None or _in_call():
        return None
    block = _current_block()
    if block is None:
        return None
    function = _enclosing_function(block)
    if function is None:
        return None
    if function.name not in _KERNEL_OPS:
        raise ProfileBufferError(
            f"zero-edit recording met a pipeline or barrier call at {user_location()} inside a "
            f"separately compiled device function ({function.name}); only calls traced into a "
            f"@cute.kernel body can be recorded. Profile this kernel with hand-placed "
            f"SliceRecorder regions, or inline the function")
    if _tracing is not None and _tracing.kernel_op == function:
        return _tracing
    name = _kernel_name(function)
    if _active.kernels is not None and not any(k in name for k in _active.kernels):
        _skipped_kernels.add(name)
        return None
    buffer = _active.allocate(_active.max_warps, _active.per_warp)
    _live_buffers.append(buffer)
    recording = KernelRecording(name, buffer, _active.max_warps, _active.per_warp,
                                barriers=_active.barriers)
    _recordings.append(recording)
    _pipeline_ids.clear()
    _tracing = _Tracing(function, recording)
    return _tracing


def _cta_linear_index() -> Int32:
    from cutlass import cute

    bx, by, bz = cute.arch.block_idx()
    gx, gy, _ = cute.arch.grid_dim()
    return Int32(bx) + Int32(gx) * (Int32(by) + Int32(gy) * Int32(bz))


def _cluster_linear_index() -> Int32:
    """The launch's cluster this CTA is in, linear (a launch without clusters: its CTA)."""
    from cutlass import cute

    cx, cy, cz = cute.arch.cluster_idx()
    nx, ny, _ = cute.arch.cluster_dim()
    return Int32(cx) + Int32(nx) * (Int32(cy) + Int32(ny) * Int32(cz))


def _open(state: _Tracing) -> None:
    """At the kernel's entry: the two stack slots of the cursor and the slice's open."""
    rec = state.recording
    entry = state.kernel_op.regions[0].blocks[0]
    address = int(rec.buffer.data_ptr())
    dims = (rec.n_slices << 32) | rec.per_warp
    with ir.InsertionPoint.at_block_begin(entry):
        one = Int32(1).ir_value()
        pointer = llvm.PointerType.get()
        state.cursor_slot = llvm.alloca(pointer, one, T.i32(), alignment=4)
        state.storing_slot = llvm.alloca(pointer, one, T.bool(), alignment=1)
        header = SliceHeader(Int64(layout.SLICES_MAGIC), Int64(dims))
        recorder = SliceRecorder(address, _cta_linear_index(), ordered=False, header=header)
        cursor, storing = recorder.cursor_state()
        llvm.store(cursor.ir_value(), state.cursor_slot)
        llvm.store(storing.ir_value(), state.storing_slot)
    state.recorder = recorder


@contextlib.contextmanager
def _recorder(state: _Tracing):
    """The kernel's recorder with its cursor loaded from the stack slots here, stored back
    after the records of one call."""
    if state.recorder is None:
        _open(state)
    rec = state.recorder
    cursor = Int32(llvm.load(T.i32(), state.cursor_slot))
    storing = Boolean(llvm.load(T.bool(), state.storing_slot))
    rec.set_cursor_state(cursor, storing)
    yield rec
    cursor, storing = rec.cursor_state()
    llvm.store(cursor.ir_value(), state.cursor_slot)
    llvm.store(storing.ir_value(), state.storing_slot)


def _kernel_end() -> None:
    """Where a kernel's body ends (scope's hook): close its slice."""
    global _tracing
    state = _tracing
    if state is None or _active is None:
        return
    function = _enclosing_function(_current_block())
    if function is None or function != state.kernel_op:
        return
    _tracing = None
    if state.recorder is None:
        return
    with _recorder(state) as rec:
        rec.close()
    state.recording.closed = True


# --------------------------------------------------------------------- naming
def _assigned_name(frame) -> str | None:
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


def _creation_site() -> tuple[str | None, str]:
    """(variable name, file:line) of the user statement that called a pipeline create();
    a helper that ``return``s the new pipeline is followed to its caller's assignment."""
    frame = sys._getframe(2)
    while frame is not None and (frame.f_code.co_name == "create"
                                 or is_library_file(frame.f_code.co_filename)):
        frame = frame.f_back
    if frame is None:
        return None, "<unknown>"
    where = f"{frame.f_code.co_filename}:{frame.f_lineno}"
    for _ in range(4):
        name = _assigned_name(frame)
        if name is not None:
            return name, where
        text = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
        if not text.startswith("return") or frame.f_back is None:
            break
        frame = frame.f_back
    return None, where


def _pipeline_info(pipeline) -> PipelineInfo:
    key = id(pipeline)
    info = _pipeline_ids.get(key)
    if info is not None and info.cls == type(pipeline).__name__:
        return info
    stages = int(getattr(pipeline, "num_stages", 0) or 0)
    rec = _tracing.recording if _tracing is not None else None
    index = len(rec.pipelines) if rec is not None else len(_pipeline_ids)
    pending = getattr(pipeline, "_cute_prof_site", None)
    name, where = pending if pending else (None, "<unknown>")
    if not name or any(p.name == name for p in (rec.pipelines if rec else [])):
        name = f"{name or type(pipeline).__name__}#{index}"
    info = PipelineInfo(index, name, type(pipeline).__name__, stages, where)
    _pipeline_ids[key] = info
    if rec is not None:
        rec.pipelines.append(info)
    return info


# --------------------------------------------------------------------- payloads
# --------------------------------------------------------------------- wrappers
def _span_start(state: _Tracing):
    """A region's start: a timer read only (the cursor stays put)."""
    if state.recorder is None:
        _open(state)
    return state.recorder.now()


def _span_end(state: _Tracing, start, tag: int, payload) -> None:
    with _recorder(state) as rec:
        rec.span(start, tag, payload=payload)


def _instant(state: _Tracing, tag: int, payload) -> None:
    with _recorder(state) as rec:
        rec.instant(tag, payload=payload & layout.MAX_SLICE_PAYLOAD
                    if isinstance(payload, int) else payload)


def _record_call(tag_of: Callable[[KernelRecording], tuple[int, str]], payload_of, call):
    state = _tracing_here()
    if state is None:
        return call()
    tag, kind = tag_of(state.recording)
    payload = payload_of()
    with _outermost():
        if kind == "wait":
            start = _span_start(state)
            result = call()
            _span_end(state, start, tag, payload)
        else:
            result = call()
            _instant(state, tag, payload)
    return result


def _pipeline_method(original, op: str, kind: str):
    def wrapper(self, *args, **kwargs):
        if _active is None or _in_call():
            return original(self, *args, **kwargs)

        def tag_of(rec):
            info = _pipeline_info(self)
            return rec.site(f"{info.name}.{op}", op, kind, info.index), kind

        result = _record_call(tag_of, lambda: NO_PAYLOAD,
                              lambda: original(self, *args, **kwargs))
        if op == "producer_commit" and _active.load_arrivals > 0:
            state = args[0] if args else kwargs.get("state")
            load_arrival_probe(self, state, _active.load_arrivals)
        if (op == "consumer_release" and _active.consumer_delay_ns > 0
                and _tracing_here() is not None and is_tma_load_ring(self)):
            spin_ns(Int64(_active.consumer_delay_ns))
        return result

    wrapper.__wrapped__ = original
    wrapper.__name__ = getattr(original, "__name__", op)
    wrapper._cute_prof_autoprof = True
    return wrapper


# A probed wait gives up after this long (ns): a kernel that commits a ring's item before it
# issues the item's copy would otherwise wait for a load it has not issued yet
LOAD_ARRIVAL_TIMEOUT_NS = 50_000
# the probe's PTX: poll the full barrier's phase (try_wait suspends the warp in hardware
# between polls, so the consumers on its SM sub-partition keep their issue slots) until it
# completes or the timeout passes; $0 = 1 when the load arrived, 0 when the probe gave up
_ARRIVAL_PTX = f"""{{
.reg .pred arrived;
.reg .u64 t0, t;
mov.u64 t0, %globaltimer;
ARRIVAL_POLL:
mbarrier.try_wait.parity.shared::cta.b64 arrived, [$1], $2;
@arrived bra ARRIVAL_DONE;
mov.u64 t, %globaltimer;
sub.u64 t, t, t0;
setp.lt.u64 arrived, t, {LOAD_ARRIVAL_TIMEOUT_NS};
@arrived bra ARRIVAL_POLL;
ARRIVAL_DONE:
selp.u32 $0, 1, 0, arrived;
}}"""


def is_tma_load_ring(pipeline) -> bool:
    """A ring whose full barrier a TMA copy completes (the producer's acquire sets the bytes
    it expects): its load's arrival is an event of its own, later than the commit."""
    from cutlass import pipeline as pipelines

    loads = tuple(getattr(pipelines, name) for name in ("PipelineTmaAsync", "PipelineTmaUmma",
                                                           "PipelineTmaMultiConsumersAsync")
                  if hasattr(pipelines, name))
    return isinstance(pipeline, loads) and getattr(pipeline, "sync_object_full", None) is not None


def sampling_offset(period: int) -> Int32:
    """Where in each period of ``period`` loads this CTA samples: its cluster's linear index
    modulo the period. A sample that starts at each CTA's (or tile's) first load takes that
    load, the slowest (it meets the CTA's start burst), in every CTA: 1 in ``period``
    samples where it is 1 in the CTA's loads (FA4 b4: a fifth of the K/V samples, 1 load in
    31). Spread over the clusters, every position of the loop is sampled as often as any
    other. The CTAs of one cluster sample the same loads: a probe stalls its producer, and a
    peer waiting for this CTA's multicast half would read that stall as its own load's
    latency (per-CTA offsets on ws_gemm's 2x1 clusters: p95 1824 ns against 1344)."""
    return _cluster_linear_index() % Int32(int(period))


def load_arrival_probe(pipeline, state, every: int) -> None:
    """After the commit of item ``state`` of a TMA-loaded ring, when ``state.count`` plus
    this CTA's :func:`sampling_offset` is a multiple of ``every``: the producer warp waits
    until the item's full barrier completes and records a region ``<ring>.load_arrival``
    from just after the commit to then (payload 1; 0 when it gave up after
    ``LOAD_ARRIVAL_TIMEOUT_NS``). A ring whose consumers seldom
    wait shows its loads' latency only as bounds; these sampled arrivals measure it, at the
    price of the producer's wait (a deep ring's slack absorbs it; measure it on your kernel).
    The producer state's phase is the flip of the consumer's, so the full barrier's phase of
    this item has parity ``phase ^ 1``; a wrong guess returns at once, never hangs."""
    tracing = _tracing_here()
    count, index, phase = (getattr(state, name, None) for name in ("count", "index", "phase"))
    if tracing is None or not is_tma_load_ring(pipeline) or None in (count, index, phase):
        return
    sampled = (Int32(count) + sampling_offset(every)) % Int32(int(every)) == Int32(0)
    _probe(tracing, pipeline, sampled, Int32(index), Int32(phase) ^ Int32(1))


def _armed_slot(tracing: _Tracing, pipeline) -> Any:
    """The stack slot saying whether ``pipeline``'s latest full-barrier arm is still
    unprobed (0 at the kernel's entry; the compiler keeps it in a register)."""
    index = _pipeline_info(pipeline).index
    slot = tracing.armed_slots.get(index)
    if slot is None:
        entry = tracing.kernel_op.regions[0].blocks[0]
        with ir.InsertionPoint.at_block_begin(entry):
            slot = llvm.alloca(llvm.PointerType.get(), Int32(1).ir_value(), T.i32(), alignment=4)
            llvm.store(Int32(0).ir_value(), slot)
        tracing.armed_slots[index] = slot
    return slot


def note_full_barrier_armed(pipeline) -> None:
    """A producer armed the full barrier of ``pipeline``'s next item (``sync_object_full.
    arrive``): the next acquire may probe that item's arrival."""
    tracing = _tracing_here()
    if tracing is None or not is_tma_load_ring(pipeline):
        return
    llvm.store(Int32(1).ir_value(), _armed_slot(tracing, pipeline))


def previous_load_arrival_probe(pipeline, index, phase) -> None:
    """A producer that drives the ring's barriers itself (``sync_object_empty.wait`` to
    acquire, ``sync_object_full.arrive`` to arm the full barrier before its copies) has no
    call after its copies but the next acquire: before the acquire of slot ``index``, the
    previous item's arrival is probed, when that item sat in this CTA's sampled slot with
    its sampled full-barrier parity (one load in two turns of the ring, at the CTA's
    :func:`sampling_offset`) and its full barrier was armed since the previous acquire (a
    drain of the ring before the producer exits loads nothing: its acquires probe
    nothing)."""
    stages = int(getattr(pipeline, "num_stages", 0) or 0)
    tracing = _tracing_here()
    if stages < 1 or tracing is None or not is_tma_load_ring(pipeline):
        return
    slot = _armed_slot(tracing, pipeline)
    armed = Int32(llvm.load(T.i32(), slot)) == Int32(1)
    # the previous item: slot (index - 1) mod stages; its full barrier's parity is the
    # producer phase's flip, and the producer phase flips where the slot index wraps
    not_wrapped = (Int32(index) + Int32(stages - 1)) // Int32(stages)
    previous = (Int32(index) + Int32(stages - 1)) % Int32(stages)
    parity = Int32(phase) ^ not_wrapped
    # the sampled turn: a slot and a parity, one of the 2 x stages a load can sit at
    turn = sampling_offset(2 * stages)
    sampled = armed & (previous == turn % Int32(stages)) & (parity == turn // Int32(stages))
    _probe(tracing, pipeline, sampled, previous, parity)
    llvm.store(Int32(0).ir_value(), slot)


def _probe(tracing: _Tracing, pipeline, sampled, index: Int32, parity: Int32) -> None:
    """Where ``sampled`` holds: wait for item ``index``'s full barrier phase of ``parity``
    and record the wait as ``<ring>.load_arrival`` (payload: arrived)."""
    from cutlass.cutlass_dsl import if_generate

    info = _pipeline_info(pipeline)
    tag = tracing.recording.site(f"{info.name}.load_arrival", "load_arrival", "wait", info.index)

    def probe():
        with _outermost():
            start = _span_start(tracing)
            barrier = pipeline.sync_object_full.get_barrier(index)
            address = llvm.ptrtoint(T.i32(), barrier.to_llvm_ptr())
            arrived = Int32(inline_asm(T.i32(), [address, parity.ir_value()], _ARRIVAL_PTX,
                                       "=r,r,r,~{memory}"))
            _span_end(tracing, start, tag, arrived)

    if_generate(sampled, probe)


def _barrier_function(original, op: str, kind: str):
    """A named barrier's or the CTA's (``bar<id>.sync`` / ``.arrive``, payload the id) or a
    cluster's (``cluster.wait`` / ``.arrive`` / ``.arrive_relaxed``: no id)."""
    cluster = op in CLUSTER_WAITS + CLUSTER_SIGNALS

    def wrapper(*args, **kwargs):
        if _active is None or _in_call():
            return original(*args, **kwargs)
        if cluster:
            name, static = "cluster." + op[len("cluster_"):], NO_PAYLOAD
        else:
            barrier_id = kwargs.get("barrier_id") if op != "sync_threads" else 0
            static = trace_time_int(barrier_id) if barrier_id is not None else 0
            label = f"bar{static}" if isinstance(static, int) else "bar"
            name = f"{label}.{'arrive' if kind == 'signal' else 'sync'}"
        return _record_call(lambda rec: (rec.site(name, op, kind, None), kind),
                            lambda: static, lambda: original(*args, **kwargs))

    wrapper.__wrapped__ = original
    wrapper.__name__ = getattr(original, "__name__", op)
    wrapper._cute_prof_autoprof = True
    return wrapper


def _create_wrapper(original):
    def create(*args, **kwargs):
        obj = original(*args, **kwargs)
        if _active is not None and getattr(obj, "_cute_prof_site", None) is None:
            try:
                object.__setattr__(obj, "_cute_prof_site", _creation_site())
            except (AttributeError, TypeError):
                pass
            _remember_sync_objects(obj)
        return obj

    create.__wrapped__ = original
    create._cute_prof_autoprof = True
    return staticmethod(create)


# a pipeline's barrier arrays, called directly (a producer that waits on
# ``sync_object_empty`` itself): full.wait is a consumer wait, empty.wait a producer acquire
_SYNC_OPS = {("full", "wait"): "consumer_wait", ("empty", "wait"): "producer_acquire",
             ("full", "arrive"): "producer_commit", ("empty", "arrive"): "consumer_release"}


def _sync_object_method(original, method: str):
    def wrapper(self, *args, **kwargs):
        owner = _sync_owners.get(id(self))
        if _active is None or _in_call() or owner is None:
            return original(self, *args, **kwargs)
        pipeline, side = owner
        op = _SYNC_OPS[(side, method)]
        kind = "wait" if op in PIPELINE_WAITS else "signal"
        probing = _active.load_arrivals > 0

        def tag_of(rec):
            info = _pipeline_info(pipeline)
            if op == "producer_commit" and is_tma_load_ring(pipeline):
                info.commit_arms_copies = True
            return rec.site(f"{info.name}.{op}", op, kind, info.index), kind

        if probing and op == "producer_acquire" and len(args) >= 2:
            previous_load_arrival_probe(pipeline, args[0], args[1])
        result = _record_call(tag_of, lambda: NO_PAYLOAD, lambda: original(self, *args, **kwargs))
        if probing and op == "producer_commit":
            note_full_barrier_armed(pipeline)
        return result

    wrapper.__wrapped__ = original
    wrapper._cute_prof_autoprof = True
    return wrapper


_sync_owners: dict[int, tuple[Any, str]] = {}


def _remember_sync_objects(pipeline) -> None:
    for side in ("full", "empty"):
        sync = getattr(pipeline, f"sync_object_{side}", None)
        if sync is not None:
            _sync_owners[id(sync)] = (pipeline, side)


def _patch_sync_objects() -> None:
    from cutlass.pipeline import MbarrierArray

    for method in ("wait", "arrive"):
        function = MbarrierArray.__dict__.get(method)
        if function is not None and not getattr(function, "_cute_prof_autoprof", False):
            _patch(MbarrierArray, method, _sync_object_method(function, method))


def _patch(owner, name: str, replacement) -> None:
    _patches.append((owner, name, owner.__dict__[name]))
    setattr(owner, name, replacement)


def _pipeline_classes():
    from cutlass import pipeline

    roots = [pipeline.PipelineAsync]
    for extra in ("PipelineTmaUmma", "PipelineAsyncUmma", "PipelineUmmaAsync"):
        cls = getattr(pipeline, extra, None)
        if cls is not None:
            roots.append(cls)
    seen, todo = [], list(roots)
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.append(cls)
        todo.extend(cls.__subclasses__())
    return seen


def _patch_pipeline_classes() -> None:
    """Wrap the recorded methods defined by every pipeline class (new subclasses too)."""
    for cls in _pipeline_classes():
        for op in PIPELINE_WAITS + PIPELINE_SIGNALS:
            method = cls.__dict__.get(op)
            if method is None or getattr(method, "_cute_prof_autoprof", False):
                continue
            _patch(cls, op, _pipeline_method(method, op, "wait" if op in PIPELINE_WAITS else "signal"))
        create = cls.__dict__.get("create")
        if isinstance(create, staticmethod) and not getattr(create.__func__, "_cute_prof_autoprof", False):
            _patch(cls, "create", _create_wrapper(create.__func__))


def _patch_barriers() -> None:
    from cutlass.cute import arch
    from cutlass.cute.arch import nvvm_wrappers

    for op in BARRIER_WAITS + BARRIER_SIGNALS + CLUSTER_WAITS + CLUSTER_SIGNALS:
        kind = "wait" if op in BARRIER_WAITS + CLUSTER_WAITS else "signal"
        for module in (arch, nvvm_wrappers):
            function = module.__dict__.get(op)
            if function is None or getattr(function, "_cute_prof_autoprof", False):
                continue
            _patch(module, op, _barrier_function(function, op, kind))


def _kernel_start_hook():
    """Pipeline subclasses imported after recording began get wrapped when a kernel starts."""
    from cutlass.cutlass_dsl.cutlass import CuTeDSL

    original = CuTeDSL.__dict__["generate_func_op"]

    def generate_func_op(self, *args, **kwargs):
        if _active is not None:
            _patch_pipeline_classes()
        return original(self, *args, **kwargs)

    generate_func_op._cute_prof_autoprof = True
    _patch(CuTeDSL, "generate_func_op", generate_func_op)


def _unpatch() -> None:
    while _patches:
        owner, name, original = _patches.pop()
        setattr(owner, name, original)


on_kernel_end(_kernel_end)


@contextlib.contextmanager
def recording(config: RecordingConfig):
    """Within the block, kernels traced (compiled) record their pipeline and barrier calls.

    Yields the list that collects one :class:`KernelRecording` per instrumented kernel."""
    global _active, _tracing
    with _lock:
        if _active is not None:
            raise ProfileBufferError("zero-edit recording is already active (blocks do not nest)")
        found: list[KernelRecording] = []
        _active = config
        _recordings.clear()
        _skipped_kernels.clear()
        try:
            _patch_pipeline_classes()
            if config.barriers:
                _patch_barriers()
            _patch_sync_objects()
            _kernel_start_hook()
            yield found
        finally:
            _unpatch()
            _active = None
            _tracing = None
            _sync_owners.clear()
            found.extend(_recordings)
            _recordings.clear()


def skipped_kernels() -> set:
    """Kernels traced in the last block that the ``kernels=`` filter left alone."""
    return set(_skipped_kernels)


# --------------------------------------------------------------------- opt-in regions
class region:
    """``with region("softmax"):`` inside a ``@cute.kernel``: one line that records the body
    as a region of the warp's zero-edit trace (tag ``softmax``, kind work), with no recorder
    passed anywhere. Outside ``cute_prof.autoprofile()`` it emits nothing, so the kernel's
    PTX stays what it was. A region costs what ``SliceRecorder.now()`` + ``span()`` cost (the
    same PTX: a timer read, then two words), on the same slice as the pipeline records. Every
    lane of a converged warp must reach both ends, as for any slice record; the payload (an
    iteration, a stage) may be a DSL value."""

    def __init__(self, tag: str, *, payload=0):
        if not isinstance(tag, str) or not tag:
            raise ProfileBufferError(f"region tag must be a non-empty string, got {tag!r}")
        self.tag, self.payload = tag, payload
        self._state = self._start = None

    def __enter__(self):
        self._state = _tracing_here()
        if self._state is not None:
            self._start = _span_start(self._state)
        return self

    def __exit__(self, *exc):
        state = self._state
        if state is None or exc[0] is not None:
            return False
        _span_end(state, self._start, state.recording.site(self.tag, "region", "work", None),
                  self.payload)
        return False


def mark(tag: str, *, payload=0) -> None:
    """An instant in the warp's zero-edit trace (``mark("epilogue")``); nothing outside
    ``cute_prof.autoprofile()``."""
    if not isinstance(tag, str) or not tag:
        raise ProfileBufferError(f"mark tag must be a non-empty string, got {tag!r}")
    state = _tracing_here()
    if state is None:
        return
    _instant(state, state.recording.site(tag, "mark", "signal", None), payload)
