"""Saving a raw profile buffer with its tag table, so a trace can be decoded, summarised or
exported again later -- on a machine without a GPU, or with a newer cute_prof.

Two formats, picked by suffix:

* ``.npz`` -- numpy, loaded with ``allow_pickle=False``: the buffer as an int64 array, the
  tag names and the metadata as JSON strings. Readable with nothing but numpy.
* ``.pt`` -- ``torch.save`` of a dict of plain values (one int64 tensor, strings, ints),
  loaded with ``weights_only=True`` so opening a file never runs code.

Both carry a format marker and a version. Anything that is not such a file (truncated,
corrupted, another program's ``.npz``) raises :class:`~cute_prof.errors.ProfileBufferError`
with a message that says so. Writes are atomic (temporary file + ``os.replace``), so an
interrupted save never leaves a half-written file under the final name.

Owns the saved formats and loading them back (stage 3); it may not import analysis, export or
anything above.
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from .buffer import host_words, source_metadata
from .errors import ProfileBufferError
from .files import atomic_write

__all__ = [
    "save_buffer",
    "save_trace",
    "load_buffer",
    "load_trace",
    "load_chrome_json",
    "trace_to_buffer",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "SUFFIXES",
]

FORMAT_NAME = "cute_prof.buffer"
FORMAT_VERSION = 1
SUFFIXES = (".npz", ".pt")


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=str)
    return str(value)


def _tag_names_of(tag_table) -> list[str]:
    if tag_table is None:
        return []
    names = getattr(tag_table, "names", tag_table)
    if isinstance(names, (str, bytes)):
        raise ProfileBufferError(
            f"tag_table must be a TagTable or a list of names, got the string {names!r}"
        )
    try:
        names = [str(name) for name in names]
    except TypeError:
        raise ProfileBufferError(
            f"tag_table must be a TagTable or a list of names, got {type(tag_table).__name__}"
        ) from None
    return names


def _suffix(path: Path, allowed=SUFFIXES) -> str:
    suffix = path.suffix.lower()
    if suffix not in allowed:
        raise ProfileBufferError(
            f"{str(path)!r}: unknown buffer file type {suffix or '(no suffix)'!r}; use one of "
            f"{', '.join(allowed)}"
        )
    return suffix


def save_buffer(
    path: str | os.PathLike,
    buf,
    tag_table=None,
    *,
    metadata: dict[str, Any] | None = None,
    compress: bool = False,
) -> Path:
    """Save the raw words of ``buf`` with the tag names and metadata needed to decode it.

    ``buf``: a ProfileBuffer, an int64 tensor (any device) or numpy array. ``tag_table``: a
    TagTable or a list of names (id order). ``compress`` (``.npz`` only) trades save time
    for size; buffers that are mostly empty shrink a lot. Returns the path written.
    """
    path = Path(path)
    suffix = _suffix(path)
    words = host_words(buf, what="profile buffer to save")
    names_json = json.dumps(_tag_names_of(tag_table))
    meta = {**source_metadata(buf), **(metadata or {})}
    metadata_json = json.dumps(meta, default=_json_default)
    header = json.dumps({"format": FORMAT_NAME, "version": FORMAT_VERSION})
    with atomic_write(path) as handle:
        if suffix == ".npz":
            save = np.savez_compressed if compress else np.savez
            save(
                handle,
                format=np.array(header),
                buffer=words,
                tag_names=np.array(names_json),
                metadata=np.array(metadata_json),
            )
        else:
            import torch

            torch.save(
                {
                    "format": FORMAT_NAME,
                    "version": FORMAT_VERSION,
                    "buffer": torch.from_numpy(words),
                    "tag_names": names_json,
                    "metadata": metadata_json,
                },
                handle,
            )
    return path


def _not_ours(path: Path, why: str) -> ProfileBufferError:
    return ProfileBufferError(
        f"{str(path)!r} is not a cute_prof buffer file ({why}); save one with "
        "cute_prof.storage.save_buffer"
    )


def _reject_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")  # NaN / Infinity: not standard JSON


def _parse_json(path: Path, text: str, what: str, expected: type):
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except (TypeError, ValueError, RecursionError):
        raise _not_ours(path, f"its {what} is not valid JSON") from None
    if not isinstance(value, expected):
        raise _not_ours(path, f"its {what} is a {type(value).__name__}, not a {expected.__name__}")
    return value


def _check_header(path: Path, name, version) -> None:
    if name != FORMAT_NAME:
        raise _not_ours(path, f"format marker is {name!r}, expected {FORMAT_NAME!r}")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise ProfileBufferError(
            f"{str(path)!r} was written by a newer cute_prof (format version {version!r}, this "
            f"one reads up to {FORMAT_VERSION}); upgrade cute_prof to read it"
        )


_ZIP_MAGIC = b"PK\x03\x04"


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0][:200] if text else type(error).__name__


def _load_npz(path: Path) -> tuple[np.ndarray, str, str]:
    with open(path, "rb") as handle:
        magic = handle.read(4)
    if magic != _ZIP_MAGIC:
        raise _not_ours(path, "it is not a zip archive, which every .npz is")
    try:
        with np.load(path, allow_pickle=False) as archive:
            keys = set(archive.files)
            missing = {"format", "buffer", "tag_names", "metadata"} - keys
            if missing:
                raise _not_ours(path, f"missing entries {sorted(missing)}")
            header = _parse_json(path, str(archive["format"][()]), "format header", dict)
            _check_header(path, header.get("format"), header.get("version"))
            words = archive["buffer"]
            names = str(archive["tag_names"][()])
            metadata = str(archive["metadata"][()])
    except (ProfileBufferError, FileNotFoundError, MemoryError):
        raise
    except Exception as err:  # noqa: BLE001
        # zipfile and numpy raise an open-ended set of types on corrupted archives
        # (BadZipFile, zlib.error, NotImplementedError for a garbled compression method or
        # version, EOFError, ValueError, ...): each means the same thing to the user.
        raise _not_ours(path, f"cannot read it as .npz: {type(err).__name__}: {_first_line(err)}") from None
    return words, names, metadata


def _load_pt(path: Path) -> tuple[np.ndarray, str, str]:
    import torch

    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except (FileNotFoundError, MemoryError):
        raise
    except Exception as err:  # noqa: BLE001
        # torch.load's weights-only unpickler raises an open-ended set of types on corrupted
        # files (UnpicklingError, RuntimeError, IndexError from a garbled stack, ...)
        raise _not_ours(path, f"torch.load failed: {type(err).__name__}: {_first_line(err)}") from None
    if not isinstance(data, dict):
        raise _not_ours(path, f"it holds a {type(data).__name__}, not a dict")
    missing = {"format", "version", "buffer", "tag_names", "metadata"} - set(data)
    if missing:
        raise _not_ours(path, f"missing entries {sorted(missing)}")
    _check_header(path, data["format"], data["version"])
    tensor = data["buffer"]
    if not isinstance(tensor, torch.Tensor):
        raise _not_ours(path, f"its buffer is a {type(tensor).__name__}, not a tensor")
    if not isinstance(data["tag_names"], str) or not isinstance(data["metadata"], str):
        raise _not_ours(path, "its tag names / metadata are not JSON strings")
    if tensor.dtype != torch.int64:
        raise _not_ours(path, f"its buffer has dtype {tensor.dtype}, expected int64")
    return tensor.numpy(), data["tag_names"], data["metadata"]


def load_buffer(path: str | os.PathLike) -> tuple[np.ndarray, Any, dict[str, Any]]:
    """``(raw int64 words, TagTable, metadata dict)`` from a file written by
    :func:`save_buffer`. The TagTable reproduces the saved ids exactly."""
    path = Path(path)
    suffix = _suffix(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such buffer file: {str(path)!r}")
    words, names_json, metadata_json = (_load_npz if suffix == ".npz" else _load_pt)(path)
    if words.dtype.kind != "i" or words.dtype.itemsize != 8 or words.ndim != 1:
        raise _not_ours(path, f"its buffer has dtype {words.dtype} shape {words.shape}")
    names = _parse_json(path, names_json, "tag table", list)
    if not all(isinstance(name, str) for name in names):
        raise _not_ours(path, "its tag table holds non-string names")
    metadata = _parse_json(path, metadata_json, "metadata", dict)
    from .tags import TagTable

    try:
        table = TagTable(names)
    except ProfileBufferError as err:
        raise _not_ours(path, f"its tag table is invalid: {err}") from None
    return np.ascontiguousarray(words, dtype=np.int64), table, metadata


def load_trace(path: str | os.PathLike, *, clock_hz: float | None = None):
    """Read a trace cute_prof wrote, as a :class:`~cute_prof.trace.Trace`:

    * ``.npz`` / ``.pt`` saved buffers are decoded again. Clock-mode records are converted
      with ``clock_hz`` if given, else with the rate the buffer's own clock_sync pairs give,
      else with the rate recorded at save time.
    * ``.json`` (or ``.json.gz``) Chrome traces from
      :func:`cute_prof.export.chrome_json.events_to_perfetto` are read back from the exact
      nanoseconds and fields they keep in each event's ``args``.
    * ``.json`` (or ``.json.gz``) NVIDIA IKET captures are read by
      :func:`cute_prof.readers.iket.load_iket`.
    """
    path = Path(path)
    if path.suffix.lower() in (".json", ".gz"):
        from .readers import iket

        if iket.is_iket_capture(path):  # NVIDIA IKET decoded JSON (plain or gzip)
            return iket.load_iket(path)
        return load_chrome_json(path)
    from .decode import decode_buffer
    from .errors import ClockRateError

    words, table, metadata = load_buffer(path)
    metadata = {**metadata, "source_file": str(path)}
    try:
        return decode_buffer(words, table, metadata=metadata, clock_hz=clock_hz)
    except ClockRateError:
        saved_rate = metadata.get("clock_hz")
        if clock_hz is not None or not isinstance(saved_rate, (int, float)):
            raise
        return decode_buffer(words, table, metadata=metadata, clock_hz=saved_rate)


# Keys of the JSON ``otherData`` that are Trace fields, not free-form metadata.
_JSON_TRACE_KEYS = ("producer", "capacity", "attempted", "overflow", "incomplete", "invalid",
                    "invalid_reasons",
                    "events", "origin_ns", "tag_names", "group_by")
_JSON_ARG_FIELDS = ("start_ns", "dur_ns", "tid", "payload", "sm", "warp")


def load_chrome_json(path: str | os.PathLike):
    """A Trace from Chrome JSON written by ``events_to_perfetto``.

    Every record's raw fields are in its event's ``args``; the loss counts, tag table and
    metadata are in the top-level ``otherData``. JSON from other tools is refused with
    :class:`ProfileBufferError` (it lacks ``otherData.producer == "cute_prof"``)."""
    from . import layout
    from .trace import EVENT_DTYPE, Trace

    path = Path(path)
    try:
        with open(path, "rb") as handle:
            if handle.read(2) == b"\x1f\x8b":  # gzip, as Perfetto's UI also opens it
                handle.seek(0)
                with gzip.GzipFile(fileobj=handle) as unzipped:
                    data = json.load(unzipped, parse_constant=_reject_constant)
            else:
                handle.seek(0)
                data = json.load(handle, parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError, OSError, EOFError) as err:
        why = "nested too deeply" if isinstance(err, RecursionError) else f"{type(err).__name__}: {err}"
        raise ProfileBufferError(f"{str(path)!r} is not a JSON trace ({why})") from None
    other = data.get("otherData") if isinstance(data, dict) else None
    if not isinstance(other, dict) or other.get("producer") != "cute_prof":
        raise ProfileBufferError(
            f"{str(path)!r} is not a cute_prof JSON trace (no otherData.producer == "
            "'cute_prof'); only traces written by cute_prof can be read back"
        )
    raw_events = data.get("traceEvents")
    if not isinstance(raw_events, list):
        raise ProfileBufferError(f"{str(path)!r}: traceEvents is missing or not a list")
    tag_names = other.get("tag_names") or []
    if not isinstance(tag_names, list) or not all(isinstance(n, str) for n in tag_names):
        raise ProfileBufferError(f"{str(path)!r}: otherData.tag_names is not a list of strings")
    tag_ids = {name: i for i, name in enumerate(tag_names)}
    kinds = {name: code for code, name in layout.KIND_NAMES.items()}
    records = [e for e in raw_events if isinstance(e, dict) and e.get("ph") in ("X", "i", "I")]
    events = np.zeros(len(records), dtype=EVENT_DTYPE)

    def integers(values: list, field: str) -> list:
        if not all(type(v) is int for v in values):  # no floats, bools, strings or nulls
            raise TypeError(f"{field} must be integers")
        return values

    try:
        args = [e["args"] for e in records]
        for field in _JSON_ARG_FIELDS:
            events[field] = integers([a[field] for a in args], field)
        events["dur_cycles"] = integers([a.get("dur_cycles", -1) for a in args], "dur_cycles")
        events["kind"] = [
            kinds.get(e.get("cat"), layout.KIND_INSTANT if e["ph"] != "X" else layout.KIND_SPAN)
            if isinstance(e.get("cat", ""), str) else layout.KIND_SPAN
            for e in records
        ]
        names = [e["name"] for e in records]
        if not all(isinstance(name, str) for name in names):
            raise TypeError("event names must be strings")
    except (KeyError, TypeError, ValueError, OverflowError) as err:
        raise ProfileBufferError(
            f"{str(path)!r}: an event lacks the cute_prof fields in its args ({err!r}); "
            "the file was edited or written by an older cute_prof"
        ) from None
    tags = np.empty(len(records), dtype=np.int32)
    for name in sorted(set(names) - set(tag_ids)):
        unknown = name[len("<unknown tag "):-1] if name.startswith("<unknown tag ") else ""
        if (unknown.isascii() and unknown.isdigit() and int(unknown) <= layout.MAX_TAG_ID
                and int(unknown) not in tag_ids.values()):
            tag_ids[name] = int(unknown)
        else:  # a name the tag table lacks: give it the next free id
            tag_ids[name] = max(tag_ids.values(), default=-1) + 1
    size = max(tag_ids.values(), default=-1) + 1
    table = [f"<unknown tag {i}>" for i in range(size)]
    for name, i in tag_ids.items():
        table[i] = name
    tags[:] = [tag_ids[n] for n in names] if names else []
    events["tag"] = tags
    events["slot"] = np.arange(len(records))
    from .decode import screen_events

    keep, screened = screen_events(events)
    events = events[keep]
    events = events[np.argsort(events["start_ns"], kind="stable")]

    def count(key: str, default: int) -> int:
        value = other.get(key, default)
        return value if type(value) is int and 0 <= value <= 2**62 else default

    n = len(records)
    metadata = {k: v for k, v in other.items() if k not in _JSON_TRACE_KEYS and v is not None}
    metadata["source_file"] = str(path)
    capacity = count("capacity", n)
    attempted = count("attempted", n)
    reasons = other.get("invalid_reasons")
    if not isinstance(reasons, dict) or not all(
        isinstance(k, str) and isinstance(v, int) for k, v in reasons.items()
    ):
        reasons = {}
    for reason, extra in screened.items():
        reasons[reason] = reasons.get(reason, 0) + extra
    return Trace(
        events=events,
        tag_names=tuple(table),
        capacity=capacity,
        attempted=attempted,
        overflow=count("overflow", max(0, attempted - capacity)),
        incomplete=count("incomplete", 0),
        metadata=metadata,
        invalid=count("invalid", 0) + sum(screened.values()),
        invalid_reasons=reasons,
    )


def trace_to_buffer(trace) -> np.ndarray:
    """Re-encode a decoded Trace as the raw buffer it came from (same slots, counter and
    capacity), so :func:`save_trace` can store a Trace that no longer has its buffer.

    Clock spans go back to their raw form (end %globaltimer, cycles) when the trace kept
    the cycle count. Invalid records come back as records that break the same validity rule
    (``trace.invalid_reasons``), in free slots below the counter; the other free slots there
    are never-written (incomplete) ones."""
    from . import layout

    events = trace.events
    syncs = getattr(trace, "clock_syncs", np.zeros(0, dtype=[("slot", np.int64)]))
    capacity = int(trace.capacity)
    slots = np.concatenate([events["slot"], syncs["slot"]]).astype(np.int64)
    n_records = slots.shape[0]
    from_slices = (trace.metadata or {}).get("format") == "slices"
    if from_slices or capacity < n_records or (n_records and (
            slots.min() < 0 or slots.max() >= capacity or np.unique(slots).shape[0] != n_records)):
        # slots do not describe a flat buffer (a slices buffer's word indices, a filtered or
        # hand-built trace): pack them
        capacity = max(capacity, n_records)
        slots = np.arange(n_records, dtype=np.int64)
    words = np.zeros(layout.buffer_words(max(capacity, 1)), dtype=np.int64)
    words[layout.COUNTER_INDEX] = max(int(trace.attempted), n_records)
    records = words[layout.HEADER_WORDS:].reshape(-1, layout.WORDS_PER_RECORD)

    start = events["start_ns"].astype(np.int64)
    dur = events["dur_ns"].astype(np.int64)
    clock = (events["kind"] == layout.KIND_CLOCK_SPAN) & (events["dur_cycles"] >= 0)
    start = np.where(clock, start + dur, start)
    dur = np.where(clock, events["dur_cycles"], dur)
    kind = np.where(
        (events["kind"] == layout.KIND_CLOCK_SPAN) & ~clock, layout.KIND_SPAN, events["kind"]
    )
    n_events = events.shape[0]
    event_slots, sync_slots = slots[:n_events], slots[n_events:]
    records[event_slots, layout.WORD_START] = start
    records[event_slots, layout.WORD_DUR] = dur
    records[event_slots, layout.WORD_TAG] = layout.encode_tag_words(
        events["tag"], payload=events["payload"], kind=kind
    )
    # launch identity: each row's launch epoch and grid id back into its tid word
    launches = getattr(trace, "launches", None) or []
    epoch = grid = 0
    if launches and n_events:
        launch_rows = np.clip(events["launch"].astype(np.int64), 0, len(launches) - 1)
        epoch = np.array([launch.get("epoch", 0) for launch in launches], np.int64)[launch_rows]
        grid = np.array([launch.get("grid_id", 0) for launch in launches], np.int64)[launch_rows]
        last_epoch = max(int(launch.get("epoch", 0)) for launch in launches)
        words[layout.COUNTER_INDEX] += last_epoch << layout.LAUNCH_EPOCH_SHIFT
    records[event_slots, layout.WORD_TID] = layout.encode_tid_words(
        events["tid"], sm=events["sm"], warp=events["warp"], epoch=epoch, grid=grid
    )
    if syncs.shape[0]:
        records[sync_slots, layout.WORD_START] = syncs["globaltimer_ns"]
        records[sync_slots, layout.WORD_DUR] = syncs["clock_cycles"]
        records[sync_slots, layout.WORD_TAG] = layout.encode_tag_words(
            0, kind=layout.KIND_CLOCK_SYNC
        )
        records[sync_slots, layout.WORD_TID] = layout.encode_tid_words(
            syncs["tid"], sm=syncs["sm"]
        )
    _write_invalid_records(records, slots, min(int(words[layout.COUNTER_INDEX]), capacity),
                           getattr(trace, "invalid_reasons", None) or {})
    return words


def _invalid_record(reason: str) -> list[int] | None:
    """``[start, dur, tag word, tid word]`` of a record the decoder rejects for ``reason``."""
    from . import layout

    span = layout.tag_word_constant(0)
    clock = layout.tag_word_constant(0, kind=layout.KIND_CLOCK_SPAN)
    int64_max = np.iinfo(np.int64).max
    return {
        "reserved_bits": [0, 0, span, layout.TID_RESERVED_MASK],
        "unknown_kind": [0, 0, layout.tag_word_constant(0, kind=layout.field_mask(layout.KIND_BITS)), 0],
        "negative_start": [-1, 0, span, 0],
        "negative_duration": [0, -1, span, 0],
        "end_overflow": [int64_max, 1, span, 0],
        # ends at 0 after more cycles than any clock rate turns into 0 ns
        "clock_overflow": [0, int64_max, clock, 0],
    }.get(reason)


def _write_invalid_records(records: np.ndarray, used_slots: np.ndarray, recorded: int,
                           reasons: dict) -> None:
    free = np.setdiff1d(np.arange(recorded, dtype=np.int64), used_slots)
    first = 0
    for reason, count in reasons.items():
        record = _invalid_record(reason)
        if record is None or not isinstance(count, int) or count <= 0:
            continue
        chosen = free[first : first + count]
        records[chosen] = np.array(record, dtype=np.int64)
        first += chosen.shape[0]


def save_trace(
    path: str | os.PathLike, trace, *, metadata: dict[str, Any] | None = None,
    compress: bool = False,
) -> Path:
    """Save a decoded Trace (re-encoded with :func:`trace_to_buffer`) so that
    :func:`load_trace` gives the same events, loss counts, tag names and metadata."""
    meta = {**(trace.metadata or {}), **(metadata or {})}
    return save_buffer(path, trace_to_buffer(trace), list(trace.tag_names or ()),
                       metadata=meta, compress=compress)
