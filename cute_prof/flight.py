"""Flight recorder, host side: allocate the recorder in pinned, device-mapped host memory,
watch a launch, and say where every warp is when it hangs or traps.

The records (the normal format of ``layout``) and the per-warp position region
(``layout`` flight section) both live in pinned host memory that the GPU writes through
its mapping, so they stay readable while the kernel is stuck and after the context has
faulted. Reading them is a plain memory read: no CUDA call touches the stuck context.

::

    rec = allocate_flight_recorder(4096, warps=ctas * warps_per_cta)
    report = watch(lambda: kernel(rec.records_ptr(), rec.positions_ptr(), rec.slots), rec,
                   timeout=5.0, tag_table=tags, output="partial.json")
    if report.hung:
        print(report.format())   # then kill the process: the context cannot be recovered

Owns the flight recorder's host side (stage 6); the device ops are
:mod:`cute_prof.device.flight`'s, which it may not import (``import cute_prof.flight`` needs no
CUTLASS DSL), nor may it import the CLI.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from . import jit, layout
from .buffer import ProfileBuffer, host_words
from .decode import decode_buffer
from .errors import ProfileBufferError
from .export import export_trace
from .tags import as_tag_table
from .trace import Trace

__all__ = [
    "FlightRecorder",
    "FlightReport",
    "allocate_flight_recorder",
    "diagnose",
    "flight_report",
    "load_dump",
    "run_catching",
    "save_dump",
    "wait_for_device",
    "watch",
]

# %globaltimer on Linux drivers counts ns since the Unix epoch; when the recorded stamps are
# within this of the host's clock, "open for" is measured against the host clock directly.
_EPOCH_AGREEMENT_NS = 60 * 10**9


class FlightRecorder:
    """Records and positions in pinned, device-mapped host memory (needs a CUDA device)."""

    def __init__(self, records: ProfileBuffer, positions, warps: int):
        self.records = records
        self.positions = positions
        self.warps = int(warps)
        self.slots = self.warps * layout.FLIGHT_DEPTH
        self.launched_host_ns: int | None = None
        self.report: FlightReport | None = None  # set by profile_session's flight mode
        self.trace: Trace | None = None
        self.reported_at: float | None = None  # time.monotonic() when the report was ready
        self.watch_started_at: float | None = None  # time.monotonic() when the watchdog began
        self.watch_ended_at: float | None = None  # when it stopped waiting (finished or timed out)

    def records_address(self) -> int:
        """Device address of the record buffer (pass as ``cute.runtime.make_ptr``)."""
        return int(self.records.tensor.data_ptr())

    def positions_address(self) -> int:
        return int(self.positions.data_ptr())

    def record_words(self) -> np.ndarray:
        return self.records.tensor.numpy().copy()

    def position_words(self) -> np.ndarray:
        return self.positions.numpy().copy()


def allocate_flight_recorder(max_events: int, *, warps: int) -> FlightRecorder:
    """Pinned (page-locked, UVA-mapped: the host pointer is the device pointer) record buffer
    for ``max_events`` records and a position region for ``warps`` recording warps."""
    import torch

    if not torch.cuda.is_available():
        raise ProfileBufferError("the flight recorder needs a CUDA device (pinned, mapped host memory)")
    if int(warps) <= 0:
        raise ProfileBufferError(f"warps must be positive, got {warps}")
    words = layout.buffer_words(int(max_events))
    storage = torch.zeros(words + 1, dtype=torch.int64, pin_memory=True)
    offset = 0 if storage.data_ptr() % 16 == 8 else 1
    records = ProfileBuffer(storage, offset, int(max_events))
    positions = torch.zeros(layout.flight_words(warps), dtype=torch.int64, pin_memory=True)
    if positions.data_ptr() % 16:
        raise ProfileBufferError("pinned allocation is not 16-byte aligned")
    positions[0] = layout.FLIGHT_MAGIC
    positions[1] = int(warps) * layout.FLIGHT_DEPTH
    return FlightRecorder(records, positions, warps)


# ----------------------------------------------------------------------------------------
# diagnosis


@dataclass
class FlightReport:
    """Where every warp was: ``warps`` (columns, one row per warp that recorded anything)
    and ``groups`` (one line per distinct position)."""

    warps: dict[str, np.ndarray]
    groups: list[dict[str, Any]]
    hung: bool = False
    error: str | None = None
    trace: Trace | None = None
    notes: list[str] = field(default_factory=list)

    def format(self) -> str:
        head = "kernel hung" if self.hung else ("kernel faulted: " + self.error if self.error else "kernel finished")
        lines = [head]
        for g in self.groups:
            lines.append("  " + g["text"])
        lines.extend("  " + n for n in self.notes)
        return "\n".join(lines)


def _positions_view(words: np.ndarray) -> np.ndarray:
    words = np.asarray(words, dtype=np.int64)
    if words.ndim != 1 or words.shape[0] < layout.FLIGHT_HEADER_WORDS or words[0] != layout.FLIGHT_MAGIC:
        raise ProfileBufferError("not a flight-recorder position region (header magic missing)")
    slots = int(words[1])
    body = words[layout.FLIGHT_HEADER_WORDS:]
    if slots % layout.FLIGHT_DEPTH or body.shape[0] != slots * layout.FLIGHT_SLOT_WORDS:
        raise ProfileBufferError(
            f"position region holds {body.shape[0]} words but its header says {slots} slots"
        )
    return body.reshape(slots // layout.FLIGHT_DEPTH, layout.FLIGHT_DEPTH, layout.FLIGHT_SLOT_WORDS)


def _seconds(ns) -> str:
    ns = float(ns)
    if ns >= 1e9:
        return f"{ns / 1e9:.1f} s"
    if ns >= 1e6:
        return f"{ns / 1e6:.1f} ms"
    return f"{ns / 1e3:.1f} us"


def _warp_set(warp_ids: np.ndarray) -> str:
    ids = np.unique(warp_ids)
    return "warp " + ",".join(str(int(w)) for w in ids[:8]) + ("..." if ids.size > 8 else "")


def diagnose(position_words, *, now_ns: int | None = None, tag_table=None) -> FlightReport:
    """Innermost open region (tag, payload, depth, open for) of every warp, else the region
    it left last, grouped by position. ``now_ns``: the %globaltimer time of the snapshot;
    default: the latest stamp in it (open-for then reads 'at least')."""
    table = as_tag_table(tag_table)
    view = _positions_view(position_words)
    enter, leave = view[:, :, layout.FLIGHT_WORD_ENTER], view[:, :, layout.FLIGHT_WORD_LEAVE]
    tags = layout.decode_tag_words(view[:, :, layout.FLIGHT_WORD_TAG])
    valid = tags["complete"] & (enter > 0)
    is_open = valid & (leave == 0)
    closed = valid & (leave > 0)
    if now_ns is None:
        now_ns = int(max(enter.max(initial=0), leave.max(initial=0)))
    depth_ids = np.arange(layout.FLIGHT_DEPTH)
    # innermost open: the deepest open level (-1 when none)
    open_depth = np.where(is_open, depth_ids, -1).max(axis=1)
    has_open = open_depth >= 0
    # last left: the closed level with the latest leave time
    leave_key = np.where(closed, leave, -1)
    left_depth = leave_key.argmax(axis=1)
    has_left = leave_key.max(axis=1) > 0
    rows = np.arange(view.shape[0])
    pick = np.where(has_open, open_depth, left_depth)
    recorded = has_open | has_left
    where = layout.decode_where_words(view[rows, pick, layout.FLIGHT_WORD_WHERE])
    warps = {
        "slot_warp": rows[recorded],
        "cta": where["cta"][recorded],
        "warp": where["warp"][recorded],
        "sm": where["sm"][recorded],
        "open": has_open[recorded],
        "depth": pick[recorded],
        "tag": tags["tag"][rows, pick][recorded],
        "payload": tags["payload"][rows, pick][recorded],
        "since_ns": np.where(has_open, now_ns - enter[rows, pick], now_ns - leave[rows, pick])[recorded],
    }
    keys = np.stack([(~warps["open"]).astype(np.int64), warps["tag"].astype(np.int64),
                     warps["payload"].astype(np.int64), warps["depth"].astype(np.int64)], axis=1)
    groups: list[dict[str, Any]] = []
    if keys.shape[0]:
        uniq, inverse, counts = np.unique(keys, axis=0, return_inverse=True, return_counts=True)
        inverse = inverse.reshape(-1)
        order = np.lexsort((-counts, uniq[:, 0]))
        for g in order:  # one iteration per distinct position, not per warp
            member = inverse == g
            left, tag, payload, depth = (int(v) for v in uniq[g])
            name = table.lookup_name(tag)
            ctas = np.unique(warps["cta"][member]).size
            since = warps["since_ns"][member]
            who = f"{int(counts[g])} warps ({_warp_set(warps['warp'][member])} of {ctas} CTAs)"
            if left:
                text = (f"{who} left '{name}' payload={payload} and entered nothing "
                        f"(left {_seconds(since.min())}..{_seconds(since.max())} ago)")
            else:
                text = (f"{who} wait in '{name}' payload={payload} depth {depth} "
                        f"for {_seconds(since.min())}..{_seconds(since.max())}")
            groups.append({"open": not left, "tag": tag, "name": name, "payload": payload,
                           "depth": depth, "warps": int(counts[g]), "ctas": int(ctas),
                           "since_min_ns": int(since.min()), "since_max_ns": int(since.max()),
                           "text": text})
    report = FlightReport(warps=warps, groups=groups)
    silent = int((~recorded).sum())
    if silent:
        report.notes.append(f"{silent} warp slots recorded no position (not launched, not recording, or never reached an op)")
    return report


def _now_globaltimer(position_words, launched_host_ns: int | None) -> int | None:
    """The snapshot time in %globaltimer ns: the host clock when the stamps agree with it,
    else the earliest enter plus the host time since launch."""
    view = _positions_view(position_words)
    enter = view[:, :, layout.FLIGHT_WORD_ENTER]
    stamped = enter[enter > 0]
    if stamped.size == 0:
        return None
    host = time.time_ns()
    if abs(int(stamped.max()) - host) < _EPOCH_AGREEMENT_NS:
        return host
    if launched_host_ns is None:
        return None
    return int(stamped.min()) + (time.monotonic_ns() - launched_host_ns)


def flight_report(recorder: FlightRecorder, *, tag_table=None, hung: bool = False,
                  error: str | None = None, output: str | os.PathLike | None = None) -> FlightReport:
    """Read positions and records from the mapped memory (no CUDA call), diagnose, decode,
    and write the (partial) trace to ``output`` when given."""
    positions = recorder.position_words()
    records = recorder.record_words()
    report = diagnose(positions, now_ns=_now_globaltimer(positions, recorder.launched_host_ns), tag_table=tag_table)
    report.hung, report.error = hung, error
    # numpy, never the compiled decoder: its first compile takes seconds, in the middle of a
    # hang report; a flight buffer is small
    with jit.disabled():
        report.trace = decode_buffer(records, tag_table,
                                     metadata={"flight": "hung" if hung else ("faulted" if error else "finished")})
    if output is not None:
        export_trace(report.trace, output)
    return report


def wait_for_device(timeout: float, *, stream=None, poll: float = 0.01) -> bool:
    """True once all work queued so far on ``stream`` (default: the current one) has
    finished, False after ``timeout`` seconds. Polls an event: never blocks on a hung kernel."""
    import torch

    if not timeout > 0:
        raise ProfileBufferError(f"timeout must be positive seconds, got {timeout}")
    done = torch.cuda.Event()
    done.record(stream)
    deadline = time.monotonic() + float(timeout)
    while True:
        if done.query():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll)


def watch(launch: Callable[[], Any], recorder: FlightRecorder, *, timeout: float, tag_table=None,
          output: str | os.PathLike | None = None, poll: float = 0.01) -> FlightReport:
    """Run ``launch()`` (it enqueues the kernel on the current stream) and wait up to
    ``timeout`` seconds. Finished: synchronise and report. Still running: report from the
    mapped memory without touching the context (``report.hung``), write the partial trace
    to ``output``; the process must then be killed -- the stuck context cannot be freed."""
    import torch

    if not timeout > 0:
        raise ProfileBufferError(f"timeout must be positive seconds, got {timeout}")
    flight_report(recorder, tag_table=tag_table)  # warm the report path before anything can hang
    recorder.launched_host_ns = time.monotonic_ns()
    launch()
    recorder.watch_started_at = time.monotonic()
    finished = wait_for_device(timeout, poll=poll)
    recorder.watch_ended_at = time.monotonic()
    if finished:
        torch.cuda.synchronize()
    report = flight_report(recorder, tag_table=tag_table, hung=not finished)
    recorder.reported_at = time.monotonic()
    if output is not None:
        export_trace(report.trace, output)
    return report


def run_catching(launch: Callable[[], Any], recorder: FlightRecorder, *, tag_table=None,
                 output: str | os.PathLike | None = None, on_report: Callable[[FlightReport], Any] = print):
    """Run ``launch()`` and synchronise; if the kernel faults (trap, illegal address, device
    assert), decode every record that reached the mapped buffer, hand the report to
    ``on_report`` and re-raise the CUDA error."""
    import torch

    recorder.launched_host_ns = time.monotonic_ns()
    try:
        launch()
        torch.cuda.synchronize()
    except Exception as exc:
        report = flight_report(recorder, tag_table=tag_table, error=f"{type(exc).__name__}: {exc}".splitlines()[0], output=output)
        on_report(report)
        raise
    return flight_report(recorder, tag_table=tag_table, output=output)


# ----------------------------------------------------------------------------------------
# dumps


def save_dump(path, recorder_or_words, *, position_words=None, now_ns: int | None = None, tag_names=(),
              status: str = "hung") -> Path:
    """Save records and positions (``.npz``) for ``cute-prof flight``; ``status``: 'hung',
    'faulted' or 'finished' (what the report's first line says)."""
    if status not in ("hung", "faulted", "finished"):
        raise ProfileBufferError(f"status must be 'hung', 'faulted' or 'finished', got {status!r}")
    if isinstance(recorder_or_words, FlightRecorder):
        records = recorder_or_words.record_words()
        positions = recorder_or_words.position_words()
        if now_ns is None:
            now_ns = _now_globaltimer(positions, recorder_or_words.launched_host_ns)
    else:
        records = host_words(recorder_or_words)
        positions = np.asarray(position_words, dtype=np.int64)
    _positions_view(positions)
    path = Path(path)
    np.savez(path, records=records, positions=positions, now_ns=np.int64(now_ns or 0),
             tag_names=np.array(list(tag_names), dtype=str), status=np.array(status))
    return path if path.suffix == ".npz" else path.with_name(path.name + ".npz")


def load_dump(path, *, tag_table=None) -> FlightReport:
    """Report and trace from a dump written by :func:`save_dump`."""
    with np.load(path, allow_pickle=False) as data:
        records, positions = data["records"], data["positions"]
        now_ns = int(data["now_ns"]) or None
        names = list(data["tag_names"]) if "tag_names" in data else []
        status = str(data["status"]) if "status" in data else "hung"
    table = tag_table if tag_table is not None else (names or None)
    report = diagnose(positions, now_ns=now_ns, tag_table=table)
    report.hung = status == "hung"
    report.error = "saved dump of a faulted kernel" if status == "faulted" else None
    report.trace = decode_buffer(records, table, metadata={"flight": str(path)})
    return report
