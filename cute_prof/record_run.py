"""Inside the program that ``cute-prof record`` runs: install the recording, save the run.

The parent puts ``record_boot`` first on ``PYTHONPATH`` and the options in ``CUTE_PROF_RECORD``
(JSON); Python's start-up imports its ``sitecustomize``, which calls :func:`start`. Nothing
happens until the program imports ``cutlass``; then the compile hook
(:class:`~cute_prof.device.launch_select.LaunchSelector`) goes in, and the pool is allocated
at the first compile. At exit (normal, an exception, Ctrl-C, SIGTERM) the run is saved,
undecoded: ``pool.npy`` (claimed slices, tables) and ``run.json`` (kernels, launches, what
ran plain and why). Asked through a pipe while the program is stuck, a watchdog thread
saves the pool from a side stream, which does not wait for the stuck kernel.

Owns the child's side of a run; it may not import the CLI.
"""

from __future__ import annotations

import atexit
import importlib.abc
import importlib.machinery
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import numpy as np

from . import layout

__all__ = ["ENV_VAR", "RUN_FILE", "POOL_FILE", "RecordingRun", "current_run", "start", "save_run"]

ENV_VAR = "CUTE_PROF_RECORD"
RUN_FILE = "run.json"
POOL_FILE = "pool.npy"
RUN_FORMAT = "cute-prof-run"
RUN_VERSION = 1
# how long the save at exit waits for the GPU to finish before copying what is there
DRAIN_TIMEOUT_S = 20.0

_RUN: "RecordingRun | None" = None


class RecordingRun:
    """One process's run: its options, its compile hook (``selector``) and its save."""

    def __init__(self, options: dict):
        self.options = options
        self.out = Path(options["out"])
        self.selector = None
        self.started_ns = time.time_ns()
        self.saved = False
        self.lock = threading.Lock()
        self.exit_reason = "exit"
        self.install_error = None
        self.torch_traces: list[str] = []  # torch.profiler traces the program exported

    # ------------------------------------------------------------------ install
    def install_safely(self) -> None:
        """Install; a failure is said on stderr and the program runs on, unrecorded."""
        try:
            self.install()
        except Exception as error:  # noqa: BLE001 - never break the user's program
            self.selector = None
            self.install_error = f"{type(error).__name__}: {error}"
            print(f"cute-prof record: recording could not be set up ({self.install_error}); "
                  f"the program runs unrecorded", file=sys.stderr)

    def install(self) -> None:
        from .device.launch_select import LaunchSelector, Selection

        selection = Selection(kernels=tuple(self.options["kernels"]) or None,
                              skip=int(self.options.get("launch_skip", 0)),
                              count=self.options.get("launch_count"))
        self.selector = LaunchSelector(self._allocate_pool, selection,
                                       barriers=bool(self.options.get("barriers", True)),
                                       mode=self.options.get("mode", "full"))
        self.selector.install()

    def _allocate_pool(self):
        import torch

        from .decode_slices import allocate_pool
        from .device.launch_select import RunPool

        per_warp = int(self.options["per_warp"])
        slice_bytes = 8 * (layout.SLICE_HEADER_WORDS + per_warp)
        tables = 8 * (layout.POOL_LOST_WORDS + layout.MAX_POOL_KERNELS + layout.SLICES_HEADER_WORDS)
        budget = int(self.options["max_memory"])
        n_slices = (budget - tables) // slice_bytes
        if n_slices < 1:
            raise SystemExit(f"cute-prof record: --max-memory {budget} bytes holds no slice of "
                             f"{per_warp} records ({slice_bytes + tables} bytes at least)")
        # no GPU (a compile-only run, CUTE_DSL_ARCH set): the pool on the host, never launched
        device = (torch.device("cuda", torch.cuda.current_device())
                  if torch.cuda.is_available() else torch.device("cpu"))
        buffer = allocate_pool(min(n_slices, layout.MAX_SLICES), per_warp, device=device)
        return RunPool(buffer, per_warp=per_warp)

    # ------------------------------------------------------------------ save
    def save(self, *, side_stream: bool = False) -> None:
        """Write the folder; ``side_stream``: copy without waiting for the GPU (the program
        is stuck), so the last launches may be partial."""
        with self.lock:
            self._save(side_stream)

    def _save(self, side_stream: bool) -> None:
        selector = self.selector
        notes: list[str] = []
        words = None
        if selector is not None and selector.pool_allocated:
            words, drained, error = _copy_pool(selector.pool, wait=not side_stream)
            if error:
                notes.append(f"the records could not be read back: {error} (the context may "
                             f"have faulted; what launched is listed)")
            elif not drained:
                notes.append("the GPU was still running a kernel when the run was saved: the "
                             "last launches' records may be partial")
        info = {
            "format": RUN_FORMAT, "version": RUN_VERSION,
            "program": self.options.get("program", []),
            "started_ns": self.started_ns, "saved_ns": time.time_ns(),
            "exit_reason": self.exit_reason,
            "selection": {k: self.options.get(k) for k in
                          ("kernels", "launch_skip", "launch_count", "per_warp", "max_memory",
                           "barriers", "mode")},
            "cutlass_imported": selector is not None or self.install_error is not None,
            "install_error": self.install_error, "torch_traces": self.torch_traces,
            "notes": notes,
        }
        if selector is not None:
            info["kernels"] = [{"id": r.pool_kernel, "name": r.name, "tags": list(r.tags.names),
                                "metadata": r.metadata()} for r in selector.recordings]
            info["launches"] = selector.launches
            info["counts"] = selector.counts
            info["unknown_launches"] = selector.unknown
            info["skipped_kernels"] = sorted(selector.skipped_kernels)
            info["plain_compile_s"] = {e.label: round(e.plain_compile_s, 3)
                                       for e in selector.entries if e.plain_fn is not None}
            if selector.pool_allocated:
                pool = selector.pool
                info["pool"] = {"capacity": pool.capacity, "per_warp": pool.per_warp,
                                "device": str(pool.buffer.device)}
                info["device_name"] = _device_name(pool.buffer.device)
        self.out.mkdir(parents=True, exist_ok=True)
        if words is not None:
            _atomic_npy(self.out / POOL_FILE, words)
        _atomic_text(self.out / RUN_FILE, json.dumps(info, indent=1, default=_jsonable))
        self.saved = True


