"""Decoded traces: a columnar table (the form every analysis and exporter reads) and the
per-event ``Event`` view built from it for seed-compatible code.

Owns the Trace table and ``Event`` (stage 1); it may not import decoding, analysis or export,
which build on it.
"""

from __future__ import annotations

import gc
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import layout

# One row per decoded record, sorted by start_ns. ``dur_ns`` is already in nanoseconds for
# every kind (clock-mode cycles are converted during decode; ``dur_cycles`` keeps the raw
# count, -1 where the record was timed with %globaltimer). ``slot`` is the buffer slot.
# ``launch`` indexes ``Trace.launches``: which kernel launch (or graph replay) wrote the row.
EVENT_DTYPE = np.dtype(
    [
        ("start_ns", np.int64),
        ("dur_ns", np.int64),
        ("tag", np.int32),
        ("tid", np.int32),
        ("payload", np.int32),
        ("kind", np.uint8),
        ("sm", np.int16),
        ("warp", np.int8),
        ("dur_cycles", np.int64),
        ("slot", np.int64),
        ("launch", np.int32),
    ]
)

# KIND_CLOCK_SYNC records are calibration data, not events: they are kept beside the events.
# One row per pair read back to back on one SM: %globaltimer (ns) and clock64 (cycles).
CLOCK_SYNC_DTYPE = np.dtype(
    [
        ("globaltimer_ns", np.int64),
        ("clock_cycles", np.int64),
        ("sm", np.int16),
        ("tid", np.int32),
        ("slot", np.int64),
    ]
)

_KIND_CODES = {name: code for code, name in layout.KIND_NAMES.items()}


def kind_name(kind: int) -> str:
    """Name of a record kind code ("span", "instant", ...; "kind_N" for unknown codes)."""
    return layout.KIND_NAMES.get(int(kind), f"kind_{int(kind)}")


def kind_code(name: str) -> int:
    """Inverse of :func:`kind_name` for the known kinds."""
    try:
        return _KIND_CODES[name]
    except KeyError:
        from .errors import ProfileBufferError

        raise ProfileBufferError(
            f"unknown event kind {name!r}; expected one of {sorted(_KIND_CODES)}"
        ) from None


@dataclass(frozen=True)
class Event:
    """One decoded record. ``tag_id`` and ``tid`` are exactly what the kernel passed."""

    name: str
    tag_id: int
    tid: int
    start_ns: int
    dur_ns: int
    sm: int = 0
    warp: int = 0
    payload: int = 0
    kind: str = "span"

    @property
    def end_ns(self) -> int:
        return self.start_ns + self.dur_ns


def _empty_clock_syncs() -> np.ndarray:
    return np.zeros(0, dtype=CLOCK_SYNC_DTYPE)


