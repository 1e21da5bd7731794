"""A trace's event columns in one compressed .npz, times relative to its first record: the
compact form the GPU benches bring back (a few bytes per record, where a re-encoded buffer
keeps every slot of the launch's capacity)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from cute_prof.trace import EVENT_DTYPE, Trace


def save_columns(path, trace, **meta) -> Path:
    ev = trace.events
    t0 = int(ev["start_ns"].min(initial=0))
    header = {**(trace.metadata or {}), **meta, "tag_names": list(trace.tag_names),
              "attempted": int(trace.attempted), "overflow": int(trace.overflow), "t0_ns": t0}
    np.savez_compressed(path, start_ns=ev["start_ns"] - t0, dur_ns=ev["dur_ns"].astype(np.int32),
                        tag=ev["tag"].astype(np.int16), tid=ev["tid"], payload=ev["payload"],
                        sm=ev["sm"], meta=np.array(json.dumps(header, default=str)))
    return Path(path)


def load_columns(path) -> Trace:
    z = np.load(path, allow_pickle=False)
    meta = json.loads(str(z["meta"]))
    ev = np.zeros(z["start_ns"].size, dtype=EVENT_DTYPE)
    for col in ("start_ns", "dur_ns", "tag", "tid", "payload", "sm"):
        ev[col] = z[col]
    return Trace(events=ev, tag_names=tuple(meta["tag_names"]), capacity=ev.size,
                 attempted=meta["attempted"], overflow=meta.get("overflow", 0), incomplete=0,
                 metadata=meta)
