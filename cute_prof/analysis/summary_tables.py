"""The tables behind :func:`~cute_prof.analysis.summary.summarize`: the dtypes of the per-tag
and per-track tables, distributions with their percentiles, and the fused passes that fill
them in one sweep over the records where numba is installed (the same numbers as the
vectorised numpy path, with no sort).

It owns the table dtypes and the passes that fill them. It computes tables only, and may not
name, format or build the Summary object: those stay in :mod:`.summary`.
"""

from __future__ import annotations

import numpy as np

from .. import jit

__all__ = ["TAG_STATS_DTYPE", "TRACK_STATS_DTYPE", "PERCENTILES"]

PERCENTILES = (50, 90, 99)

TAG_STATS_DTYPE = np.dtype(
    [
        ("tag", np.int32),
        ("count", np.int64),  # regions (spans) with this tag
        ("total_ns", np.int64),
        ("mean_ns", np.float64),
        ("min_ns", np.int64),
        ("p50_ns", np.float64),
        ("p90_ns", np.float64),
        ("p99_ns", np.float64),
        ("max_ns", np.int64),
        ("share", np.float64),  # total_ns / sum of total_ns over all tags
        ("instants", np.int64),  # instant records with this tag
    ]
)

TRACK_STATS_DTYPE = np.dtype(
    [
        ("track", np.int64),  # the tid, or the SM id
        ("regions", np.int64),
        ("instants", np.int64),
        ("busy_ns", np.int64),  # length of the union of the track's regions
        ("busy_fraction", np.float64),  # busy_ns / kernel span
        ("first_ns", np.int64),  # first region start, relative to the kernel start
        ("last_ns", np.int64),  # last region end, relative to the kernel start
        ("gap_count", np.int64),
        ("gap_total_ns", np.int64),
        ("gap_max_ns", np.int64),
    ]
)


def group_percentiles(
    values: np.ndarray, starts: np.ndarray, lengths: np.ndarray, q
) -> np.ndarray:
    """Percentile ``q`` (0..100) of each group of ``values`` (sorted inside each group), with
    numpy's default linear interpolation, for all groups at once."""
    if starts.shape[0] == 0:
        return np.zeros(0, np.float64)
    position = (lengths - 1) * (float(q) / 100.0)
    lower = np.floor(position).astype(np.int64)
    upper = np.minimum(lower + 1, lengths - 1)
    frac = position - lower
    lo_values = values[starts + lower].astype(np.float64)
    hi_values = values[starts + upper].astype(np.float64)
    return lo_values + (hi_values - lo_values) * frac


def distribution(values: np.ndarray) -> dict[str, float | int]:
    """count/total/mean/min/percentiles/max of a 1-D integer array, as plain Python numbers."""
    values = np.asarray(values)
    out: dict[str, float | int] = {"count": int(values.shape[0])}
    if values.shape[0] == 0:
        out.update(total_ns=0, mean_ns=0.0, min_ns=0, max_ns=0)
        out.update({f"p{q}_ns": 0.0 for q in PERCENTILES})
        return out
    out["total_ns"] = int(values.sum())
    out["mean_ns"] = float(values.mean())
    out["min_ns"] = int(values.min())
    for q, v in zip(PERCENTILES, np.percentile(values, PERCENTILES)):
        out[f"p{q}_ns"] = float(v)
    out["max_ns"] = int(values.max())
    return out


# --------------------------------------------------------------------------------------
# compiled path: a few passes over the columns, no sort (numpy above stays the reference)
#
# Decoded traces are sorted by start, so walking the rows once in order visits every
# track's regions in (track, start) order, ties in row order: the order the numpy path
# sorts into. Per-track state (running end, open cluster) then gives the busy union and
# the gaps without ordering anything. Sums and float accumulations run in the same order
# as numpy's, so every figure is identical (the tests compare both paths).

_INT64_MIN = int(np.iinfo(np.int64).min)
_INT64_MAX = int(np.iinfo(np.int64).max)
# per-track state columns (one row of int64 per track value in [lo, hi])
_REGIONS, _INSTANTS, _BUSY, _FIRST, _RUNNING, _GAPS, _GAP_MAX, _CLUSTER = range(8)
_TRACK_STATE = 8
# per-tag state columns
_T_COUNT, _T_TOTAL, _T_MIN, _T_MAX, _T_INSTANTS = range(5)
# per-track state is kept for every value in a column's range: bounded so that a sparse
# id space (huge tids) takes the numpy path instead of a huge table
_DIRECT_TABLE_MIN = 1 << 17


