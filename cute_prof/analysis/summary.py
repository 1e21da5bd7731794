"""Statistics over a decoded :class:`~cute_prof.trace.Trace`: what took how long, how busy
each SM and each tid was, and how long tids sat idle between regions.

Everything is computed over the columnar ``Trace.events`` table, with vectorised numpy or,
where numba is installed (``cute_prof.jit``), a few compiled passes that need no sort and
give exactly the same numbers (:mod:`.summary_tables`). All results are kept in nanoseconds;
only the text tables convert to a readable unit.

Definitions used throughout:

* A *region* is a span record (``KIND_SPAN`` or ``KIND_CLOCK_SPAN``); *instants*
  (``KIND_INSTANT``) are counted per tag but carry no duration; calibration records
  (``KIND_CLOCK_SYNC``) are ignored.
* The *kernel span* runs from the earliest region start / instant to the latest region end.
* *Busy* time of a track (one tid, or one SM) is the length of the union of its regions, so
  nested or overlapping regions are not counted twice.
* A *gap* is the idle time between a region and everything that ran before it on the same
  track: ``start - max(end of all earlier regions)``, kept when it is ``>= 0`` (a region
  starting inside an earlier one is nesting/overlap, not a gap). Back-to-back regions give
  gaps of 0.

This module owns :func:`summarize`, :class:`Summary` and its text; it reads a Trace and may
not import the pipeline model or any exporter.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import jit, layout
from ..trace import Trace
from .summary_tables import (distribution, group_percentiles, PERCENTILES, summarize_fused,
    TAG_STATS_DTYPE, TRACK_STATS_DTYPE)

__all__ = ["Summary", "summarize", "span_mask", "instant_mask", "busy_union"]

_SPAN_KINDS = (layout.KIND_SPAN, layout.KIND_CLOCK_SPAN)


def span_mask(events: np.ndarray) -> np.ndarray:
    """Rows that are regions (have a duration)."""
    kind = events["kind"]
    return (kind == _SPAN_KINDS[0]) | (kind == _SPAN_KINDS[1])


def instant_mask(events: np.ndarray) -> np.ndarray:
    """Rows that are instant markers."""
    return events["kind"] == layout.KIND_INSTANT


# --------------------------------------------------------------------------------------
# vectorised building blocks


def _order_by(major: np.ndarray, minor: np.ndarray) -> np.ndarray:
    """Indices sorting by (major, minor); ties keep their input order, so results that
    depend on the order of equal keys (zero-length regions at one instant) are deterministic.

    Packs both keys into one int64 when their ranges allow it: a single sort is several
    times faster than ``np.lexsort`` on a million rows.
    """
    if major.shape[0] == 0:
        return np.zeros(0, np.int64)
    major = major.astype(np.int64, copy=False)
    minor = minor.astype(np.int64, copy=False)
    major_lo, minor_lo = int(major.min()), int(minor.min())
    major_range = int(major.max()) - major_lo + 1
    if major_range <= (1 << 16) and (minor[1:] >= minor[:-1]).all():
        # rows already in minor order (decoded traces are sorted by start): a stable sort
        # of the narrow major key alone, which numpy does as an O(n) radix sort
        return np.argsort((major - major_lo).astype(np.uint16), kind="stable")
    minor_range = int(minor.max()) - minor_lo + 1
    if major_range * minor_range < (1 << 62):
        return np.argsort((major - major_lo) * minor_range + (minor - minor_lo), kind="stable")
    return np.lexsort((minor, major))


def _group_bounds(sorted_keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start index and length of each run of equal keys in a sorted array."""
    n = sorted_keys.shape[0]
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    starts = np.flatnonzero(np.r_[True, sorted_keys[1:] != sorted_keys[:-1]])
    lengths = np.diff(np.r_[starts, n])
    return starts, lengths


@dataclass
class _UnionResult:
    tracks: np.ndarray  # unique track keys, ascending
    busy_ns: np.ndarray  # per track: union length
    first_ns: np.ndarray  # per track: first start
    last_ns: np.ndarray  # per track: last end
    regions: np.ndarray  # per track: number of regions
    gap_track_index: np.ndarray  # per gap: index into ``tracks``
    gap_ns: np.ndarray  # per gap: idle time before a region (>= 0)


