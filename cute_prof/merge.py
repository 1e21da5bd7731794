"""Our intra-kernel tracks inside the PyTorch profiler's own trace: one file with CPU ops,
CUDA kernels (CUPTI) and, inside each instrumented kernel's slice, the warps' regions.

``%globaltimer`` and the profiler's clock are different time bases, so the offset is
estimated per trace from the data: the instrumented launches (``Trace.launches``, in time
order) are matched to the profiler's kernel slices whose name matches ``kernel_pattern``
(in time order, at the shift that makes the per-launch offsets agree best), each matched
launch gives the offset that centres its records in its slice, and the median of those is
the trace's offset. The report gives the residuals (how far each launch's own offset is from
the median) and how far each launch's records stay inside its slice.

Timestamps of the profiler's trace are read as exact decimals (they are microseconds with
nanosecond digits, and as floats lose precision at epoch-scale values); the merged file is
rebased to the earliest timestamp so that floats keep nanoseconds. ``cute_prof_time_base_us``
in its metadata holds the base.

Owns the merge into the PyTorch profiler's trace (stage 6); it may not import the CLI.
"""

from __future__ import annotations

import copy
import gzip
import json
import re
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

import numpy as np

from .errors import ProfileBufferError
from .files import atomic_open, check_output_path
from .trace import Trace, kind_name

__all__ = [
    "MergeReport",
    "merge_torch_trace",
    "load_torch_trace",
    "kernel_pattern_of",
    "DEFAULT_KERNEL_PATTERN",
]

# CuTe DSL kernels appear in CUPTI as "kernel_cutlass_<function>_<hash>..."
DEFAULT_KERNEL_PATTERN = r"^kernel_cutlass"
# our tracks get thread ids above every real one, so they never share a track with CUPTI's
_TRACK_ID_BASE = 1 << 40


@dataclass
class MergeReport:
    """How the merge aligned the two clocks, in nanoseconds."""

    offset_ns: int  # profiler time = %globaltimer + offset_ns
    matched: int  # instrumented launches matched to kernel slices
    slice_shift: int  # index of the first kernel slice matched
    residual_ns: np.ndarray  # per launch: its own centring offset minus offset_ns
    start_margin_ns: np.ndarray  # per launch: first record start - slice start (>= 0 inside)
    end_margin_ns: np.ndarray  # per launch: slice end - last record end (>= 0 inside)
    kernels: list[str] = field(default_factory=list)  # matched slice names, per launch
    output: Path | None = None

    @property
    def max_abs_residual_ns(self) -> float:
        return float(np.abs(self.residual_ns).max()) if self.matched else 0.0

    @property
    def worst_margin_ns(self) -> int:
        """The smallest margin over all launches (negative: some record lies outside)."""
        if not self.matched:
            return 0
        return int(min(self.start_margin_ns.min(), self.end_margin_ns.min()))

    def describe(self) -> str:
        return (
            f"merged {self.matched} launches: offset {self.offset_ns} ns, residual max "
            f"{self.max_abs_residual_ns / 1e3:.3f} us, records inside their CUPTI kernel slice "
            f"with >= {self.worst_margin_ns / 1e3:.3f} us to spare"
            + (f"; wrote {self.output}" if self.output else "")
        )


def load_torch_trace(source) -> dict:
    """A torch.profiler Chrome trace (path or already-loaded dict, floats as ``Decimal``); a
    path ending in ``.gz`` is read gzipped (``export_chrome_trace("t.json.gz")`` writes so)."""
    if isinstance(source, dict):
        return copy.deepcopy(source)  # the merge annotates slices; leave the caller's alone
    try:
        opener = gzip.open if str(source).endswith(".gz") else open
        with opener(source, "rt", encoding="utf-8") as handle:
            data = json.load(handle, parse_float=Decimal)
    except (OSError, ValueError, EOFError) as exc:
        raise ProfileBufferError(f"cannot read the torch.profiler trace {str(source)!r}: {exc}") from None
    if isinstance(data, list):
        data = {"traceEvents": data}
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise ProfileBufferError(
            f"{str(source)!r} is not a Chrome trace (no traceEvents list); pass the file "
            "written by torch.profiler's export_chrome_trace"
        )
    return data


def kernel_pattern_of(trace: Trace) -> str:
    """A regex for the CUPTI names of ``trace``'s kernels: their exact names when every launch
    carries one, else :data:`DEFAULT_KERNEL_PATTERN`."""
    names = {launch.get("kernel") for launch in trace.launches}
    if names and None not in names and "" not in names:
        return "^(?:" + "|".join(re.escape(str(name)) for name in sorted(names)) + ")$"
    return DEFAULT_KERNEL_PATTERN


def _ns(value) -> int:
    return int(Decimal(str(value)) * 1000)


