"""A whole program's recording (``cute-prof record``): each launch runs either the recording
build of its kernels (writing into the run's pooled slices buffer) or the plain one.

While :class:`LaunchSelector` is installed, every ``cute.compile`` (FA4's, quack's, the user's)
compiles with zero-edit recording on. Kernels that record get a kernel id in the pool, and
the caller gets a :class:`SelectingFunction`. Each call is one launch, numbered per kernel
name: in the range and with room in the pool, the kernel's launch epoch is bumped on the
launch's stream and the recording build runs; otherwise the plain build (compiled once,
outside recording) runs at the plain kernel's speed. A ``@cute.jit`` function called
directly traces at every call (the DSL then finds its compiled module in its own cache by the
module's hash): the call is traced with recording on or off, by the same choice, and its
kernels keep their ids from one call to the next, so both builds stay cached. Launches of
compiled functions that came from neither (a module loaded from elsewhere) are counted by name.

Owns the compile hook, the per-launch choice and the launch table; the pool tensor comes from
the host (:func:`cute_prof.decode_slices.allocate_pool`). It may not import anything on the
host side above ``device``.
"""

from __future__ import annotations

import dataclasses
import importlib
import threading
import time
from typing import Any, Callable

from .. import layout
from ..errors import ProfileBufferError
from .autoprof import recording
from .autoprof_state import RecordingConfig

__all__ = ["LaunchSelector", "RunPool", "Selection", "SelectingFunction"]


@dataclasses.dataclass(frozen=True)
class Selection:
    """Which launches record: kernels whose name contains one of ``kernels`` (all when None),
    and of each such kernel name the launches ``skip <= index < skip + count`` (count None:
    all from ``skip`` on)."""

    kernels: tuple[str, ...] | None = None
    skip: int = 0
    count: int | None = None

    def in_range(self, index: int) -> bool:
        return index >= self.skip and (self.count is None or index < self.skip + self.count)

    @property
    def has_range(self) -> bool:
        return self.skip > 0 or self.count is not None


class RunPool:
    """The run's pooled slices buffer, its kernels, and a host copy of its claim count
    (refreshed after each recorded launch, never waited for)."""

    def __init__(self, buffer, *, per_warp: int):
        import torch

        n_slices, stored_per_warp, pooled = layout.split_slices_dims(int(buffer[1]))
        if not pooled or stored_per_warp != per_warp:
            raise ProfileBufferError("RunPool needs a pooled slices buffer (allocate_pool)")
        self.buffer, self.capacity, self.per_warp = buffer, n_slices, per_warp
        self.kernels: list[str] = []  # kernel id -> name
        first = layout.slices_buffer_words(n_slices, per_warp) + layout.POOL_LOST_WORDS
        self.epochs = buffer[first:first + layout.MAX_POOL_KERNELS]
        self.claimed_mirror = torch.zeros(1, dtype=torch.int64, pin_memory=buffer.is_cuda)
        self._streams: dict[int, Any] = {}

    def new_kernel(self, name: str) -> int:
        if len(self.kernels) >= layout.MAX_POOL_KERNELS:
            raise ProfileBufferError(f"a run records at most {layout.MAX_POOL_KERNELS} compiled "
                                     f"kernels; narrow it with --kernel")
        self.kernels.append(name)
        return len(self.kernels) - 1

    def full(self) -> bool:
        """The pool had no slice left at the last claim count the host has seen."""
        return int(self.claimed_mirror[0]) >= self.capacity

    def stream(self, handle: int | None):
        import torch

        if not self.buffer.is_cuda:
            return None
        if handle is None:
            return torch.cuda.current_stream(self.buffer.device)
        if handle not in self._streams:
            self._streams[handle] = torch.cuda.ExternalStream(handle, device=self.buffer.device)
        return self._streams[handle]

    def before_launch(self, kernel_ids: list[int], stream) -> None:
        import torch

        if stream is None:  # a pool on the host: a compile-only run, nothing launches
            return
        with torch.cuda.stream(stream):
            for kernel in kernel_ids:
                self.epochs[kernel:kernel + 1].add_(1)

    def after_launch(self, stream) -> None:
        import torch

        if stream is None:
            return
        with torch.cuda.stream(stream):
            self.claimed_mirror.copy_(self.buffer[3:4], non_blocking=True)


@dataclasses.dataclass
class CompiledEntry:
    """One ``cute.compile`` call's builds: the recording one and, when a launch needs it,
    the plain one (``make_plain`` compiles it, once)."""

    label: str
    kernel_ids: list[int]
    names: list[str]
    recording_fn: Any
    make_plain: Callable[[], Any] | None
    plain_fn: Any = None
    plain_compile_s: float = 0.0

    def plain(self):
        if self.plain_fn is None:
            started = time.perf_counter()
            self.plain_fn = self.make_plain()
            self.make_plain = None  # drop the compile arguments it kept alive
            self.plain_compile_s = time.perf_counter() - started
        return self.plain_fn