def busy_union(track: np.ndarray, start: np.ndarray, end: np.ndarray) -> _UnionResult:
    """Union length of the intervals ``[start, end)`` of each track, plus the idle gaps.

    Sort by (track, start); a segmented running maximum of ``end`` gives, for every interval,
    the latest end of everything before it on its track. An interval that starts at or after
    that running maximum opens a new busy cluster; the union is the sum of cluster lengths.
    The segmented maximum is a plain ``np.maximum.accumulate`` over ends shifted by a
    per-track offset that keeps tracks apart, so there is no Python loop over tracks.
    """
    track = np.asarray(track, dtype=np.int64)
    start = np.asarray(start, dtype=np.int64)
    end = np.maximum(np.asarray(end, dtype=np.int64), start)
    n = start.shape[0]
    if n == 0:
        z = np.zeros(0, np.int64)
        return _UnionResult(z, z, z, z, z, z, z)
    order = _order_by(track, start)
    track, start, end = track[order], start[order], end[order]
    group_starts, group_lengths = _group_bounds(track)
    tracks = track[group_starts]
    group_index = np.repeat(np.arange(group_starts.shape[0], dtype=np.int64), group_lengths)

    # Work relative to the earliest start so the per-track offsets cannot overflow int64.
    t0 = int(start.min())
    rel_start = start - t0
    rel_end = end - t0
    stride = int(rel_end.max()) + 1
    if stride * (group_starts.shape[0] + 1) < np.iinfo(np.int64).max // 2:
        offset = group_index * stride
        running_end = np.maximum.accumulate(rel_end + offset) - offset
    else:  # absurd time ranges (corrupted data): fall back to one accumulate per track
        running_end = np.empty_like(rel_end)
        for s, length in zip(group_starts.tolist(), group_lengths.tolist()):
            running_end[s:s + length] = np.maximum.accumulate(rel_end[s:s + length])

    previous_end = np.empty_like(running_end)
    previous_end[1:] = running_end[:-1]
    first_in_group = np.zeros(n, dtype=bool)
    first_in_group[group_starts] = True
    opens_cluster = first_in_group | (rel_start >= previous_end)

    cluster_first = np.flatnonzero(opens_cluster)
    cluster_last = np.r_[cluster_first[1:], n] - 1
    cluster_length = running_end[cluster_last] - rel_start[cluster_first]
    # Exact int64 sums (float weights round ends near 2**63 past the int64 range); every
    # track opens at least one cluster and clusters of one track are disjoint, so a track's
    # sum stays within its time range.
    busy = np.add.reduceat(cluster_length, np.searchsorted(cluster_first, group_starts))

    is_gap = opens_cluster & ~first_in_group
    gap_ns = rel_start[is_gap] - previous_end[is_gap]
    group_last = group_starts + group_lengths - 1
    return _UnionResult(
        tracks=tracks,
        busy_ns=busy.astype(np.int64),
        first_ns=start[group_starts],
        last_ns=running_end[group_last] + t0,
        regions=group_lengths.astype(np.int64),
        gap_track_index=group_index[is_gap],
        gap_ns=gap_ns.astype(np.int64),
    )