def _kernel_slices(events: list, pattern: str) -> tuple[np.ndarray, np.ndarray, list[dict]]:
    regex = re.compile(pattern)
    slices = [
        e for e in events
        if isinstance(e, dict) and e.get("ph") == "X" and e.get("cat") == "kernel"
        and regex.search(str(e.get("name", "")))
    ]
    start = np.array([_ns(e["ts"]) for e in slices], dtype=np.int64)
    end = start + np.array([_ns(e.get("dur", 0)) for e in slices], dtype=np.int64)
    order = np.argsort(start, kind="stable")
    return start[order], end[order], [slices[i] for i in order.tolist()]


def _best_shift(first: np.ndarray, last: np.ndarray, slice_start, slice_end) -> int:
    """The index k such that launches map to slices k..k+n-1 most consistently."""
    n, m = first.shape[0], slice_start.shape[0]
    centre = (slice_start + slice_end) // 2
    ours = (first + last) // 2
    windows = np.lib.stride_tricks.sliding_window_view(centre, n)  # (m-n+1, n)
    offsets = windows - ours[None, :]
    spread = offsets.max(axis=1) - offsets.min(axis=1)
    return int(np.argmin(spread)) if m > n else 0


def _match_by_name(first: np.ndarray, last: np.ndarray, names: list[str], slices: list[dict],
                   slice_start: np.ndarray, slice_end: np.ndarray) -> np.ndarray | None:
    """Per launch, its kernel slice, where the profiler also saw launches left unrecorded: the
    offset proposed by one of the first launch's same-name slices whose matches (each launch
    to the nearest same-name slice) lie closest. None where a name has no slice."""
    centre = (slice_start + slice_end) // 2
    ours = (first + last) // 2
    slice_names = np.array([str(s.get("name")) for s in slices], dtype=object)
    by_name = {name: np.flatnonzero(slice_names == name) for name in set(names)}
    if any(rows.size == 0 for rows in by_name.values()):
        return None
    best, best_cost = None, None
    for candidate in by_name[names[0]]:
        offset = centre[candidate] - ours[0]
        chosen = np.empty(len(names), dtype=np.int64)
        for name, rows in by_name.items():
            mine = np.flatnonzero(np.array(names, dtype=object) == name)
            want = ours[mine] + offset
            at = np.clip(np.searchsorted(centre[rows], want), 1, max(rows.size - 1, 1))
            left = rows[np.maximum(at - 1, 0)]
            right = rows[np.minimum(at, rows.size - 1)]
            closer = np.abs(centre[left] - want) <= np.abs(centre[right] - want)
            chosen[mine] = np.where(closer, left, right)
        cost = float(np.abs(centre[chosen] - ours - offset).sum())
        if best_cost is None or cost < best_cost:
            best, best_cost = chosen, cost
    return best


def merge_torch_trace(
    torch_trace,
    trace: Trace,
    output=None,
    *,
    kernel_pattern: str | None = None,
) -> MergeReport:
    """Align ``trace`` (decoded from our buffer, or an IKET capture) with a torch.profiler
    Chrome trace and write both into ``output`` (Chrome JSON; None: only compute the report).

    Every launch in ``trace.launches`` must correspond to one kernel slice whose name
    matches ``kernel_pattern``; the profiler may hold more such slices (the launches are
    matched to the consecutive run of slices that fits best, or, where each launch names its
    kernel, to the same-name slices that fit best: a ``cute-prof record`` launch range). ``kernel_pattern=None``: the
    launches' own kernel names where the trace knows them all (IKET captures do), else
    :data:`DEFAULT_KERNEL_PATTERN`. When a file is written, each launch dict of ``trace``
    gets its CUPTI kernel name under ``"kernel"``."""
    if kernel_pattern is None:
        kernel_pattern = kernel_pattern_of(trace)
    target = check_output_path(output) if output is not None else None
    data = load_torch_trace(torch_trace)
    events = data["traceEvents"]
    slice_start, slice_end, slices = _kernel_slices(events, kernel_pattern)
    launches = sorted(trace.launches, key=lambda launch: launch["first_ns"])
    if not launches:
        raise ProfileBufferError("the cute_prof trace holds no records, so nothing can be merged")
    if slice_start.shape[0] < len(launches):
        raise ProfileBufferError(
            f"the torch.profiler trace has {slice_start.shape[0]} kernel slices matching "
            f"{kernel_pattern!r} but our trace has {len(launches)} launches; profile the same "
            "launches (or pass kernel_pattern= to match the instrumented kernels' names)"
        )
    first = np.array([launch["first_ns"] for launch in launches], dtype=np.int64)
    last = np.array([launch["last_ns"] for launch in launches], dtype=np.int64)
    n = first.shape[0]
    names = [launch.get("kernel") for launch in launches]
    picked = None
    if all(names) and slice_start.shape[0] > n:  # named launches, fewer than the profiler saw
        picked = _match_by_name(first, last, names, slices, slice_start, slice_end)
    if picked is None:
        shift = _best_shift(first, last, slice_start, slice_end)
        picked = np.arange(shift, shift + n)
    shift = int(picked.min())
    s_start, s_end = slice_start[picked], slice_end[picked]
    per_launch = ((s_start + s_end) - (first + last)) // 2
    offset = int(np.median(per_launch))
    matched = [slices[i] for i in picked.tolist()]
    report = MergeReport(
        offset_ns=offset,
        matched=n,
        slice_shift=shift,
        residual_ns=per_launch - offset,
        start_margin_ns=first + offset - s_start,
        end_margin_ns=s_end - (last + offset),
        kernels=[str(s.get("name")) for s in matched],
    )
    if target is not None:
        launch_slice = {launch["index"]: s for launch, s in zip(launches, matched)}
        _write_merged(data, trace, launch_slice, offset, target, report)
        report.output = target
    return report


