"""NVIDIA IKET captures (the decoded JSON ``run-iket profile --postprocess json`` writes) as a
cute_prof :class:`~cute_prof.trace.Trace`, so kernels instrumented with
``cutlass.cute.experimental.iket`` get every cute_prof analysis, export and CLI verb.

The format (IKET's ``meta.version`` 1, read from the nvidia-cutlass-dsl 4.8 wheel and real
captures): top-level ``stringTable`` (range and marker names), ``locationTable`` (one entry
per warp seen: ``ctaId`` [x, y, z], ``smId``, ``gpcId``, ``tpcId``, ``warpId``),
``launches`` (one per kernel launch) and ``graphLaunches`` (``"graph_exec_G:R"`` -> the
kernel nodes of one graph replay). Each launch holds its kernel name, grid/block dims,
``gridId``, ``contextId``, ``enabledCluster``, and ``ranges`` (``startTs``/``endTs`` in
``%globaltimer`` ns, ``rangeNameIdx``, ``warpLocIdxs`` [start warp, end warp],
``internalEvents`` with payloads), ``markers`` (``timestamp``, ``markerNameIdx``,
``locIdx``, payload) and ``warpLifetimes`` (``startTs``, ``endTs``, ``locIdx``).

Mapping: a range is a span and a marker an instant, tagged by name (the tag table is IKET's
string table); each (CTA, warp) is one track (``tid``, named ``"cta x,y,z warp w"``), with
``sm`` and ``warp`` from the location table; ``payload`` is the range's start payload (its
end payload when the start has none; float payloads keep their float32 bits). Warp
lifetimes are kept apart (:attr:`IketCapture.warp_lifetimes`) unless asked for as spans.
Launches and graph launches are ``Trace.launches`` entries with IKET's ids and their span in
``%globaltimer`` ns; ``events["launch"]`` points into them.

Speed and memory: msgspec decodes straight into typed structs (and rejects foreign JSON by
schema); the file is memory-mapped and each launch is decoded and turned into numpy columns
on its own, so peak memory is the mapped file plus one launch's structs.

Owns the mapping of IKET's JSON onto a Trace (stage 3); it may not import analysis, export or
anything above.
"""


import gzip
import mmap
import os
import re
from dataclasses import dataclass
from operator import attrgetter, itemgetter
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Union

import numpy as np

from .. import layout
from ..errors import ProfileBufferError
from ..trace import EVENT_DTYPE, Trace

__all__ = [
    "IketCapture",
    "LIFETIME_DTYPE",
    "LIFETIME_TAG",
    "SUPPORTED_VERSIONS",
    "is_iket_capture",
    "load_iket",
    "read_iket",
]

SUPPORTED_VERSIONS = (1,)
LIFETIME_TAG = "warp lifetime"  # tag name of warp lifetimes when they are asked for as spans

# One row per warp lifetime (IKET records the entry and exit of every warp of a launch).
LIFETIME_DTYPE = np.dtype([("start_ns", np.int64), ("dur_ns", np.int64), ("tid", np.int32),
                           ("sm", np.int16), ("warp", np.int8), ("launch", np.int32)])

# IKET's PayloadType codes (iket.PayloadType) that carry a floating-point value
_FLOAT_PAYLOAD_TYPES = (9, 10, 11, 12, 13, 14)
_NO_EVENT = SimpleNamespace(payloadType=0, payloadVal=0)
# nlohmann::json writes keys in sorted order: an IKET capture opens with one of these
_HEAD = re.compile(rb'\A\s*\{\s*"(graphLaunches|launches|locationTable)"\s*:')
_GZIP_MAGIC = b"\x1f\x8b"