def _track_table(
    keys_spans: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    keys_instants: np.ndarray,
    kernel_start: int,
    kernel_span: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Per-track busy/gap table and the flat array of all gaps."""
    union = busy_union(keys_spans, start, end)
    instant_tracks, instant_counts = np.unique(keys_instants.astype(np.int64), return_counts=True)
    tracks = np.union1d(union.tracks, instant_tracks)
    table = np.zeros(tracks.shape[0], dtype=TRACK_STATS_DTYPE)
    table["track"] = tracks
    where = np.searchsorted(tracks, union.tracks)
    table["regions"][where] = union.regions
    table["busy_ns"][where] = union.busy_ns
    table["first_ns"][where] = union.first_ns - kernel_start
    table["last_ns"][where] = union.last_ns - kernel_start
    table["instants"][np.searchsorted(tracks, instant_tracks)] = instant_counts
    n_union = union.tracks.shape[0]
    gap_count = np.bincount(union.gap_track_index, minlength=n_union)
    gap_total = np.bincount(union.gap_track_index, weights=union.gap_ns, minlength=n_union)
    gap_max = np.zeros(n_union, np.int64)
    np.maximum.at(gap_max, union.gap_track_index, union.gap_ns)
    table["gap_count"][where] = gap_count
    table["gap_total_ns"][where] = np.rint(gap_total).astype(np.int64)
    table["gap_max_ns"][where] = gap_max
    table["busy_fraction"] = table["busy_ns"] / kernel_span if kernel_span > 0 else 0.0
    return table, union.gap_ns


def _tag_table(tags: np.ndarray, durations: np.ndarray, instant_tags: np.ndarray) -> np.ndarray:
    order = _order_by(tags, durations)
    tags_sorted, durs_sorted = tags[order], durations[order]
    starts, lengths = _group_bounds(tags_sorted)
    span_tags = tags_sorted[starts]
    instant_tag_ids, instant_counts = np.unique(instant_tags, return_counts=True)
    all_tags = np.union1d(span_tags, instant_tag_ids)
    table = np.zeros(all_tags.shape[0], dtype=TAG_STATS_DTYPE)
    table["tag"] = all_tags
    where = np.searchsorted(all_tags, span_tags)
    if starts.shape[0]:
        totals = np.add.reduceat(durs_sorted, starts)
        table["count"][where] = lengths
        table["total_ns"][where] = totals
        table["mean_ns"][where] = totals / lengths
        table["min_ns"][where] = durs_sorted[starts]
        table["max_ns"][where] = durs_sorted[starts + lengths - 1]
        for q in PERCENTILES:
            table[f"p{q}_ns"][where] = group_percentiles(durs_sorted, starts, lengths, q)
        grand_total = table["total_ns"].sum()
        if grand_total > 0:
            table["share"] = table["total_ns"] / grand_total
    table["instants"][np.searchsorted(all_tags, instant_tag_ids)] = instant_counts
    return table


# --------------------------------------------------------------------------------------
# the summary object


@dataclass
class Summary:
    """Everything :func:`summarize` found. Arrays are numpy structured arrays (see
    ``TAG_STATS_DTYPE`` / ``TRACK_STATS_DTYPE``), all times in nanoseconds."""

    tags: np.ndarray  # TAG_STATS_DTYPE, one row per tag seen
    tag_names: dict[int, str]  # tag id -> display name
    sms: np.ndarray  # TRACK_STATS_DTYPE, track = SM id
    tids: np.ndarray  # TRACK_STATS_DTYPE, track = tid
    gaps: dict[str, float | int]  # distribution of idle gaps between regions of one tid
    kernel_start_ns: int
    kernel_end_ns: int
    n_records: int  # rows in the trace
    n_regions: int
    n_instants: int
    capacity: int
    attempted: int
    overflow: int
    incomplete: int
    metadata: dict[str, Any] = field(default_factory=dict)
    invalid: int = 0  # complete records that break a validity rule (decode.INVALID_REASONS)
    invalid_reasons: dict[str, int] = field(default_factory=dict)

    @property
    def kernel_span_ns(self) -> int:
        return max(0, self.kernel_end_ns - self.kernel_start_ns)

    def tag_name(self, tag: int) -> str:
        return self.tag_names.get(int(tag), f"<unknown tag {int(tag)}>")

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-serialisable data (lists of row dicts, Python numbers)."""

        def rows(table: np.ndarray, extra=None) -> list[dict[str, Any]]:
            columns = {name: table[name].tolist() for name in table.dtype.names}
            out = [dict(zip(columns, values)) for values in zip(*columns.values())]
            if extra:
                for row in out:
                    row.update(extra(row))
            return out

        return {
            "records": self.n_records,
            "regions": self.n_regions,
            "instants": self.n_instants,
            "capacity": self.capacity,
            "attempted": self.attempted,
            "overflow": self.overflow,
            "incomplete": self.incomplete,
            "invalid": self.invalid,
            "invalid_reasons": dict(self.invalid_reasons),
            "kernel_start_ns": self.kernel_start_ns,
            "kernel_end_ns": self.kernel_end_ns,
            "kernel_span_ns": self.kernel_span_ns,
            "tags": rows(self.tags, lambda row: {"name": self.tag_name(row["tag"])}),
            "sms": rows(self.sms),
            "tids": rows(self.tids),
            "gaps": dict(self.gaps),
            "metadata": {k: _jsonable(v) for k, v in self.metadata.items()},
        }

    def format_table(self, *, max_rows: int = 8, unit: str | None = None) -> str:
        """Aligned text tables: per-tag durations, busy fraction per SM and per tid, gaps.

        ``max_rows`` bounds the SM and tid listings (the least and the most busy are shown);
        ``unit`` forces ``"ns"``, ``"us"`` or ``"ms"`` instead of picking one from the data.
        """
        return _format_summary(self, max_rows=max_rows, unit=unit)

    def __str__(self) -> str:
        return self.format_table()


def _tag_name(trace: Trace, tag: int) -> str:
    names = tuple(trace.tag_names or ())
    if 0 <= tag < len(names) and names[tag]:
        return names[tag]
    return f"<unknown tag {int(tag)}>"


def summarize(trace: Trace) -> Summary:
    """Per-tag duration statistics, busy fractions per SM and tid, idle gaps, loss counts."""
    events = trace.events
    fused = summarize_fused(events) if jit.enabled() else None
    if fused is not None:
        tags, tids, sms, gaps, kernel_start, kernel_end, n_regions, n_instants = fused
        return _make_summary(trace, tags, tids, sms, gaps, kernel_start, kernel_end,
                             n_regions, n_instants)
    # only the columns the summary reads (copying whole rows doubles the peak memory)
    is_span, is_instant = span_mask(events), instant_mask(events)
    spans = {name: events[name][is_span] for name in ("start_ns", "dur_ns", "tag", "tid", "sm")}
    instants = {name: events[name][is_instant] for name in ("start_ns", "tag", "tid", "sm")}

    span_start = spans["start_ns"]
    span_end = span_start + np.maximum(spans["dur_ns"], 0)
    candidates_start = [a.min() for a in (span_start, instants["start_ns"]) if a.shape[0]]
    candidates_end = [a.max() for a in (span_end, instants["start_ns"]) if a.shape[0]]
    kernel_start = int(min(candidates_start)) if candidates_start else 0
    kernel_end = int(max(candidates_end)) if candidates_end else 0
    kernel_span = kernel_end - kernel_start

    tags = _tag_table(
        spans["tag"].astype(np.int64), spans["dur_ns"], instants["tag"].astype(np.int64)
    )
    tids, tid_gaps = _track_table(
        spans["tid"], span_start, span_end, instants["tid"], kernel_start, kernel_span
    )
    sms, _ = _track_table(
        spans["sm"], span_start, span_end, instants["sm"], kernel_start, kernel_span
    )
    return _make_summary(trace, tags, tids, sms, distribution(tid_gaps), kernel_start,
                         kernel_end, int(spans["start_ns"].shape[0]),
                         int(instants["start_ns"].shape[0]))


def _make_summary(trace, tags, tids, sms, gaps, kernel_start, kernel_end, n_regions,
                  n_instants) -> Summary:
    tag_names = {int(t): _tag_name(trace, t) for t in tags["tag"].tolist()}
    return Summary(
        tags=tags,
        tag_names=tag_names,
        sms=sms,
        tids=tids,
        gaps=gaps,
        kernel_start_ns=kernel_start,
        kernel_end_ns=kernel_end,
        n_records=int(trace.events.shape[0]),
        n_regions=n_regions,
        n_instants=n_instants,
        capacity=int(trace.capacity),
        attempted=int(trace.attempted),
        overflow=int(trace.overflow),
        incomplete=int(trace.incomplete),
        metadata=dict(trace.metadata or {}),
        invalid=int(getattr(trace, "invalid", 0) or 0),
        invalid_reasons=dict(getattr(trace, "invalid_reasons", None) or {}),
    )


# --------------------------------------------------------------------------------------
# text formatting

_UNIT_SCALE = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}
_UNIT_LABEL = {"ns": "ns", "us": "µs", "ms": "ms", "s": "s"}


