"""Reader-side checks of written traces, shared by the tests and the fuzz harness."""

from __future__ import annotations

import gzip
import json
from decimal import Decimal
from pathlib import Path



def _whole_ns(micros) -> int:
    """Microseconds (a Decimal, or a number from an already-parsed trace) as whole ns."""
    return int((Decimal(str(micros)) * 1000).to_integral_value())


def json_nesting_violations(trace) -> list[str]:
    """Tracks of a Chrome trace-event JSON whose complete (``X``) events do not nest strictly.

    ``trace``: a path or the parsed object. The format requires duration events on one
    ``(pid, tid)`` to nest; Perfetto's importer mis-draws or drops those that partially
    overlap. Returns one line per offending track (empty: the trace nests)."""
    if not isinstance(trace, (dict, list)):
        # decimals parsed exactly: µs as doubles lose whole ns beyond ~2**53 ns (104 days)
        path = Path(trace)
        text = (gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz"
                else path.read_text())
        trace = json.loads(text, parse_float=Decimal)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    by_track: dict[tuple, list[tuple[float, float]]] = {}
    for event in events:
        if event.get("ph") == "X":
            # timestamps are microseconds with ns decimals: compare in whole ns, so that
            # back-to-back slices (132.576 + 0.032 vs 132.608) do not cross by rounding
            key = (event.get("pid"), event.get("tid"))
            start = _whole_ns(event["ts"])
            by_track.setdefault(key, []).append((start, start + _whole_ns(event.get("dur", 0))))
    problems = []
    for key, spans in by_track.items():
        stack: list[int] = []  # Python ints: timestamps near the int64 limit stay exact
        for start, end in sorted(spans, key=lambda span: (span[0], span[0] - span[1])):
            while stack and stack[-1] <= start:
                stack.pop()
            if stack and end > stack[-1]:
                problems.append(f"pid {key[0]} tid {key[1]}: [{start}, {end}] crosses the end "
                                f"{stack[-1]} of an enclosing slice")
                break
            stack.append(end)
    return problems