@jit.kernel
def _scan_ranges(start, dur, kind, tid, sm, tag, out):
    """One pass: spans sorted by start?, kernel start/end, counts, and the ranges of tid, sm
    and tag over regions and instants. ``out`` (int64[11]) receives them."""
    spans_sorted = 1
    previous = _INT64_MIN
    k_start, k_end = _INT64_MAX, _INT64_MIN
    n_spans = 0
    n_instants = 0
    tid_lo, tid_hi, sm_lo, sm_hi, tag_lo, tag_hi = _INT64_MAX, _INT64_MIN, _INT64_MAX, _INT64_MIN, _INT64_MAX, _INT64_MIN
    for i in range(start.shape[0]):
        k = kind[i]
        s = start[i]
        if k == 0 or k == 2:
            if s < previous:
                spans_sorted = 0
            previous = s
            d = dur[i]
            e = s + (d if d > 0 else 0)
            k_end = max(k_end, e)
            n_spans += 1
        elif k == 1:
            k_end = max(k_end, s)
            n_instants += 1
        else:
            continue
        k_start = min(k_start, s)
        t = np.int64(tid[i])
        m = np.int64(sm[i])
        g = np.int64(tag[i])
        tid_lo, tid_hi = min(tid_lo, t), max(tid_hi, t)
        sm_lo, sm_hi = min(sm_lo, m), max(sm_hi, m)
        tag_lo, tag_hi = min(tag_lo, g), max(tag_hi, g)
    out[0] = spans_sorted
    out[1] = k_start
    out[2] = k_end
    out[3] = n_spans
    out[4] = n_instants
    out[5] = tid_lo
    out[6] = tid_hi
    out[7] = sm_lo
    out[8] = sm_hi
    out[9] = tag_lo
    out[10] = tag_hi


@jit.kernel(inline="always")
def _track_step(state, gap_total, row, s, e):
    """Add region [s, e) to track ``row`` (visited in start order). Whether a region opens
    a cluster is random, so the update is arithmetic on 0/1 flags instead of branches
    (a branch the CPU cannot predict costs more than the arithmetic). Adding 0.0 to
    ``gap_total`` leaves it exactly as it was."""
    regions = state[row, 0]
    seen = np.int64(regions > 0)
    running = state[row, 4] * seen + s * (1 - seen)  # the first region: as if just ended
    opens = np.int64(s >= running)  # a new cluster (or the first region)
    is_gap = opens * seen
    gap = (s - running) * is_gap  # idle time before it
    state[row, 2] += (running - state[row, 7]) * is_gap  # the closed cluster's length
    state[row, 5] += is_gap
    gap_total[row] += np.float64(gap)
    state[row, 6] = max(state[row, 6], gap)
    state[row, 7] = s * opens + state[row, 7] * (1 - opens)
    state[row, 3] = state[row, 3] * seen + s * (1 - seen)
    state[row, 4] = max(running, e)
    state[row, 0] = regions + 1


@jit.kernel
def _track_pass(start, dur, kind, key, lo, state, gap_total):
    """Busy union and gaps of every track (``key - lo`` indexes ``state``) in one pass."""
    for i in range(start.shape[0]):
        k = kind[i]
        if k == 0 or k == 2:
            s = start[i]
            d = dur[i]
            _track_step(state, gap_total, np.int64(key[i]) - lo, s, s + (d if d > 0 else 0))
        elif k == 1:
            state[np.int64(key[i]) - lo, 1] += 1
    for row in range(state.shape[0]):
        if state[row, 0]:
            state[row, 2] += state[row, 4] - state[row, 7]


@jit.kernel
def _tag_pass(dur, kind, tag, lo, state):
    """Per-tag region count, total, min and max duration, and instant count."""
    for i in range(dur.shape[0]):
        k = kind[i]
        g = np.int64(tag[i]) - lo
        if k == 0 or k == 2:
            d = dur[i]
            if state[g, 0] == 0:
                state[g, 2] = d
                state[g, 3] = d
            else:
                state[g, 2] = min(state[g, 2], d)
                state[g, 3] = max(state[g, 3], d)
            state[g, 0] += 1
            state[g, 1] += d
        elif k == 1:
            state[g, 4] += 1


