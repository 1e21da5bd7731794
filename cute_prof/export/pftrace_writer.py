"""Native Perfetto export (writer): a ``.pftrace`` protobuf trace built with the official protos that
ship in the ``perfetto`` pip package (``perfetto_trace_pb2``).

Why not only Chrome JSON: the protobuf format keeps nanosecond timestamps exactly, is about
five times smaller, loads much faster in ui.perfetto.dev, and interns slice names.

Layout of the file:

* One root track ("cute_prof ..."), whose description and one "trace info" instant carry
  the loss counts, the device, the tag table and the rest of the metadata as debug
  annotations.
* Under it, optional group tracks (one per SM for ``group_by="sm"``, one per tid for
  ``group_by="warp"``), and under those one track per tid (or warp). Tracks are named
  tracks with explicit numeric ordering, so "tid 2" sorts before "tid 10".
* Regions become ``TYPE_SLICE_BEGIN`` / ``TYPE_SLICE_END`` pairs, instants
  ``TYPE_INSTANT``; timestamps are the original nanoseconds. A nonzero payload is attached
  to the event as the debug annotation ``payload``.
* Perfetto needs the slices of one track to nest strictly. Regions on one tid that overlap
  without nesting (asynchronous work recorded with the same tid) are moved to extra tracks
  with the same name under the tid's track, which the UI draws merged with it.
* Every track is its own packet sequence: the sequence's first packet clears incremental
  state, interns the event names used on that track and sets the track as the default for
  all its events, so each event packet carries only timestamp, type and name id.

Speed: building protobuf messages in Python costs about a microsecond per packet, and a
region needs two packets. So the events are ordered, checked and split into per-track
sequences with numpy, and the event packets are encoded with numpy too: each distinct
(type, name, payload) combination is serialised once with the official protos as a
template, and the per-packet timestamp and sequence varints and the packet framing are
written with array operations (``_encode_events``). The tests parse the output with the
official protos and compare it with the slices the earlier protobuf-per-packet writer
produced.

With numba (:mod:`cute_prof.jit`) a compiled writer runs instead (``_write_compiled``,
loops in :mod:`.kernels` and :mod:`.pftrace_kernels`): one counting-sort pass groups the
records by track, first-fit lanes and the event packets are computed track by track, and
the packets are streamed to the file in chunks, so no global sort and no per-operation arrays are needed. It writes
the same bytes as the numpy writer (``tests/test_export_compiled.py``).

Owns the ``.pftrace`` format (the numpy path and the compiled path's driver; the loops are
:mod:`.kernels` and :mod:`.pftrace_kernels`); it may not import the session, the CLI or the
device code.
"""


from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .. import jit, layout
from ..errors import ProfileBufferError
from ..files import atomic_write
from ..trace import Trace
from . import kernels, pftrace_kernels
from .regions import (
    SPAN_KINDS,
    RegionOps,
    counter_series,
    launch_label,
    build_region_ops,
    misnested_spans,
    pair_index,
    retrack,
    split_overlaps,
)

__all__ = ["write_pftrace", "GROUP_BY", "TRACE_INFO_EVENT", "PAYLOAD_ANNOTATION", "ROOT_TRACK_UUID"]

GROUP_BY = ("tid", "device", "sm", "warp")  # "device" is the JSON exporter's name for "tid"
TRACE_INFO_EVENT = "cute_prof trace info"
PAYLOAD_ANNOTATION = "payload"
PAYLOAD_ANNOTATION_IID = 1
ROOT_TRACK_UUID = 1
_GROUP_UUID_BASE = 1 << 32
_COUNTER_UUID_BASE = 3 << 32
_TRACK_UUID_BASE = 2 << 32
_ROOT_SEQUENCE = 1
_FIRST_TRACK_SEQUENCE = 2


def load_protos():
    """The official Perfetto trace protos (perfetto_trace_pb2)."""
    try:
        from perfetto.protos.perfetto.trace import perfetto_trace_pb2
    except ImportError as err:  # pragma: no cover - perfetto is a dependency
        raise ProfileBufferError(
            "writing .pftrace needs the 'perfetto' package (pip install perfetto); "
            "or export Chrome JSON with a .json path instead"
        ) from err
    return perfetto_trace_pb2


# --------------------------------------------------------------------------------------
# track layout


@dataclass
class _Tracks:
    """Naming and nesting of the final tracks (one per tid/warp, plus overlap lanes)."""

    names: list[str]  # per final track
    parent: np.ndarray  # per final track: index into group_names, -1 when there are no groups
    lane_of: np.ndarray  # per final track: 0 for the main track, k for overlap lane k
    base_of: np.ndarray  # per final track: index of its lane-0 track
    group_names: list[str]
    rank: np.ndarray  # per final track: sort rank among its siblings


