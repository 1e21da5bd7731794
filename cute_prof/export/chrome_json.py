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
  are small positive numbers unique across the file (Perfetto ignores negative ids, treats
  pid 0 as the kernel's swapper and keys threads by tid as Linux does); the thread name
  shows the kernel's tid, and ``thread_sort_index`` orders threads by it.
* Regions of one track that overlap without nesting go to extra threads with the same
  name (the pftrace writer's first-fit lanes, ``regions.nesting_lanes``), so every
  ``(pid, tid)`` nests strictly, as the format requires. Several kernel launches
  (``len(trace.launches) > 1``) are one process each.
* The file is written atomically: a temporary file in the same directory, fsync, then
  ``os.replace``. A failure leaves neither a partial trace nor the temporary file.

Formatting is vectorised, with no per-event Python code: a chunk of events is rendered as
one fixed-width uint8 matrix (one row per event) from digit arrays computed with numpy, and
written straight from that matrix. Numbers shorter than the widest in their chunk are
padded with spaces, which JSON allows between tokens, so the file is somewhat larger than a
minimal one but exports about twice as fast as with ``%``-formatting.

With numba (:mod:`cute_prof.jit`) a compiled writer runs instead (``_write_compiled``,
loops in :mod:`.kernels` and :mod:`.json_kernels`): no copy of the events, lanes per track in one pass, each event's
text formatted straight into a chunk buffer (numbers without padding) that a worker thread
fills while this one writes the previous chunk. The file parses into the same events.

Owns the JSON format (the numpy path and the compiled path's driver; the loops are
:mod:`.kernels` and :mod:`.json_kernels`); it may not import the session, the CLI or the device
code.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .. import jit, layout
from ..errors import ProfileBufferError
from ..files import atomic_open, check_output_path
from ..trace import Event, Trace, kind_name
from . import json_kernels, kernels
from .regions import counter_series, launch_label, nesting_lanes, pair_index

__all__ = ["GROUP_BY_CHOICES", "events_to_perfetto"]

GROUP_BY_CHOICES = ("device", "sm", "rank")
_CHUNK_EVENTS = 32_768
_SEPARATOR = ",\n"


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


_SPACE, _MINUS, _DOT, _ZERO, _ONE = (ord(c) for c in " -.01")
_POWERS_OF_TEN = np.array([10**k for k in range(20)], dtype=np.uint64)


def _perfetto_needs_guard(values: np.ndarray) -> np.ndarray:
    """Which ns values Perfetto would read 1 ns short from ``"%d.%03d"`` µs text.

    Mirrors its parser: whole part and fraction accumulated as doubles, summed, then
    ``(int64)(value * 1000.0)`` (truncation). See the module docstring."""
    magnitude = np.abs(values).view(np.uint64)  # abs(INT64_MIN) wraps; the uint64 view fixes it
    whole, remainder = np.divmod(magnitude, np.uint64(1000))
    as_read = whole.astype(np.float64) + remainder.astype(np.float64) / 1000.0
    return np.trunc(as_read * 1000.0) != magnitude.astype(np.float64)


def _literal(text: str, rows: int) -> np.ndarray:
    return np.broadcast_to(np.frombuffer(text.encode("ascii"), np.uint8), (rows, len(text)))


def _padded_table(texts: list[str]) -> np.ndarray:
    """ASCII strings as a (count, longest) uint8 table, padded with trailing spaces."""
    table = np.full((len(texts), max(map(len, texts))), _SPACE, dtype=np.uint8)
    for row, text in enumerate(texts):
        table[row, : len(text)] = np.frombuffer(text.encode("ascii"), np.uint8)
    return table


def _decimal_block(values: np.ndarray, *, micros: bool = False, guard=None) -> np.ndarray:
    """int64 values as right-aligned decimal text, one row per value: (rows, width) uint8.

    Shorter numbers are padded on the left with spaces, which JSON allows between tokens,
    so a whole chunk of events is one fixed-width byte matrix built with array ops.
    ``micros``: the values are ns, written as µs with three decimals; where ``guard`` is
    set a fourth decimal ``1`` is appended (the Perfetto rounding guard)."""
    rows = values.shape[0]
    negative = values < 0
    whole = np.abs(values).view(np.uint64)
    if micros:
        whole, remainder = np.divmod(whole, np.uint64(1000))
    digits = np.maximum(np.searchsorted(_POWERS_OF_TEN, whole, side="right"), 1)
    most = int(digits.max())
    sign = int(negative.any())
    with_guard = micros and guard is not None and bool(guard.any())
    width = sign + most + ((4 + with_guard) if micros else 0)
    text = np.full((width, rows), _SPACE, dtype=np.uint8)  # one row per character position
    rest = whole.copy()
    ten = np.uint64(10)
    for k in range(most):
        shifted = rest // ten
        digit = (rest - shifted * ten).astype(np.uint8) + np.uint8(_ZERO)
        text[sign + most - 1 - k] = np.where(k < digits, digit, np.uint8(_SPACE))
        rest = shifted
    if sign:
        negative_rows = np.flatnonzero(negative)
        text[sign + most - 1 - digits[negative_rows], negative_rows] = _MINUS
    if micros:
        point = sign + most
        remainder = remainder.astype(np.int64)
        text[point] = _DOT
        text[point + 1] = remainder // 100 + _ZERO
        text[point + 2] = remainder // 10 % 10 + _ZERO
        text[point + 3] = remainder % 10 + _ZERO
        if with_guard:
            text[point + 4] = np.where(guard, np.uint8(_ONE), np.uint8(_SPACE))
    return text.T


def _kind_table(present: np.ndarray) -> np.ndarray:
    """Per kind code: the category and phase fields; only kinds present take up width."""
    texts = [""] * (1 << layout.KIND_BITS)
    for code in present.tolist():
        phase = "i" if code == layout.KIND_INSTANT else "X"
        texts[code] = f',"cat":"{kind_name(code)}","ph":"{phase}"'
    return _padded_table(texts)


_INSTANT_SCOPE = np.frombuffer(b',"s":"t"', np.uint8)  # written where an instant's "dur" would be


def _parents_first(start: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """Order for start-sorted events so that equal starts put longer (enclosing) spans
    first, as JSON importers nest by file order. Only the tied rows are re-sorted."""
    order = np.arange(start.shape[0])
    if start.shape[0] < 2:
        return order
    first_of_run = np.concatenate(([True], start[1:] != start[:-1]))
    run = np.cumsum(first_of_run) - 1
    tied = np.flatnonzero(np.bincount(run)[run] > 1)
    if tied.shape[0]:
        order[tied] = tied[np.lexsort((-dur[tied], run[tied]))]
    return order


def _micros_text(ns: np.ndarray) -> list[str]:
    """ns values as the µs decimals the events use (with the Perfetto rounding guard)."""
    if ns.shape[0] == 0:
        return []
    block = _decimal_block(ns, micros=True, guard=_perfetto_needs_guard(ns))
    return [row.tobytes().decode("ascii").strip() for row in block]


def _flow_events(flows, position, ev, relative_start, json_pid, json_tid) -> list[str]:
    """``s``/``f`` event pairs, one flow per row of ``flows``, at the slices' starts."""
    if flows is None or len(flows) == 0:
        return []
    try:
        src = np.asarray(flows["src"], dtype=np.int64).reshape(-1)
        dst = np.asarray(flows["dst"], dtype=np.int64).reshape(-1)
    except (KeyError, ValueError, TypeError, IndexError) as err:
        raise ProfileBufferError("flows must be a structured array with int64 fields "
                                 "'src' and 'dst' (row indices into trace.events)") from err
    count = position.shape[0]
    for rows in (src, dst):
        if rows.shape[0] and (rows.min() < 0 or rows.max() >= count):
            raise ProfileBufferError(f"flow rows must be in [0, {count}): got "
                                     f"{int(rows.min())}..{int(rows.max())}")
    lines = []
    for phase, rows, binding in (("s", src, ""), ("f", dst, ',"bp":"e"')):
        at = position[rows]
        for k, (ts, pid, tid) in enumerate(zip(_micros_text(relative_start[at]),
                                               json_pid[at].tolist(), json_tid[at].tolist())):
            lines.append(f'{{"name":"flow","cat":"flow","ph":"{phase}","id":{k + 1},'
                         f'"ts":{ts},"pid":{pid},"tid":{tid}{binding}}}')
    return lines


def _counter_events(counters, trace: Trace, origin: int) -> list[str]:
    """One ``C`` event per counter sample, in the first process."""
    lines = []
    for name, ts, value in counter_series(counters, trace):
        quoted = _dumps(name)
        for t, v in zip(_micros_text(ts - origin), value.tolist()):
            lines.append(f'{{"name":{quoted},"ph":"C","ts":{t},"pid":1,'
                         f'"args":{{"value":{_dumps(v)}}}}}')
    return lines


def _nesting_lanes(ev: np.ndarray, track_index: np.ndarray, n_tracks: int) -> np.ndarray:
    """Per row, the overlap lane of its track (0 unless its regions overlap without
    nesting), chosen as the pftrace writer chooses them (:func:`regions.split_overlaps`)."""
    lane = np.zeros(ev.shape[0], np.int64)
    spans = np.flatnonzero(ev["kind"] != layout.KIND_INSTANT)
    if spans.shape[0] < 2:
        return lane
    start = ev["start_ns"][spans].astype(np.int64)
    end = start + np.maximum(ev["dur_ns"][spans].astype(np.int64), 0)
    track = track_index[spans].astype(np.int64)
    lane[spans] = nesting_lanes(track, start, end, n_tracks)
    return lane


def _processes(trace: Trace, ev: np.ndarray, group_by: str, process_name: str | None
               ) -> tuple[np.ndarray | None, list[str]]:
    """JSON process of every row of ``ev`` (None: all in the one process) and the
    processes' names."""
    device = str(trace.metadata.get("device") or "GPU")
    launches = trace.launches if len(trace.launches) > 1 else []
    if launches:  # each kernel launch its own process (per SM too with group_by="sm")
        launch_of_row = np.clip(ev["launch"].astype(np.int64), 0, len(launches) - 1)
    if group_by == "sm" and launches:
        keys, process_index = np.unique((launch_of_row << 16) | (ev["sm"].astype(np.int64)
                                                                 & 0xFFFF), return_inverse=True)
        process_names = [f"{launch_label(launches, k >> 16)} / SM {np.int16(k & 0xFFFF)}"
                         for k in keys.tolist()]
    elif group_by == "sm":
        sm_ids, process_index = np.unique(ev["sm"], return_inverse=True)
        process_names = [f"SM {sm}" for sm in sm_ids.tolist()]
    elif group_by == "rank":  # a gathered multi-GPU trace: one process per rank
        launch_rank = np.array([int(l.get("rank", 0)) for l in trace.launches] or [0])
        rank_of_row = launch_rank[np.minimum(ev["launch"], len(launch_rank) - 1)]
        rank_ids, process_index = np.unique(rank_of_row, return_inverse=True)
        ranks = {r.get("rank"): r for r in
                 (trace.metadata.get("distributed") or {}).get("ranks", [])}
        process_names = [f"rank {r} {ranks.get(r, {}).get('host', '')} GPU "
                         f"{ranks.get(r, {}).get('gpu', '?')}" for r in rank_ids.tolist()]
    elif launches:
        used, process_index = np.unique(launch_of_row, return_inverse=True)
        process_names = [f"{launch_label(launches, i)} ({process_name or device})"
                         for i in used.tolist()]
    else:
        process_index = None
        process_names = [process_name or device]
    if process_index is None:
        return None, process_names
    return process_index.reshape(-1).astype(np.int64), process_names


def _track_header_events(trace: Trace, process_names: list[str], track_process: np.ndarray,
                         track_tids: np.ndarray, lanes_per_track: np.ndarray,
                         first_lane: np.ndarray) -> list[str]:
    """Process and thread naming and sort-order events (``"ph": "M"``)."""
    process_count = len(process_names)
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
    for track, (proc, tid) in enumerate(zip(track_process.tolist(), track_tids.tolist())):
        pid = proc + 1
        name = _dumps(trace.track_name(tid))
        for k in range(int(lanes_per_track[track])):
            jtid = int(first_lane[track]) + k + process_count + 1
            header_events.append(
                f'{{"name":"thread_name","ph":"M","ts":0,"pid":{pid},"tid":{jtid},'
                f'"args":{{"name":{name}}}}}'
            )
            header_events.append(
                f'{{"name":"thread_sort_index","ph":"M","ts":0,"pid":{pid},"tid":{jtid},'
                f'"args":{{"sort_index":{jtid - process_count - 1}}}}}'
            )
    return header_events


def _other_data(trace: Trace, count: int, device: str, origin: int, group_by: str,
                metadata: dict[str, Any] | None) -> dict[str, Any]:
    other = {
        "producer": "cute_prof",
        "capacity": trace.capacity,
        "attempted": trace.attempted,
        "overflow": trace.overflow,
        "incomplete": trace.incomplete,
        "invalid": trace.invalid,
        "invalid_reasons": dict(trace.invalid_reasons or {}),
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
    return other


# --------------------------------------------------------------------------- export
def events_to_perfetto(
    events,
    path,
    *,
    group_by: str = "device",
    process_name: str | None = None,
    metadata: dict[str, Any] | None = None,
    flows: np.ndarray | None = None,
    counters: list[dict[str, Any]] | None = None,
    chunk_progress: Callable[[int, int], None] | None = None,
) -> Path:
    """Write ``events`` (a Trace, or a list of Event) as Chrome Trace Event JSON.

    ``group_by``: ``"device"`` (one process for the GPU), ``"sm"`` (one per SM) or
    ``"rank"`` (one per rank of a :mod:`cute_prof.distributed` trace, from its launches).
    ``process_name`` overrides the GPU process name (default: the trace's device).
    ``metadata`` is added to the file's ``otherData``. ``flows``: a structured array with
    int64 fields ``src`` and ``dst`` (row indices into ``trace.events``): a flow arrow
    (``s``/``f`` events bound to the enclosing slices) from each src to its dst.
    ``counters``: dicts ``{"name", "ts" (int64 ns), "value" (float64), optional "tid"}``,
    written as ``C`` events. With several kernel launches each launch is its own process.
    ``chunk_progress``: called with ``(events written, events in all)`` after each chunk.
    Returns the path written.

    With numba (:mod:`cute_prof.jit`) the events are formatted in a compiled loop into a
    byte buffer streamed to the file (numbers without padding); without it, by numpy
    byte matrices. Both files parse into the same events.
    """
    target = check_output_path(path)
    if group_by not in GROUP_BY_CHOICES:
        raise ProfileBufferError(f"group_by must be one of {GROUP_BY_CHOICES}, got {group_by!r}")
    trace = _as_trace(events)
    if jit.enabled() and trace.events.shape[0]:
        written = _write_compiled(trace, target, group_by, process_name, metadata, flows,
                                  counters, chunk_progress or (lambda done, total: None))
        if written is not None:
            return written
    ev = trace.events
    count = ev.shape[0]
    # Parents before children: order by start, then longer first for equal starts.
    start = ev["start_ns"]
    row_of = np.arange(count)  # original row of each written event
    if count and not (start[1:] >= start[:-1]).all():
        row_of = np.argsort(start, kind="stable")
        start = ev["start_ns"][row_of]
    row_of = row_of[_parents_first(start, ev["dur_ns"][row_of])]
    ev = ev[row_of]

    # ------------------------------------------------------------ tracks
    process_index, process_names = _processes(trace, ev, group_by, process_name)
    if process_index is None:
        process_index = np.zeros(count, dtype=np.int64)
    device = str(trace.metadata.get("device") or "GPU")
    process_index = process_index.reshape(-1).astype(np.int64)
    # One track per (process, tid); offsetting tid by 2**31 keeps signed order in the key.
    track_key = (process_index << 32) | (ev["tid"].astype(np.int64) + (1 << 31))
    track_keys, track_index = np.unique(track_key, return_inverse=True)
    track_index = track_index.reshape(-1)
    # Overlapping regions of one track move to extra lanes (threads), as in the pftrace.
    lane = _nesting_lanes(ev, track_index, track_keys.shape[0])
    lanes_per_track = np.ones(track_keys.shape[0], np.int64)
    np.maximum.at(lanes_per_track, track_index, lane + 1)
    first_lane = np.r_[0, np.cumsum(lanes_per_track)[:-1]].astype(np.int64)
    process_count = len(process_names)
    json_pid = process_index + 1  # pids 1..P; tids P+1.. so no id is reused anywhere
    json_tid = first_lane[track_index] + lane + process_count + 1

    header_events = _track_header_events(trace, process_names, track_keys >> 32,
                                         (track_keys & 0xFFFFFFFF) - (1 << 31),
                                         lanes_per_track, first_lane)

    # ------------------------------------------------------------ columns
    origin = int(ev["start_ns"].min()) if count else 0
    relative_start = ev["start_ns"] - origin
    ts_guard = _perfetto_needs_guard(relative_start)
    position = np.empty(count, np.int64)
    position[row_of] = np.arange(count)
    header_events += _flow_events(flows, position, ev, relative_start, json_pid, json_tid)
    header_events += _counter_events(counters, trace, origin)
    dur_guard = _perfetto_needs_guard(ev["dur_ns"])
    name_index, names = trace.name_table(ev["tag"])
    name_table = _padded_table([_dumps(name) for name in names] or ['""'])
    kind_table = _kind_table(np.unique(ev["kind"]))
    is_instant = ev["kind"] == layout.KIND_INSTANT
    is_clock = ev["kind"] == layout.KIND_CLOCK_SPAN
    with_cycles = bool(is_clock.any())

    other = _other_data(trace, count, device, origin, group_by, metadata)

    with atomic_open(target, "wb") as out:
        out.write(f'{{"displayTimeUnit":"ns","otherData":{_dumps(other)},"traceEvents":[\n'.encode())
        out.write(_SEPARATOR.join(header_events).encode())
        if count and header_events:
            out.write(_SEPARATOR.encode())
        for start in range(0, count, _CHUNK_EVENTS):
            rows = slice(start, min(start + _CHUNK_EVENTS, count))
            n = rows.stop - rows.start
            dur = np.concatenate(
                [_literal(',"dur":', n), _decimal_block(ev["dur_ns"][rows], micros=True, guard=dur_guard[rows])],
                axis=1,
            )
            instants = np.flatnonzero(is_instant[rows])
            if instants.shape[0]:  # instants have no duration: a thread scope instead
                dur[instants] = _SPACE
                dur[instants, : _INSTANT_SCOPE.shape[0]] = _INSTANT_SCOPE
            blocks = [
                _literal('{"name":', n),
                name_table[name_index[rows]],
                kind_table[ev["kind"][rows]],
                _literal(',"ts":', n),
                _decimal_block(relative_start[rows], micros=True, guard=ts_guard[rows]),
                dur,
                _literal(',"pid":', n),
                _decimal_block(json_pid[rows]),
                _literal(',"tid":', n),
                _decimal_block(json_tid[rows]),
                _literal(',"args":{"start_ns":', n),
                _decimal_block(ev["start_ns"][rows]),
                _literal(',"dur_ns":', n),
                _decimal_block(ev["dur_ns"][rows]),
                _literal(',"tid":', n),
                _decimal_block(ev["tid"][rows].astype(np.int64)),
                _literal(',"payload":', n),
                _decimal_block(ev["payload"][rows].astype(np.int64)),
                _literal(',"sm":', n),
                _decimal_block(ev["sm"][rows].astype(np.int64)),
                _literal(',"warp":', n),
                _decimal_block(ev["warp"][rows].astype(np.int64)),
            ]
            if with_cycles:
                cycles = np.concatenate(
                    [_literal(',"dur_cycles":', n), _decimal_block(ev["dur_cycles"][rows])], axis=1
                )
                cycles[~is_clock[rows]] = _SPACE
                blocks.append(cycles)
            blocks.append(_literal("}},\n", n))
            text = np.concatenate(blocks, axis=1)
            if rows.stop == count:
                text[-1, -2] = _SPACE  # no comma after the last event
            out.write(text.data)
        out.write(b"]}\n")
    return target


_STREAM_CHUNK_BYTES = 1 << 25
def _byte_table(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Texts as one uint8 array and their offsets (text k is ``blob[at[k]:at[k + 1]]``)."""
    encoded = [t.encode("utf-8") for t in texts]
    at = np.zeros(len(encoded) + 1, np.int64)
    at[1:] = np.cumsum([len(b) for b in encoded])
    return np.frombuffer(b"".join(encoded) or b"\0", np.uint8), at


def _write_compiled(trace: Trace, target: Path, group_by: str, process_name, metadata, flows,
                    counters, advance) -> Path | None:
    """The compiled writer: no copy of the events, lanes and text in compiled loops. None
    (the numpy writer runs) when tag ids spread too wide for a lookup table."""
    ev = trace.events
    count = ev.shape[0]
    start, dur, kind, tag = ev["start_ns"], ev["dur_ns"], ev["kind"], ev["tag"]
    tag_min, tag_max = int(tag.min()), int(tag.max())
    if tag_max - tag_min >= (1 << 24):
        return None
    row_of = json_kernels.parents_first_order(start, dur)  # empty: rows are in file order

    process_index, process_names = _processes(trace, ev, group_by, process_name)
    device = str(trace.metadata.get("device") or "GPU")
    track_index = np.empty(0, np.int64)
    if process_index is None:  # one process: ranks by a lookup table over the tids
        track_index, track_tids = kernels.dense_index(ev["tid"], max(4 * count, 1 << 16))
        track_process = np.zeros_like(track_tids)
    if track_index.shape[0] != count:
        track_index, track_process, track_tids = pair_index(process_index,
                                                            ev["tid"].astype(np.int64))
    n_tracks = track_process.shape[0]
    offsets, rows = kernels.count_sort_tracks(track_index, n_tracks)
    lane, lanes_per_track = json_kernels.lanes_by_row(offsets, rows, kind, start, dur,
                                                 layout.KIND_INSTANT)
    del rows
    first_lane = np.cumsum(lanes_per_track) - lanes_per_track
    process_count = len(process_names)
    header_events = _track_header_events(trace, process_names, track_process, track_tids,
                                         lanes_per_track, first_lane)
    origin = int(start.min())
    if flows is not None and len(flows):
        order = row_of if row_of.shape[0] else np.arange(count)
        position = np.empty(count, np.int64)
        position[order] = np.arange(count)
        pid_of_row = (process_index + 1 if process_index is not None
                      else np.ones(count, np.int64))
        tid_of_row = first_lane[track_index] + lane + process_count + 1
        header_events += _flow_events(flows, position, ev, (start - origin)[order],
                                      pid_of_row[order], tid_of_row[order])
    header_events += _counter_events(counters, trace, origin)

    present = kernels.used_values(tag, tag_min, tag_max - tag_min + 1)
    used_tags = np.flatnonzero(present) + tag_min
    names, name_at = _byte_table([_dumps(trace.tag_name(t)) for t in used_tags.tolist()])
    name_of_tag = (np.cumsum(present) - 1).astype(np.int64)
    kinds_present = kernels.used_values(kind, 0, 1 << layout.KIND_BITS)
    kind_texts = [""] * (1 << layout.KIND_BITS)
    for code in np.flatnonzero(kinds_present).tolist():
        phase = "i" if code == layout.KIND_INSTANT else "X"
        kind_texts[code] = f',"cat":"{kind_name(code)}","ph":"{phase}"'
    kinds, kind_at = _byte_table(kind_texts)
    with_cycles = bool(kinds_present[layout.KIND_CLOCK_SPAN])
    bound = 512 + int(np.diff(name_at).max()) + int(np.diff(kind_at).max())
    pid = (process_index + 1) if process_index is not None else np.zeros(0, np.int64)
    other = _other_data(trace, count, device, origin, group_by, metadata)

    tid, payload, sm, warp, cycles = (ev[name] for name in ("tid", "payload", "sm", "warp",
                                                            "dur_cycles"))

    per_chunk = max(_STREAM_CHUNK_BYTES // bound, 1)
    chunks = [(lo, min(lo + per_chunk, count)) for lo in range(0, count, per_chunk)]

    def step(buffer: np.ndarray, lo: int, hi: int) -> int:
        return json_kernels.encode_json_events(
            buffer, lo, hi, count, row_of, start, dur, tag, tid, payload, kind, sm, warp,
            cycles, origin, name_of_tag, tag_min, names, name_at, kinds, kind_at,
            layout.KIND_SPAN, layout.KIND_INSTANT, layout.KIND_CLOCK_SPAN, with_cycles, pid,
            track_index, lane, first_lane, process_count + 1)

    with atomic_open(target, "wb") as out:
        out.write(f'{{"displayTimeUnit":"ns","otherData":{_dumps(other)},"traceEvents":[\n'.encode())
        out.write(_SEPARATOR.join(header_events).encode())
        if header_events:
            out.write(_SEPARATOR.encode())
        kernels.stream_chunks(out, step, chunks, per_chunk * bound,
                              lambda done: advance(done, count))
        out.write(b"]}\n")
    return target
