"""A whole program's recording (``cute-prof record``): each launch runs either the recording
build of its kernels (writing into the run's pooled slices buffer) or the plain one.

While :class:`LaunchSelector` is installed, every ``cute.compile`` (FA4's, quack's, the user's)
compiles with zero-edit recording on. Kernels that record get a kernel id in the pool, and
the caller gets a :class:`SelectingFunction`. Each call is one launch, numbered per kernel
name: in the range and with room in the pool, the kernel's launch epoch is bumped on the
launch's stream and the recording build runs; otherwise the plain build (compiled once,
outside recording) runs at the plain kernel's speed. Launches of compiled functions that
did not come from ``cute.compile`` in the run are counted by name.

Owns the compile hook, the per-launch choice and the launch table; the pool tensor comes from
the host (:func:`cute_prof.decode_slices.allocate_pool`). It may not import anything on the
host side above ``device``.
"""

from __future__ import annotations

import dataclasses
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
        from cutlass.base_dsl.compiler import CompileCallable
        from cutlass.base_dsl.jit_executor import JitExecutor

        original_compile = CompileCallable.__dict__["_compile"]
        original_run = JitExecutor.__dict__["run_compiled_program"]
        selector = self

        def _compile(this, func, *args, **kwargs):
            if kwargs.get("compile_to_precompiled_mlir"):
                return original_compile(this, func, *args, **kwargs)
            label = getattr(func, "__qualname__", None) or type(func).__name__
            return selector.compile(lambda: original_compile(this, func, *args, **kwargs), label)

        def run_compiled_program(this, exe_args):
            module = getattr(this, "jit_module", None)
            if id(getattr(module, "engine", None)) not in selector._builds:
                kernels = [m.sym for m in getattr(module, "cuda_modules", None) or []]
                name = ", ".join(kernels) or "a function cute.compile did not build in this run"
                with selector.lock:
                    selector.unknown[name] = selector.unknown.get(name, 0) + 1
            return original_run(this, exe_args)

        self._patch(CompileCallable, "_compile", _compile)
        self._patch(JitExecutor, "run_compiled_program", run_compiled_program)

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
    def launch(self, entry: CompiledEntry, args, kwargs):
        import torch

        with self.lock:
            indices = []
            for name in entry.names:
                count = self.counts.setdefault(
                    name, {"launched": 0, "recorded": 0, "plain_range": 0, "plain_memory": 0})
                indices.append(count["launched"])
                count["launched"] += 1
            wanted = any(self.selection.in_range(i) for i in indices)
            record = wanted and not self.pool.full()
            for name in entry.names:
                key = "recorded" if record else ("plain_memory" if wanted else "plain_range")
                self.counts[name][key] += 1
            if not record:
                plain = entry.plain()
                self._note_build(plain)
                return plain(*args, **kwargs)
            handle = stream_handle(args, kwargs)
            stream = self.pool.stream(handle)
            self.pool.before_launch(entry.kernel_ids, stream)
            for kernel, name, index in zip(entry.kernel_ids, entry.names, indices):
                self._epochs[kernel] = self._epochs.get(kernel, 0) + 1
                self.launches.append({
                    "kernel_id": kernel, "kernel": name, "launch": index,
                    "epoch": self._epochs[kernel],
                    "stream": int(stream.cuda_stream) if stream is not None else None,
                    "host_ns": time.time_ns(),
                    "captured": bool(stream is not None
                                     and torch.cuda.is_current_stream_capturing()),
                })
        result = entry.recording_fn(*args, **kwargs)
        self.pool.after_launch(stream)
        return result


def _no_allocation(n_slices: int, per_warp: int):  # a run's kernels share its pool
    raise ProfileBufferError("a run's recording kernels write into its pool, not a buffer of their own")
