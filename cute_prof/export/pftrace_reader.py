"""Reading a ``.pftrace`` back into slices and metadata (tests, the CLI).

Owns reading only (writing is :mod:`.pftrace_writer`'s); it may not import the session, the CLI
or the device code.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ProfileBufferError
from .pftrace_writer import (
    PAYLOAD_ANNOTATION,
    ROOT_TRACK_UUID,
    TRACE_INFO_EVENT,
    load_protos,
)

__all__ = ["SLICE_DTYPE", "read_pftrace", "read_pftrace_metadata", "read_pftrace_slices"]

SLICE_DTYPE = np.dtype(
    [
        ("start_ns", np.int64),
        ("dur_ns", np.int64),  # 0 for instants
        ("instant", np.bool_),
        ("payload", np.int64),
        ("track_uuid", np.int64),
        ("name", object),
        ("track", object),  # track name path, e.g. "SM 3/tid 17"
    ]
)


def read_pftrace(path: str | os.PathLike) -> tuple[np.ndarray, dict[str, Any]]:
    """Parse a ``.pftrace`` written by :func:`write_pftrace` (or any TrackEvent trace):
    ``(slices as SLICE_DTYPE sorted by start, trace-info metadata dict)``.

    Resolves interned names and per-sequence default tracks and pairs begin/end per track
    with a stack, like Perfetto's importer. Pure Python: meant for tests and tools."""
    pb = load_protos()
    path = Path(path)
    try:
        data = path.read_bytes()
    except IsADirectoryError:
        raise ProfileBufferError(f"{str(path)!r} is a directory, not a .pftrace file") from None
    trace = pb.Trace()
    try:
        trace.ParseFromString(data)
    except Exception as err:  # google.protobuf.message.DecodeError and friends
        raise ProfileBufferError(
            f"{str(path)!r} is not a Perfetto protobuf trace ({type(err).__name__}: {err})"
        ) from None
    names: dict[int, dict[int, str]] = {}
    annotation_names: dict[int, dict[int, str]] = {}
    defaults: dict[int, int] = {}
    descriptors: dict[int, tuple[str, int]] = {}
    open_slices: dict[int, list[tuple]] = {}
    rows: list[tuple] = []
    info: dict[str, Any] = {}
    for packet in trace.packet:
        sequence = packet.trusted_packet_sequence_id
        if packet.sequence_flags & pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED:
            names[sequence] = {}
            annotation_names[sequence] = {}
            defaults.pop(sequence, None)
        if packet.HasField("trace_packet_defaults"):
            track_defaults = packet.trace_packet_defaults.track_event_defaults
            if track_defaults.HasField("track_uuid"):
                defaults[sequence] = track_defaults.track_uuid
        if packet.HasField("interned_data"):
            for entry in packet.interned_data.event_names:
                names.setdefault(sequence, {})[entry.iid] = entry.name
            for entry in packet.interned_data.debug_annotation_names:
                annotation_names.setdefault(sequence, {})[entry.iid] = entry.name
        if packet.HasField("track_descriptor"):
            desc = packet.track_descriptor
            descriptors[desc.uuid] = (desc.name, desc.parent_uuid)
            continue
        if not packet.HasField("track_event"):
            continue
        event = packet.track_event
        uuid = event.track_uuid if event.HasField("track_uuid") else defaults.get(sequence, 0)
        name = (event.name if event.HasField("name")
                else names.get(sequence, {}).get(event.name_iid, ""))
        payload = 0
        for annotation in event.debug_annotations:
            key = (annotation.name if annotation.HasField("name")
                   else annotation_names.get(sequence, {}).get(annotation.name_iid, ""))
            if name == TRACE_INFO_EVENT:
                info[key] = _annotation_value(annotation)
            elif key == PAYLOAD_ANNOTATION:
                payload = annotation.int_value
        if name == TRACE_INFO_EVENT:
            continue
        if event.type == pb.TrackEvent.TYPE_SLICE_BEGIN:
            open_slices.setdefault(uuid, []).append((packet.timestamp, name, payload))
        elif event.type == pb.TrackEvent.TYPE_SLICE_END:
            stack = open_slices.get(uuid)
            if stack:
                begin, begin_name, begin_payload = stack.pop()
                rows.append((begin, packet.timestamp - begin, False, begin_payload, uuid,
                             begin_name))
        elif event.type == pb.TrackEvent.TYPE_INSTANT:
            rows.append((packet.timestamp, 0, True, payload, uuid, name))

    def track_path(uuid: int) -> str:
        parts = []
        seen = set()
        while uuid in descriptors and uuid not in seen and uuid != ROOT_TRACK_UUID:
            seen.add(uuid)
            name, parent = descriptors[uuid]
            if not parts or parts[0] != name:  # overlap lanes repeat their parent's name
                parts.insert(0, name)
            uuid = parent
        return "/".join(parts)

    slices = np.zeros(len(rows), dtype=SLICE_DTYPE)
    if rows:
        columns = list(zip(*rows))
        for field_name, column in zip(SLICE_DTYPE.names[:6], columns):
            slices[field_name] = column
        paths = {uuid: track_path(uuid) for uuid in set(columns[4])}
        slices["track"] = [paths[u] for u in columns[4]]
        slices = slices[np.argsort(slices["start_ns"], kind="stable")]
    if "tag_names" in info and isinstance(info["tag_names"], str):
        info["tag_names"] = json.loads(info["tag_names"])
    if "metadata" in info and isinstance(info["metadata"], str):
        info["metadata"] = json.loads(info["metadata"])
    return slices, info


def read_pftrace_slices(path: str | os.PathLike) -> np.ndarray:
    """Slices and instants of a ``.pftrace`` (``SLICE_DTYPE``), sorted by start time."""
    return read_pftrace(path)[0]


def read_pftrace_metadata(path: str | os.PathLike) -> dict[str, Any]:
    """The trace-info metadata (loss counts, tag table, device, ...) of a ``.pftrace``."""
    return read_pftrace(path)[1]


def _annotation_value(annotation) -> Any:
    for field_name in ("int_value", "uint_value", "double_value", "bool_value", "string_value"):
        if annotation.HasField(field_name):
            return getattr(annotation, field_name)
    return None