def _group_and_leaf(
    trace: Trace, rows: np.ndarray, group_by: str
) -> tuple[np.ndarray | None, np.ndarray, Callable[[int], str], Callable[[int], str]]:
    """Group key (None: no group level) and leaf key of the selected rows, and how to name
    each. With several kernel launches the launch is part of the group: each launch is
    its own track group, named from ``trace.launches``."""
    events = trace.events

    def column(name: str) -> np.ndarray:
        return events[name][rows].astype(np.int64)

    def tid_name(tid: int) -> str:
        return trace.track_name(tid)

    if group_by not in GROUP_BY:
        raise ProfileBufferError(f"group_by must be one of {GROUP_BY}, got {group_by!r}")
    launches = trace.launches if len(trace.launches) > 1 else []
    launch = np.clip(column("launch"), 0, max(len(launches) - 1, 0)) if launches else None
    if group_by in ("tid", "device"):
        if launch is None:
            return None, column("tid"), str, tid_name
        return launch, column("tid"), lambda g: launch_label(launches, g), tid_name
    if group_by == "sm":
        if launch is None:
            return column("sm"), column("tid"), lambda g: f"SM {g}", tid_name
        return ((launch << 16) | (column("sm") & 0xFFFF), column("tid"),
                lambda g: f"{launch_label(launches, g >> 16)} / SM {np.int16(g & 0xFFFF)}",
                tid_name)
    warp_name = lambda w: f"warp {w}"
    if launch is None:
        return column("tid"), column("warp"), tid_name, warp_name
    return ((launch << 32) | (column("tid") + (1 << 31)), column("warp"),
            lambda g: f"{launch_label(launches, g >> 32)} / "
                      f"{trace.track_name((g & 0xFFFFFFFF) - (1 << 31))}",
            warp_name)


# --------------------------------------------------------------------------------------
# serialisation


def _sequence_headers(pb, trace, ops: RegionOps, lo: int, hi: int, track_uuid: np.ndarray,
                      names: list[str]) -> None:
    """Append the first packet of every track sequence in ``ops[lo:hi]`` to ``trace``:
    it clears incremental state, interns the names used on the track and makes the track
    the default for the sequence's events."""
    track, iid, payload = ops.track[lo:hi], ops.iid[lo:hi], ops.payload[lo:hi]
    if track.shape[0] == 0:
        return
    used = iid > 0
    n_names = len(names) + 1
    pairs = np.unique(track[used] * n_names + iid[used])
    track_ids, first_op = np.unique(track, return_index=True)
    with_payload = np.zeros(int(track_ids.max()) + 1, bool)
    with_payload[track[payload != 0]] = True
    sequence_header_packets(pb, trace, track_ids, ops.ts[lo:hi][first_op], pairs // n_names,
                            pairs % n_names, with_payload[track_ids], track_uuid, names)


def sequence_header_packets(pb, trace, track_ids: np.ndarray, first_ts: np.ndarray,
                            pair_track: np.ndarray, pair_iid: np.ndarray,
                            with_payload: np.ndarray, track_uuid: np.ndarray,
                            names: list[str]) -> None:
    """The first packet of each track's sequence (``track_ids`` ascending, ``first_ts`` its
    first event's time; ``(pair_track, pair_iid)`` the names it uses, sorted)."""
    bounds = np.r_[np.searchsorted(pair_track, track_ids), pair_track.shape[0]].tolist()
    add = trace.packet.add
    flags = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
    for i, (track_id, ts, payload) in enumerate(zip(track_ids.tolist(), first_ts.tolist(),
                                                    with_payload.tolist())):
        packet = add()
        packet.timestamp = ts
        packet.trusted_packet_sequence_id = _FIRST_TRACK_SEQUENCE + track_id
        packet.sequence_flags = flags
        packet.first_packet_on_sequence = True
        packet.trace_packet_defaults.track_event_defaults.track_uuid = int(track_uuid[track_id])
        interned = packet.interned_data
        for name_iid in pair_iid[bounds[i]:bounds[i + 1]].tolist():
            entry = interned.event_names.add()
            entry.iid = name_iid
            entry.name = names[name_iid - 1]
        if payload:
            entry = interned.debug_annotation_names.add()
            entry.iid = PAYLOAD_ANNOTATION_IID
            entry.name = PAYLOAD_ANNOTATION


def _event_template(pb, kind: int, iid: int, payload: int) -> bytes:
    """The fields an event packet shares with every other packet of the same type, name
    and payload, serialised once with the official protos."""
    packet = pb.TracePacket()
    event = packet.track_event
    event.type = kind
    if iid:
        event.name_iid = iid
        packet.sequence_flags = pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
        if payload:
            annotation = event.debug_annotations.add()
            annotation.name_iid = PAYLOAD_ANNOTATION_IID
            annotation.int_value = payload
    return packet.SerializeToString()


def _varint_lengths(values: np.ndarray) -> np.ndarray:
    """Bytes of each uint64 value as a protobuf varint (1..10)."""
    lengths = np.ones(values.shape[0], np.int64)
    for k in range(1, 10):
        lengths += values >= np.uint64(1 << (7 * k))
    return lengths