def _schema():
    """The msgspec structs of the format, built on first use (msgspec is imported lazily)."""
    import msgspec

    class Meta(msgspec.Struct, gc=False):
        version: int

    class Location(msgspec.Struct, gc=False):
        ctaId: list[int]
        smId: int
        warpId: int
        gpcId: int = -1
        tpcId: int = -1

    class Capture(msgspec.Struct, gc=False):  # launches stay raw bytes until decoded one by one
        meta: Meta
        stringTable: list[str]
        locationTable: list[Location]
        launches: list[msgspec.Raw] = []
        graphLaunches: dict[str, list[msgspec.Raw]] = {}

    class Internal(msgspec.Struct, gc=False):
        timestamp: int
        eventId: int = 0
        payloadType: int = 0
        payloadVal: Union[int, float] = 0

    class Range(msgspec.Struct, gc=False):
        startTs: int
        endTs: int
        rangeNameIdx: int
        warpLocIdxs: list[int]
        internalEvents: list[Internal] = []
        rangeId: int = 0
        rangeScope: int = 0
        rangeType: int = 0

    class Marker(msgspec.Struct, gc=False):
        timestamp: int
        markerNameIdx: int
        locIdx: int
        payloadType: int = 0
        payloadVal: Union[int, float] = 0

    class Lifetime(msgspec.Struct, gc=False):
        startTs: int
        endTs: int
        locIdx: int

    class Launch(msgspec.Struct, gc=False):
        kernelName: str
        gridDimX: int
        gridDimY: int
        gridDimZ: int
        blockDimX: int
        blockDimY: int
        blockDimZ: int
        gridId: int = -1
        contextId: int = -1
        enabledCluster: Union[dict[str, int], None] = None
        singleClusterActive: int = 0
        ranges: list[Range] = []
        markers: list[Marker] = []
        warpLifetimes: list[Lifetime] = []

    class VersionProbe(msgspec.Struct, gc=False):  # only the version, everything else skipped
        meta: Union[Meta, None] = None

    return msgspec, Capture, Launch, VersionProbe


@dataclass
class IketCapture:
    """An IKET capture read in full: the trace plus what has no place in a Trace's events."""

    trace: Trace
    warp_lifetimes: np.ndarray  # LIFETIME_DTYPE, one row per warp per launch
    version: int

    def launch_spans(self) -> np.ndarray:
        """``(start_ns, end_ns)`` per launch in ``%globaltimer`` ns, from its first to its
        last warp entry/exit or record (for the timeline merge); -1 for a launch with none."""
        return np.array([(-1 if l["first_ns"] is None else l["first_ns"],
                          -1 if l["last_ns"] is None else l["last_ns"])
                         for l in self.trace.launches], dtype=np.int64).reshape(-1, 2)


# ------------------------------------------------------------------ opening
def _open_bytes(path: Path):
    """The file's bytes: memory-mapped when plain, decompressed when gzip."""
    with open(path, "rb") as handle:
        magic = handle.read(2)
        if magic == _GZIP_MAGIC:
            handle.seek(0)
            try:
                return gzip.decompress(handle.read())
            except (OSError, EOFError) as err:
                raise ProfileBufferError(
                    f"{str(path)!r}: truncated or corrupt gzip data ({err})") from None
        size = os.fstat(handle.fileno()).st_size
        if size == 0:
            return b""
        return mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)


def _head(path: Path, size: int = 256) -> bytes:
    with open(path, "rb") as handle:
        head = handle.read(size)
        if head[:2] == _GZIP_MAGIC:
            handle.seek(0)
            try:
                with gzip.GzipFile(fileobj=handle) as unzipped:
                    head = unzipped.read(size)
            except (OSError, EOFError):
                return b""
    return head


def is_iket_capture(path: str | os.PathLike) -> bool:
    """Whether the file opens like IKET's decoded JSON (plain or gzip). Cheap: reads 256 bytes."""
    try:
        return bool(_HEAD.match(_head(Path(path))))
    except OSError:
        return False