@dataclass
class Trace:
    """A decoded buffer: columnar events plus everything needed to trust them."""

    events: np.ndarray  # EVENT_DTYPE, sorted by start_ns
    tag_names: tuple[str, ...]  # tag id -> name for known ids
    capacity: int  # max_events of the buffer
    attempted: int  # the device counter: records the kernel tried to write
    overflow: int  # attempted - capacity when positive: records that did not fit
    incomplete: int  # slots claimed (below min(attempted, capacity)) but never written
    metadata: dict[str, Any] = field(default_factory=dict)  # device, clock_hz, ...
    # complete records that break a validity rule (decode.INVALID_REASONS); never decoded
    invalid: int = 0
    # KIND_CLOCK_SYNC calibration pairs (CLOCK_SYNC_DTYPE), in slot order
    clock_syncs: np.ndarray = field(default_factory=_empty_clock_syncs)
    # one dict per kernel launch the rows came from (``events["launch"]`` indexes it); empty
    # when the source does not tell launches apart (then every row has launch 0)
    launches: list[dict[str, Any]] = field(default_factory=list)
    # display names of tracks, tid -> name ("producer", "consumer wg1 warp 5"); tids not
    # named here are shown as "tid N"
    track_names: dict[int, str] = field(default_factory=dict)
    # invalid records per reason (keys from decode.INVALID_REASONS); sums to ``invalid``
    # when the source kept the reasons
    invalid_reasons: dict[str, int] = field(default_factory=dict)

    # ------------------------------------------------------------- counts
    def __len__(self) -> int:
        return int(self.events.shape[0])

    @property
    def recorded(self) -> int:
        """Slots the device claimed inside the buffer: ``min(attempted, capacity)``."""
        return min(self.attempted, self.capacity)

    # -------------------------------------------------------------- names
    def tag_name(self, tag_id: int) -> str:
        """Name of ``tag_id``; ``"<unknown tag N>"`` for ids the tag table did not know."""
        index = int(tag_id)
        if 0 <= index < len(self.tag_names):
            return self.tag_names[index]
        return f"<unknown tag {index}>"

    def track_name(self, tid: int) -> str:
        """Display name of track ``tid``."""
        return self.track_names.get(int(tid), f"tid {int(tid)}")

    def name_table(self, tag_ids: np.ndarray | None = None) -> tuple[np.ndarray, list[str]]:
        """Vectorised naming: ``(index, names)`` with ``names[index[i]]`` the name of event i.

        Only distinct tag ids are looked up, so this costs one ``np.unique`` per trace."""
        tags = self.events["tag"] if tag_ids is None else np.asarray(tag_ids)
        unique_tags, index = np.unique(tags, return_inverse=True)
        return index.reshape(-1), [self.tag_name(t) for t in unique_tags.tolist()]

    def event_names(self) -> np.ndarray:
        """Per-event names as an object array (shares one str object per distinct tag)."""
        index, names = self.name_table()
        lookup = np.empty(len(names), dtype=object)
        lookup[:] = names
        return lookup[index]

    # ---------------------------------------------------- per-event view
    def to_events(self) -> list[Event]:
        """The events as ``Event`` objects (for seed-compatible code; columnar is faster)."""
        ev = self.events
        if ev.shape[0] == 0:
            return []
        index, names = self.name_table()
        kind_codes, kind_index = np.unique(ev["kind"], return_inverse=True)
        kinds = [kind_name(k) for k in kind_codes.tolist()]
        columns = zip(
            [names[i] for i in index.tolist()],
            ev["tag"].tolist(),
            ev["tid"].tolist(),
            ev["start_ns"].tolist(),
            ev["dur_ns"].tolist(),
            ev["sm"].tolist(),
            ev["warp"].tolist(),
            ev["payload"].tolist(),
            [kinds[i] for i in kind_index.reshape(-1).tolist()],
        )
        new = object.__new__
        out = []
        append = out.append
        # A million small objects trigger repeated full GC passes that triple the cost;
        # none of them can form a cycle, so pause the collector while building them.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            for name, tag_id, tid, start_ns, dur_ns, sm, warp, payload, kind in columns:
                event = new(Event)
                # Event is frozen: fill its __dict__ directly. Same object as Event(...)
                # gives (tests check equality), faster at a million events.
                event.__dict__.update(
                    name=name, tag_id=tag_id, tid=tid, start_ns=start_ns, dur_ns=dur_ns,
                    sm=sm, warp=warp, payload=payload, kind=kind,
                )
                append(event)
        finally:
            if gc_was_enabled:
                gc.enable()
        return out

    @classmethod
    def from_events(
        cls, events: Sequence[Event], *, metadata: dict[str, Any] | None = None
    ) -> "Trace":
        """Columnar trace from ``Event`` objects (e.g. a filtered ``decode_events`` result).

        Tag ids are kept when every id has one name (the normal case); otherwise ids are
        reassigned by name in order of first appearance, so names always survive."""
        count = len(events)
        table = np.zeros(count, dtype=EVENT_DTYPE)
        id_to_name: dict[int, str] = {}
        consistent = True
        for event in events:
            known = id_to_name.setdefault(int(event.tag_id), event.name)
            consistent = consistent and known == event.name
        consistent = (
            consistent
            and len(set(id_to_name.values())) == len(id_to_name)
            and all(0 <= i <= layout.MAX_TAG_ID for i in id_to_name)
        )
        if consistent:
            size = max(id_to_name, default=-1) + 1
            names = [id_to_name.get(i, f"<unknown tag {i}>") for i in range(size)]
            tag_column = [event.tag_id for event in events]
        else:
            ids: dict[str, int] = {}
            tag_column = [ids.setdefault(event.name, len(ids)) for event in events]
            names = list(ids)
        if count:
            table["tag"] = tag_column
            for column in ("tid", "start_ns", "dur_ns", "sm", "warp", "payload"):
                table[column] = [getattr(event, column) for event in events]
            table["kind"] = [kind_code(event.kind) for event in events]
            table["dur_cycles"] = -1
            table["slot"] = np.arange(count)
            table = table[np.argsort(table["start_ns"], kind="stable")]
        return cls(
            events=table,
            tag_names=tuple(names),
            capacity=count,
            attempted=count,
            overflow=0,
            incomplete=0,
            metadata=dict(metadata or {}),
        )


def stack_traces(traces: Sequence[Trace]) -> tuple[list[np.ndarray], tuple[str, ...], int]:
    """Several traces' events ready for one trace (several ranks, several launches): copies
    with one tag table (tags merged by name, in order of first appearance) and part k's tids
    moved up by k times the stride (one more than the largest tid of any part). Returns
    ``(events per part, tag names, stride)``."""
    names: dict[str, int] = {}
    for trace in traces:
        for name in trace.tag_names:
            names.setdefault(name, len(names))
    stride = 1 + max((int(t.events["tid"].max()) for t in traces if len(t.events)), default=0)
    parts = []
    for k, trace in enumerate(traces):
        ev = trace.events.copy()
        remap = np.array([names[n] for n in trace.tag_names] or [0], dtype=np.int32)
        known = ev["tag"] < len(trace.tag_names)
        ev["tag"] = np.where(known, remap[np.minimum(ev["tag"], len(remap) - 1)], ev["tag"])
        ev["tid"] += k * stride
        parts.append(ev)
    return parts, tuple(names), stride