def _jsonable(value):
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (set, tuple)):
        return list(value)
    return str(value)


def _device_name(device) -> str:
    import torch

    try:
        return torch.cuda.get_device_name(device)
    except Exception:  # noqa: BLE001 - a faulted context still gets its folder
        return "?"


def _copy_pool(pool, *, wait: bool):
    """The pool's claimed slices and tables as a host array (a pooled buffer of the claimed
    slices alone), whether the GPU had finished, and an error text where it could not be read."""
    import torch

    drained = True
    if not pool.buffer.is_cuda:  # a compile-only run: the pool never left the host
        return _pool_words(pool, pool.buffer), True, None
    if wait:
        done = threading.Event()

        def drain():
            try:
                torch.cuda.synchronize(pool.buffer.device)
            except Exception:  # noqa: BLE001 - reported by the copy below
                pass
            done.set()

        threading.Thread(target=drain, daemon=True).start()
        drained = done.wait(DRAIN_TIMEOUT_S)
    else:
        drained = False
    try:
        side = torch.cuda.Stream(pool.buffer.device)
        with torch.cuda.stream(side):
            words = _pool_words(pool, pool.buffer)
        side.synchronize()
    except Exception as error:  # noqa: BLE001 - a faulted context: say so, keep the table
        return None, drained, f"{type(error).__name__}: {str(error).splitlines()[0]}"
    return words, drained, None


def _pool_words(pool, buffer) -> np.ndarray:
    """The claimed slices and the tables of ``buffer`` (on the current stream) as one host
    array: a pooled buffer whose slices are the claimed ones."""
    header = buffer[:layout.SLICES_HEADER_WORDS].to("cpu").numpy()
    claimed = min(int(header[3]), pool.capacity)
    stride = layout.SLICE_HEADER_WORDS + pool.per_warp
    first = layout.slices_buffer_words(pool.capacity, pool.per_warp)
    body = buffer[layout.SLICES_HEADER_WORDS:layout.SLICES_HEADER_WORDS + claimed * stride]
    tables = buffer[first:first + layout.POOL_LOST_WORDS + layout.MAX_POOL_KERNELS]
    words = np.empty(layout.pool_buffer_words(claimed, pool.per_warp), dtype=np.int64)
    words[:layout.SLICES_HEADER_WORDS] = header
    words[1] = layout.slices_header(claimed, pool.per_warp, pooled=True)[1]
    words[layout.SLICES_HEADER_WORDS:layout.SLICES_HEADER_WORDS + claimed * stride] = body.to("cpu").numpy()
    words[layout.slices_buffer_words(claimed, pool.per_warp):] = tables.to("cpu").numpy()
    return words