@jit.kernel
def _tid_gaps(start, dur, kind, tid, tid_lo, position, running, out):
    """Every tid gap, written in (tid, start) order: ``position`` holds each track's first
    output index (advanced in place), ``running`` starts at INT64_MIN (unseen track).
    Branch-free like :func:`_track_step`: a non-gap writes its slot again later."""
    for i in range(start.shape[0]):
        k = kind[i]
        if k == 0 or k == 2:
            t = np.int64(tid[i]) - tid_lo
            s = start[i]
            d = dur[i]
            r = running[t]
            is_gap = np.int64(s >= r) * np.int64(r != _INT64_MIN)
            p = position[t]
            if p < out.shape[0]:  # the last gap of the last track is followed by no slot
                out[p] = (s - r) * is_gap + out[p] * (1 - is_gap)
            position[t] = p + is_gap
            running[t] = max(r, s + max(d, 0))


@jit.kernel
def _durations_by_tag(dur, kind, tag, tag_lo, position, out):
    """Region durations grouped by tag (tags ascending, row order inside a tag)."""
    for i in range(dur.shape[0]):
        k = kind[i]
        if k == 0 or k == 2:
            g = np.int64(tag[i]) - tag_lo
            out[position[g]] = dur[i]
            position[g] += 1


def _fused_track_table(state, gap_total, lo, kernel_start, kernel_span) -> np.ndarray:
    present = np.flatnonzero((state[:, _REGIONS] > 0) | (state[:, _INSTANTS] > 0))
    rows = state[present]
    table = np.zeros(present.shape[0], dtype=TRACK_STATS_DTYPE)
    table["track"] = present + lo
    has = rows[:, _REGIONS] > 0
    table["regions"] = rows[:, _REGIONS]
    table["instants"] = rows[:, _INSTANTS]
    table["busy_ns"] = rows[:, _BUSY]
    table["first_ns"][has] = rows[has, _FIRST] - kernel_start
    table["last_ns"][has] = rows[has, _RUNNING] - kernel_start
    table["gap_count"] = rows[:, _GAPS]
    table["gap_total_ns"] = np.rint(gap_total[present]).astype(np.int64)
    table["gap_max_ns"] = rows[:, _GAP_MAX]
    table["busy_fraction"] = table["busy_ns"] / kernel_span if kernel_span > 0 else 0.0
    return table


def _fused_tag_table(events, tag_state, tag_lo, scratch) -> np.ndarray:
    present = np.flatnonzero((tag_state[:, _T_COUNT] > 0) | (tag_state[:, _T_INSTANTS] > 0))
    rows = tag_state[present]
    table = np.zeros(present.shape[0], dtype=TAG_STATS_DTYPE)
    table["tag"] = present + tag_lo
    table["instants"] = rows[:, _T_INSTANTS]
    with_spans = rows[:, _T_COUNT] > 0
    where = np.flatnonzero(with_spans)
    if where.shape[0] == 0:
        return table
    counts = tag_state[:, _T_COUNT]
    lengths = rows[with_spans, _T_COUNT]
    totals = rows[with_spans, _T_TOTAL]
    table["count"][where] = lengths
    table["total_ns"][where] = totals
    table["mean_ns"][where] = totals / lengths
    table["min_ns"][where] = rows[with_spans, _T_MIN]
    table["max_ns"][where] = rows[with_spans, _T_MAX]
    # order statistics: durations grouped by tag, each group partitioned at the ranks the
    # percentiles read (a selection per group instead of a full sort)
    first = np.zeros(counts.shape[0], dtype=np.int64)
    np.cumsum(counts[:-1], out=first[1:])
    grouped = scratch
    _durations_by_tag(events["dur_ns"], events["kind"], events["tag"], tag_lo, first.copy(),
                      grouped)
    starts = first[present[with_spans]]
    ranks = []
    for q in PERCENTILES:
        position = (lengths - 1) * (float(q) / 100.0)
        lower = np.floor(position).astype(np.int64)
        ranks += [lower, np.minimum(lower + 1, lengths - 1)]
    ranks = np.stack(ranks, axis=1)
    for group, (begin, length) in enumerate(zip(starts.tolist(), lengths.tolist())):
        grouped[begin:begin + length].partition(np.unique(ranks[group]))
    for q in PERCENTILES:
        table[f"p{q}_ns"][where] = group_percentiles(grouped, starts, lengths, q)
    grand_total = table["total_ns"].sum()
    if grand_total > 0:
        table["share"] = table["total_ns"] / grand_total
    return table


