"""Chrome Trace Event JSON export (opens in https://ui.perfetto.dev and chrome://tracing).

Output layout::

    {"displayTimeUnit": "ns",
     "otherData": {overflow, incomplete, capacity, device, clock_hz, tag_names, ...},
     "traceEvents": [process/thread naming ("ph": "M"), then one event per record]}

* Spans are complete events (``"ph": "X"`` with ``dur``); instants are ``"ph": "i"`` with
  ``"s": "t"`` (thread scope). ``ts``/``dur`` are microseconds relative to the earliest
  event, written as exact decimals with nanosecond precision. The raw nanoseconds and the
  rest of the record (``start_ns``, ``dur_ns``, ``tid``, ``payload``, ``sm``, ``warp``,
  ``dur_cycles`` for clock spans) are in ``args``.
* Perfetto's JSON importer parses decimals with its own (not correctly rounded) routine
  and *truncates* ``value * 1000`` to integer ns, which loses 1 ns on ~1% of values. Where
  that would happen we append a ``1`` in the fourth decimal (+0.1 ns), so Perfetto lands
  on the exact nanosecond and readers that round still get it too.
* Tracks: by default one process per GPU and one thread per kernel ``tid``; with
  ``group_by="sm"`` one process per SM, threads per ``tid`` within it. JSON pids and tids
  are small positive numbers unique across the file (Perfetto drops negative ids, treats
  pid 0 as the kernel's swapper and merges equal tids across processes); the thread name
  shows the kernel's tid, and ``thread_sort_index`` orders threads by it.
* The file is written atomically: a temporary file in the same directory, fsync, then
  ``os.replace``. A failure leaves neither a partial trace nor the temporary file.

Formatting is vectorised: every distinct (name, kind, rounding/sign flags) combination gets
one ``%``-template, and a chunk of events is rendered with a single C-level ``%``
operation over a flat tuple of integers -- no per-event Python code runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from . import layout
from .errors import ProfileBufferError
from .trace import Event, Trace, kind_name

__all__ = ["events_to_perfetto", "atomic_open", "check_output_path", "GROUP_BY_CHOICES"]

GROUP_BY_CHOICES = ("device", "sm")
_CHUNK_EVENTS = 32_768
_SEPARATOR = ",\n"


# ------------------------------------------------------------------- file handling
def check_output_path(path) -> Path:
    """Validate a trace output path before any work is done; returns it as a Path."""
    try:
        target = Path(os.fspath(path))
    except TypeError:
        raise ProfileBufferError(f"trace path must be a str or os.PathLike, got {path!r}") from None
    if target.is_dir():
        raise ProfileBufferError(f"trace path {str(target)!r} is a directory; give a file name")
    parent = target.parent
    if not parent.is_dir():
        raise ProfileBufferError(
            f"cannot write {str(target)!r}: directory {str(parent)!r} does not exist; create it "
            "first (os.makedirs) or choose another path"
        )
    return target


@contextlib.contextmanager
def atomic_open(path, mode: str = "w", *, encoding: str | None = "utf-8") -> Iterator[Any]:
    """Open a temporary sibling of ``path`` for writing; on success fsync and rename it
    over ``path``, on any exception delete it. Readers never see a partial file."""
    target = check_output_path(path)
    temp = target.parent / f".{target.name}.{secrets.token_hex(6)}.tmp"
    # O_EXCL: never clobber someone else's file; 0o666 lets the umask decide permissions.
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        binary = "b" in mode
        with os.fdopen(fd, mode, encoding=None if binary else encoding) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
    with contextlib.suppress(OSError):  # make the rename itself durable where supported
        dir_fd = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


# ------------------------------------------------------------------------ helpers
def _jsonable(value: Any) -> Any:
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=str)
    return str(value)


def _dumps(value: Any) -> str:
    return json.dumps(value, default=_jsonable, allow_nan=False, separators=(",", ":"))


def _as_trace(events) -> Trace:
    if isinstance(events, Trace):
        return events
    if isinstance(events, np.ndarray):
        raise ProfileBufferError(
            "got a numpy array; pass the Trace from decode_buffer (or a list of Event), "
            "not Trace.events or a raw buffer"
        )
    if isinstance(events, Sequence) and all(isinstance(e, Event) for e in events):
        return Trace.from_events(events)
    raise ProfileBufferError(
        f"events_to_perfetto takes a Trace or a list of Event, got {type(events).__name__}"
    )


def _split_us(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Nanosecond ints -> (negative, whole µs, ns remainder, needs_bias) for "%d.%03d".

    ``needs_bias`` marks values that Perfetto's parser (int part + frac/1000, then
    truncating ``* 1000``) would read 1 ns short; see the module docstring."""
    negative = values < 0
    magnitude = np.abs(values).view(np.uint64)  # abs(INT64_MIN) wraps, uint64 view fixes it
    whole = magnitude // np.uint64(1000)
    remainder = magnitude % np.uint64(1000)
    as_read = whole.astype(np.float64) + remainder.astype(np.float64) / 1000.0
    needs_bias = np.trunc(as_read * 1000.0) != (whole * np.uint64(1000) + remainder).astype(
        np.float64
    )
    return negative, whole.astype(np.int64), remainder.astype(np.int64), needs_bias


