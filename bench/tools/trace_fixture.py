"""Cut a committed GPU trace down to a few CTAs, for a small test fixture.

    python bench/tools/trace_fixture.py TRACE.npz OUT.npz --ctas 8 [--tid-stride 16]

TRACE is either a cute_prof buffer file (``cute_prof.storage``) or the column file that
``bench/whatif_gpu.py`` writes. OUT is a cute_prof buffer file with every record of the
first ``--ctas`` CTAs (tid // tid_stride), so per-CTA analyses see whole CTAs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from cute_prof.storage import load_trace, save_trace  # noqa: E402
from cute_prof.trace import EVENT_DTYPE, Trace  # noqa: E402


def read_any(path: Path) -> Trace:
    with np.load(path, allow_pickle=False) as z:
        if "start_ns" not in z.files:
            return load_trace(path)
        meta = json.loads(str(z["meta"]))
        ev = np.zeros(z["start_ns"].size, dtype=EVENT_DTYPE)
        for col in ("start_ns", "dur_ns", "tag", "tid", "payload", "sm"):
            ev[col] = z[col]
    return Trace(events=ev, tag_names=tuple(meta["tag_names"]), capacity=ev.size,
                 attempted=ev.size, overflow=0, incomplete=0, metadata=meta)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--ctas", type=int, default=8, help="CTAs to keep (default 8)")
    parser.add_argument("--tid-stride", type=int, default=16, help="tids per CTA (default 16)")
    args = parser.parse_args(argv)
    trace = read_any(args.trace)
    ev = trace.events
    keep = ev[ev["tid"] // args.tid_stride < args.ctas]
    keep = keep[np.argsort(keep["start_ns"], kind="stable")]
    small = Trace(events=keep, tag_names=trace.tag_names, capacity=keep.size,
                  attempted=keep.size, overflow=0, incomplete=0,
                  metadata={**(trace.metadata or {}), "fixture_of": args.trace.name,
                            "fixture_ctas": args.ctas})
    save_trace(args.out, small, compress=True)
    print(f"{args.out}: {keep.size} of {ev.size} records, {args.out.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