class SelectingFunction:
    """What ``cute.compile`` returns in a run for a recording function: called, it picks a
    build per launch; other attributes are the recording build's."""

    def __init__(self, selector: "LaunchSelector", entry: CompiledEntry):
        self._selector, self._entry = selector, entry

    def __call__(self, *args, **kwargs):
        return self._selector.launch(self._entry, args, kwargs)

    def __getattr__(self, name):
        return getattr(self._entry.recording_fn, name)


def _backend_functions() -> list:
    """The DSL's compiled-function classes that run a program themselves (the MLIR engine's,
    the cutlass compiler's, TVM-FFI's), each defining ``run_compiled_program``."""
    from cutlass.base_dsl.jit_executor import JitCompiledFunction

    found = [JitCompiledFunction]
    for module, name in (("cutlass.cutlass_dsl.cutlass_function", "CutlassCallJitCompiledFunction"),
                         ("cutlass.cutlass_dsl.tvm_ffi_provider", "TVMFFIJitCompiledFunctionBase")):
        try:
            cls = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):  # a DSL build without that backend
            continue
        if "run_compiled_program" in cls.__dict__:
            found.append(cls)
    return found


def kernel_names(function) -> list[str]:
    """The kernels a compiled function launches (its kernel symbols)."""
    info = getattr(function, "kernel_info", None)
    if info:
        return list(info)
    module = getattr(function, "jit_module", None)
    return [m.sym for m in getattr(module, "cuda_modules", None) or []]


def stream_handle(args, kwargs) -> int | None:
    """The ``CUstream`` a compiled function is called with (None: it takes none, and launches
    on the current stream, as a TVM-FFI function with the environment's stream does)."""
    try:
        from cuda.bindings.driver import CUstream
    except ImportError:  # pragma: no cover - cuda-python is a dependency
        return None
    for value in list(args) + list(kwargs.values()):
        if isinstance(value, CUstream):
            return int(value)
    return None


class DirectPool:
    """The run's pool as one trace of a directly called function sees it: a kernel traced
    before under that function keeps its id (the recording build's module repeats, and the
    DSL's cache serves it); ``used`` lists (name, id) of this trace's kernels."""

    def __init__(self, pool: RunPool, ids: dict):
        self.buffer, self.capacity, self.per_warp = pool.buffer, pool.capacity, pool.per_warp
        self._pool, self._ids = pool, ids
        self.used: list[tuple[str, int]] = []

    def new_kernel(self, name: str) -> int:
        key = (name, sum(1 for seen, _ in self.used if seen == name))
        if key not in self._ids:
            self._ids[key] = self._pool.new_kernel(name)
        self.used.append((name, self._ids[key]))
        return self._ids[key]


@dataclasses.dataclass
class DirectFunction:
    """A ``@cute.jit`` function called directly: its kernels' pool ids, (name, ordinal in a
    trace) -> id, and the kernels its module launches (None until its first launch)."""

    ids: dict = dataclasses.field(default_factory=dict)
    names: list[str] | None = None


@dataclasses.dataclass
class DirectCall:
    """A direct call in flight (between its trace and its launch): whether it traced with
    recording on, the kernels it recorded, its arguments (for the stream)."""

    function: DirectFunction
    record: bool
    pool: DirectPool | None
    args: tuple
    kwargs: dict