# ----------------------------------------------------------------- columns
_get_start = attrgetter("startTs")
_get_end = attrgetter("endTs")
_get_name = attrgetter("rangeNameIdx")
_get_first = itemgetter(0)
_get_last = itemgetter(-1)
_get_warp_locs = attrgetter("warpLocIdxs")
_get_internal = attrgetter("internalEvents")
_get_timestamp = attrgetter("timestamp")
_get_marker_name = attrgetter("markerNameIdx")
_get_loc = attrgetter("locIdx")
_get_payload_type = attrgetter("payloadType")
_get_payload_val = attrgetter("payloadVal")


def _column(getter, items, dtype, count) -> np.ndarray:
    return np.fromiter(map(getter, items), dtype=dtype, count=count)


def _payload_words(types: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, int]:
    """int32 payload column from IKET payload types and values (object array); the count of
    integer payloads that did not fit 32 bits (kept as their low 32 bits)."""
    out = np.zeros(values.shape[0], dtype=np.int32)
    floats = np.isin(types, _FLOAT_PAYLOAD_TYPES)
    if floats.any():
        out[floats] = values[floats].astype(np.float32).view(np.int32)
    ints = ~floats & (types != 0)
    wide = 0
    if ints.any():
        as_int = values[ints].astype(np.int64)
        wide = int(np.count_nonzero((as_int < -(2**31)) | (as_int >= 2**32)))
        out[ints] = as_int.astype(np.uint64).astype(np.uint32).view(np.int32)
    return out, wide


def _range_payloads(ranges: list) -> tuple[np.ndarray, dict[str, int]]:
    """Payload column of ranges (start payload, else end payload) and what it cannot hold:
    integers wider than 32 bits, end payloads that differ from the start's, and the inner
    events of multi-event ranges (counted, not kept)."""
    count = len(ranges)
    internals = list(map(_get_internal, ranges))
    sizes = np.fromiter(map(len, internals), dtype=np.int64, count=count)
    if sizes.all():
        starts, ends = list(map(_get_first, internals)), list(map(_get_last, internals))
    else:  # ranges without internal events: rare, so a plain loop
        starts = [e[0] if e else _NO_EVENT for e in internals]
        ends = [e[-1] if e else _NO_EVENT for e in internals]
    start_types = _column(_get_payload_type, starts, np.int16, count)
    end_types = _column(_get_payload_type, ends, np.int16, count)
    start_values = np.fromiter(map(_get_payload_val, starts), dtype=object, count=count)
    end_values = np.fromiter(map(_get_payload_val, ends), dtype=object, count=count)
    use_end = (start_types == 0) & (end_types != 0)
    payload, wide = _payload_words(np.where(use_end, end_types, start_types),
                                   np.where(use_end, end_values, start_values))
    end_words, _ = _payload_words(end_types, end_values)
    differing = (start_types != 0) & (end_types != 0) & (end_words != payload)
    return payload, {"payloads_wider_than_32_bits": wide,
                     "end_payloads_differing": int(np.count_nonzero(differing)),
                     "inner_events_not_kept": int(np.maximum(sizes - 2, 0).sum())}


@dataclass
class _Locations:
    tid: np.ndarray  # per location index
    sm: np.ndarray
    warp: np.ndarray
    track_names: dict[int, str]
    table: list[dict[str, Any]]


def _locations(raw: list, path: Path) -> _Locations:
    """One track per (CTA, warp): the same CTA warp on another SM (another launch) shares it."""
    n = len(raw)
    cta = np.zeros((n, 3), dtype=np.int64)
    for i, loc in enumerate(raw):  # the location table has one entry per warp seen: small
        coords = list(loc.ctaId)[:3]
        cta[i, : len(coords)] = coords
    warp = np.fromiter((loc.warpId for loc in raw), dtype=np.int64, count=n)
    sm = np.fromiter((loc.smId for loc in raw), dtype=np.int64, count=n)
    keys = np.stack([cta[:, 2], cta[:, 1], cta[:, 0], warp], axis=1)
    unique, tid = np.unique(keys, axis=0, return_inverse=True)
    names = {i: f"cta {x},{y},{z} warp {w}" for i, (z, y, x, w) in enumerate(unique.tolist())}
    table = [{"cta": [int(v) for v in cta[i]], "sm": int(sm[i]), "warp": int(warp[i]),
              "gpc": int(raw[i].gpcId), "tpc": int(raw[i].tpcId)} for i in range(n)]
    return _Locations(tid.reshape(-1).astype(np.int32), sm.astype(np.int16),
                      warp.astype(np.int8), names, table)


