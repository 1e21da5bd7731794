"""``profile_session``: allocate, run, synchronise, decode, warn, export -- in one ``with``.

::

    with cute_prof.profile_session(4096, ["load", "mma"], "trace.json") as prof:
        my_kernel(x, prof.tensor, prof.max_events)
    print(prof.trace.overflow, len(prof.events))

On exit the buffer is decoded even if the body raised (a crash is exactly when the
recorded part is most useful); the body's exception then propagates unchanged, and a
problem while decoding after a failure is reported as a warning rather than masking it.

Export switches, strongest first: the call's ``export=True/False``; then
``set_export_enabled(...)`` (or ``set_export_trace_on()`` / ``set_export_trace_off()``);
then the environment variable ``CUTE_PROF_EXPORT`` (``0``/``false``/``no``/``off``
disable); default on. Decoding, warnings and ``summary`` happen either way.

The trace format follows the file suffix: ``.json`` (Chrome Trace Event JSON, this
package) or ``.pftrace`` / ``.perfetto-trace`` (Perfetto protobuf via
``cute_prof.export.pftrace_writer.write_pftrace``).

Owns ``profile_session`` and the export switches (stage 6); it may not import the CLI.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .buffer import ProfileBuffer, allocate_profile_buffer
from .decode import decode_buffer, warn_about_losses
from .errors import KernelHangError, ProfileBufferError, ProfileWarning
from .export.chrome_json import GROUP_BY_CHOICES
from .files import check_output_path
from .tags import as_tag_table
from .trace import Trace

__all__ = [
    "profile_session",
    "write_trace",
    "export_enabled",
    "set_export_enabled",
    "set_export_trace_on",
    "set_export_trace_off",
    "EXPORT_ENV_VAR",
    "TRACE_SUFFIXES",
]

EXPORT_ENV_VAR = "CUTE_PROF_EXPORT"
_JSON_SUFFIXES = (".json",)
_PFTRACE_SUFFIXES = (".pftrace", ".perfetto-trace")
TRACE_SUFFIXES = _JSON_SUFFIXES + _PFTRACE_SUFFIXES
_FALSE_WORDS = {"0", "false", "no", "off"}

_export_lock = threading.Lock()
_export_override: bool | None = None  # None: follow the environment variable


def set_export_enabled(enabled: bool | None) -> None:
    """Turn trace writing on or off process-wide (``None`` = follow ``CUTE_PROF_EXPORT``)."""
    global _export_override
    with _export_lock:
        _export_override = None if enabled is None else bool(enabled)


def set_export_trace_on() -> None:
    """Process-wide: write traces (unless a call passes ``export=False``)."""
    set_export_enabled(True)


def set_export_trace_off() -> None:
    """Process-wide: do not write traces (unless a call passes ``export=True``)."""
    set_export_enabled(False)


def export_enabled() -> bool:
    """Whether sessions write traces by default right now."""
    if _export_override is not None:
        return _export_override
    return os.environ.get(EXPORT_ENV_VAR, "1").strip().lower() not in _FALSE_WORDS


def _trace_format(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix in _JSON_SUFFIXES:
        return "json"
    if suffix in _PFTRACE_SUFFIXES:
        return "pftrace"
    raise ProfileBufferError(
        f"cannot tell the trace format of {str(path)!r} from its suffix {suffix!r}; "
        f"use one of {list(TRACE_SUFFIXES)}"
    )


def write_trace(trace: Trace, path, *, group_by: str = "device") -> Path:
    """Write ``trace`` in the format its suffix names (``.json`` or ``.pftrace``)."""
    from .export import export_trace

    target = check_output_path(path)
    return export_trace(trace, target, format=_trace_format(target), group_by=group_by)


def _print_summary(trace: Trace) -> None:
    from .analysis import summarize

    table = summarize(trace)
    if table is not None:
        print(table)


def _synchronize(buffer: ProfileBuffer) -> None:
    if buffer.device.type != "cuda":
        return
    if buffer.stream is not None:
        buffer.stream.synchronize()
    else:
        import torch

        torch.cuda.synchronize(buffer.device)


@contextlib.contextmanager
def profile_session(
    max_events: int,
    tag_names=None,
    trace_path=None,
    device="cuda",
    stream=None,
    *,
    export: bool | None = None,
    summary: bool = False,
    clock_hz: float | None = None,
    group_by: str = "device",
    metadata: dict[str, Any] | None = None,
    watchdog: float | None = None,
    flight_warps: int | None = None,
) -> Iterator[ProfileBuffer]:
    """Allocate a profile buffer, yield it, then decode (and export) on exit.

    ``tag_names``: list of names, a TagTable, or None for the default auto table.
    ``trace_path``: where to write the trace (suffix picks the format); None writes none.
    ``export``: force writing on/off for this call (default: the global switch).
    ``summary``: print ``cute_prof.analysis.summarize(trace)`` after decoding.
    ``clock_hz``, ``metadata``: passed to ``decode_buffer``; ``group_by`` to the exporter.

    After the block, the yielded buffer's ``.trace``, ``.events`` and ``.overflow`` hold
    the result. Lost records (overflow, incomplete, invalid) raise ProfileWarning with the
    exact counts.

    ``flight_warps=N`` (the number of recording warps of the launch) yields a
    :class:`cute_prof.flight.FlightRecorder` instead: records and per-warp positions in
    pinned host memory that stays readable while a kernel hangs and after it faults.
    ``watchdog=seconds`` (needs ``flight_warps``) bounds the wait at the end of the block:
    still running then, the session prints where every warp is, writes the partial trace
    and raises :class:`cute_prof.errors.KernelHangError` (end the process then). A kernel
    that faults gets the same report (printed, and attached to the CUDA error as a note)
    before the error propagates.
    """
    table = as_tag_table(tag_names)
    target = None
    if trace_path is not None:  # fail before the kernel runs, not after
        target = check_output_path(trace_path)
        _trace_format(target)
    if group_by not in GROUP_BY_CHOICES:
        raise ProfileBufferError(f"group_by must be one of {GROUP_BY_CHOICES}, got {group_by!r}")
    if watchdog is not None or flight_warps is not None:
        yield from _flight_session(max_events, table, target, export, summary, clock_hz, group_by,
                                   metadata, watchdog=watchdog, flight_warps=flight_warps, stream=stream)
        return
    buffer = allocate_profile_buffer(max_events, device=device, stream=stream)
    try:
        yield buffer
    except BaseException:
        try:
            _finish(buffer, table, target, export, summary, clock_hz, group_by, metadata)
        except Exception as exc:  # never hide the body's exception behind ours
            warnings.warn(
                f"profile_session could not decode or write the trace after the body failed: "
                f"{type(exc).__name__}: {exc}",
                ProfileWarning,
                stacklevel=3,
            )
        raise
    _finish(buffer, table, target, export, summary, clock_hz, group_by, metadata)


def _flight_session(max_events, table, target, export, summary, clock_hz, group_by, metadata, *,
                    watchdog, flight_warps, stream):
    """The body of ``profile_session`` in flight-recorder mode (see its docstring)."""
    from .flight import allocate_flight_recorder, flight_report, wait_for_device

    if flight_warps is None:
        raise ProfileBufferError(
            "watchdog= needs flight_warps=N (the recording warps of the launch: CTAs x warps "
            "per CTA) so that every warp's position has a slot in host memory")
    if watchdog is not None and not (isinstance(watchdog, (int, float)) and watchdog > 0):
        raise ProfileBufferError(f"watchdog must be a positive number of seconds, got {watchdog!r}")
    recorder = allocate_flight_recorder(max_events, warps=flight_warps)
    flight_report(recorder, tag_table=table)  # warm the report path before anything can hang
    recorder.launched_host_ns = time.monotonic_ns()
    should_export = export_enabled() if export is None else bool(export)
    partial = target if should_export else None

    def report_problem(*, hung: bool, error: str | None):
        # the report first (a plain read of mapped memory), then the partial trace, whose
        # atomic write (fsync) can take seconds on a busy disk
        report = flight_report(recorder, tag_table=table, hung=hung, error=error)
        recorder.report, recorder.trace = report, report.trace
        recorder.reported_at = time.monotonic()
        where = f"\npartial trace: {partial}" if partial is not None else ""
        print(report.format() + where, file=sys.stderr, flush=True)
        if partial is not None:
            write_trace(report.trace, partial, group_by=group_by)
        return report, where

    try:
        yield recorder
    except BaseException as exc:
        if not isinstance(exc, KeyboardInterrupt):
            try:
                report, where = report_problem(hung=False, error=f"{type(exc).__name__}: {exc}".splitlines()[0])
                _add_note(exc, report.format() + where)
            except Exception as inner:  # never hide the body's exception behind ours
                warnings.warn(f"profile_session could not read the flight recorder after the body failed: "
                              f"{type(inner).__name__}: {inner}", ProfileWarning, stacklevel=3)
        raise
    import torch

    recorder.watch_started_at = time.monotonic()
    try:  # a fault (trap, illegal address, device assert) surfaces in the poll or the sync
        finished = watchdog is None or wait_for_device(watchdog, stream=stream)
        if finished:
            if stream is not None:
                stream.synchronize()
            else:
                torch.cuda.synchronize()
    except Exception as exc:
        report, where = report_problem(hung=False, error=f"{type(exc).__name__}: {exc}".splitlines()[0])
        _add_note(exc, report.format() + where)
        raise
    if not finished:
        report, where = report_problem(hung=True, error=None)
        raise KernelHangError(
            f"kernel still running {watchdog:g} s after the profile_session block ended; positions "
            f"above{where}. The CUDA context cannot be recovered while it runs: end the process "
            f"(os._exit), a normal exit waits for the kernel forever.", report)
    recorder.report = flight_report(recorder, tag_table=table)
    _finish(recorder.records, table, target, export, summary, clock_hz, group_by, metadata)
    recorder.trace = recorder.records.trace


def _add_note(exc: BaseException, note: str) -> None:
    """Attach the flight report to an exception (Python 3.11+: shown in its traceback)."""
    if hasattr(exc, "add_note"):
        exc.add_note(note)


def _finish(buffer, table, target, export, summary, clock_hz, group_by, metadata) -> None:
    _synchronize(buffer)
    trace = decode_buffer(buffer, table, clock_hz=clock_hz, metadata=metadata)
    buffer.remember(trace)
    warn_about_losses(trace, include_overflow=True, stacklevel=4)
    should_export = export_enabled() if export is None else bool(export)
    if target is not None and should_export:
        write_trace(trace, target, group_by=group_by)
        trace.metadata["trace_path"] = str(target)
    if summary:
        _print_summary(trace)