def pick_unit(typical_ns: float) -> str:
    """The unit that shows ``typical_ns`` with 1 to 4 integer digits."""
    typical_ns = abs(float(typical_ns))
    if typical_ns < 1e4:
        return "ns" if typical_ns < 1e3 else "us"
    if typical_ns < 1e7:
        return "us"
    return "ms" if typical_ns < 1e10 else "s"


def format_duration(ns: float, unit: str | None = None) -> str:
    """``1234567`` -> ``"1.235 ms"``."""
    unit = unit or pick_unit(ns)
    if unit == "ns":
        return f"{ns:,.0f} ns"
    return f"{ns / _UNIT_SCALE[unit]:,.3f} {_UNIT_LABEL[unit]}"


def _fmt_time(ns: float, unit: str) -> str:
    if unit == "ns":
        return f"{ns:,.0f}"
    return f"{ns / _UNIT_SCALE[unit]:,.3f}"


def _render(headers: list[str], rows: list[list[str]], left: int = 1) -> list[str]:
    """Right-aligned columns (the first ``left`` columns left-aligned)."""
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row)]

    def line(cells: list[str]) -> str:
        parts = [
            cell.ljust(w) if i < left else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(cells, widths))
        ]
        return "  ".join(parts).rstrip()

    return [line(headers), line(["-" * w for w in widths]), *[line(r) for r in rows]]