# -------------------------------------------------------------------- read
def read_iket(path: str | os.PathLike, *, lifetimes_as_spans: bool = False) -> IketCapture:
    """Read an IKET capture in full. ``lifetimes_as_spans``: also put each warp lifetime
    into the events as a span tagged :data:`LIFETIME_TAG` on its warp's track.

    Raises :class:`ProfileBufferError` for a file that is not an IKET capture, one cut short,
    or one of a format version this reader does not know."""
    path = Path(path)
    msgspec, capture_type, launch_type, probe_type = _schema()
    data = _open_bytes(path)
    try:
        return _read(path, data, msgspec, capture_type, launch_type, probe_type,
                     lifetimes_as_spans)
    finally:
        if isinstance(data, mmap.mmap):
            try:
                data.close()
            except BufferError:  # raw slices still held by an error's traceback: GC closes it
                pass


def _bad(path: Path, what: str, err: Exception) -> ProfileBufferError:
    return ProfileBufferError(f"{str(path)!r}: {what} ({err})")


def _check_version(path: Path, version) -> None:
    if version not in SUPPORTED_VERSIONS:
        raise ProfileBufferError(
            f"{str(path)!r}: IKET capture format version {version} is not supported (this "
            f"cute_prof reads version {', '.join(map(str, SUPPORTED_VERSIONS))}); decode it "
            "with the nvidia-cutlass-dsl that matches, or update cute_prof")