def _gap_distribution(events, tid_state, tid_lo, scratch) -> dict[str, float | int]:
    """The numpy path's ``distribution`` of the tid gaps, from gaps written in the same
    (tid, start) order (the float mean depends on the order)."""
    gap_counts = tid_state[:, _GAPS]
    first = np.zeros(gap_counts.shape[0], dtype=np.int64)
    np.cumsum(gap_counts[:-1], out=first[1:])
    gaps = scratch[:int(gap_counts.sum())]
    running = np.full(gap_counts.shape[0], _INT64_MIN, dtype=np.int64)
    _tid_gaps(events["start_ns"], events["dur_ns"], events["kind"], events["tid"], tid_lo,
              first, running, gaps)
    out: dict[str, float | int] = {"count": int(gaps.shape[0])}
    if gaps.shape[0] == 0:
        return distribution(gaps)
    out["total_ns"] = int(gaps.sum())
    out["mean_ns"] = float(gaps.mean())
    out["min_ns"] = int(gaps.min())
    maximum = int(gaps.max())
    # the same percentiles as np.percentile(gaps), partitioning the array in place
    for q, v in zip(PERCENTILES, np.percentile(gaps, PERCENTILES, overwrite_input=True)):
        out[f"p{q}_ns"] = float(v)
    out["max_ns"] = maximum
    return out


def summarize_fused(events: np.ndarray):
    """The summary's numbers from compiled passes, or None where the numpy path must run
    (rows not sorted by start, no regions, or ids spread too wide for per-value tables)."""
    n = events.shape[0]
    if n == 0:
        return None
    start, dur, kind = events["start_ns"], events["dur_ns"], events["kind"]
    tid, sm, tag = events["tid"], events["sm"], events["tag"]
    scan = np.zeros(11, dtype=np.int64)
    _scan_ranges(start, dur, kind, tid, sm, tag, scan)
    (spans_sorted, kernel_start, kernel_end, n_spans, n_instants,
     tid_lo, tid_hi, sm_lo, sm_hi, tag_lo, tag_hi) = scan.tolist()
    limit = max(_DIRECT_TABLE_MIN, n // 8)
    if (not spans_sorted or n_spans == 0
            or max(tid_hi - tid_lo, sm_hi - sm_lo, tag_hi - tag_lo) >= limit):
        return None
    kernel_span = kernel_end - kernel_start
    tid_state = np.zeros((tid_hi - tid_lo + 1, _TRACK_STATE), dtype=np.int64)
    tid_gap_total = np.zeros(tid_state.shape[0], dtype=np.float64)
    _track_pass(start, dur, kind, tid, tid_lo, tid_state, tid_gap_total)
    tids = _fused_track_table(tid_state, tid_gap_total, tid_lo, kernel_start, kernel_span)
    sm_state = np.zeros((sm_hi - sm_lo + 1, _TRACK_STATE), dtype=np.int64)
    sm_gap_total = np.zeros(sm_state.shape[0], dtype=np.float64)
    _track_pass(start, dur, kind, sm, sm_lo, sm_state, sm_gap_total)
    sms = _fused_track_table(sm_state, sm_gap_total, sm_lo, kernel_start, kernel_span)
    tag_state = np.zeros((tag_hi - tag_lo + 1, 5), dtype=np.int64)
    _tag_pass(dur, kind, tag, tag_lo, tag_state)
    # One scratch array, used in turn by the per-tag durations and by the gaps (a tid has
    # fewer gaps than regions): fresh pages are slow to come by on a VM, and the peak stays
    # at the buffer, the Trace and one int64 per region.
    scratch = np.empty(n_spans, dtype=np.int64)
    tags = _fused_tag_table(events, tag_state, tag_lo, scratch)
    gaps = _gap_distribution(events, tid_state, tid_lo, scratch)
    del scratch
    return tags, tids, sms, gaps, kernel_start, kernel_end, n_spans, n_instants