def _put_varints(out: np.ndarray, at: np.ndarray, values: np.ndarray, lengths: np.ndarray) -> None:
    """Write ``values`` as varints into ``out`` at byte offsets ``at`` (all vectorised:
    one pass per byte position, over the values that are that long)."""
    rest = values.copy()
    for k in range(int(lengths.max()) if lengths.shape[0] else 0):
        live = np.flatnonzero(lengths > k)
        if live.shape[0] == 0:
            break
        byte = (rest[live] & np.uint64(0x7F)).astype(np.uint8)
        byte |= np.where(lengths[live] > k + 1, np.uint8(0x80), np.uint8(0))
        out[at[live] + k] = byte
        rest >>= np.uint64(7)


_PACKET_FIELD = 0x0A  # Trace.packet, field 1, length-delimited
_TIMESTAMP_FIELD = 0x40  # TracePacket.timestamp, field 8, varint
_SEQUENCE_FIELD = 0x50  # TracePacket.trusted_packet_sequence_id, field 10, varint
_ENCODE_CHUNK = 1 << 20


def _encode_events(pb, ts: np.ndarray, types: np.ndarray, iids: np.ndarray,
                   payloads: np.ndarray, sequences: np.ndarray,
                   overrides: dict[int, bytes] | None = None) -> bytes:
    """Event packets framed as ``Trace.packet`` entries, encoded with numpy.

    A packet is ``timestamp``, ``trusted_packet_sequence_id`` and the fields it shares
    with every packet of the same type, name and payload: those are serialised once per
    distinct combination with the official protos (a template), so only two varints and
    the framing are computed here. Parsers accept fields in any order, so the bytes parse
    into exactly the message the protobuf library would build. ``overrides``: op index ->
    its own template (events that start or end flows)."""
    n = ts.shape[0]
    if n == 0:
        return b""
    key = ((types.astype(np.int64) << 50) | (iids.astype(np.int64) << 32)
           | (payloads.astype(np.int64) & 0xFFFFFFFF))
    combos, combo_of = np.unique(key, return_inverse=True)
    combo_of = combo_of.reshape(-1)
    templates = []
    for combo in combos.tolist():
        payload = combo & 0xFFFFFFFF
        payload -= (1 << 32) if payload >= (1 << 31) else 0  # back to a signed int32
        templates.append(_event_template(pb, combo >> 50, (combo >> 32) & 0x3FFFF, payload))
    for op, template in (overrides or {}).items():
        combo_of[op] = len(templates)
        templates.append(template)
    template_length = np.array([len(t) for t in templates], np.int64)
    table = np.zeros((len(templates), int(template_length.max())), np.uint8)
    for row, template in enumerate(templates):
        table[row, : len(template)] = np.frombuffer(template, np.uint8)

    ts = ts.astype(np.uint64)
    sequences = sequences.astype(np.uint64)
    ts_length = _varint_lengths(ts)
    sequence_length = _varint_lengths(sequences)
    body = 2 + ts_length + sequence_length + template_length[combo_of]
    body_length = _varint_lengths(body.astype(np.uint64))
    size = 1 + body_length + body
    start = np.r_[0, np.cumsum(size)[:-1]]
    out = np.empty(int(size.sum()), np.uint8)
    out[start] = _PACKET_FIELD
    _put_varints(out, start + 1, body.astype(np.uint64), body_length)
    at = start + 1 + body_length
    out[at] = _TIMESTAMP_FIELD
    _put_varints(out, at + 1, ts, ts_length)
    at += 1 + ts_length
    out[at] = _SEQUENCE_FIELD
    _put_varints(out, at + 1, sequences, sequence_length)
    at += 1 + sequence_length
    length = template_length[combo_of]
    for k in range(table.shape[1]):
        live = np.flatnonzero(length > k)
        out[at[live] + k] = table[combo_of[live], k]
    return out.tobytes()


def _serialize_events(pb, ops: RegionOps, lo: int, hi: int,
                      flow_templates: dict[int, bytes] | None = None) -> bytes:
    """Event packets of ``ops[lo:hi]``."""
    overrides = {op - lo: t for op, t in (flow_templates or {}).items() if lo <= op < hi}
    return _encode_events(pb, ops.ts[lo:hi], ops.type[lo:hi], ops.iid[lo:hi],
                          ops.payload[lo:hi], ops.track[lo:hi] + _FIRST_TRACK_SEQUENCE,
                          overrides)