class LaunchSelector:
    """A run's compile hook and launch table: ``launches`` (a dict per recorded launch),
    ``counts`` (per kernel name: launched, recorded, plain for the range, plain for memory),
    ``unknown`` (launches of functions the hook did not build, by name)."""

    def __init__(self, pool_factory: Callable[[], RunPool], selection: Selection, *,
                 barriers: bool = True, mode: str = "full"):
        self._pool_factory, self._pool = pool_factory, None
        self.selection, self.barriers, self.mode = selection, barriers, mode
        self.launches: list[dict] = []
        self._epochs: dict[int, int] = {}  # kernel id -> recorded launches dispatched
        self.counts: dict[str, dict[str, int]] = {}
        self.unknown: dict[str, int] = {}
        self.skipped_kernels: set[str] = set()
        self.entries: list[CompiledEntry] = []
        self.recordings: list = []  # every KernelRecording (kernel id = its pool_kernel)
        self.lock = threading.RLock()
        self._patches: list[tuple[Any, str, Any]] = []
        self._builds: set[int] = set()
        self._keep: list = []
        self._direct: dict[Any, DirectFunction] = {}  # by the function called
        # .call: this thread's DirectCall before its launch; .direct: during it
        self._in_flight = threading.local()

    @property
    def pool(self) -> RunPool:
        """The run's pool, allocated at the first compile (its address goes into kernels)."""
        if self._pool is None:
            self._pool = self._pool_factory()
        return self._pool

    @property
    def pool_allocated(self) -> bool:
        return self._pool is not None

    # ------------------------------------------------------------------ the hook
    def install(self) -> None:
        from cutlass._mlir import ir
        from cutlass.base_dsl.compiler import CompileCallable
        from cutlass.base_dsl.dsl import BaseDSL
        from cutlass.base_dsl.jit_executor import JitExecutor

        original_compile = CompileCallable.__dict__["_compile"]
        original_run = JitExecutor.__dict__["run_compiled_program"]
        original_func = BaseDSL.__dict__["_func"]
        selector = self

        def _compile(this, func, *args, **kwargs):
            if kwargs.get("compile_to_precompiled_mlir"):
                return original_compile(this, func, *args, **kwargs)
            label = getattr(func, "__qualname__", None) or type(func).__name__
            return selector.compile(lambda: original_compile(this, func, *args, **kwargs), label)

        def _func(this, func, *args, **kwargs):
            nested = ir.Context.current is not None and ir.InsertionPoint.current is not None
            if nested or kwargs.get("compile_only"):  # traced inside another, or cute.compile
                return original_func(this, func, *args, **kwargs)
            return selector.direct_call(lambda: original_func(this, func, *args, **kwargs),
                                        func, args, kwargs)

        def counting_unknown(this, exe_args):
            module = getattr(this, "jit_module", None)
            direct = getattr(selector._in_flight, "direct", False)  # counted by its call
            if not direct and id(getattr(module, "engine", None)) not in selector._builds:
                kernels = [m.sym for m in getattr(module, "cuda_modules", None) or []]
                name = ", ".join(kernels) or "a function cute.compile did not build in this run"
                with selector.lock:
                    selector.unknown[name] = selector.unknown.get(name, 0) + 1
            return original_run(this, exe_args)

        def launching(original):
            """A compiled function's run, on whichever of the DSL's backends: a direct call's
            launch is counted (and recorded) there, once, wherever the backend delegates."""
            def run_compiled_program(this, exe_args):
                call = getattr(selector._in_flight, "call", None)
                if call is None:
                    return original(this, exe_args)
                selector._in_flight.call, selector._in_flight.direct = None, True
                try:
                    return selector.direct_launch(call, kernel_names(this),
                                                  lambda: original(this, exe_args))
                finally:
                    selector._in_flight.direct = False
            return run_compiled_program

        self._patch(CompileCallable, "_compile", _compile)
        self._patch(JitExecutor, "run_compiled_program", launching(counting_unknown))
        for cls in _backend_functions():
            self._patch(cls, "run_compiled_program", launching(cls.__dict__["run_compiled_program"]))
        self._patch(BaseDSL, "_func", _func)

    def uninstall(self) -> None:
        while self._patches:
            owner, name, original = self._patches.pop()
            setattr(owner, name, original)

    def _patch(self, owner, name: str, replacement) -> None:
        self._patches.append((owner, name, owner.__dict__[name]))
        setattr(owner, name, replacement)

    def _note_build(self, fn) -> None:
        """Remember a build of the hook's: the executors it makes share its JIT engine."""
        engine = getattr(fn, "engine", None)
        if engine is not None:
            self._builds.add(id(engine))
            self._keep.append(engine)  # an id stays unique while the object lives

    # ------------------------------------------------------------------ compiling
    def compile(self, make: Callable[[], Any], label: str):
        config = RecordingConfig(per_warp=self.pool.per_warp, max_warps=self.pool.capacity,
                                 allocate=_no_allocation, kernels=self.selection.kernels,
                                 barriers=self.barriers, pool=self.pool, mode=self.mode)
        from .autoprof import skipped_kernels

        with self.lock:
            with recording(config) as found:
                built = make()
            self.skipped_kernels |= skipped_kernels()
        self._note_build(built)
        if not found:
            return built  # nothing in it records: the build is the plain kernel
        unclosed = [r.name for r in found if not r.closed]
        if unclosed:
            raise ProfileBufferError(f"recording kernels {unclosed} never finished tracing")
        entry = CompiledEntry(label=label, kernel_ids=[r.pool_kernel for r in found],
                              names=[r.name for r in found], recording_fn=built,
                              make_plain=make)
        self.entries.append(entry)
        self.recordings.extend(found)
        if self.selection.has_range:
            self._note_build(entry.plain())  # launches outside the range need it at once
        return SelectingFunction(self, entry)

    # ------------------------------------------------------------------ launching
    def _next_indices(self, names: list[str], *, claim: bool) -> list[int]:
        """Each kernel's index among its name's launches (``claim``: counted as launched)."""
        indices = []
        for name in names:
            count = self.counts.setdefault(
                name, {"launched": 0, "recorded": 0, "plain_range": 0, "plain_memory": 0})
            indices.append(count["launched"])
            count["launched"] += claim
        return indices

    def _tally(self, names: list[str], *, recorded: bool, wanted: bool) -> None:
        for name in names:
            key = "recorded" if recorded else ("plain_memory" if wanted else "plain_range")
            self.counts[name][key] += 1

    def _begin_recorded(self, kernels: list[tuple[int, str, int]], args, kwargs):
        """Bump each (kernel id, name, index)'s epoch on the launch's stream and note the
        launch; the stream is returned for :meth:`RunPool.after_launch`."""
        import torch

        stream = self.pool.stream(stream_handle(args, kwargs))
        self.pool.before_launch([kernel for kernel, _, _ in kernels], stream)
        for kernel, name, index in kernels:
            self._epochs[kernel] = self._epochs.get(kernel, 0) + 1
            self.launches.append({
                "kernel_id": kernel, "kernel": name, "launch": index,
                "epoch": self._epochs[kernel],
                "stream": int(stream.cuda_stream) if stream is not None else None,
                "host_ns": time.time_ns(),
                "captured": bool(stream is not None
                                 and torch.cuda.is_current_stream_capturing()),
            })
        return stream

    def launch(self, entry: CompiledEntry, args, kwargs):
        with self.lock:
            indices = self._next_indices(entry.names, claim=True)
            wanted = any(self.selection.in_range(i) for i in indices)
            record = wanted and not self.pool.full()
            self._tally(entry.names, recorded=record, wanted=wanted)
            if not record:
                plain = entry.plain()
                self._note_build(plain)
                return plain(*args, **kwargs)
            stream = self._begin_recorded(
                list(zip(entry.kernel_ids, entry.names, indices)), args, kwargs)
        result = entry.recording_fn(*args, **kwargs)
        self.pool.after_launch(stream)
        return result

    # ------------------------------------------------------------------ direct calls
    def direct_call(self, call: Callable[[], Any], func, args, kwargs):
        """A ``@cute.jit`` function called directly: trace it with recording on when its
        launch is wanted (the kernels its last call launched are in the range and the pool
        has room), else plain. Its first call records unless ``--launch-skip`` is set (its
        kernels are not known before it is traced; with a skip, its first call runs plain and
        names them)."""
        with self.lock:
            known = self._direct.setdefault(func, DirectFunction())
            if known.names is None:
                record = self.selection.skip == 0 and not self.pool.full()
            else:
                indices = self._next_indices(known.names, claim=False)
                record = (any(self.selection.in_range(i) for i in indices)
                          and not self.pool.full())
            pool = DirectPool(self.pool, known.ids) if record else None
            self._in_flight.call = DirectCall(known, record, pool, args, kwargs)
            try:
                if not record:
                    return call()
                config = RecordingConfig(per_warp=pool.per_warp, max_warps=pool.capacity,
                                         allocate=_no_allocation,
                                         kernels=self.selection.kernels,
                                         barriers=self.barriers, pool=pool, mode=self.mode)
                from .autoprof import skipped_kernels

                with recording(config) as found:
                    result = call()
                self.skipped_kernels |= skipped_kernels()
                recorded = {r.pool_kernel for r in self.recordings}
                self.recordings.extend(r for r in found if r.pool_kernel not in recorded)
                return result
            finally:
                if self._in_flight.call is not None:  # it ran by a path no hook saw
                    name = f"{getattr(func, '__qualname__', func)} (called directly)"
                    self.unknown[name] = self.unknown.get(name, 0) + 1
                self._in_flight.call = None

    def direct_launch(self, call: DirectCall, names: list[str], run: Callable[[], Any]):
        """The launch of a direct call's module: counted under its kernels' names, recorded
        (epochs bumped, launches noted) when it was traced with recording on."""
        if call.function.names is None:
            call.function.names = names
        indices = self._next_indices(names, claim=True)
        used = dict(call.pool.used) if call.record else {}
        recorded = [(used[name], name, index) for name, index in zip(names, indices)
                    if name in used]
        wanted = any(self.selection.in_range(i) for i in indices)
        self._tally(names, recorded=bool(recorded), wanted=wanted)
        if not recorded:
            return run()
        stream = self._begin_recorded(recorded, call.args, call.kwargs)
        result = run()
        self.pool.after_launch(stream)
        return result


def _no_allocation(n_slices: int, per_warp: int):  # a run's kernels share its pool
    raise ProfileBufferError("a run's recording kernels write into its pool, not a buffer of their own")