def _event_template(name_json: str, kind: int, ts_neg, ts_bias, dur_neg, dur_bias) -> str:
    """One event's %-template. Value order (13 ints, same for every template): ts µs, ts ns,
    dur µs, dur ns, pid, json tid, start_ns, dur_ns, tid, payload, sm, warp, dur_cycles.
    ``%.0s`` consumes a value without printing it, so every template takes all 13."""
    name = name_json.replace("%", "%%")
    ts = f'{"-" if ts_neg else ""}%d.%03d{"1" if ts_bias else ""}'
    dur = f'{"-" if dur_neg else ""}%d.%03d{"1" if dur_bias else ""}'
    cat = kind_name(kind)
    if kind == layout.KIND_INSTANT:
        head = f'{{"name":{name},"cat":"{cat}","ph":"i","s":"t","ts":{ts}%.0s%.0s'
    else:
        head = f'{{"name":{name},"cat":"{cat}","ph":"X","ts":{ts},"dur":{dur}'
    cycles = ',"dur_cycles":%d' if kind == layout.KIND_CLOCK_SPAN else "%.0s"
    return (
        head + ',"pid":%d,"tid":%d,"args":{"start_ns":%d,"dur_ns":%d,"tid":%d,"payload":%d,'
        '"sm":%d,"warp":%d' + cycles + "}}"
    )


