"""Zero-edit recording: a kernel nobody instrumented records every pipeline and barrier call.

CuTe DSL runs a kernel's Python body once, while tracing, to build its IR. While
:func:`recording` is active, the methods of every ``cutlass.pipeline`` class (and of every
subclass, such as FlashAttention-4's) and ``cute.arch.barrier`` / ``barrier_arrive`` /
``sync_threads``, the cluster barrier's ``cluster_arrive`` / ``cluster_wait`` and the NVVM
dialect's ``barrier_cta_sync`` (a named barrier built without ``cute.arch``) are wrapped, so
each call the kernel makes also emits a record on the per-warp slices path
(:class:`~cute_prof.device.slices.SliceRecorder`):

* ``producer_acquire``, ``consumer_wait``, a named-barrier ``barrier`` (or
  ``barrier_cta_sync``), ``sync_threads`` or a cluster's ``cluster_wait``: a region from
  just before the call to just after it (the blocked time), two words;
* ``producer_commit``, ``consumer_release``, ``barrier_arrive``, ``cluster_arrive`` (and
  its ``_relaxed`` form): an instant, one word.

Tags name the pipeline object (the variable its ``create`` was assigned to) and the call
(``producer_tail``, the producer's drain of the ring before it exits, is one region of its
own). Pipeline records carry no payload (the host numbers a warp's calls: iteration and
stage follow from their order); a barrier record's payload is the barrier id. Nothing is
threaded through the kernel's loops: the recorder's cursor lives in a stack slot allocated
at the kernel's entry, which the compiler promotes to a register (a loop-carried value,
exactly as if the kernel had carried it). The buffer's address is a constant of the compiled
kernel, so the kernel's signature does not change either. The slice is opened at the
kernel's entry and closed (exact counts) where its body ends.

Outside :func:`recording` nothing is wrapped and a compiled kernel is what it always was.

This module owns the wrapping: which ``cutlass`` methods and functions are patched, what
each call records, and the :func:`recording` block that patches and restores them. The
trace-time state and the records' emission live in :mod:`cute_prof.device.autoprof_state`,
the load-arrival probes and the consumer delay (experiments) in
:mod:`cute_prof.device.load_probes`, the opt-in ``region`` / ``mark`` in
:mod:`cute_prof.device.autoprof_regions` (re-exported here). It may not import anything on
the host side above ``device`` (the user's entry point is :func:`cute_prof.autoprofile`).
"""

from __future__ import annotations

import contextlib
from typing import Any

from ..errors import ProfileBufferError
from .autoprof_regions import mark, region
from .autoprof_state import (
    STATE,
    KernelRecording,
    PipelineInfo,
    RecordingConfig,
    Site,
    acquire_wait_end,
    constant_int,
    creation_site,
    in_call,
    pipeline_info,
    record_call,
)
from .load_probes import (
    LOAD_ARRIVAL_TIMEOUT_NS,
    consumer_delay,
    is_tma_load_ring,
    load_arrival_probe,
    note_full_barrier_armed,
    previous_load_arrival_probe,
    sampling_offset,
)
from .ptx import trace_time_int

__all__ = ["KernelRecording", "LIGHT_OPS", "LOAD_ARRIVAL_TIMEOUT_NS", "MODES", "PipelineInfo", "RecordingConfig",
           "Site", "is_recording", "pipeline_classes", "is_tma_load_ring", "load_arrival_probe", "mark",
           "recording", "region", "sampling_offset", "skipped_kernels"]

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
# a named barrier built from the NVVM dialect itself, not through ``cute.arch`` (FA4's
# ``NamedBarrier.arrive_and_wait_unaligned``, the TMEM-allocation handshake of its Blackwell
# kernels): a region tagged ``bar<id>.sync`` like ``barrier``'s, op ``barrier``. ``cute.arch``'s
# own barriers build other ops (``nvvm.barrier``), and a wrapped call inside another records once
NVVM_BARRIER_WAITS = ("barrier_cta_sync",)
# what a light recording keeps: the producer's waits alone (its blocked time at acquire says
# when the consumers released; the acquires' ends pace the ring). A light producer_acquire
# region runs from before the warp's deferred stores of its previous region to where the
# ring's empty-barrier wait returns (its arrive on the full barrier, the expect-tx, is
# outside); where that wait is not made unconditionally in the call, to the call's end
LIGHT_OPS = ("producer_acquire", "producer_tail")
MODES = ("full", "light")
# pipeline records carry no payload: a warp makes a pipeline's calls in order, so the host
# numbers them (iteration = ordinal per warp and call, stage = iteration mod depth); a
# dynamic payload would cost four more instructions per record
NO_PAYLOAD = 0