def _our_events(trace: Trace, launch_slice: dict, offset: int, base_ns: int) -> list[dict]:
    ev = trace.events
    if ev.shape[0] == 0:
        return []
    name_index, names = trace.name_table()
    known = np.isin(ev["launch"], np.array(list(launch_slice), dtype=np.int64))
    # one track per (kernel slice's process, stream, our tid)
    slice_of = {i: (s.get("pid", 0), (s.get("args") or {}).get("stream", s.get("tid", 0)))
                for i, s in launch_slice.items()}
    launch_ids = sorted(slice_of)
    stream_keys = sorted({slice_of[i] for i in launch_ids}, key=str)
    stream_code = np.zeros(max(launch_ids) + 1, dtype=np.int64)
    for code, key in enumerate(stream_keys):
        for i in launch_ids:
            if slice_of[i] == key:
                stream_code[i] = code
    rows = np.flatnonzero(known)
    tids, tid_rank = np.unique(ev["tid"][rows], return_inverse=True)
    track = _TRACK_ID_BASE + stream_code[ev["launch"][rows]] * (1 << 32) + tid_rank.reshape(-1)
    start_us = (ev["start_ns"][rows] + offset - base_ns) / 1e3
    dur_us = ev["dur_ns"][rows] / 1e3
    kinds = np.array([kind_name(k) for k in range(256)], dtype=object)[ev["kind"][rows]]
    names_of = np.array(names, dtype=object)[name_index[rows]]
    pid_of = {i: slice_of[i][0] for i in launch_ids}
    out = []
    columns = zip(names_of.tolist(), track.tolist(), start_us.tolist(), dur_us.tolist(),
                  ev["launch"][rows].tolist(), ev["tid"][rows].tolist(),
                  ev["payload"][rows].tolist(), ev["sm"][rows].tolist(),
                  ev["warp"][rows].tolist(), kinds.tolist())
    for name, tr, ts, dur, launch, tid, payload, sm, warp, kind in columns:
        event = {"name": name, "cat": "cute_prof", "pid": pid_of[launch], "tid": tr, "ts": ts,
                 "args": {"launch": launch, "tid": tid, "payload": payload, "sm": sm,
                          "warp": warp, "kind": kind}}
        if kind == "instant":
            event.update(ph="i", s="t")
        else:
            event.update(ph="X", dur=dur)
        out.append(event)
    # track names: "stream 7 · cute_prof tid 3", sorted right after the streams
    for tr in np.unique(track).tolist():
        code, rank = divmod(tr - _TRACK_ID_BASE, 1 << 32)
        pid, stream = stream_keys[code]
        label = f"stream {stream} · cute_prof {trace.track_name(int(tids[rank]))}"
        out.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tr, "args": {"name": label}})
        out.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tr,
                    "args": {"sort_index": 1_000_000 + rank}})
    return out


def _plain(value):
    """Decimals (exact timestamps as read) back to floats for writing."""
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _write_merged(data: dict, trace: Trace, launch_slice: dict, offset: int, target: Path,
                  report: MergeReport) -> None:
    events = data["traceEvents"]
    stamps = [Decimal(str(e["ts"])) for e in events if isinstance(e, dict) and "ts" in e]
    base_us = int(min(stamps)) if stamps else 0
    base_ns = base_us * 1000
    for index, s in launch_slice.items():
        s.setdefault("args", {})["cute_prof_launch"] = index
        trace.launches[index]["kernel"] = s.get("name")
    merged_events = []
    for event in events:
        if isinstance(event, dict) and "ts" in event:
            event = dict(event)
            event["ts"] = Decimal(str(event["ts"])) - base_us
        merged_events.append(event)
    merged = {k: v for k, v in data.items() if k != "traceEvents"}
    merged["traceEvents"] = merged_events + _our_events(trace, launch_slice, offset, base_ns)
    if "baseTimeNanoseconds" in merged:
        merged["baseTimeNanoseconds"] = int(merged["baseTimeNanoseconds"]) + base_ns
    merged["cute_prof_time_base_us"] = base_us
    merged["cute_prof_merge"] = {
        "offset_ns": offset, "launches": report.matched,
        "max_abs_residual_ns": report.max_abs_residual_ns,
        "worst_margin_ns": report.worst_margin_ns,
    }
    with atomic_open(target, "w") as handle:
        json.dump(_plain(merged), handle)