# --------------------------------------------------------------------------- export
def events_to_perfetto(
    events,
    path,
    *,
    group_by: str = "device",
    process_name: str | None = None,
    metadata: dict[str, Any] | None = None,
) -> Path:
    """Write ``events`` (a Trace, or a list of Event) as Chrome Trace Event JSON.

    ``group_by``: ``"device"`` (one process for the GPU) or ``"sm"`` (one per SM).
    ``process_name`` overrides the GPU process name (default: the trace's device).
    ``metadata`` is added to the file's ``otherData``. Returns the path written.
    """
    target = check_output_path(path)
    if group_by not in GROUP_BY_CHOICES:
        raise ProfileBufferError(f"group_by must be one of {GROUP_BY_CHOICES}, got {group_by!r}")
    trace = _as_trace(events)
    ev = trace.events
    count = ev.shape[0]
    # Parents before children: order by start, then longer first for equal starts.
    order = np.lexsort((-ev["dur_ns"], ev["start_ns"])) if count else np.zeros(0, np.intp)
    ev = ev[order]

    # ------------------------------------------------------------ tracks
    device = str(trace.metadata.get("device") or "GPU")
    if group_by == "sm":
        sm_ids, process_index = np.unique(ev["sm"], return_inverse=True)
        process_names = [f"SM {sm}" for sm in sm_ids.tolist()]
    else:
        process_index = np.zeros(count, dtype=np.int64)
        process_names = [process_name or device]
    process_index = process_index.reshape(-1).astype(np.int64)
    # One track per (process, tid); offsetting tid by 2**31 keeps signed order in the key.
    track_key = (process_index << 32) | (ev["tid"].astype(np.int64) + (1 << 31))
    track_keys, track_index = np.unique(track_key, return_inverse=True)
    track_index = track_index.reshape(-1)
    process_count = len(process_names)
    json_pid = process_index + 1  # pids 1..P; tids P+1.. so no id is reused anywhere
    json_tid = track_index.astype(np.int64) + process_count + 1

    header_events: list[str] = []
    for i, name in enumerate(process_names):
        pid = i + 1
        header_events.append(
            f'{{"name":"process_name","ph":"M","ts":0,"pid":{pid},"tid":{pid},'
            f'"args":{{"name":{_dumps(name)}}}}}'
        )
        header_events.append(
            f'{{"name":"process_sort_index","ph":"M","ts":0,"pid":{pid},"tid":{pid},'
            f'"args":{{"sort_index":{i}}}}}'
        )
    track_process = (track_keys >> 32).tolist()
    track_tids = ((track_keys & 0xFFFFFFFF) - (1 << 31)).tolist()
    for track, (proc, tid) in enumerate(zip(track_process, track_tids)):
        pid, jtid = proc + 1, track + process_count + 1
        header_events.append(
            f'{{"name":"thread_name","ph":"M","ts":0,"pid":{pid},"tid":{jtid},'
            f'"args":{{"name":"tid {tid}"}}}}'
        )
        header_events.append(
            f'{{"name":"thread_sort_index","ph":"M","ts":0,"pid":{pid},"tid":{jtid},'
            f'"args":{{"sort_index":{track}}}}}'
        )

    # --------------------------------------------------------- templates
    origin = int(ev["start_ns"].min()) if count else 0
    ts_neg, ts_us, ts_frac, ts_bias = _split_us(ev["start_ns"] - origin)
    dur_neg, dur_us, dur_frac, dur_bias = _split_us(ev["dur_ns"])
    name_index, names = trace.name_table(ev["tag"])
    flags = (
        ts_neg.astype(np.int64) * 8
        + ts_bias.astype(np.int64) * 4
        + dur_neg.astype(np.int64) * 2
        + dur_bias.astype(np.int64)
    )
    combo = (name_index.astype(np.int64) * 16 + ev["kind"].astype(np.int64)) * 16 + flags
    combos, combo_index = np.unique(combo, return_inverse=True)
    templates = np.empty(combos.shape[0], dtype=object)
    for i, code in enumerate(combos.tolist()):
        name_i, rest = divmod(code, 256)
        kind, flag = divmod(rest, 16)
        templates[i] = _event_template(
            _dumps(names[name_i]), kind, flag & 8, flag & 4, flag & 2, flag & 1
        )
    combo_index = combo_index.reshape(-1)

    values = np.empty((count, 13), dtype=np.int64)
    for column, data in enumerate(
        (
            ts_us, ts_frac, dur_us, dur_frac, json_pid, json_tid,
            ev["start_ns"], ev["dur_ns"], ev["tid"], ev["payload"], ev["sm"], ev["warp"],
            ev["dur_cycles"],
        )
    ):
        values[:, column] = data

    other = {
        "producer": "cute_prof",
        "capacity": trace.capacity,
        "attempted": trace.attempted,
        "overflow": trace.overflow,
        "incomplete": trace.incomplete,
        "invalid": trace.invalid,
        "events": count,
        "device": device,
        "clock_hz": trace.metadata.get("clock_hz"),
        "origin_ns": origin,
        "group_by": group_by,
        "tag_names": list(trace.tag_names),
    }
    for key, value in trace.metadata.items():
        other.setdefault(key, value)
    if metadata:
        other.update(metadata)

    with atomic_open(target) as out:
        out.write(f'{{"displayTimeUnit":"ns","otherData":{_dumps(other)},"traceEvents":[\n')
        out.write(_SEPARATOR.join(header_events))
        first = not header_events
        for start in range(0, count, _CHUNK_EVENTS):
            stop = min(start + _CHUNK_EVENTS, count)
            chunk_template = _SEPARATOR.join(templates[combo_index[start:stop]].tolist())
            text = chunk_template % tuple(values[start:stop].ravel().tolist())
            out.write(text if first else _SEPARATOR + text)
            first = False
        out.write("\n]}\n")
    return target