def _read(path, data, msgspec, capture_type, launch_type, probe_type,
          lifetimes_as_spans) -> IketCapture:
    try:
        top = msgspec.json.decode(data, type=capture_type)
    except msgspec.ValidationError as err:
        try:  # a newer format may differ in structure: say so by its version if it has one
            probe = msgspec.json.decode(data, type=probe_type)
        except (msgspec.ValidationError, msgspec.DecodeError):
            probe = None
        if probe is not None and probe.meta is not None:
            _check_version(path, probe.meta.version)
        raise _bad(path, "not an IKET capture: its JSON lacks IKET's structure", err) from None
    except msgspec.DecodeError as err:
        raise _bad(path, "not an IKET capture, or one cut short: its JSON does not parse",
                   err) from None
    version = top.meta.version
    _check_version(path, version)
    names = list(top.stringTable)
    locations = _locations(top.locationTable, path)
    n_locations = len(locations.table)

    sources = [(raw, None, None) for raw in top.launches]
    for key, nodes in top.graphLaunches.items():
        sources.extend((raw, key, node) for node, raw in enumerate(nodes))
    del top

    parts, lifetime_parts, launches = [], [], []
    range_ids: dict[str, int] = {}
    losses = dict.fromkeys(("payloads_wider_than_32_bits", "end_payloads_differing",
                            "inner_events_not_kept", "ranges_ending_on_another_warp"), 0)
    for index, (raw, graph_key, graph_node) in enumerate(sources):
        sources[index] = None  # the raw slice is not needed once decoded
        try:
            launch = msgspec.json.decode(raw, type=launch_type)
        except (msgspec.ValidationError, msgspec.DecodeError) as err:
            raise _bad(path, f"launch {index} of the IKET capture is malformed", err) from None
        ranges, markers, lifetimes = launch.ranges, launch.markers, launch.warpLifetimes
        n_r, n_m, n_l = len(ranges), len(markers), len(lifetimes)
        block = np.zeros(n_r + n_m, dtype=EVENT_DTYPE)
        loc = np.empty(n_r + n_m, dtype=np.int64)
        if n_r:
            start = _column(_get_start, ranges, np.int64, n_r)
            block["start_ns"][:n_r] = start
            block["dur_ns"][:n_r] = _column(_get_end, ranges, np.int64, n_r) - start
            block["tag"][:n_r] = _column(_get_name, ranges, np.int32, n_r)
            loc[:n_r] = np.fromiter(map(_get_first, map(_get_warp_locs, ranges)),
                                    dtype=np.int64, count=n_r)
            block["payload"][:n_r], counts = _range_payloads(ranges)
            for key, value in counts.items():
                losses[key] += value
            ends_elsewhere = np.fromiter(map(_get_last, map(_get_warp_locs, ranges)),
                                         dtype=np.int64, count=n_r)
            losses["ranges_ending_on_another_warp"] += int(np.count_nonzero(
                ends_elsewhere != loc[:n_r]))
            block["kind"][:n_r] = layout.KIND_SPAN
            for r in _first_of_each_name(ranges, block["tag"][:n_r]):
                range_ids.setdefault(_name(names, r.rangeNameIdx), int(r.rangeId))
        if n_m:
            block["start_ns"][n_r:] = _column(_get_timestamp, markers, np.int64, n_m)
            block["tag"][n_r:] = _column(_get_marker_name, markers, np.int32, n_m)
            loc[n_r:] = _column(_get_loc, markers, np.int64, n_m)
            types = _column(_get_payload_type, markers, np.int16, n_m)
            values = np.fromiter(map(_get_payload_val, markers), dtype=object, count=n_m)
            block["payload"][n_r:], wide = _payload_words(types, values)
            losses["payloads_wider_than_32_bits"] += wide
            block["kind"][n_r:] = layout.KIND_INSTANT
        life = np.zeros(n_l, dtype=LIFETIME_DTYPE)
        life_loc = np.empty(0, dtype=np.int64)
        if n_l:
            life["start_ns"] = _column(_get_start, lifetimes, np.int64, n_l)
            life["dur_ns"] = _column(_get_end, lifetimes, np.int64, n_l) - life["start_ns"]
            life_loc = _column(_get_loc, lifetimes, np.int64, n_l)
        fields = {f: getattr(launch, f) for f in launch.__struct_fields__
                  if f not in ("ranges", "markers", "warpLifetimes")}
        del launch, ranges, markers, lifetimes
        for what, idx in (("range or marker", loc), ("warp lifetime", life_loc)):
            if idx.size and (idx.min() < 0 or idx.max() >= n_locations):
                raise ProfileBufferError(
                    f"{str(path)!r}: launch {index}: a {what} points at location "
                    f"{int(idx.max() if idx.max() >= n_locations else idx.min())}, outside the "
                    f"location table ({n_locations} entries)")
        if block.shape[0] and (block["tag"].min() < 0 or block["tag"].max() >= len(names)):
            raise ProfileBufferError(
                f"{str(path)!r}: launch {index}: a name index is outside the string table "
                f"({len(names)} names)")
        block["tid"] = locations.tid[loc]
        block["sm"] = locations.sm[loc]
        block["warp"] = locations.warp[loc]
        block["dur_cycles"] = -1
        block["launch"] = index
        life["tid"] = locations.tid[life_loc]
        life["sm"] = locations.sm[life_loc]
        life["warp"] = locations.warp[life_loc]
        life["launch"] = index
        parts.append(block)
        lifetime_parts.append(life)
        launches.append(_launch_entry(index, fields, graph_key,
                                      graph_node, block, life, n_r, n_m))

    events = np.concatenate(parts) if parts else np.zeros(0, dtype=EVENT_DTYPE)
    lifetimes_all = (np.concatenate(lifetime_parts) if lifetime_parts
                     else np.zeros(0, dtype=LIFETIME_DTYPE))
    tag_names = list(names)
    if lifetimes_as_spans and lifetimes_all.shape[0]:
        extra = np.zeros(lifetimes_all.shape[0], dtype=EVENT_DTYPE)
        for column in ("start_ns", "dur_ns", "tid", "sm", "warp", "launch"):
            extra[column] = lifetimes_all[column]
        extra["tag"] = len(tag_names)
        extra["kind"] = layout.KIND_SPAN
        extra["dur_cycles"] = -1
        tag_names.append(LIFETIME_TAG)
        events = np.concatenate([events, extra])
    events["slot"] = np.arange(events.shape[0])
    events = events[np.argsort(events["start_ns"], kind="stable")]
    n_events = int(events.shape[0])
    metadata = {
        "source": "iket",
        "source_file": str(path),
        "clock": "globaltimer",
        "iket": {
            "version": version,
            "string_table": names,
            "range_ids": range_ids,
            "graph_launches": sorted({l["graph_launch"] for l in launches
                                      if l["graph_launch"] is not None}),
            "ranges": int(sum(l["ranges"] for l in launches)),
            "markers": int(sum(l["markers"] for l in launches)),
            "warp_lifetimes": int(lifetimes_all.shape[0]),
            "lifetimes_as_spans": bool(lifetimes_as_spans),
            "locations": locations.table,
            # what a Trace row cannot hold, counted (a range is drawn on its start warp)
            **losses,
        },
    }
    trace = Trace(events=events, tag_names=tuple(tag_names), capacity=n_events,
                  attempted=n_events, overflow=0, incomplete=0, metadata=metadata,
                  launches=launches, track_names=locations.track_names)
    return IketCapture(trace=trace, warp_lifetimes=lifetimes_all, version=version)