def _pct(x: float) -> str:
    return f"{100.0 * x:.1f}%"


def _track_rows(table: np.ndarray, label: str, max_rows: int, unit: str) -> list[str]:
    if table.shape[0] == 0:
        return [f"  (no {label}s)"]
    busy = table["busy_fraction"]
    p10, p50, p90 = np.percentile(busy, [10, 50, 90])
    lines = [
        f"  {table.shape[0]:,} {label}s: busy min {_pct(busy.min())}  p10 {_pct(p10)}  "
        f"p50 {_pct(p50)}  p90 {_pct(p90)}  max {_pct(busy.max())}  mean {_pct(busy.mean())}"
    ]
    order = np.argsort(busy, kind="stable")
    if table.shape[0] <= max_rows:
        shown, skipped_after = order, None
    else:
        low = max_rows // 2
        shown = np.r_[order[:low], order[-(max_rows - low):]]
        skipped_after = low
    headers = [label, "busy", "busy " + _UNIT_LABEL[unit], "regions", "instants",
               "first", "last", "gaps", "gap total", "gap max"]
    rows = []
    for i, idx in enumerate(shown.tolist()):
        if skipped_after is not None and i == skipped_after:
            rows.append(["...", "", "", "", "", "", "", "", "", ""])
        r = table[idx]
        rows.append([
            str(int(r["track"])), _pct(r["busy_fraction"]), _fmt_time(r["busy_ns"], unit),
            f"{int(r['regions']):,}", f"{int(r['instants']):,}",
            _fmt_time(r["first_ns"], unit), _fmt_time(r["last_ns"], unit),
            f"{int(r['gap_count']):,}", _fmt_time(r["gap_total_ns"], unit),
            _fmt_time(r["gap_max_ns"], unit),
        ])
    lines += ["  " + s for s in _render(headers, rows)]
    return lines