_patches: list[tuple[Any, str, Any]] = []
# id(a pipeline's MbarrierArray) -> (the pipeline, "full" or "empty")
_sync_owners: dict[int, tuple[Any, str]] = {}


# --------------------------------------------------------------------- wrappers
def _pipeline_method(original, op: str, kind: str):
    def wrapper(self, *args, **kwargs):
        active = STATE.active
        if active is None or in_call() or (active.mode == "light" and op not in LIGHT_OPS):
            return original(self, *args, **kwargs)

        def tag_of(rec):
            info = pipeline_info(self)
            return rec.site(f"{info.name}.{op}", op, kind, info.index), kind

        # light: an acquire's region ends where its empty-barrier wait returns
        wait_of = (getattr(self, "sync_object_empty", None)
                   if active.mode == "light" and op == "producer_acquire" else None)
        result = record_call(tag_of, lambda: NO_PAYLOAD,
                             lambda: original(self, *args, **kwargs), wait_of=wait_of)
        if op == "producer_commit" and active.load_arrivals > 0:
            state = args[0] if args else kwargs.get("state")
            load_arrival_probe(self, state, active.load_arrivals)
        if op == "consumer_release" and active.consumer_delay_ns > 0:
            consumer_delay(self, active.consumer_delay_ns)
        return result

    wrapper.__wrapped__ = original
    wrapper.__name__ = getattr(original, "__name__", op)
    wrapper._cute_prof_autoprof = True
    return wrapper


def _barrier_function(original, op: str, kind: str):
    """A named barrier's or the CTA's (``bar<id>.sync`` / ``.arrive``, payload the id) or a
    cluster's (``cluster.wait`` / ``.arrive`` / ``.arrive_relaxed``: no id)."""
    cluster = op in CLUSTER_WAITS + CLUSTER_SIGNALS

    def wrapper(*args, **kwargs):
        if STATE.active is None or in_call():
            return original(*args, **kwargs)
        if cluster:
            name, static = "cluster." + op[len("cluster_"):], NO_PAYLOAD
        else:
            barrier_id = kwargs.get("barrier_id") if op != "sync_threads" else 0
            static = trace_time_int(barrier_id) if barrier_id is not None else 0
            label = f"bar{static}" if isinstance(static, int) else "bar"
            name = f"{label}.{'arrive' if kind == 'signal' else 'sync'}"
        return record_call(lambda rec: (rec.site(name, op, kind, None), kind),
                           lambda: static, lambda: original(*args, **kwargs))

    wrapper.__wrapped__ = original
    wrapper.__name__ = getattr(original, "__name__", op)
    wrapper._cute_prof_autoprof = True
    return wrapper


def _nvvm_barrier_function(original):
    """``nvvm.barrier_cta_sync(barrier_id, ...)``: the id is an MLIR value, a constant where
    the kernel's barrier id is (the tag names it), else packed as the payload on the device."""

    def wrapper(*args, **kwargs):
        if STATE.active is None or in_call():
            return original(*args, **kwargs)
        value = args[0] if args else kwargs.get("barrier_id")
        static = constant_int(value)
        if static is None:
            from cutlass import Int32

            payload, name = Int32(value), "bar.sync"
        else:
            payload, name = static, f"bar{static}.sync"
        return record_call(lambda rec: (rec.site(name, "barrier", "wait", None), "wait"),
                           lambda: payload, lambda: original(*args, **kwargs))

    wrapper.__wrapped__ = original
    wrapper.__name__ = getattr(original, "__name__", "barrier_cta_sync")
    wrapper._cute_prof_autoprof = True
    return wrapper