def _name(names: list[str], index: int) -> str:
    return names[index] if 0 <= index < len(names) else f"<unknown tag {index}>"


def _first_of_each_name(ranges: list, tags: np.ndarray) -> list:
    _, first = np.unique(tags, return_index=True)
    return [ranges[i] for i in first.tolist()]


def _launch_entry(index, fields, graph_key, graph_node, block, life, n_ranges, n_markers):
    starts = [a.min() for a in (block["start_ns"], life["start_ns"]) if a.size]
    ends = [a.max() for a in (block["start_ns"] + block["dur_ns"],
                              life["start_ns"] + life["dur_ns"]) if a.size]
    cluster = fields.get("enabledCluster")
    return {
        "index": index,
        "source": "iket",
        "kernel": fields.get("kernelName", ""),
        # the keys every Trace.launches entry has (cute_prof.launches), so the merge with a
        # torch.profiler trace and the per-launch views work on IKET captures too
        "first_ns": int(min(starts)) if starts else None,
        "last_ns": int(max(ends)) if ends else None,
        "records": n_ranges + n_markers,
        "grid": [fields.get(f"gridDim{a}", 0) for a in "XYZ"],
        "block": [fields.get(f"blockDim{a}", 0) for a in "XYZ"],
        "grid_id": fields.get("gridId"),
        "context_id": fields.get("contextId"),
        "enabled_cluster": [cluster.get(a) for a in "xyz"] if isinstance(cluster, dict) else None,
        "single_cluster_active": fields.get("singleClusterActive"),
        "graph_launch": graph_key,
        "graph_node": graph_node,
        "ranges": n_ranges,
        "markers": n_markers,
        "warp_lifetimes": int(life.shape[0]),
    }


def load_iket(path: str | os.PathLike, *, lifetimes_as_spans: bool = False) -> Trace:
    """The :class:`Trace` of an IKET capture (see :func:`read_iket`)."""
    return read_iket(path, lifetimes_as_spans=lifetimes_as_spans).trace