def _flow_templates(pb, ops: RegionOps, span_of_row: np.ndarray, flows) -> dict[int, bytes]:
    """Per begin op that starts or ends a flow, its template with ``flow_ids`` /
    ``terminating_flow_ids`` (flow k has id k + 1)."""
    if flows is None or len(flows) == 0:
        return {}
    src, dst = _flow_rows(flows, span_of_row.shape[0])
    begin_op = np.empty(int(ops.span.max()) + 1 if ops.span.shape[0] else 0, np.int64)
    is_begin = ops.type == 1
    begin_op[ops.span[is_begin]] = np.flatnonzero(is_begin)
    for name, rows in (("source", src), ("destination", dst)):
        if (span_of_row[rows] < 0).any():
            bad = int(rows[span_of_row[rows] < 0][0])
            raise ProfileBufferError(f"flow {name} row {bad} is not a region (span); flows "
                                     "connect regions")
    outgoing: dict[int, list[int]] = {}
    incoming: dict[int, list[int]] = {}
    for k, (a, b) in enumerate(zip(begin_op[span_of_row[src]].tolist(),
                                   begin_op[span_of_row[dst]].tolist())):
        outgoing.setdefault(a, []).append(k + 1)
        incoming.setdefault(b, []).append(k + 1)
    templates = {}
    for op in set(outgoing) | set(incoming):
        packet = pb.TracePacket()
        packet.MergeFromString(_event_template(pb, int(ops.type[op]), int(ops.iid[op]),
                                               int(ops.payload[op])))
        packet.track_event.flow_ids.extend(outgoing.get(op, []))
        packet.track_event.terminating_flow_ids.extend(incoming.get(op, []))
        templates[op] = packet.SerializeToString()
    return templates