def _create_wrapper(original):
    def create(*args, **kwargs):
        obj = original(*args, **kwargs)
        if STATE.active is not None and getattr(obj, "_cute_prof_site", None) is None:
            try:
                object.__setattr__(obj, "_cute_prof_site", creation_site())
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
        if method == "wait" and STATE.active is not None and STATE.active.mode == "light":
            ended, result = acquire_wait_end(self, lambda: original(self, *args, **kwargs))
            if ended:
                return result
        owner = _sync_owners.get(id(self))
        if STATE.active is None or in_call() or owner is None:
            return original(self, *args, **kwargs)
        pipeline, side = owner
        op = _SYNC_OPS[(side, method)]
        if STATE.active.mode == "light" and op not in LIGHT_OPS:
            return original(self, *args, **kwargs)
        kind = "wait" if op in PIPELINE_WAITS else "signal"
        probing = STATE.active.load_arrivals > 0

        def tag_of(rec):
            info = pipeline_info(pipeline)
            if op == "producer_commit" and is_tma_load_ring(pipeline):
                info.commit_arms_copies = True
            return rec.site(f"{info.name}.{op}", op, kind, info.index), kind

        if probing and op == "producer_acquire" and len(args) >= 2:
            previous_load_arrival_probe(pipeline, args[0], args[1])
        result = record_call(tag_of, lambda: NO_PAYLOAD, lambda: original(self, *args, **kwargs))
        if probing and op == "producer_commit":
            note_full_barrier_armed(pipeline)
        return result

    wrapper.__wrapped__ = original
    wrapper._cute_prof_autoprof = True
    return wrapper


def _remember_sync_objects(pipeline) -> None:
    for side in ("full", "empty"):
        sync = getattr(pipeline, f"sync_object_{side}", None)
        if sync is not None:
            _sync_owners[id(sync)] = (pipeline, side)


# --------------------------------------------------------------------- patching
def _patch(owner, name: str, replacement) -> None:
    _patches.append((owner, name, owner.__dict__[name]))
    setattr(owner, name, replacement)


def _patch_sync_objects() -> None:
    from cutlass.pipeline import MbarrierArray

    for method in ("wait", "arrive"):
        function = MbarrierArray.__dict__.get(method)
        if function is not None and not getattr(function, "_cute_prof_autoprof", False):
            _patch(MbarrierArray, method, _sync_object_method(function, method))


def pipeline_classes() -> list:
    """Every ``cutlass.pipeline`` class a kernel may call: the roots and their subclasses
    (FA4's and quack's own among them, once imported)."""
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
    for cls in pipeline_classes():
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
    from cutlass._mlir.dialects import nvvm

    for op in NVVM_BARRIER_WAITS:
        function = nvvm.__dict__.get(op)
        if function is not None and not getattr(function, "_cute_prof_autoprof", False):
            _patch(nvvm, op, _nvvm_barrier_function(function))


def _kernel_start_hook():
    """Pipeline subclasses imported after recording began get wrapped when a kernel starts."""
    from cutlass.cutlass_dsl.cutlass import CuTeDSL

    original = CuTeDSL.__dict__["generate_func_op"]

    def generate_func_op(self, *args, **kwargs):
        if STATE.active is not None:
            _patch_pipeline_classes()
        return original(self, *args, **kwargs)

    generate_func_op._cute_prof_autoprof = True
    _patch(CuTeDSL, "generate_func_op", generate_func_op)


def _unpatch() -> None:
    while _patches:
        owner, name, original = _patches.pop()
        setattr(owner, name, original)


# --------------------------------------------------------------------- the block
@contextlib.contextmanager
def recording(config: RecordingConfig):
    """Within the block, kernels traced (compiled) record their pipeline and barrier calls.

    Yields the list that collects one :class:`KernelRecording` per instrumented kernel."""
    with STATE.lock:
        if STATE.active is not None:
            raise ProfileBufferError("zero-edit recording is already active (blocks do not nest)")
        found: list[KernelRecording] = []
        STATE.active = config
        STATE.recordings.clear()
        STATE.skipped_kernels.clear()
        try:
            if config.mode not in MODES:
                raise ProfileBufferError(f"mode must be one of {MODES}, got {config.mode!r}")
            _patch_pipeline_classes()
            if config.barriers and config.mode == "full":
                _patch_barriers()
            _patch_sync_objects()
            _kernel_start_hook()
            yield found
        finally:
            _unpatch()
            STATE.active = None
            STATE.tracing = None
            _sync_owners.clear()
            found.extend(STATE.recordings)
            STATE.recordings.clear()


def is_recording() -> bool:
    """A :func:`recording` block is active (its wrappers are in place)."""
    return STATE.active is not None


def skipped_kernels() -> set:
    """Kernels traced in the last block that the ``kernels=`` filter left alone."""
    return set(STATE.skipped_kernels)