def _atomic_npy(path: Path, words: np.ndarray) -> None:
    temporary = path.with_name(path.name + ".part")
    with open(temporary, "wb") as handle:
        np.save(handle, words)
    os.replace(temporary, path)


def _atomic_text(path: Path, text: str) -> None:
    temporary = path.with_name(path.name + ".part")
    temporary.write_text(text)
    os.replace(temporary, path)


# ---------------------------------------------------------------------- start-up
class _AfterImport(importlib.abc.MetaPathFinder):
    """Calls ``then()`` right after ``module`` has been imported (a one-shot import hook)."""

    def __init__(self, module: str, then):
        self.module, self.then = module, then

    def find_spec(self, name, path, target=None):
        if name != self.module:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        loader, then = spec.loader, self.then
        original = loader.exec_module

        def exec_module(module):
            original(module)
            then()

        loader.exec_module = exec_module
        return spec


def _at_exit() -> None:
    run = _RUN
    if run is None or run.saved:
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C: save anyway
    try:
        run.save()
    except Exception as error:  # noqa: BLE001 - the program's own exit status stays
        print(f"cute-prof record: could not save the run: {error}", file=sys.stderr)
    finally:
        signal.signal(signal.SIGINT, previous)


def _on_sigterm(signum, frame):
    if _RUN is not None:
        _RUN.exit_reason = "SIGTERM"
    raise SystemExit(128 + signum)


def _note_uncaught_exceptions() -> None:
    """The run says how the program ended: an uncaught exception (Ctrl-C's included) is named."""
    previous = sys.excepthook

    def excepthook(kind, value, traceback):
        if _RUN is not None:
            _RUN.exit_reason = f"uncaught {kind.__name__}"
        previous(kind, value, traceback)

    sys.excepthook = excepthook


def _note_torch_traces() -> None:
    """Remember where the program exports its torch.profiler traces (export merges them)."""
    from torch.profiler import profile

    original = profile.export_chrome_trace

    def export_chrome_trace(self, path, *args, **kwargs):
        result = original(self, path, *args, **kwargs)
        if _RUN is not None:
            _RUN.torch_traces.append(os.path.abspath(str(path)))
        return result

    profile.export_chrome_trace = export_chrome_trace


def _watchdog(fd: int) -> None:
    """The parent writes one byte to ask for a save now (the program does not exit)."""
    with os.fdopen(fd, "rb", buffering=0) as pipe:
        while True:
            byte = pipe.read(1)
            if not byte:
                return
            run = _RUN
            if run is not None:
                run.exit_reason = "interrupted while the program was stuck"
                try:
                    run.save(side_stream=True)
                except Exception as error:  # noqa: BLE001
                    print(f"cute-prof record: could not save the run: {error}", file=sys.stderr)
            done = os.environ.get("CUTE_PROF_RECORD_DONE")
            if done:
                Path(done).write_text("saved")


def start(options: dict | None = None) -> None:
    """Set up the run described by ``options`` (default: the ``CUTE_PROF_RECORD`` variable)."""
    global _RUN
    if _RUN is not None:
        return
    if options is None:
        text = os.environ.get(ENV_VAR)
        if not text:
            return
        options = json.loads(text)
    _RUN = RecordingRun(options)
    sys.meta_path.insert(0, _AfterImport("torch.profiler", _note_torch_traces))
    if "cutlass" in sys.modules and "cutlass.cute" in sys.modules:
        _RUN.install_safely()
    else:  # after the whole package: cutlass/__init__ imports cutlass.cute half-way through
        sys.meta_path.insert(0, _AfterImport("cutlass", _RUN.install_safely))
    atexit.register(_at_exit)
    _note_uncaught_exceptions()
    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
        signal.signal(signal.SIGTERM, _on_sigterm)
    fd = options.get("watchdog_fd")
    if fd is not None:
        threading.Thread(target=_watchdog, args=(int(fd),), daemon=True,
                         name="cute-prof-watchdog").start()


def current_run() -> RecordingRun | None:
    """The run this process records (None outside ``cute-prof record`` and :func:`start`)."""
    return _RUN


def save_run() -> None:
    """Save the run now (tests; a program may call it to checkpoint)."""
    if _RUN is not None:
        _RUN.save()
