"""Decoded traces: a columnar table (the form every analysis and exporter reads) and the
per-event ``Event`` view built from it for seed-compatible code."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

# One row per decoded record, sorted by start_ns. ``dur_ns`` is already in nanoseconds for
# every kind (clock-mode cycles are converted during decode; ``dur_cycles`` keeps the raw
# count, -1 where the record was timed with %globaltimer). ``slot`` is the buffer slot.
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
    ]
)


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