def _flow_rows(flows, n_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """``flows``' src and dst columns as int64 row indices, checked."""
    try:
        src = np.asarray(flows["src"], dtype=np.int64).reshape(-1)
        dst = np.asarray(flows["dst"], dtype=np.int64).reshape(-1)
    except (KeyError, ValueError, TypeError, IndexError) as err:
        raise ProfileBufferError("flows must be a structured array with int64 fields "
                                 "'src' and 'dst' (row indices into trace.events)") from err
    for rows in (src, dst):
        if rows.shape[0] and (rows.min() < 0 or rows.max() >= n_rows):
            raise ProfileBufferError(f"flow rows must be in [0, {n_rows}): got "
                                     f"{int(rows.min())}..{int(rows.max())}")
    return src, dst


def _counter_descriptor(pb, index: int, name: str, first_ts: int):
    """The descriptor packet of counter track ``index`` (under the root track)."""
    packet = pb.TracePacket()
    packet.timestamp = first_ts
    packet.trusted_packet_sequence_id = _ROOT_SEQUENCE
    packet.track_descriptor.uuid = _COUNTER_UUID_BASE + index
    packet.track_descriptor.name = name
    packet.track_descriptor.parent_uuid = ROOT_TRACK_UUID
    packet.track_descriptor.counter.SetInParent()
    return packet


def _counter_packets(pb, counters, first_ts: int, offset: int, trace: Trace) -> list:
    """A counter track per entry of ``counters`` under the root, with its samples."""
    packets = []
    for index, (name, ts, value) in enumerate(counter_series(counters, trace)):
        uuid = _COUNTER_UUID_BASE + index
        packet = _counter_descriptor(pb, index, name, first_ts)
        packets.append(packet)
        for t, v in zip((ts + offset).tolist(), value.tolist()):
            packet = pb.TracePacket()
            packet.timestamp = max(t, 0)
            packet.trusted_packet_sequence_id = _ROOT_SEQUENCE
            packet.track_event.type = pb.TrackEvent.TYPE_COUNTER
            packet.track_event.track_uuid = uuid
            packet.track_event.double_counter_value = v
            packets.append(packet)
    return packets


def _annotation(pb, name: str, value: Any):
    annotation = pb.DebugAnnotation()
    annotation.name = name
    if isinstance(value, bool):
        annotation.bool_value = value
    elif isinstance(value, (int, np.integer)) and -(1 << 63) <= int(value) < (1 << 63):
        annotation.int_value = int(value)
    elif isinstance(value, (float, np.floating)):
        annotation.double_value = float(value)
    elif isinstance(value, str):
        annotation.string_value = value
    else:
        annotation.string_value = json.dumps(value, default=str)
    return annotation


def _trace_info(trace: Trace, group_by: str, offset_ns: int) -> dict[str, Any]:
    info: dict[str, Any] = {
        "records": int(trace.events.shape[0]),
        "capacity": int(trace.capacity),
        "attempted": int(trace.attempted),
        "overflow": int(trace.overflow),
        "incomplete": int(trace.incomplete),
        "invalid": int(getattr(trace, "invalid", 0) or 0),
        "group_by": group_by,
        "tag_names": json.dumps(list(trace.tag_names or ())),
        "timestamp_offset_ns": int(offset_ns),
    }
    metadata = dict(trace.metadata or {})
    info["metadata"] = json.dumps(metadata, default=str)
    for key, value in metadata.items():
        if isinstance(value, (str, int, float, bool, np.integer, np.floating)) and key not in info:
            info[key] = value
    return info


def _descriptor_packets(
    pb, tracks: _Tracks, track_uuid: np.ndarray, group_by: str,
    info: dict[str, Any], first_ts: int,
) -> list:
    packets = []

    def descriptor(uuid: int, name: str, *, parent: int | None = None, rank: int | None = None,
                   explicit_children: bool = False, description: str | None = None):
        packet = pb.TracePacket()
        packet.timestamp = first_ts
        packet.trusted_packet_sequence_id = _ROOT_SEQUENCE
        desc = packet.track_descriptor
        desc.uuid = uuid
        desc.name = name
        if parent is not None:
            desc.parent_uuid = parent
        if rank is not None:
            desc.sibling_order_rank = int(rank)
        if explicit_children:
            desc.child_ordering = pb.TrackDescriptor.EXPLICIT
        if description:
            desc.description = description
        packets.append(packet)

    device = info.get("device") or info.get("device_name") or ""
    root_name = "cute_prof" + (f" ({device})" if device else "")
    description = (
        f"{info['records']:,} records, capacity {info['capacity']:,}, attempted "
        f"{info['attempted']:,}, overflow {info['overflow']:,}, incomplete "
        f"{info['incomplete']:,}; tracks grouped by {group_by}"
    )
    descriptor(ROOT_TRACK_UUID, root_name, explicit_children=True, description=description)
    for index, name in enumerate(tracks.group_names):
        descriptor(_GROUP_UUID_BASE + index, name, parent=ROOT_TRACK_UUID, rank=index,
                   explicit_children=True)
    for track, name in enumerate(tracks.names):
        lane = int(tracks.lane_of[track])
        if lane:
            parent = int(track_uuid[tracks.base_of[track]])
        elif tracks.parent[track] >= 0:
            parent = _GROUP_UUID_BASE + int(tracks.parent[track])
        else:
            parent = ROOT_TRACK_UUID
        descriptor(int(track_uuid[track]), name, parent=parent, rank=int(tracks.rank[track]),
                   explicit_children=not lane)

    # The metadata, clickable in the UI: one instant on the root track.
    packet = pb.TracePacket()
    packet.timestamp = first_ts
    packet.trusted_packet_sequence_id = _ROOT_SEQUENCE
    event = packet.track_event
    event.type = pb.TrackEvent.TYPE_INSTANT
    event.track_uuid = ROOT_TRACK_UUID
    event.name = TRACE_INFO_EVENT
    for key, value in info.items():
        event.debug_annotations.append(_annotation(pb, str(key), value))
    packets.append(packet)
    return packets


def write_pftrace(
    trace: Trace,
    path: str | os.PathLike,
    *,
    group_by: str = "tid",
    payloads: bool = True,
    workers: int | None = None,
    progress: Callable[[str], None] | None = None,
    flows: np.ndarray | None = None,
    counters: list[dict[str, Any]] | None = None,
    chunk_progress: Callable[[int, int], None] | None = None,
) -> Path:
    """Write ``trace`` as a native Perfetto protobuf trace (open it in ui.perfetto.dev).

    ``group_by``: ``"tid"`` (alias ``"device"``, one flat list of tid tracks, as the JSON
    exporter's default), ``"sm"`` (a group per SM, a track per tid on it) or ``"warp"``
    (a group per tid, a track per warp). ``payloads``: attach nonzero payloads as the
    ``payload`` arg (False: a smaller file, written as fast). ``workers`` is accepted for
    callers of the earlier multi-process writer and has no effect.
    ``progress``: called with a line per stage; ``chunk_progress``: called with
    ``(records written, records in all)`` after each chunk written (a progress bar).
    ``flows``: a structured array with int64
    fields ``src`` and ``dst`` (row indices into ``trace.events``, both regions): a flow
    arrow from each src slice to its dst slice. ``counters``: dicts ``{"name", "ts" (int64
    ns), "value" (float64), optional "tid"}``, each drawn as a counter track. The file is
    written atomically. Returns the path.

    With numba (:mod:`cute_prof.jit`) the events are ordered, given lanes and encoded
    track by track in compiled loops and streamed in chunks; without it, by the numpy
    path. Both write the same slices on the same tracks.
    """
    if group_by not in GROUP_BY:
        raise ProfileBufferError(f"group_by must be one of {GROUP_BY}, got {group_by!r}")
    pb = load_protos()
    say = progress or (lambda message: None)
    advance = chunk_progress or (lambda done, total: None)
    if jit.enabled():
        written = _write_compiled(pb, trace, Path(path), group_by, payloads, say, advance,
                                  flows, counters)
        if written is not None:
            return written
    return _write_numpy(pb, trace, Path(path), group_by, payloads, say, advance, flows,
                        counters)


def _track_layout(grouped: bool, pair_group: np.ndarray, pair_leaf: np.ndarray,
                  group_namer, leaf_namer, lanes_per_pair: np.ndarray | None) -> _Tracks:
    """Final tracks: each (group, leaf) pair's track followed by its extra lanes."""
    n_pairs = pair_group.shape[0]
    if lanes_per_pair is None:
        lanes_per_pair = np.ones(n_pairs, np.int64)
    first_lane_track = np.cumsum(lanes_per_pair) - lanes_per_pair
    n_tracks = int(lanes_per_pair.sum())
    base_of = np.repeat(first_lane_track, lanes_per_pair)
    pair_of_track = np.repeat(np.arange(n_pairs), lanes_per_pair)
    lane_of = np.arange(n_tracks) - base_of
    if not grouped:
        group_names: list[str] = []
        parent = np.full(n_tracks, -1, np.int64)
        rank = pair_of_track.copy()
    else:
        group_values, group_index = np.unique(pair_group, return_inverse=True)
        group_index = group_index.reshape(-1)
        group_names = [group_namer(g) for g in group_values.tolist()]
        parent = group_index[pair_of_track]
        first_pair_of_group = np.searchsorted(group_index, np.arange(group_values.shape[0]))
        rank = pair_of_track - first_pair_of_group[parent]
    rank = np.where(lane_of > 0, lane_of, rank)
    leaf_names = [leaf_namer(v) for v in pair_leaf.tolist()]
    return _Tracks(
        names=[leaf_names[p] for p in pair_of_track.tolist()],
        parent=parent,
        lane_of=lane_of,
        base_of=base_of,
        group_names=group_names,
        rank=rank,
    )


def _write_numpy(pb, trace, path, group_by, payloads, say, advance, flows, counters) -> Path:
    """The numpy writer: every operation ordered with global sorts (the reference)."""
    events = trace.events
    kind = events["kind"]
    span_rows = np.flatnonzero((kind == SPAN_KINDS[0]) | (kind == SPAN_KINDS[1]))
    instant_rows = np.flatnonzero(kind == layout.KIND_INSTANT)
    rows = np.concatenate([span_rows, instant_rows])
    n_spans = span_rows.shape[0]

    def column(name: str) -> tuple[np.ndarray, np.ndarray]:
        values = events[name][rows].astype(np.int64)
        return values[:n_spans], values[n_spans:]

    start, instant_ts = column("start_ns")
    dur, _ = column("dur_ns")
    span_tag, instant_tag = column("tag")
    span_payload, instant_payload = column("payload")
    if not payloads:
        span_payload, instant_payload = np.zeros_like(span_payload), np.zeros_like(instant_payload)
    end = start + np.maximum(dur, 0)
    all_times = [a for a in (start, end, instant_ts) if a.shape[0]]
    t_min = min((int(a.min()) for a in all_times), default=0)
    t_max = max((int(a.max()) for a in all_times), default=0)
    offset = -t_min if t_min < 0 else 0  # protobuf timestamps are unsigned
    start, end, instant_ts = start + offset, end + offset, instant_ts + offset
    t0, t_range = t_min + offset, t_max - t_min + 1

    # name ids: index into the distinct tag ids + 1 (iid 0 is reserved)
    tag_ids = np.union1d(span_tag, instant_tag)
    names = [_tag_name(trace, t) for t in tag_ids.tolist()]
    span_iid = np.searchsorted(tag_ids, span_tag) + 1
    instant_iid = np.searchsorted(tag_ids, instant_tag) + 1

    group_all, leaf_all, group_namer, leaf_namer = _group_and_leaf(trace, rows, group_by)
    pair, pair_group, pair_leaf = pair_index(group_all, leaf_all)
    span_track, instant_track = pair[:n_spans], pair[n_spans:]
    n_pairs = pair_group.shape[0]

    def build(span_track_: np.ndarray, instant_track_: np.ndarray, n_tracks_: int) -> RegionOps:
        return build_region_ops(
            span_track_, start, end, span_iid, span_payload,
            instant_track_, instant_ts, instant_iid, instant_payload,
            n_tracks_, t0, t_range,
        )

    say(f"ordering {n_spans:,} regions and {instant_rows.shape[0]:,} instants")
    ops = build(span_track, instant_track, n_pairs)
    bad = misnested_spans(ops, n_spans)
    lanes_per_pair = None
    if bad.shape[0]:
        say(f"{np.unique(span_track[bad]).shape[0]:,} tracks have regions that overlap "
            "without nesting; giving them extra lanes")
        span_track, first_lane_track, lanes_per_pair = split_overlaps(
            span_track, start, end, bad, n_pairs, order=ops.span[ops.type == 1]
        )
        ops = retrack(ops, span_track, first_lane_track)
        if misnested_spans(ops, n_spans).shape[0]:  # pragma: no cover - lanes guarantee it
            raise AssertionError("internal error: lanes still overlap")
    tracks = _track_layout(group_all is not None, pair_group, pair_leaf, group_namer,
                           leaf_namer, lanes_per_pair)
    track_uuid = _TRACK_UUID_BASE + np.arange(len(tracks.names), dtype=np.int64)

    info = _trace_info(trace, group_by, offset)
    first_ts = int(ops.ts[0]) if ops.ts.shape[0] else t0

    header = pb.Trace()
    header.packet.extend(_descriptor_packets(pb, tracks, track_uuid, group_by, info, first_ts))
    n_ops = ops.ts.shape[0]
    _sequence_headers(pb, header, ops, 0, n_ops, track_uuid, names)
    span_of_row = np.full(events.shape[0], -1, np.int64)
    span_of_row[span_rows] = np.arange(n_spans)
    flow_templates = _flow_templates(pb, ops, span_of_row, flows)
    say(f"encoding {n_ops:,} events and writing {path}")
    total = int(rows.shape[0])
    with atomic_write(path) as handle:
        handle.write(header.SerializeToString())
        if jit.enabled():  # the same bytes, encoded in a compiled loop
            _write_counters(pb, handle, counters, first_ts, offset, trace)
        else:
            counter_packets = pb.Trace()
            counter_packets.packet.extend(_counter_packets(pb, counters, first_ts, offset,
                                                           trace))
            handle.write(counter_packets.SerializeToString())
        for lo in range(0, n_ops, _ENCODE_CHUNK):
            hi = min(lo + _ENCODE_CHUNK, n_ops)
            handle.write(_serialize_events(pb, ops, lo, hi, flow_templates))
            advance(min(total, int(total * hi / n_ops)), total)
    return path


_STREAM_CHUNK_BYTES = 1 << 25


def _write_compiled(pb, trace, path, group_by, payloads, say, advance, flows,
                    counters) -> Path | None:
    """The compiled writer (see :mod:`.kernels`); None where it does not apply (no
    events, or tag ids spread too wide for a lookup table), then the numpy path runs."""
    events = trace.events
    kind, start, dur = events["kind"], events["start_ns"], events["dur_ns"]
    tag, payload = events["tag"], events["payload"]
    span_a, span_b = SPAN_KINDS
    instant = layout.KIND_INSTANT
    count, t_min, t_max, tag_min, tag_max = kernels.scan_records(
        kind, start, dur, tag, span_a, span_b, instant)
    if count == 0 or tag_max - tag_min >= (1 << 24):
        return None
    offset = -t_min if t_min < 0 else 0  # protobuf timestamps are unsigned
    present = kernels.tag_presence(kind, tag, span_a, span_b, instant, tag_min,
                                   tag_max - tag_min + 1)
    tag_ids = np.flatnonzero(present) + tag_min
    names = [_tag_name(trace, t) for t in tag_ids.tolist()]
    iid_of_tag = np.cumsum(present).astype(np.int64)  # 1-based name id per tag

    every = count == events.shape[0]
    rows = slice(None) if every else np.flatnonzero(
        (kind == span_a) | (kind == span_b) | (kind == instant))
    say(f"ordering {count:,} records by track")
    pair = None
    if every and group_by in ("tid", "device") and len(trace.launches) <= 1:
        # one track per tid: ranks by a lookup table, straight from the tid column
        pair, pair_leaf = kernels.dense_index(events["tid"], max(4 * count, 1 << 16))
        if pair.shape[0] == count:
            pair_group = np.zeros_like(pair_leaf)
            grouped, group_namer, leaf_namer = False, str, trace.track_name
        else:
            pair = None
    if pair is None:
        group_all, leaf_all, group_namer, leaf_namer = _group_and_leaf(trace, rows, group_by)
        grouped = group_all is not None
        pair, pair_group, pair_leaf = pair_index(group_all, leaf_all)
        del group_all, leaf_all
    n_pairs = pair_group.shape[0]
    if every:
        track_of_row = pair
    else:
        track_of_row = np.full(events.shape[0], -1, np.int64)
        track_of_row[rows] = pair
    del pair
    override_of_row, templates, template_at = _flow_overrides(
        pb, events, flows, iid_of_tag, tag_min, bool(payloads))
    offsets, ts, end, iid, pay, override = kernels.gather_by_track(
        track_of_row, kind, start, dur, tag, payload, span_a, span_b, instant, n_pairs,
        iid_of_tag, tag_min, bool(payloads), override_of_row)
    del track_of_row, override_of_row
    say("placing overlapping regions in lanes")
    lane, lanes_of, first_ts_final, with_payload, pair_track, pair_iid = (
        pftrace_kernels.order_and_lanes(offsets, ts, end, iid, pay, override, len(names)))
    lanes_per_pair = lanes_of if (lanes_of > 1).any() else None
    if lanes_per_pair is not None:
        say(f"{int((lanes_of > 1).sum()):,} tracks have regions that overlap without "
            "nesting; giving them extra lanes")
    tracks = _track_layout(grouped, pair_group, pair_leaf, group_namer, leaf_namer,
                           lanes_per_pair)
    n_tracks = len(tracks.names)
    track_uuid = _TRACK_UUID_BASE + np.arange(n_tracks, dtype=np.int64)
    first_final = np.cumsum(lanes_of) - lanes_of

    info = _trace_info(trace, group_by, offset)
    first_ts = int(first_ts_final[0]) + offset
    header = pb.Trace()
    header.packet.extend(_descriptor_packets(pb, tracks, track_uuid, group_by, info, first_ts))
    sequence_header_packets(pb, header, np.arange(n_tracks), first_ts_final + offset,
                            pair_track, pair_iid, with_payload, track_uuid, names)
    bound = pftrace_kernels.PACKET_BOUND + int(np.diff(template_at).max(initial=0))
    per_key = np.diff(offsets)
    track_bytes = (2 * per_key[0::2] + per_key[1::2]) * bound
    chunk_bytes = max(_STREAM_CHUNK_BYTES, int(track_bytes.max()))
    chunks = kernels.plan_chunks(track_bytes, chunk_bytes)

    def step(buffer: np.ndarray, track_lo: int, track_hi: int) -> int:
        return pftrace_kernels.encode_pftrace_tracks(
            buffer, track_lo, track_hi, offsets, ts, end, iid, pay, override, lane, lanes_of,
            first_final, offset, _FIRST_TRACK_SEQUENCE, templates, template_at)

    say(f"encoding {count:,} records and writing {path}")
    with atomic_write(path) as handle:
        handle.write(header.SerializeToString())
        _write_counters(pb, handle, counters, first_ts, offset, trace)
        kernels.stream_chunks(handle, step, chunks, chunk_bytes,
                              lambda track: advance(int(offsets[2 * track]), count))
    return path


def _flow_overrides(pb, events, flows, iid_of_tag, tag_min, payloads):
    """Per row, the index of its begin packet's template with flow ids (-1: none; an empty
    array without flows), and the templates concatenated with their offsets."""
    none = (np.zeros(0, np.int32), np.zeros(0, np.uint8), np.zeros(1, np.int64))
    if flows is None or len(flows) == 0:
        return none
    src, dst = _flow_rows(flows, events.shape[0])
    kind = events["kind"]
    for name, rows in (("source", src), ("destination", dst)):
        is_span = (kind[rows] == SPAN_KINDS[0]) | (kind[rows] == SPAN_KINDS[1])
        if not is_span.all():
            bad = int(rows[~is_span][0])
            raise ProfileBufferError(f"flow {name} row {bad} is not a region (span); flows "
                                     "connect regions")
    outgoing: dict[int, list[int]] = {}
    incoming: dict[int, list[int]] = {}
    for k, (a, b) in enumerate(zip(src.tolist(), dst.tolist())):
        outgoing.setdefault(a, []).append(k + 1)
        incoming.setdefault(b, []).append(k + 1)
    override_of_row = np.full(events.shape[0], -1, np.int32)
    blobs = []
    for index, row in enumerate(sorted(set(outgoing) | set(incoming))):
        packet = pb.TracePacket()
        payload = int(events["payload"][row]) if payloads else 0
        iid = int(iid_of_tag[int(events["tag"][row]) - tag_min])
        packet.MergeFromString(_event_template(pb, 1, iid, payload))
        packet.track_event.flow_ids.extend(outgoing.get(row, []))
        packet.track_event.terminating_flow_ids.extend(incoming.get(row, []))
        blobs.append(packet.SerializeToString())
        override_of_row[row] = index
    template_at = np.r_[0, np.cumsum([len(b) for b in blobs])].astype(np.int64)
    return override_of_row, np.frombuffer(b"".join(blobs), np.uint8), template_at


def _write_counters(pb, handle, counters, first_ts: int, offset: int, trace: Trace) -> None:
    """Counter tracks (descriptors with the protos, samples with the compiled encoder),
    byte for byte what :func:`_counter_packets` serialises."""
    for index, (name, ts, value) in enumerate(counter_series(counters, trace)):
        uuid = _COUNTER_UUID_BASE + index
        packet = _counter_descriptor(pb, index, name, first_ts)
        wrapper = pb.Trace()
        wrapper.packet.append(packet)
        handle.write(wrapper.SerializeToString())
        if ts.shape[0]:
            out = np.empty(48 * ts.shape[0], np.uint8)
            used = pftrace_kernels.encode_counter_packets(
                out, ts + offset, np.ascontiguousarray(value, np.float64),
                np.full(ts.shape[0], uuid, np.int64), _ROOT_SEQUENCE)
            handle.write(memoryview(out)[:used])


def _tag_name(trace: Trace, tag: int) -> str:
    names = tuple(trace.tag_names or ())
    return names[tag] if 0 <= tag < len(names) and names[tag] else f"<unknown tag {tag}>"