def _format_summary(summary: Summary, *, max_rows: int, unit: str | None) -> str:
    if unit is not None and unit not in _UNIT_SCALE:
        raise ValueError(f"unit must be one of {sorted(_UNIT_SCALE)}, got {unit!r}")
    lines: list[str] = []
    span = summary.kernel_span_ns
    lines.append(
        f"cute_prof summary: {summary.n_records:,} records "
        f"({summary.n_regions:,} regions, {summary.n_instants:,} instants) "
        f"over a kernel span of {format_duration(span)}"
    )
    lines.append(
        f"  buffer: capacity {summary.capacity:,}, attempted {summary.attempted:,}, "
        f"overflow {summary.overflow:,}, incomplete {summary.incomplete:,}"
    )
    if summary.overflow:
        lines.append(
            f"  WARNING: {summary.overflow:,} records did not fit in the buffer and are missing "
            "from every statistic below; allocate a larger buffer (max_events)."
        )
    if summary.incomplete:
        lines.append(
            f"  WARNING: {summary.incomplete:,} slots were claimed but never written "
            "(kernel aborted or killed mid-record)."
        )
    if summary.invalid:
        reasons = ", ".join(f"{n:,} {r}" for r, n in summary.invalid_reasons.items())
        lines.append(
            f"  WARNING: {summary.invalid:,} records are invalid"
            + (f" ({reasons})" if reasons else "")
            + ": corrupted buffer or a newer cute_prof; they were left out."
        )
    device = summary.metadata.get("device") or summary.metadata.get("device_name")
    if device:
        lines.append(f"  device: {device}")

    tags = summary.tags
    tag_unit = unit or pick_unit(np.median(tags["p50_ns"][tags["count"] > 0])
                                 if (tags["count"] > 0).any() else 0)
    lines.append("")
    lines.append(f"Regions per tag (durations in {_UNIT_LABEL[tag_unit]})")
    if tags.shape[0] == 0:
        lines.append("  (no records)")
    else:
        # tags of instants alone (a zero-edit trace's commits and releases) are no regions:
        # they get their own table below, with their counts
        regions = tags[tags["count"] > 0]
        headers = ["tag", "count", "total", "mean", "min", "p50", "p90", "p99", "max",
                   "share", "instants"]
        rows = []
        for r in regions[np.argsort(-regions["total_ns"], kind="stable")]:
            times = [_fmt_time(r[f"{k}_ns"], tag_unit)
                     for k in ("total", "mean", "min", "p50", "p90", "p99", "max")]
            rows.append([summary.tag_name(r["tag"]), f"{int(r['count']):,}", *times,
                         _pct(r["share"]), f"{int(r['instants']):,}"])
        lines += ["  " + s for s in _render(headers, rows)] if rows else ["  (no regions)"]
        instants = tags[(tags["count"] == 0) & (tags["instants"] > 0)]
        if instants.shape[0]:
            lines.append("")
            lines.append("Instants per tag (tags with no region)")
            rows = [[summary.tag_name(r["tag"]), f"{int(r['instants']):,}"]
                    for r in instants[np.argsort(-instants["instants"], kind="stable")]]
            lines += ["  " + s for s in _render(["tag", "count"], rows)]

    track_unit = unit or pick_unit(span)
    lines.append("")
    lines.append(
        f"Busy fraction per SM (union of regions over the {format_duration(span)} kernel span; "
        f"times in {_UNIT_LABEL[track_unit]} from kernel start)"
    )
    lines += _track_rows(summary.sms, "sm", max_rows, track_unit)
    lines.append("")
    lines.append("Busy fraction per tid")
    lines += _track_rows(summary.tids, "tid", max_rows, track_unit)

    gaps = summary.gaps
    gap_unit = unit or pick_unit(gaps["p50_ns"])
    lines.append("")
    lines.append(
        f"Idle gaps between consecutive regions of one tid (in {_UNIT_LABEL[gap_unit]})"
    )
    if gaps["count"] == 0:
        lines.append("  (no gaps: every tid has at most one busy stretch)")
    else:
        headers = ["gaps", "total", "mean", "min", "p50", "p90", "p99", "max"]
        row = [f"{gaps['count']:,}"] + [
            _fmt_time(gaps[k], gap_unit)
            for k in ("total_ns", "mean_ns", "min_ns", "p50_ns", "p90_ns", "p99_ns", "max_ns")
        ]
        lines += ["  " + s for s in _render(headers, [row], left=0)]
    return "\n".join(lines)


def _jsonable(value: Any) -> Any:
    """Metadata values as JSON-friendly Python objects."""
    if isinstance(value, (str, bool, int, float)) or value is None:
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return str(value)
