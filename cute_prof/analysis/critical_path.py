"""Pipeline analysis over every unit (CTA or output tile) of a trace, and what-if replays.

``match_records`` turns records into dense per-unit arrays (unit x iteration x region),
reporting missing and extra records instead of guessing; with ``tile_modulo`` each unit is
one output tile and knows the previous tile of its CTA, whose items its first waits depend
on (blockers, latencies and blocker edges follow that; the replay starts every tile at its
measured start). ``replay`` re-schedules the
measured work durations under a :class:`~cute_prof.analysis.model.PipelineSpec` (waits end
when their resource event plus an inferred latency arrives), vectorised over units with a
loop over iterations only. The critical path, blockers, ring occupancy and initiation
intervals come from those arrays; ``what_if`` compares a changed pipeline's replay with the
base replay and carries the per-unit change through each SM's sequence of units to a
kernel-time change.
"""

from __future__ import annotations

import heapq
import warnings
from dataclasses import dataclass, field

import numpy as np

from ..errors import ProfileBufferError
from ..trace import Trace
from .grouping import unique_ints
from .model import (PipelineSpec, arrival_issue_times, arrival_latencies, arrival_leader_gaps,
                    arrival_positions, shifted_arrivals)

BLOCKED_MARGIN_NS = 64.0
_FLOAT_MAX = np.finfo(np.float64).max

__all__ = ["PipelineData", "Schedule", "match_records", "replay", "critical_path",
           "blockers", "ring_occupancy", "initiation_interval", "what_if", "latency_sample",
           "timer_step", "launch_gaps", "load_congestion", "loop_queueing", "lighter_load_point",
           "unchanged_span", "queued_under_load",
           "predict_what_if", "latency_sensitivity", "pool_predictions", "never_blocked",
           "recorder_slowdown",
           "slowed_by_recorder", "worker_regions", "blocked_as_base", "busy_share",
           "analyze_pipeline", "perfetto_outputs", "format_pipeline_report"]

# loaded latency: at least this many observations of one kind before it is used
MIN_LATENCY_SAMPLE = 8
# the quantile of the loaded latencies taken for a load that met no queue (queued_under_load)
UNQUEUED_QUANTILE = 0.05
# the seed of the per-item latency draws from a sample of arrivals (what_if): fixed, so a
# prediction repeats exactly
LATENCY_DRAW_SEED = 2027
# each replayed item draws its latency from this many sampled loads, those nearest its place
# in the loop (what_if: _draw_latencies)
NEAREST_ARRIVALS = 64
PLACE_SAMPLE_MIN = 16  # ... unless this many were sampled at the place itself: those


@dataclass
class PipelineData:
    """Measured arrays, shape (units, iterations, regions); times in ns."""

    spec: PipelineSpec
    start: np.ndarray  # recorded start (latest track of the role)
    end: np.ndarray  # recorded end (latest track of the role)
    row: np.ndarray  # trace row of the latest-ending record per cell (-1: none)
    unit_group: np.ndarray  # (units,) group (CTA) of each unit
    unit_tile: np.ndarray  # (units,) tile of each unit (0 without tile_modulo)
    unit_sm: np.ndarray  # (units,) SM
    unit_first: np.ndarray  # (units,) first start of any record of the unit's group
    unit_last: np.ndarray  # (units,) last end of any record of the unit's group
    missing: int  # cells with fewer records than the role has tracks (units dropped)
    extra: int  # cells with more
    dropped_units: np.ndarray  # (group, tile) of units dropped for missing records
    # (units,) the unit of the same group's previous tile (-1: none, or it was dropped).
    # A persistent CTA carries its rings from tile to tile: the first waits of a tile
    # depend on the previous tile's items
    unit_prev: np.ndarray | None = None
    # every time above is ns after this timestamp (the trace's first start): %globaltimer
    # reads ~1.8e18 ns, where a float64 resolves only 256 ns, so the arrays hold offsets
    origin_ns: int = 0
    # (units,) iterations each unit ran (a causal mask, a persistent CTA with fewer tiles:
    # fewer than the longest); its cells past them are nan. None: every unit ran them all
    iterations: np.ndarray | None = None
    # (units, iterations, regions) a release region's earliest track group's end, nan in the
    # other regions (FA4's leading consumer warpgroup: its own release); None without track
    # groups (spec.track_group)
    lead_end: np.ndarray | None = None
    # what the replay derives from these arrays alone (work spans, async jobs, ...), kept
    # for the next replay: a what-if replays the same data many times (see _memo)
    _memo: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def shape(self):
        return self.start.shape

    @property
    def valid(self) -> np.ndarray:
        """(units, iterations) True where the unit ran that iteration."""
        units, iters, _ = self.start.shape
        if self.iterations is None:
            return np.ones((units, iters), dtype=bool)
        return np.arange(iters)[None, :] < self.iterations[:, None]


def _memo(data: PipelineData, key: tuple, compute):
    """``compute()`` once per data and key (the arrays come back read-only: shared by every
    later caller). The measured arrays are not changed after ``match_records``."""
    if key not in data._memo:
        data._memo[key] = _read_only(compute())
    return data._memo[key]


def _read_only(value):
    if isinstance(value, np.ndarray):
        value.setflags(write=False)
    elif isinstance(value, (tuple, list)):
        for item in value:
            _read_only(item)
    elif isinstance(value, dict):
        for item in value.values():
            _read_only(item)
    return value


def _mmax(a, axis):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmedian(a, axis=axis)


def match_records(trace: Trace, spec: PipelineSpec) -> PipelineData:
    """Dense arrays of the spec's regions per unit and iteration (iteration = payload, or
    payload % tile_modulo with the tile = payload // tile_modulo)."""
    ev = trace.events
    names = list(trace.tag_names)
    unknown = [r.tag for r in spec.regions if r.tag not in names]
    if unknown:
        raise ProfileBufferError(f"pipeline names tags the trace does not have: {unknown}")
    # each column read once: gathers from a packed record field are several times slower
    # than from its own copy
    tag = np.ascontiguousarray(ev["tag"])
    event_start = np.ascontiguousarray(ev["start_ns"])
    event_dur = np.ascontiguousarray(ev["dur_ns"])
    n = len(spec.regions)
    lut = np.full(max(len(names), int(tag.max(initial=0)) + 1), -1, dtype=np.int64)
    for i, region in enumerate(spec.regions):
        lut[names.index(region.tag)] = i
    roles = spec.roles
    step_role = np.array([roles.role_names.index(r.role) for r in spec.regions])
    step = (lut[tag] if tag.size and int(tag.min()) >= 0
            else np.where(tag >= 0, lut[np.clip(tag, 0, lut.size - 1)], -1))
    tid = ev["tid"].astype(np.int64)
    group_all = roles.group_of(tid)
    rows = np.flatnonzero(step >= 0)
    wrong_role = roles.role_of(tid[rows]) != step_role[step[rows]]
    extra = int(wrong_role.sum())
    rows = rows[~wrong_role]
    step = step[rows]
    payload = np.ascontiguousarray(ev["payload"])[rows].astype(np.int64)
    if (payload < 0).any():
        raise ProfileBufferError("pipeline records need a payload >= 0 (the iteration)")
    if spec.tile_modulo:
        k, tile = payload % spec.tile_modulo, payload // spec.tile_modulo
    else:
        k, tile = payload, np.zeros_like(payload)
    group = group_all[rows]
    ntiles = int(tile.max(initial=0)) + 1
    key = group * ntiles + tile
    ukeys, unit = unique_ints(key, return_inverse=True)
    units = ukeys.size
    if units == 0:
        raise ProfileBufferError("no records of the pipeline's regions in the trace")
    iters = int(k.max()) + 1
    cell = (unit * iters + k) * n + step
    size = units * iters * n
    counts = np.bincount(cell, minlength=size)
    # tracks per unit and role: distinct tids of the role among the unit's records. A tid
    # and a tile make one unit (the tid's group's tile): distinct (tid, tile) pairs are the
    # distinct (unit, tid) ones, and count over the tids' range rather than units x tids
    tid_rows = tid[rows]
    pair = unique_ints(tid_rows * ntiles + tile)  # distinct (tid, tile)
    pair_tid = pair // ntiles
    pair_unit = np.searchsorted(ukeys, roles.group_of(pair_tid) * ntiles + pair % ntiles)
    tracks = np.zeros((units, len(roles.role_names)), dtype=np.int64)
    np.add.at(tracks, (pair_unit, roles.role_of(pair_tid)), 1)
    expected = np.repeat(tracks[:, step_role][:, None, :], iters, axis=1)
    # a unit whose records stop at an iteration ran fewer iterations (FA4's causal CTAs):
    # its later cells are absent, not missing. Only in a trace that lost no record: where
    # records were lost, a short unit may be a cut one and is dropped as before
    ran = np.full(units, -1, dtype=np.int64)
    np.maximum.at(ran, unit, k)
    ran += 1
    if trace.overflow or trace.incomplete:
        ran[:] = iters
    absent = np.arange(iters)[None, :] >= ran[:, None]
    expected[absent] = 0
    expected = expected.reshape(-1)
    missing_cells = counts < expected
    extra += int(np.maximum(counts - expected, 0).sum())
    origin = int(event_start.min()) if ev.shape[0] else 0
    starts = (event_start[rows] - origin).astype(np.float64)
    ends = starts + event_dur[rows]
    # each cell: its latest track's record (a slot is free once the last track released
    # it). With track groups (spec.track_group: warpgroups), a consumes wait is its earliest
    # group's, each group as late as its latest track: the role needs the item when its
    # first group waits for it (FA4's second consumer warpgroup trails the first by
    # 500-800 ns)
    def of_regions(relation):  # the matched rows of regions with ``relation``
        if not spec.track_group:
            return np.zeros(step.size, dtype=bool)
        return np.array([relation in r.relations for r in spec.regions])[step]

    def earliest_group(rows, values):  # per cell: the earliest track group's latest value
        slot_group = (tid_rows[rows] % int(roles.tid_stride)) // int(spec.track_group)
        return _earliest_group_latest(cell[rows], slot_group, values, size)

    grouped = of_regions("consumes")
    start = np.full(size, -np.inf)
    end = np.full(size, -np.inf)
    np.maximum.at(start, cell[~grouped], starts[~grouped])
    np.maximum.at(end, cell[~grouped], ends[~grouped])
    if grouped.any():
        first_start, first_end = earliest_group(grouped, (starts[grouped], ends[grouped]))
        taken = np.isfinite(first_end)
        start[taken], end[taken] = first_start[taken], first_end[taken]
    # a release region's leading group's own release (lead_end)
    releasing = of_regions("releases")
    lead_end = None
    if releasing.any():
        (lead_end,) = earliest_group(releasing, (ends[releasing],))
        lead_end[~np.isfinite(lead_end)] = np.nan
    # the row of each cell's chosen end (ties: the last row), as sorting by (cell, end)
    # would put it last
    chosen = ends == end[cell]
    row = np.full(size, -1, dtype=np.int64)
    np.maximum.at(row, cell[chosen], rows[chosen])
    bad_unit = missing_cells.reshape(units, -1).any(1)
    good = ~bad_unit
    gap = np.repeat(absent[:, :, None], n, axis=2).reshape(-1)
    start[gap] = np.nan
    end[gap] = np.nan
    if lead_end is not None:
        lead_end[gap] = np.nan
    unit_group, unit_tile = ukeys // ntiles, ukeys % ntiles
    # per group: SM, first start and last end of all its records (phases, epilogue included)
    g_uni, g_inv = unique_ints(group_all, return_inverse=True)
    # in integer ns, then as offsets (float64 rounds monotonically: the same as the extremes
    # of the rows' float offsets)
    g_first = np.full(g_uni.size, np.iinfo(np.int64).max)
    g_last = np.full(g_uni.size, np.iinfo(np.int64).min)
    g_sm = np.zeros(g_uni.size, dtype=np.int64)
    np.minimum.at(g_first, g_inv, event_start)
    np.maximum.at(g_last, g_inv, event_start + event_dur)
    g_first = (g_first - origin).astype(np.float64)
    g_last = (g_last - origin).astype(np.float64)
    g_sm[g_inv] = np.ascontiguousarray(ev["sm"])
    gi = np.searchsorted(g_uni, unit_group)
    # a persistent CTA runs its tiles one after another: each tile spans its own records,
    # the group's first tile from the group's first record (setup) and its last tile to the
    # group's last record (epilogue, tail), so the units of an SM chain without overlap
    u_first = np.full(units, np.inf)
    u_last = np.full(units, -np.inf)
    np.minimum.at(u_first, unit, starts)
    np.maximum.at(u_last, unit, ends)
    first_of_group = np.r_[True, unit_group[1:] != unit_group[:-1]]
    last_of_group = np.r_[unit_group[1:] != unit_group[:-1], True]
    unit_first = np.where(first_of_group, g_first[gi], u_first)
    unit_last = np.where(last_of_group, g_last[gi], u_last)
    shape = (units, iters, n)
    kept_group, kept_tile = unit_group[good], unit_tile[good]
    unit_prev = np.full(kept_group.size, -1, dtype=np.int64)
    if spec.tile_modulo:
        follows = (kept_group[1:] == kept_group[:-1]) & (kept_tile[1:] == kept_tile[:-1] + 1)
        unit_prev[1:][follows] = np.flatnonzero(follows)
    return PipelineData(
        spec=spec, start=start.reshape(shape)[good], end=end.reshape(shape)[good],
        row=row.reshape(shape)[good], unit_group=unit_group[good], unit_tile=unit_tile[good],
        unit_sm=g_sm[gi][good], unit_first=unit_first[good], unit_last=unit_last[good],
        missing=int(missing_cells.sum()), extra=extra,
        dropped_units=np.stack([unit_group[bad_unit], unit_tile[bad_unit]], 1),
        unit_prev=unit_prev, origin_ns=origin,
        lead_end=None if lead_end is None else lead_end.reshape(shape)[good],
        iterations=ran[good] if (ran[good] < iters).any() else None)


def _earliest_group_latest(cells: np.ndarray, groups: np.ndarray, values: tuple,
                           size: int) -> tuple:
    """Per cell (of ``size``): each value's maximum within every track group of the cell's
    rows, then its minimum over the groups (inf where the cell has no row). A warpgroup
    acts when its last warp does; the role's first warpgroup is the earliest of those."""
    width = int(groups.max()) + 1
    sub, sub_of = unique_ints(cells * width + groups, return_inverse=True)
    out = []
    for value in values:
        latest = np.full(sub.size, -np.inf)
        np.maximum.at(latest, sub_of, value)
        earliest = np.full(size, np.inf)
        np.minimum.at(earliest, sub // width, latest)
        out.append(earliest)
    return tuple(out)


# ---------------------------------------------------------------------------- model terms
def _role_sequences(spec: PipelineSpec):
    """Per region: the previous region of its role in program order (-1: first of the
    iteration, whose predecessor is the role's last region one iteration earlier), and the
    role's last region."""
    prev = np.full(len(spec.regions), -1)
    last_of_role = {}
    first_of_role = {}
    for i, r in enumerate(spec.regions):
        if r.role in last_of_role:
            prev[i] = last_of_role[r.role]
        else:
            first_of_role[r.role] = i
        last_of_role[r.role] = i
    role_last = np.array([last_of_role[r.role] for r in spec.regions])
    return prev, role_last


def work_spans(data: PipelineData) -> tuple[np.ndarray, np.ndarray]:
    """(begin, duration) of every work region by the gap rule: from the end of the role's
    previous region to the start of its next one (async work like wgmma ends where the next
    wait begins); after another work region, from this region's own record (where the
    previous one ended: no time counted twice); the role's very last region keeps its
    recorded end. Iterations a unit did not run: nan begin, no work."""
    spec = data.spec
    prev, role_last = _role_sequences(spec)
    dur = np.zeros(data.shape)
    begins = np.full(data.shape, np.nan)
    nxt = {int(p): i for i, p in enumerate(prev) if p >= 0}
    for i, r in enumerate(spec.regions):
        if r.kind != "work":
            continue
        before = prev[i] if prev[i] >= 0 else role_last[i]
        if spec.regions[before].kind == "work":
            begin = data.start[:, :, i]
        elif prev[i] >= 0:
            begin = data.end[:, :, prev[i]]
        else:
            first_begin = data.start[:, :1, i]
            begin = np.concatenate([first_begin, data.end[:, :-1, role_last[i]]], axis=1)
        if i in nxt:
            finish = data.start[:, :, nxt[i]]
        else:
            first = [j for j, q in enumerate(spec.regions) if q.role == r.role][0]
            finish = np.concatenate([data.start[:, 1:, first], data.end[:, -1:, i]], axis=1)
            # the last iteration a unit ran (fewer than the longest) keeps its recorded end
            finish = np.where(np.isnan(finish), data.end[:, :, i], finish)
        dur[:, :, i] = np.maximum(finish - begin, 0.0)
        begins[:, :, i] = begin
    return begins, np.nan_to_num(dur, nan=0.0)


def _work_durations(data: PipelineData) -> np.ndarray:
    return _memo(data, ("work_spans",), lambda: work_spans(data))[1]


def _event_times(spec: PipelineSpec, start: np.ndarray, end: np.ndarray) -> dict:
    """Per resource: produce times (U, K) and release times (U, K) of every item."""
    units, iters, _ = start.shape
    out = {}
    for res in spec.resources:
        prod = rel = None
        for i, r in enumerate(spec.regions):
            if "produces" in r.relations and r.relations["produces"].resource == res.name:
                prod = start[:, :, i]
            if "releases" in r.relations and r.relations["releases"].resource == res.name:
                d = r.relations["releases"].distance
                when = _release_point(spec, i, start, end)
                rel = np.full((units, iters), np.nan)
                if d < iters:
                    rel[:, :iters - d] = when[:, d:]
                # the last iteration releases what is still held at its end
                rel[:, max(iters - d, 0):] = end[:, -1:, i]
                ran = np.isfinite(start[:, :, i])
                if not ran.all():  # a unit that ran fewer iterations: at its own last one
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore", RuntimeWarning)
                        last = np.nanmax(np.where(ran, end[:, :, i], np.nan), axis=1)
                    rel = np.where(np.isnan(rel) & ran, last[:, None], rel)
        out[res.name] = (prod, rel)
    return out


def prologue_slots(spec: PipelineSpec, resource: str) -> tuple[int, int]:
    """(p, d): how many items the kernel issued before its loop still hold slots of
    ``resource`` when the loop starts (its ``prologue_items``, at most the depth and the
    releasing distance d), and d. The loop's release in iteration k frees item k - d, so its
    releases d - p .. d - 1 free those p items."""
    res = spec.resource(resource)
    region = spec.regions[spec.source_region("releases", resource)]
    d = region.relations["releases"].distance
    return min(res.prologue_items, d, res.depth), d


def pre_loop_releases(spec: PipelineSpec, start: np.ndarray, end: np.ndarray) -> dict:
    """Per resource with items issued before the loop (``prologue_slots``): (U, p) when the
    loop's releases of them happen. The producer's acquire of item depth - p waits for the
    first of them: ws_gemm's consumer waits for k-tile 0 before its loop and releases it
    after waiting for k-tile 1 (on an H100 the persistent GEMM's fourth acquire blocked
    1.8 us until that release, its 2-stage variant's second 1.9 us); without them the
    replay's ring holds one slot more at each CTA's start than the kernel's."""
    out = {}
    for i, r in enumerate(spec.regions):
        rel = r.relations.get("releases")
        if rel is None:
            continue
        p, d = prologue_slots(spec, rel.resource)
        if p > 0 and d - p < start.shape[1]:
            out[rel.resource] = _release_point(spec, i, start, end)[:, d - p:d]
    return out


def _release_point(spec: PipelineSpec, i: int, start: np.ndarray, end: np.ndarray):
    """(U, K) time at which region i's ``releases`` happens in iteration k."""
    at = spec.regions[i].relations["releases"].at
    if at == "start":
        return start[:, :, i]
    if at == "end":
        return end[:, :, i]
    prev, role_last = _role_sequences(spec)
    following = [j for j, p in enumerate(prev) if p == i]
    if following:
        return start[:, :, following[0]]
    first = [j for j, q in enumerate(spec.regions) if q.role == spec.regions[i].role][0]
    return np.concatenate([start[:, 1:, first], end[:, -1:, i]], axis=1)


def _cluster_index(data: PipelineData, shared_by: int) -> np.ndarray:
    return np.unique(np.stack([data.unit_group // shared_by, data.unit_tile], 1), axis=0,
                     return_inverse=True)[1].reshape(-1)


def _shift_items(data, times, owner, shift, iters, first_items=None):
    """times[u, k - shift] (U, K) and the unit it belongs to; k - shift < 0 reaches into
    the previous tile of the unit's CTA (a carried ring) where there is one, else into
    ``first_items`` (U, p): the p items the CTA's first unit issued before its loop, the
    last of them just before item 0 (its own unit's); nan where neither holds one."""
    units = times.shape[0]
    prev = data.unit_prev if data.unit_prev is not None else np.full(units, -1)
    has_prev = prev >= 0
    p = 0 if first_items is None else first_items.shape[1]
    width = max(iters, p)  # the one previous tile, or the items before the loop
    before = np.full((units, width), np.nan)
    before[has_prev, width - iters:] = times[prev[has_prev]]
    if p:
        before[~has_prev, width - p:] = first_items[~has_prev]
    before_owner = np.full((units, width), -1)
    before_owner[has_prev, width - iters:] = owner[prev[has_prev]]
    ext = np.concatenate([before, times], 1)
    ext_owner = np.concatenate([before_owner, owner], 1)
    lo = max(shift - width, 0)
    dep = np.full((units, iters), np.nan)
    peer = np.repeat(np.arange(units)[:, None], iters, 1)
    if lo < iters:
        dep[:, lo:] = ext[:, width - shift + lo:width + iters - shift]
        got = ext_owner[:, width - shift + lo:width + iters - shift]
        peer[:, lo:] = np.where(got >= 0, got, peer[:, lo:])
    return dep, peer


def _dependency_times(data, spec, events, i, iters):
    """(U, K) time of the event wait region i waits on (nan: none), and the peer unit."""
    r = spec.regions[i]
    units = data.shape[0]
    self_owner = np.repeat(np.arange(units)[:, None], iters, 1)
    if "consumes" in r.relations:
        rel = r.relations["consumes"]
        prod = events[rel.resource][0]
        return _shift_items(data, prod, self_owner, rel.distance, iters)
    else:
        rel = r.relations["acquires"]
        res = spec.resource(rel.resource)
        shift = res.depth + rel.distance
        # by item, the p items the kernel issued before its loop first (pre_loop_releases)
        before = pre_loop_releases(spec, data.start, data.end).get(rel.resource)
        p = 0 if before is None else before.shape[1]
        released = events[rel.resource][1] if before is None else np.concatenate(
            [before, events[rel.resource][1]], 1)
        if res.shared_by > 1:
            cluster = _cluster_index(data, res.shared_by)
            gmax = np.full((cluster.max() + 1, p + iters), -np.inf)
            np.maximum.at(gmax, cluster, released)
            hit = released == gmax[cluster]
            first = np.full((cluster.max() + 1, p + iters), units)
            np.minimum.at(first, cluster, np.where(hit, np.arange(units)[:, None], units))
            released, owner = gmax[cluster], first[cluster][:, p:]
        else:
            owner = self_owner
        # a CTA's first unit acquires the slots the items before its loop held
        return _shift_items(data, released[:, p:], owner, shift, iters,
                            first_items=released[:, :p] if p else None)


@dataclass
class Schedule:
    """A (measured or replayed) schedule with its model terms."""

    start: np.ndarray  # (U, K, n)
    end: np.ndarray
    latency: np.ndarray  # (U, n) inferred latency of each wait's dependency
    cost: np.ndarray  # (n,) intrinsic cost of each wait when not blocked
    dep_time: np.ndarray  # (U, K, n) dependency event time (nan: none / work)
    dep_peer: np.ndarray  # (U, K, n) unit whose event it is
    blocked: np.ndarray  # (U, K, n) the dependency (not program order) set the end


def blocked_and_free(data: PipelineData, i: int, cost: float, dep: np.ndarray):
    """(U, K) masks of wait ``i``: blocked (it lasted clearly longer, two 32 ns timer ticks,
    than its unblocked cost and ended after its event: end = event + latency) and free (no
    longer than that: it ended after its event, so end - event bounds the latency)."""
    s, e = data.start[:, :, i], data.end[:, :, i]
    has_event = ~np.isnan(dep)
    blocked = (e - s > cost + BLOCKED_MARGIN_NS) & has_event & (e >= dep)
    free = (e - s <= cost + BLOCKED_MARGIN_NS) & has_event
    return blocked, free


def infer_terms(data: PipelineData):
    """The model's terms, read from the measured schedule alone: (per resource: produce and
    release times; (U, n) latency of each wait's event; (n,) each wait's unblocked cost;
    (U, K, n) the event each wait waited on; (U, K, n) the unit it came from). What
    ``replay`` and ``what_if`` take as ``terms``."""
    spec = data.spec
    units, iters, n = data.shape
    events = _event_times(spec, data.start, data.end)
    latency = np.zeros((units, n))
    cost = np.zeros(n)
    dep_all = np.full(data.shape, np.nan)
    peer_all = np.zeros(data.shape, dtype=np.int64)
    for i, r in enumerate(spec.regions):
        if r.kind != "wait":
            continue
        dep, peer = _dependency_times(data, spec, events, i, iters)
        dep_all[:, :, i], peer_all[:, :, i] = dep, peer
        s, e = data.start[:, :, i], data.end[:, :, i]
        # the fastest instance is the cost of an unblocked wait
        cost[i] = float(np.nanmin(e - s))
        late, free = blocked_and_free(data, i, cost[i], dep)
        lat = np.where(late, e - dep, np.nan)
        per_unit = _mmax(lat, axis=1)
        overall = np.nanmedian(lat) if late.any() else 0.0
        estimate = np.where(np.isnan(per_unit), overall, per_unit)
        # a wait that was not blocked ended no earlier than its event + latency: that caps
        # the latency (cold-start loads would otherwise stand for the steady state)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            cap = np.nanmin(np.where(free, e - dep, np.nan), axis=1)
        estimate = np.where(np.isnan(cap), estimate, np.minimum(estimate, cap))
        latency[:, i] = np.maximum(estimate, 0.0)
    return events, latency, cost, dep_all, peer_all


def _waited_for_job(took: np.ndarray, floor: float) -> np.ndarray:
    """Where a job-releasing region waited for its job: it lasted clearly longer (the
    blocked margin) than its shortest typical instance (``SHORTEST_TYPICAL``)."""
    return took > floor + BLOCKED_MARGIN_NS


def _async_jobs(data: PipelineData, dur: np.ndarray, floor: np.ndarray) -> dict:
    """Per asynchronous work region that releases an item of an earlier iteration (ws_gemm:
    issue the k-tile's wgmma, ``wait_group(1)``, release k-tile k - 1): (U, K) the engine
    time of the job issued in each iteration. The job issued at iteration k (at the wait's
    end W_k) starts when it is issued and the previous job is done, and ends where the
    release of iteration k + 1 ends if that release waited for it (``_waited_for_job``):
    its time is R_{k+1} - max(W_k, end of job k - 1). Iterations whose release did not wait
    take the unit's median (the job ended somewhere before)."""
    spec = data.spec
    prev, _ = _role_sequences(spec)
    out = {}
    for i, r in enumerate(spec.regions):
        if not _is_job_region(spec, i, prev):
            continue
        issued = data.end[:, :, prev[i]]  # nan where the unit did not run the iteration
        released = issued + dur[:, :, i]
        waited = _waited_for_job(dur[:, :, i], floor[i]) & ~np.isnan(issued)
        # before a drain (_drains) the region's end is the epilogue's: its job's release is
        # its own stamp, and the next job ends at the drain's stamp
        drained, _ = _drains(data, i)
        before = np.zeros_like(drained)
        before[:, :-1] = drained[:, 1:]
        stamp = data.end[:, :, i]
        offset = stamp - issued
        if before.any():
            normal = ~before & data.valid & np.isfinite(offset)
            least = float(offset[normal].min()) if normal.any() else 0.0
            released = np.where(before, stamp, released)
            waited = np.where(before, _waited_for_job(offset, least), waited) & ~np.isnan(issued)
        started = np.where(waited, released, issued)  # previous job's end, else the issue
        job = np.full(issued.shape, np.nan)
        job[:, :-1] = np.where(waited[:, 1:], released[:, 1:] - started[:, :-1], np.nan)
        # the job issued before a drain ends at the drain's stamp, waited for or not
        job[:, :-1] = np.where(drained[:, 1:], stamp[:, 1:] - np.maximum(
            started[:, :-1], issued[:, :-1]), job[:, :-1])
        job = np.where(job >= 0, job, np.nan)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            per_unit = np.nanmedian(job, axis=1)
        fallback = np.nanmedian(job) if np.isfinite(job).any() else 0.0
        per_unit = np.where(np.isnan(per_unit), fallback, per_unit)
        out[i] = np.where(np.isnan(job), per_unit[:, None], job)
    return out


def _async_after_wait(spec: PipelineSpec, i: int, prev: np.ndarray) -> bool:
    """Region i is asynchronous work issued right after its role's wait (a wgmma)."""
    return bool(spec.regions[i].asynchronous and prev[i] >= 0
                and spec.regions[prev[i]].kind == "wait")


def _is_job_region(spec: PipelineSpec, i: int, prev: np.ndarray) -> bool:
    """Region i issues an async job right after a wait and releases an earlier iteration's
    item once that job is done (ws_gemm's wgmma, ``wait_group(1)``, release k - 1)."""
    rel = spec.regions[i].relations.get("releases")
    return _async_after_wait(spec, i, prev) and rel is not None and rel.distance >= 1


def job_regions(spec: PipelineSpec) -> list[int]:
    """The regions that issue an async job after a wait and release an earlier item once it
    is done (``_is_job_region``): where a model has none (FA4), nothing about jobs needs
    computing."""
    prev, _ = _role_sequences(spec)
    return [i for i in range(len(spec.regions)) if _is_job_region(spec, i, prev)]


def _shortest(data: PipelineData, dur: np.ndarray, quantile: float = 0.0) -> np.ndarray:
    """(n,) each region's shortest ``dur`` (U, K, n) over the iterations the units ran; a job
    region's over those without a drain (``_drains``: such a region releases nothing after
    its wait, so its span says nothing of how soon a release can follow one). ``quantile``:
    the duration that share of the instances fall below instead (``SHORTEST_TYPICAL``)."""
    ran = data.valid
    out = np.quantile(dur[ran], quantile, axis=0, method="lower")
    prev, _ = _role_sequences(data.spec)
    for i in range(len(data.spec.regions)):
        if _is_job_region(data.spec, i, prev):
            keep = ran & ~_drains(data, i)[0]
            if keep.any():
                out[i] = np.quantile(dur[:, :, i][keep], quantile, method="lower")
    return out


# the share of a job region's instances below the duration that tells whether a release
# waited for its job (``_waited_for_job``): the shortest one alone let one stray instance
# decide. quack's 4 -> 2 stages on an H100 (gpu34) read +97.95%, +90.85% and +76.09% from
# three traced launches of the same base; the third's shortest work after a wait took 352
# ns where the others' took 416-448 (a 32 ns timer), so fewer of its releases counted as
# not waiting. At this share: +99.01%, +90.85%, +89.99% (bench/whatif_variants.py)
SHORTEST_TYPICAL = 0.001


def _drains(data: PipelineData, i: int) -> tuple[np.ndarray, np.ndarray]:
    """``_find_drains``, once per data and region."""
    return _memo(data, ("drains", i), lambda: _find_drains(data, i))


def _find_drains(data: PipelineData, i: int) -> tuple[np.ndarray, np.ndarray]:
    """For job region i: (U, K) True where iteration k's release came before the role's
    first wait of k, and (U, K) at k - 1 the time from that release to the wait's start.
    A persistent CTA's tile ends so: after its last wait the role waits for every job
    (``wait_group(0)``), releases the tile's last item and runs the epilogue, and the next
    tile's first wait follows; its calls, numbered per warp, put that release in the next
    iteration. The job issued before it ends at its stamp, and the epilogue is the role's
    own work after that job: taken as job time (the persistent GEMM, 4 -> 2 stages), a
    blocked wait before it made the replayed epilogue 512 ns short at every tile's end."""
    spec = data.spec
    first = next(j for j, q in enumerate(spec.regions) if q.role == spec.regions[i].role)
    units, iters, _ = data.shape
    drained = np.zeros((units, iters), dtype=bool)
    tail = np.zeros((units, iters))
    if iters > 1:
        with np.errstate(invalid="ignore"):
            drained[:, 1:] = data.end[:, 1:, i] < data.start[:, 1:, first]
        tail[:, :-1] = np.where(drained[:, 1:], data.start[:, 1:, first] - data.end[:, 1:, i], 0.0)
    return drained, tail


def _unblocked_wait_times(data: PipelineData, cost: np.ndarray) -> np.ndarray:
    """(U, K, n) how long each wait takes when its event is already there: as measured
    where the base's wait was not blocked (a try_wait that succeeds at once, its timer
    reads; 32 ns in one instance, 96 in the next), else the region's median unblocked time.
    The shortest instance alone (``cost``) made every replayed iteration shorter than the
    measured one by the waits' spread."""
    own = np.zeros(data.shape)
    for i, r in enumerate(data.spec.regions):
        if r.kind != "wait":
            continue
        took = data.end[:, :, i] - data.start[:, :, i]
        free = took <= cost[i] + BLOCKED_MARGIN_NS
        typical = float(np.median(took[free])) if free.any() else float(cost[i])
        own[:, :, i] = np.where(free, took, typical)
    return own


def _wait_leads(data: PipelineData, record_ns: float = 0.0) -> dict:
    """Per wait region: (U, K) where it starts against the end of the role's region before
    it, so that the replay keeps it. After another wait (FA4: V's wait after K's): the time
    between the two, which no region holds (the QK GEMM's issue, the records' own stores),
    less one record's own time without recording. After a work region (whose time runs to
    this wait's start: ``work_spans``), only a negative lead: a consumes wait is its role's
    first warp's, which may wait for the next item before the role's last warp released
    the one before (FA4's second consumer warpgroup trails the first)."""
    spec = data.spec
    prev, role_last = _role_sequences(spec)
    begins, durations = _memo(data, ("work_spans",), lambda: work_spans(data))
    out = {}
    for i, r in enumerate(spec.regions):
        before = prev[i] if prev[i] >= 0 else role_last[i]
        if r.kind != "wait":
            continue
        if spec.regions[before].kind == "work":
            if prev[i] >= 0:
                previous_end = begins[:, :, before] + durations[:, :, before]
            else:
                previous_end = np.concatenate(
                    [data.start[:, :1, i], (begins + durations)[:, :-1, before]], 1)
            lead = np.minimum(np.nan_to_num(data.start[:, :, i] - previous_end, nan=0.0), 0.0)
            if (lead < 0).any():
                out[i] = lead
            continue
        if prev[i] >= 0:
            previous_end = data.end[:, :, before]
        else:  # the role's first region: after the last one of the iteration before
            previous_end = np.concatenate([data.start[:, :1, i], data.end[:, :-1, before]], 1)
        gap = np.nan_to_num(data.start[:, :, i] - previous_end, nan=0.0)
        out[i] = np.maximum(gap - record_ns, 0.0)
    return out


def _stamp(data: PipelineData, i: int, at: str) -> np.ndarray:
    """(U, K) the time of region i's record that a relation reads: its start or its end."""
    return data.start[:, :, i] if at == "start" else data.end[:, :, i]


# the quantile of a trailing track group's lag behind the leading group's release that the
# replay holds it to (trailing_lag)
TRAILING_LAG_QUANTILE = 0.25


def trailing_lag(data: PipelineData, i: int) -> float | None:
    """How far a release region's trailing track group (FA4's second consumer warpgroup)
    releases after the leading one, as the replay keeps it: the lag's lower state, its
    ``TRAILING_LAG_QUANTILE`` over the launch. None: region i has no leading group's release.

    The lag is the phase the two groups hold, not work: in FA4 causal's bases it sits at
    480-512 ns or at 736-800 (a CTA starts in the lower state and may take the upper one a
    few iterations in: 30% of K's items in some runs' launches and 62% in others', the
    recording kernel's cost 11.6-13.2% either way), and a starved ring, which makes both
    groups wait for the same load, holds them at one state (the 1-deep variants' own
    traces, diagnosis only: 576-608 ns for K, 0-0.3% above 640;
    ``bench/results/whatif/trailing_lag.txt``). Kept item by item, the upper state put
    causal's 2 -> 1 prediction 3-4 points higher in the runs that had more of it (+5.4 to
    +6.3 against +0.3 to +2.7)."""
    if data.lead_end is None:
        return None
    lag = data.end[:, :, i] - data.lead_end[:, :, i]
    lag = lag[data.valid & np.isfinite(lag)]
    return float(np.quantile(lag, TRAILING_LAG_QUANTILE)) if lag.size else None


def _stamp_offsets(data: PipelineData, stamps: tuple, measured_begin: np.ndarray,
                   measured_dur: np.ndarray, lagging: tuple = ()) -> dict:
    """Per work region and the end of its record a relation reads (index, ``at``): (U, K)
    how far that stamp lies after the region's begin, and before its end. A release
    happens there; so does a produce (the commit, after the load's issue: the latency is
    read from it, so a 1- or 2-deep ring pays the gap from the acquire's end, 32-64 ns in
    ws_gemm and quack, on every item). ``lagging``: regions whose stamp is a trailing
    track group's release, held to ``trailing_lag`` after the leading group's."""
    out = {}
    for i, at in stamps:
        offset = np.clip(np.nan_to_num(_stamp(data, i, at) - measured_begin[:, :, i]), 0.0, None)
        lag = trailing_lag(data, i) if i in lagging else None
        if lag is not None:
            lead = data.lead_end[:, :, i] - measured_begin[:, :, i]
            offset = np.where(np.isfinite(lead),
                              np.minimum(offset, np.maximum(np.nan_to_num(lead), 0.0) + lag),
                              offset)
        # a stamp past the region's end: a staggered role's release, by its trailing
        # warpgroup after the leading one reached the role's next wait
        overhang = np.maximum(offset - measured_dur[:, :, i], 0.0)
        out[i] = (offset, np.maximum(measured_dur[:, :, i] - offset, 0.0), overhang)
    return out


def _leading_job_left(data: PipelineData, measured_begin: np.ndarray, jobs: dict) -> dict:
    """Per asynchronous work region that releases right after a wait, in a role of several
    track groups (``PipelineSpec.track_group``: FA4's two consumer warpgroups): (U, K) how
    long the leading group's release came after the wait's end, less one timer step (two
    records' stamps are at least that far apart). That is the leading group's own async job
    (its QK GEMM) still running when its wait ended; a wait that blocks runs it meanwhile,
    and the group's release, the trailing group's after it and the region's end come that
    much sooner after the wait. FA4's 1-deep K/V rings: 384-416 ns in the bases, 96-128 in
    the variants whose V wait blocked; without it the replay kept the bases' 928-960 ns from
    the V wait to the trailing release (704-768 measured) and put the recorded b1 s1024
    kernel's change 13-15 points high."""
    if data.lead_end is None:
        return {}
    out = {}
    for i in _releases_after_wait(data.spec, jobs):
        left = data.lead_end[:, :, i] - measured_begin[:, :, i] - after_wait_floor(data, i)
        out[i] = np.nan_to_num(np.maximum(left, 0.0))
    return out


def _releases_after_wait(spec: PipelineSpec, jobs) -> tuple[int, ...]:
    """The asynchronous work regions that release right after their role's wait and issue
    no job (``jobs``: the job regions' indices): FA4's K and V releases, whose staggered
    role keeps the leading group's release (``_leading_job_left``) and holds the trailing
    one's lag (``trailing_lag``)."""
    prev, _ = _role_sequences(spec)
    return tuple(i for i, r in enumerate(spec.regions)
                 if r.kind == "work" and "releases" in r.relations and i not in jobs
                 and _async_after_wait(spec, i, prev))


def after_wait_floor(data: PipelineData, i: int) -> float:
    """The least a warp of region i's role takes from a wait's end to its next stamp with
    no job to wait for: the role's gaps from one wait's end to the next wait's start
    (FA4: K's wait to V's, the QK GEMM's issue and a record between them), their
    ``UNQUEUED_QUANTILE``; one timer step where the role has no such pair. FA4's 1-deep
    variants released 96-128 ns after a V wait that blocked (``bench/whatif_diagnose.py``);
    the timer step alone left 32 ns and replayed the fast CTAs' iterations 64 ns short
    (stop 45's ``bench/whatif_fa4_lockstep.py``: 1,728 ns against 1,792 measured)."""
    spec = data.spec
    prev, _ = _role_sequences(spec)
    gaps = [data.start[:, :, j] - data.end[:, :, prev[j]]
            for j, r in enumerate(spec.regions)
            if r.role == spec.regions[i].role and r.kind == "wait" and prev[j] >= 0
            and spec.regions[prev[j]].kind == "wait"]
    gaps = np.concatenate([g[data.valid & np.isfinite(g)] for g in gaps]) if gaps else ()
    return float(np.quantile(gaps, UNQUEUED_QUANTILE)) if len(gaps) else timer_step(data)


def _clean_release_offsets(data: PipelineData, jobs: dict,
                           measured_begin: np.ndarray) -> dict:
    """Per region that releases after an async job: the offsets of its release's stamp from
    the region's begin (the wait's end) where the job issued one iteration earlier had surely
    ended by then: the wait ended at least the unit's median job time (and the blocked
    margin) after that job could start (the previous wait's end, or the previous release,
    which followed the job before it). What is left is issuing the next job and the release
    itself, as a starved ring pays it on every item."""
    out = {}
    for i, job in jobs.items():
        began = measured_begin[:, :, i]
        stamp = _stamp(data, i, data.spec.regions[i].relations["releases"].at)
        with warnings.catch_warnings():  # a unit that ran no iteration: no median
            warnings.simplefilter("ignore", RuntimeWarning)
            typical = np.nanmedian(job, axis=1)[:, None]
        could_start = np.full(began.shape, np.nan)
        could_start[:, 1:] = np.maximum(began[:, :-1], stamp[:, :-1])
        with np.errstate(invalid="ignore"):
            clean = data.valid & (began - could_start >= typical + BLOCKED_MARGIN_NS)
            offset = (stamp - began)[clean]
        out[i] = offset[offset >= 0]
    return out


def _measured_jobs(data: PipelineData) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict]:
    """The measured work spans (begin, duration), each region's shortest typical duration
    and the async jobs (``_async_jobs``), once per data."""
    measured_begin, measured_dur = _memo(data, ("work_spans",), lambda: work_spans(data))
    floor = _memo(data, ("measured_floor",), lambda: _shortest(
        data, measured_dur, SHORTEST_TYPICAL))
    jobs = _memo(data, ("async_jobs",), lambda: _async_jobs(data, measured_dur, floor))
    return measured_begin, measured_dur, floor, jobs


def clean_releases(data: PipelineData) -> dict[str, np.ndarray]:
    """Per region that releases after an async job (by tag): the offsets, ns, from the wait's
    end to the release of the releases that did not wait for their job
    (``_clean_release_offsets``). A launch whose producer was probed
    (``autoprofile(load_arrivals=N)``) starves its consumers now and then and has many more
    of them than a plain one: ``replay(release_sample=)`` pools that launch's with the
    trace's own."""
    measured_begin, _, _, jobs = _measured_jobs(data)
    return {data.spec.regions[i].tag: offsets for i, offsets
            in _clean_release_offsets(data, jobs, measured_begin).items()}


# releases that did not wait for their job (_clean_release_offsets), pooled: at least this
# many before their mean stands for the unwaited release (else the shortest regions' offsets)
MIN_CLEAN_RELEASES = 32


def _unwaited_release_offsets(data: PipelineData, jobs: dict, measured_begin: np.ndarray,
                              measured_dur: np.ndarray, floor: np.ndarray,
                              release_sample: dict | None = None,
                              min_clean: float = MIN_CLEAN_RELEASES) -> dict:
    """Per region that releases after an async job: how far its release's stamp lies after
    the region's begin (the wait's end) where the release did not wait for the job:
    issuing the next job and the release itself, as (typical, ``UNQUEUED_QUANTILE``). In a
    starved ring every release is of that kind and this time lies on the ring's recurrence;
    the shortest instance alone left the replayed 2-deep ring short of the measured one.
    Where the trace's own clean releases (``_clean_release_offsets``) and another launch's
    (``release_sample``: tag -> offsets, ``clean_releases``) make ``MIN_CLEAN_RELEASES``,
    their mean and quantile. Else the offsets of the regions no longer than the shortest
    typical one and the blocked margin, their median: those regions still waited for part
    of their job (quack 4 -> 2 on an H100: a median of 416-480 ns by launch where the
    2-stage variant released 377-382 ns after its waits, the clean releases' mean 393-422:
    bench/results/whatif/release_after_wait.txt),
    and a 32 ns timer moves a median of so few by whole ticks, 11 points of quack's 2-stage
    prediction between launches of one run (gpu36)."""
    clean = _clean_release_offsets(data, jobs, measured_begin)
    out = {}
    for i in jobs:
        other = np.asarray((release_sample or {}).get(data.spec.regions[i].tag, ()), float)
        pooled = np.concatenate([clean[i], other[np.isfinite(other) & (other >= 0)]])
        if pooled.size >= min_clean:
            mean = float(pooled.mean())
            out[i] = (mean, min(float(np.quantile(pooled, UNQUEUED_QUANTILE)), mean))
            continue
        took = measured_dur[:, :, i]
        offset = _stamp(data, i, data.spec.regions[i].relations["releases"].at) \
            - measured_begin[:, :, i]
        unwaited = data.valid & ~_waited_for_job(took, floor[i])
        offset = offset[unwaited & (offset >= 0) & (offset <= took)]
        out[i] = ((float(np.median(offset)), float(np.quantile(offset, UNQUEUED_QUANTILE)))
                  if offset.size else (0.0, 0.0))
    return out


def unwaited_release(data: PipelineData, *, release_sample: dict | None = None,
                     min_clean: float = MIN_CLEAN_RELEASES) -> dict[str, tuple[float, float]]:
    """Per region that releases after an async job (by tag): the time from a wait's end to
    the release where the release does not wait for its job, (typical, least loaded), as
    the replay takes it (``_unwaited_release_offsets``); ``min_clean=inf`` reads it by the
    shortest regions alone, as the model did before stop 50."""
    measured_begin, measured_dur, floor, jobs = _measured_jobs(data)
    return {data.spec.regions[i].tag: value for i, value in _unwaited_release_offsets(
        data, jobs, measured_begin, measured_dur, floor, release_sample, min_clean).items()}


def _sample_key(release_sample: dict | None) -> tuple:
    """A memo key for ``release_sample`` (tag -> offsets): its tags, sizes and sums."""
    return tuple(sorted((tag, int(np.size(x)), float(np.nansum(x)))
                        for tag, x in (release_sample or {}).items()))


def replay(data: PipelineData, spec: PipelineSpec | None = None, *,
           scale: dict[str, float] | None = None, terms=None,
           record_ns: float = 0.0, item_latency: dict | None = None,
           own_scale: dict[str, float] | None = None,
           leaders: dict | None = None, unit_shift: np.ndarray | None = None,
           load_share: np.ndarray | None = None,
           departure_kept: np.ndarray | None = None,
           release_sample: dict | None = None) -> Schedule:
    """Re-schedule the measured work durations under ``spec`` (default: the data's own);
    ``scale``: tag -> factor on that work region's durations (0.8 = 20% faster), its async
    job's included; ``own_scale``: the same on the warps' own work alone, the job's engine
    time kept (what a recorder's schedule slows: ``recorder_slowdown``).
    ``record_ns``: one record's own time (``pipelines.record_cost_ns``); a work region
    spans two stamps' worth of recording (from the record before it, past its own, to the
    read of the next), so each loses twice that: the replay of the kernel unrecorded.
    ``item_latency``: wait region index -> (units, iterations) latency of each item's
    event, in place of the terms' one latency per unit (loads whose latencies vary);
    ``leaders``: wait region index -> CTAs per group, where that wait's latencies are
    (2, units, iterations), as an L2 miss and as a hit: each group's first load of a place
    (CTAs ranked by their first start) misses, and a load of the same place lands no sooner
    than that miss, nor sooner than its own hit would (``pipelines.leader_gaps``).
    ``unit_shift``: (units,) ns each unit starts later than measured (``dispatch_shift``:
    the CTAs past the first wave start where the change frees an SM).
    ``load_share``: (units,) how much of each unit's non-producing roles' time stays work in
    the change against the base (``what_if``'s fixed point, ``busy_share``; None: the
    base's load): the load the SM's warps put on each other shrinks with it. The issue
    times on a ring's recurrence (a produce's stamp after its acquire: the copies' issue; a
    release after a wait that did not wait for its job: the next job's issue) keep their
    least loaded part (``UNQUEUED_QUANTILE`` of the base's) and that share of the rest:
    under the base's load the SM issues them later than a starved ring does (ws_gemm 4 -> 2:
    a release 160 ns after the wait in the base's unwaited releases, 117 ns mean in the
    variant; the copies' commit 50 ns after the acquire against 38), and kept whole they
    made the replayed 2-deep ring 5% slow (stop 41 scaled them by 1 / the throughput ratio).
    Each unit's own work keeps that share of its departure from the iteration's median over
    the units (a 1-deep FA4 b1 s1024: the consumers' work per SM spread 45 ns in the base,
    13 in the variant; the producer's V commit came 288 ns after its acquire mid-loop in
    the base, 160 in the variant; the GEMMs' 2-deep rings committed and released 32 ns
    sooner than 1 / ratio gave). ``departure_kept``: (units, iterations) 1 where that
    departure stays, 0 where the iteration runs the median's work (``what_if`` keeps it
    only where the change blocks the roles' waits as the base did: ``blocked_as_base``).
    ``release_sample``: region tag -> another launch's releases that did not wait for their
    job (``clean_releases``), pooled with the trace's own for the unwaited release's time."""
    base = data.spec
    spec = base if spec is None else spec
    if [r.tag for r in spec.regions] != [r.tag for r in base.regions]:
        raise ProfileBufferError("a what-if pipeline must keep the measured regions")
    units, iters, n = data.shape
    _, latency, cost, _, _ = terms if terms is not None else infer_terms(data)
    # what follows from the measured data alone is derived once per data (_memo). The loop
    # below steps through the iterations, every unit at once: its arrays are held by
    # iteration, (K, [n,] U), so that each step reads and writes contiguous rows
    # an async job's engine time is the kernel's own, recording or not
    measured_begin, measured_dur, measured_floor, jobs = _measured_jobs(data)
    jobs = dict(jobs)  # scaled below for this replay alone
    ran = data.valid  # (U, K): the iterations each unit ran (the others pass through, empty)
    dur = np.maximum(measured_dur - 2.0 * record_ns, 0.0)
    # where in its region each release happens: its record's stamp, as far from the region's
    # start (from its end, for a release that waits for an async job) as measured; a stamp
    # at the region's end stays at its end
    releasing = tuple((i, r.relations["releases"].at) for i, r in enumerate(spec.regions)
                      if "releases" in r.relations and r.kind == "work")
    producing = tuple((i, "start") for i, r in enumerate(spec.regions)
                      if "produces" in r.relations and r.kind == "work")

    def stamp_offsets(stamps):
        # a trailing group's release held to its lag's lower state (trailing_lag)
        return _memo(data, ("stamp_at", stamps), lambda: {
            i: tuple(_by_iteration(x) for x in offsets) for i, offsets
            in _stamp_offsets(data, stamps, measured_begin, measured_dur,
                              _releases_after_wait(data.spec, jobs)).items()})
    release_at, produce_at = stamp_offsets(releasing), stamp_offsets(producing)
    # a stamp's offset from the wait before it holds that wait's record (its store): one
    # record less without recording
    def issue_scaled(value, low):
        """An issue time under the change's load: its part above the least loaded one
        keeps each unit's busy share."""
        return value if load_share is None else low + (value - low) * load_share
    release_own = {i: np.maximum(issue_scaled(x, low) - record_ns, 0.0)
                   for i, (x, low) in _memo(
        data, ("unwaited_release_at", _sample_key(release_sample)),
        lambda: _unwaited_release_offsets(data, jobs, measured_begin, measured_dur,
                                          measured_floor, release_sample)).items()}
    produce_low = _memo(data, ("produce_low", producing), lambda: {
        i: float(np.quantile(offsets[0][_by_iteration(ran)], UNQUEUED_QUANTILE))
        for i, offsets in produce_at.items()})
    lead = _memo(data, ("wait_leads", record_ns), lambda: {
        i: _by_iteration(x) for i, x in _wait_leads(data, record_ns).items()})
    own_time = _memo(data, ("unblocked_wait_times", np.asarray(cost).tobytes()),
                     lambda: _by_iteration(_unblocked_wait_times(data, cost)))
    ran_k = _memo(data, ("valid",), lambda: _by_iteration(ran))
    # how long each wait blocked in the base: its measured work after it already holds that
    # much of an async job run meanwhile, so a replay absorbs only blocking beyond it
    base_blocked = _memo(data, ("base_blocked", np.asarray(cost).tobytes()), lambda: np.nan_to_num(
        np.maximum(_by_iteration(data.end - data.start) - own_time, 0.0)))
    absorbable = _memo(data, ("leading_job_left",), lambda: {
        i: _by_iteration(x) for i, x in _leading_job_left(data, measured_begin, jobs).items()})
    # shortest measured duration of each work region: a minimum, so a scaled region's is
    # its own scaled (one pass over the data per record time)
    floor = np.array(_memo(data, ("floor", record_ns), lambda: _shortest(data, dur)))
    if load_share is not None:
        # each unit's own work keeps its busy share of its departure from the iteration's
        # median over the units (the load the SM's warps put on each other in the base)
        own_work = set(slowed_by_recorder(spec))
        for i in (i for i, r in enumerate(spec.regions) if r.tag in own_work):
            def medians(i=i):
                with warnings.catch_warnings():  # an iteration no unit ran: no median
                    warnings.simplefilter("ignore", RuntimeWarning)
                    return np.nan_to_num(np.nanmedian(np.where(ran, dur[:, :, i], np.nan), 0))
            # the unscaled durations' medians: the same for every replay of one record time
            typical = _memo(data, ("iteration_medians", record_ns, i), medians)
            kept = load_share[:, None] if departure_kept is None \
                else load_share[:, None] * departure_kept
            dur[:, :, i] = np.where(ran, typical[None, :] + (dur[:, :, i] - typical[None, :])
                                    * kept, dur[:, :, i])
    tags = [r.tag for r in spec.regions]
    for own, factors in ((False, scale), (True, own_scale)):
        for tag, factor in (factors or {}).items():
            if tag not in tags:
                raise ProfileBufferError(f"scale names an unknown region {tag!r}")
            if spec.regions[tags.index(tag)].kind != "work":
                raise ProfileBufferError(f"only work regions can be made faster, {tag!r} is a "
                                         "wait")
            factor = np.asarray(factor, dtype=np.float64)
            dur[:, :, tags.index(tag)] *= factor[:, None] if factor.ndim else float(factor)
            floor[tags.index(tag)] *= float(factor.min())
            if not own and tags.index(tag) in jobs:  # the region's work is its async job
                jobs[tags.index(tag)] = jobs[tags.index(tag)] * float(factor)
    prev, role_last = _role_sequences(spec)
    order = spec.step_order()
    dur = _by_iteration(dur)
    jobs = {i: _by_iteration(job) for i, job in jobs.items()}
    # job regions whose releases drain a tile's jobs: (K, U) where, and the epilogue after
    drains = _memo(data, ("drains_by_iteration",), lambda: {
        i: tuple(_by_iteration(x) for x in _drains(data, i)) for i in jobs
        if _drains(data, i)[0].any()})
    latency_of = np.ascontiguousarray(latency.T)  # (n, U)
    # an item's latency: its draw, or (2, U, K) draws, as a miss and as an L2 hit, for a ring
    # whose CTAs share lines in groups (``leaders``: wait -> the group's CTAs)
    per_item = {i: np.ascontiguousarray(np.moveaxis(np.asarray(x, dtype=np.float64), -2, -1))
                for i, x in (item_latency or {}).items()}  # ([2,] K, U)
    leaders = {i: int(group) for i, group in (leaders or {}).items() if per_item[i].ndim == 3}
    led = {spec.regions[i].relations["consumes"].resource: group
           for i, group in leaders.items()}
    group_first = {name: np.zeros((iters, units), dtype=np.int64) for name in led}
    cta_rank = cta_ranks(data)
    job_end = {i: np.full(units, -np.inf) for i in jobs}
    shape = (iters, n, units)
    start = np.full(shape, np.nan)
    end = np.full(shape, np.nan)
    dep_all = np.full(shape, np.nan)
    peer_all = np.zeros(shape, dtype=np.int64)
    blocked = np.zeros(shape, dtype=bool)
    prod = {r.name: np.full((iters, units), np.nan) for r in spec.resources}
    # each ring's releases by item, its first rows the p items the kernel issued before its
    # loop (prologue_slots): item j's release is row j + p
    released_rings = [q.relations["releases"].resource for q in spec.regions
                      if "releases" in q.relations]
    pre_loop = {name: prologue_slots(spec, name)[0] for name in released_rings}
    rel = {r.name: np.full((pre_loop.get(r.name, 0) + iters, units), np.nan)
           for r in spec.resources}
    clusters = {r.name: _memo(data, ("cluster", r.shared_by),
                              lambda shared_by=r.shared_by: _cluster_index(data, shared_by))
                for r in spec.resources if r.shared_by > 1}
    arange = np.arange(units)
    absorbed = {}  # per region in ``absorbable``: this iteration's absorbed time (U,)
    for k in range(iters):
        here = ran_k[k]
        for i in order:
            r = spec.regions[i]
            if prev[i] >= 0:
                begin = end[k, prev[i]]
            elif k > 0:
                begin = end[k - 1, role_last[i]]
            else:
                begin = data.start[:, 0, i] if unit_shift is None else (
                    data.start[:, 0, i] + unit_shift)
            if r.kind == "wait" and i in lead:
                begin = begin + lead[i][k]
            start[k, i] = begin
            if r.kind == "wait":
                dep = np.full(units, np.nan)
                peer = arange
                if "consumes" in r.relations:
                    rl = r.relations["consumes"]
                    if k - rl.distance >= 0:
                        dep = prod[rl.resource][k - rl.distance]
                else:
                    rl = r.relations["acquires"]
                    res = spec.resource(rl.resource)
                    # the item acquired back: < 0 where none (nor one from before the loop)
                    j = k - res.depth - rl.distance + pre_loop.get(rl.resource, 0)
                    if j >= 0:
                        dep = rel[rl.resource][j]
                        if res.shared_by > 1:
                            cl = clusters[res.name]
                            gmax = np.full(cl.max() + 1, -np.inf)
                            np.maximum.at(gmax, cl, dep)
                            first = np.full(cl.max() + 1, units)
                            np.minimum.at(first, cl, np.where(dep == gmax[cl], arange, units))
                            dep, peer = gmax[cl], first[cl]
                if ("acquires" in r.relations and j >= 0
                        or "consumes" in r.relations and k - rl.distance >= 0) \
                        and (np.isnan(dep) & here).any():
                    raise ProfileBufferError(
                        f"the pipeline cannot run: {r.tag} at iteration {k} waits on an event "
                        f"that comes later in the same iteration (ring too shallow: deadlock)")
                if i in leaders and k >= rl.distance:
                    # a load lands when its own copy would (an L2 hit) and no sooner than
                    # its group's first load of the place, a miss, brings the line
                    j = k - rl.distance
                    first_unit = group_first[rl.resource][j]
                    miss = prod[rl.resource][j][first_unit] + per_item[i][0, k, first_unit]
                    item = np.maximum(per_item[i][1, k], miss - dep)
                elif i in leaders:
                    item = per_item[i][1, k]
                else:
                    item = per_item[i][k] if i in per_item else latency_of[i]
                arm = dep + item
                own = begin + own_time[k, i]
                # the event decides where it comes later: no event (nan) never does, and an
                # infinite one counts as the largest float (np.nan_to_num(arm, nan=-inf)
                # compared, without its cost)
                is_dep = (np.minimum(np.maximum(arm, -_FLOAT_MAX), _FLOAT_MAX) > own) & here
                end[k, i] = np.where(is_dep, arm, np.where(here, own, begin))
                dep_all[k, i], peer_all[k, i], blocked[k, i] = dep, peer, is_dep
            else:
                end[k, i] = begin + dur[k, i]
                if i in jobs:
                    # the release waits for the job issued one iteration earlier; this
                    # iteration's job starts once it is issued and the engine is free
                    end[k, i] = np.where(here, np.maximum(begin + floor[i], job_end[i]), begin)
                    if i in drains:  # the job before was drained: the region's own span
                        end[k, i] = np.where(here & drains[i][0][k], begin + dur[k, i],
                                             end[k, i])
                    previous_job_end = job_end[i]  # the job issued one iteration earlier
                    job_end[i] = np.where(here, np.maximum(begin, job_end[i]) + jobs[i][k],
                                          job_end[i])
                    if i in drains and k + 1 < iters:
                        # the next iteration's release drains this job, then the epilogue
                        end[k, i] = np.where(drains[i][0][k + 1] & here, np.maximum(
                            end[k, i], job_end[i] + drains[i][1][k]), end[k, i])
                elif _async_after_wait(spec, i, prev):
                    w = prev[i]
                    # the wait's blocking beyond the base's runs this region's async work
                    extra = np.maximum(end[k, w] - start[k, w] - own_time[k, w]
                                       - base_blocked[k, w], 0.0)
                    end[k, i] = np.where(here, np.maximum(
                        begin + floor[i], begin + dur[k, i] - extra), begin)
                    if i in absorbable:  # the leading group's job ran while the wait blocked
                        absorbed[i] = np.minimum(extra, absorbable[i][k])
                        end[k, i] = np.where(here, np.minimum(
                            end[k, i], begin + dur[k, i] - absorbed[i]), begin)
                if "produces" in r.relations:
                    offset = (issue_scaled(produce_at[i][0][k], produce_low[i])
                              - record_ns) if i in produce_at else 0.0
                    made = r.relations["produces"].resource
                    prod[made][k] = begin + np.clip(offset, 0.0, end[k, i] - begin)
                    if made in led:  # each unit's group's first load of this place
                        cell = cta_rank // led[made]
                        when = np.where(here, prod[made][k], np.inf)
                        first_of = np.full(int(cell.max()) + 1, np.inf)
                        np.minimum.at(first_of, cell, when)
                        first_unit = np.full(first_of.size, units)
                        np.minimum.at(first_unit, cell,
                                      np.where(when == first_of[cell], arange, units))
                        group_first[made][k] = np.minimum(first_unit[cell], units - 1)
                if "releases" in r.relations:
                    rl = r.relations["releases"]
                    # the item released (the loop's first releases: those from before it)
                    released_item = k - rl.distance + pre_loop[rl.resource]
                    if released_item >= 0:
                        length = end[k, i] - begin
                        after_start, before_end, overhang = release_at[i]
                        if i in jobs:  # after the job: measured from the end, and no
                            # sooner than a release that did not wait for its job
                            when = np.maximum(end[k, i] - np.minimum(before_end[k], length),
                                              begin + release_own[i])
                            if i in drains and k + 1 < iters:
                                # before a drain the end is the epilogue's: the release
                                # is the previous job's end
                                when = np.where(drains[i][0][k + 1], np.maximum(
                                    previous_job_end, begin + release_own[i]), when)
                            grows = here
                            if i in drains:  # a drain: the drained job's end, before this
                                drain = drains[i][0][k]  # region (which it does not extend)
                                when = np.where(drain, previous_job_end, when)
                                grows = here & ~drain
                            end[k, i] = np.where(grows, np.maximum(end[k, i], when), end[k, i])
                        else:
                            # a release at the region's end (its record's stamp there) stays
                            # at the end when the work runs longer than measured
                            when = np.where(before_end[k] > 0,
                                            begin + np.minimum(after_start[k], length),
                                            end[k, i]) + overhang[k]
                            if i in absorbed:
                                when = when - absorbed[i]
                        rel[rl.resource][released_item] = when
                    if k == iters - 1:
                        lo = max(iters - rl.distance, 0) + pre_loop[rl.resource]
                        rel[rl.resource][lo:] = end[k, i][None, :]
    return Schedule(start=_by_unit(start), end=_by_unit(end), latency=latency, cost=cost,
                    dep_time=_by_unit(dep_all), dep_peer=_by_unit(peer_all),
                    blocked=_by_unit(blocked))


# how a load's queued time scales with the change's throughput (queued_under_load)
QUEUE_RULES = ("little", "open", "none")


def queued_under_load(queued, unqueued: float, ratio: float, *, rule: str = "little",
                      lighter: tuple[float, float] | None = None):
    """A load's queued time (its latency above the least congested ``unqueued`` one) when the
    kernel's throughput changes by 1 / ``ratio`` (the change's time against the base's), by
    ``rule`` (one of ``QUEUE_RULES``), or where the base kernel was also run at a lighter
    load (``lighter``: (f, h), its queued part f times the base's at h of the base's
    throughput, ``lighter_load_point``), a slower change's by that curve instead: the
    queued part's factor runs straight from 1 at the base's throughput to f at h, and
    from there to 0 at none (Little's law, the queued part's factor equal to the
    throughput's, is that curve through (h, h)):

    - ``"little"`` (the model's): Little's law at a fixed occupancy, queued / ratio;
    - ``"open"``: one open queue, W = W0 / (1 - rho), the base's utilisation rho = queued /
      (unqueued + queued), the change's rho / ratio (the model's in stops 41-53);
    - ``"none"``: the base's queueing kept.

    The open queue shrinks a slower change's queueing the most, and its shallower rings'
    loads came out faster than the GPU's: probed on an H100, quack's 2-stage variant's loads
    took 704 / 800 / 832 / 896 / 1024 ns (p5 / p25 / median / p75 / p95) where its base's
    took 544 / 640 / 800 / 992 / 1184, the open queue's draws 439 / 599 / 695 / 855 / 1079;
    its 2-stage ring's blocked loads took 768-832 ns on all eleven runs of stops 52-53 with
    the base's sampled median anywhere in 800-960. Over those runs Little's law put 78 of
    80 full-run rows within 3 points (0.89 points mean error) against the open queue's 77
    (0.96), quack's 4 -> 2 2.71 points off on average against 3.58, no row more than 0.07
    point worse on average; held out on stop 54's three runs, 45 of 48 within (the open
    queue's, read after: 46; queue_rules.txt, stop62/moved_from_results/ in
    bench/results/whatif/history/stops_31-64.tar.xz). A faster change
    (``ratio`` < 1) loads memory more: every rule but ``"none"`` takes Little's law there
    (the open queue has no steady state once rho reaches 1)."""
    if rule not in QUEUE_RULES:
        raise ValueError(f"unknown queue rule {rule!r}: one of {sorted(QUEUE_RULES)}")
    r = max(float(ratio), 1e-6)
    q = np.maximum(queued, 0.0)
    if lighter is not None and r > 1.0:
        factor, at = float(lighter[0]), float(lighter[1])
        if not (0.0 < at < 1.0 and factor >= 0.0):
            raise ValueError(f"a lighter load's point is (factor >= 0, throughput in (0, 1)), "
                             f"got {lighter!r}")
        throughput = 1.0 / r
        if throughput >= at:
            return q * (1.0 + (factor - 1.0) * (1.0 - throughput) / (1.0 - at))
        return q * factor * throughput / at
    if rule == "none":
        return q
    if rule == "little" or r <= 1.0:
        return q / r
    w0 = max(float(unqueued), 1e-9)
    return w0 * q / ((w0 + q) * r - q)  # > 0: (w0 + q) r > w0 + q > q


def cta_ranks(data: PipelineData) -> np.ndarray:
    """(units,) each unit's CTA's rank by its first start: the launch order that groups the
    CTAs reading the same tiles (``pipelines.leader_gaps``)."""
    def ranks():
        group, first = cta_dispatch(data)[:2]
        rank = np.empty(first.size, dtype=np.int64)
        rank[np.argsort(first, kind="stable")] = np.arange(first.size)
        return rank[group]
    return _memo(data, ("cta_rank",), ranks)


def _by_iteration(a: np.ndarray) -> np.ndarray:
    """(U, K[, n]) -> (K[, n], U), contiguous: what the replay reads one iteration at a time."""
    return np.ascontiguousarray(np.moveaxis(a, 0, -1))


def _by_unit(a: np.ndarray) -> np.ndarray:
    """(K[, n], U) -> (U, K[, n]): the replay's arrays in the layout of the data (a view: a
    what-if reads only the ends of its replays, no copy of the rest)."""
    return np.moveaxis(a, -1, 0)


# ---------------------------------------------------------------------------- critical path
def critical_path(data: PipelineData, sched: Schedule):
    """Walk back from each unit's last event: a blocked wait jumps to the region whose
    event it waited on (possibly a peer unit's), everything else to the role's previous
    region. Returns (share (U, n) ns of each region's work/cost on the path, latency (U, n)
    ns spent in the dependency latency of each wait, on_path (U, K, n) bool)."""
    spec = data.spec
    units, iters, n = data.shape
    prev, role_last = _role_sequences(spec)
    src = np.full(n, -1)
    src_at_start = np.zeros(n, dtype=bool)
    src_shift = np.zeros(n, dtype=np.int64)
    for i, r in enumerate(spec.regions):
        if "consumes" in r.relations:
            rl = r.relations["consumes"]
            src[i] = spec.source_region("produces", rl.resource)
            src_at_start[i] = True
            src_shift[i] = rl.distance
        elif "acquires" in r.relations:
            rl = r.relations["acquires"]
            src[i] = spec.source_region("releases", rl.resource)
            src_at_start[i] = spec.regions[src[i]].relations["releases"].at == "start"
            src_shift[i] = spec.resource(rl.resource).depth + rl.distance \
                - spec.regions[src[i]].relations["releases"].distance
    is_wait = np.array([r.kind == "wait" for r in spec.regions])
    share = np.zeros((units, n))
    lat = np.zeros((units, n))
    on_path = np.zeros(data.shape, dtype=bool)
    flat_end = sched.end.reshape(units, -1)
    node = np.nanargmax(flat_end, axis=1)
    owner = np.arange(units)
    cur_u = owner.copy()
    cur_k, cur_i = node // n, node % n
    at_start = np.zeros(units, dtype=bool)
    active = np.ones(units, dtype=bool)
    for _ in range(4 * iters * n + 4):
        if not active.any():
            break
        a = np.flatnonzero(active)
        u, k, i, st = cur_u[a], cur_k[a], cur_i[a], at_start[a]
        on_path[u, k, i] |= ~st
        wait = is_wait[i] & ~st
        jump = wait & sched.blocked[u, k, i]
        # contributions
        dur = sched.end[u, k, i] - sched.start[u, k, i]
        np.add.at(lat, (owner[a][jump], i[jump]), sched.latency[u[jump], i[jump]])
        plain = ~jump & ~st
        np.add.at(share, (owner[a][plain], i[plain]), np.where(jump, 0, dur)[plain])
        # next node
        nu, nk, ni, ns = u.copy(), k.copy(), i.copy(), np.zeros(a.size, dtype=bool)
        nu[jump] = sched.dep_peer[u[jump], k[jump], i[jump]]
        # the releasing region of item j sits at iteration j + release distance, clipped
        nk[jump] = np.minimum(k[jump] - src_shift[i[jump]], iters - 1)
        ni[jump] = src[i[jump]]
        ns[jump] = src_at_start[i[jump]]
        step = ~jump
        has_prev = prev[i] >= 0
        ni[step & has_prev] = prev[i[step & has_prev]]
        back = step & ~has_prev
        nk[back] = k[back] - 1
        ni[back] = role_last[i[back]]
        done = back & (k == 0)
        cur_u[a], cur_k[a], cur_i[a], at_start[a] = nu, nk, ni, ns
        active[a[done]] = False
    return share, lat, on_path


def blockers(data: PipelineData, terms=None) -> list[dict]:
    """Per wait region, on the measured data: how often the dependency (not program order)
    was the last to arrive, its margin, and which region it was."""
    spec = data.spec
    events, latency, cost, dep, _ = terms if terms is not None else infer_terms(data)
    out = []
    for i, r in enumerate(spec.regions):
        if r.kind != "wait":
            continue
        arm = dep[:, :, i] + latency[:, i][:, None]
        own = data.start[:, :, i] + cost[i]
        ran = ~np.isnan(own)  # the iterations each unit ran
        valid = ~np.isnan(arm) & ran
        margin = np.where(valid, arm - own, np.nan)
        blocked = valid & (margin > 0)
        rel_name = "consumes" if "consumes" in r.relations else "acquires"
        source = spec.regions[spec.source_region(
            "produces" if rel_name == "consumes" else "releases",
            r.relations[rel_name].resource)]
        out.append({
            "region": r.tag, "role": r.role, "resource": r.relations[rel_name].resource,
            "blocked_by": f"{source.role}:{source.tag}",
            "instances": int(ran.sum()),
            "blocked": int(blocked.sum()),
            "blocked_fraction": float(blocked.sum() / max(ran.sum(), 1)),
            "median_margin_ns": float(np.median(margin[blocked])) if blocked.any() else 0.0,
            "median_slack_ns": float(np.median(-margin[valid & ~blocked]))
            if (valid & ~blocked).any() else 0.0,
            "blocked_ns_total": float((data.end[:, :, i] - data.start[:, :, i])[blocked].sum()),
            "latency_ns_median": float(np.median(latency[:, i])),
            "wait_cost_ns": float(cost[i]),
        })
    return out


def ring_occupancy(data: PipelineData, *, resource: str):
    """Slots held over time per unit (+1 when a slot is acquired, -1 when it is released).
    Returns (stats dict, unit index, ts, value) with ts/value the step function."""
    spec = data.spec
    res = spec.resource(resource)
    events = _event_times(spec, data.start, data.end)
    acq_step = [i for i, r in enumerate(spec.regions)
                if "acquires" in r.relations and r.relations["acquires"].resource == resource]
    prod, rel = events[resource]
    if res.shared_by > 1:
        # a multicast slot is free again only once every CTA sharing it released it
        cluster = _cluster_index(data, res.shared_by)
        gmax = np.full((cluster.max() + 1, rel.shape[1]), -np.inf)
        np.maximum.at(gmax, cluster, rel)
        rel = gmax[cluster]
    take = data.end[:, :, acq_step[0]] if acq_step else prod
    units, iters = take.shape
    if acq_step:
        # causality: the acquire of item j + depth completed, so item j was released by
        # then (a recorded release point can trail the barrier arrive by a timer tick)
        shift = res.depth + spec.regions[acq_step[0]].relations["acquires"].distance
        if shift < iters:
            rel = rel.copy()
            rel[:, :iters - shift] = np.fmin(rel[:, :iters - shift], take[:, shift:])
    t = np.concatenate([take, rel], 1)
    v = np.concatenate([np.ones((units, iters)), -np.ones((units, iters))], 1)
    u = np.repeat(np.arange(units)[:, None], 2 * iters, 1)
    # release before take at a tie: an acquire that ends at t was enabled by a release <= t
    order = np.lexsort((v.ravel(), t.ravel(), u.ravel()))
    t, v, u = t.ravel()[order], v.ravel()[order], u.ravel()[order]
    occ = np.cumsum(v)  # every unit returns to 0, so a global running sum stays per unit
    span = np.nan_to_num(np.r_[np.diff(t), 0.0])  # items of iterations a unit did not run
    span[np.r_[u[1:] != u[:-1], True]] = 0.0
    total = np.bincount(u, span, minlength=units)
    stats = {
        "resource": resource, "depth": res.depth,
        "peak": int(occ.max()),
        "mean": float((occ * span).sum() / max(total.sum(), 1e-9)),
        "time_full_fraction": float(span[occ >= res.depth * res.shared_by // res.shared_by]
                                    .sum() / max(total.sum(), 1e-9)),
        "time_empty_fraction": float(span[occ <= 0].sum() / max(total.sum(), 1e-9)),
    }
    return stats, u, t, occ


def initiation_interval(data: PipelineData, terms=None) -> dict:
    """Steady-state iteration period (middle half of the iterations) against the
    resource-bound minimum (the busiest role's work per iteration) and the recurrence bound
    of each ring (slot holding time / depth)."""
    spec = data.spec
    events, latency, cost, dep, _ = terms if terms is not None else infer_terms(data)
    units, iters, n = data.shape
    lo, hi = iters // 4, max(iters * 3 // 4, iters // 4 + 2)
    dur = _work_durations(data)
    leads = _wait_leads(data)  # what lies between two waits belongs to the role's work too
    per_role = {}
    measured = {}
    for role in dict.fromkeys(r.role for r in spec.regions):
        idx = [i for i, r in enumerate(spec.regions) if r.role == role]
        busy = dur[:, lo:hi, idx].sum(-1) + sum(cost[i] + leads[i][:, lo:hi] if i in leads
                                                 else cost[i] for i in idx
                                                 if spec.regions[i].kind == "wait")
        per_role[role] = float(np.nanmedian(np.where(data.valid[:, lo:hi], busy, np.nan)))
        measured[role] = float(np.nanmedian(np.diff(data.start[:, lo:hi, idx[0]], axis=1)))
    rec = {}
    for res in spec.resources:
        acq = [i for i, r in enumerate(spec.regions)
               if "acquires" in r.relations and r.relations["acquires"].resource == res.name]
        if not acq:
            continue
        _, released = events[res.name]
        hold = released + latency[:, acq[0]][:, None] - data.end[:, :, acq[0]]
        rec[res.name] = float(np.nanmedian(hold[:, lo:hi]) / res.depth)
    return {"measured_ns": measured, "resource_bound_ns": per_role,
            "recurrence_bound_ns": rec,
            "bound_ns": max([*per_role.values(), *rec.values()])}


# ---------------------------------------------------------------------------- what-if
def _kernel_time(data: PipelineData, unit_delta: np.ndarray,
                 keep: np.ndarray | None = None, *,
                 gap_change_ns: float = 0.0) -> tuple[float, float]:
    """Measured kernel span and the span with each unit longer by ``unit_delta``;
    ``keep``: over those units only (their SMs). A CTA's units (a persistent CTA's tiles)
    run one after another; the CTAs after the first wave start where an SM frees, as the
    block scheduler dispatches them (``dispatched_span``), not on the SM they ran on, the
    launch gap ``gap_change_ns`` longer than the trace's (a change of the cluster)."""
    group, first, last, sm, _ = cta_dispatch(data, keep)
    delta = _cta_delta(group, unit_delta if keep is None else np.asarray(unit_delta)[keep],
                       first.size)
    measured = float(last.max() - first.min())
    return measured, measured + dispatched_span(
        first, last, sm, delta, gap_change_ns=gap_change_ns) - unchanged_span(data, keep)


def unchanged_span(data: PipelineData, keep: np.ndarray | None = None) -> float:
    """The kernel's span as ``dispatched_span`` dispatches its CTAs unchanged: what a
    change's dispatched span is set against (the greedy dispatch's own error cancels)."""
    _, first, last, _, unchanged = cta_dispatch(data, keep)
    return float((unchanged + (last - first)).max() - first.min())


def _cta_delta(group: np.ndarray, unit_delta: np.ndarray, ctas: int) -> np.ndarray:
    """(ctas,) each CTA's change: its units' (a persistent CTA's tiles run in turn)."""
    return np.bincount(group, np.asarray(unit_delta, dtype=np.float64), minlength=ctas)


# the dispatch moves the CTAs' starts only where it reproduces the measured ones: their
# median distance at most this fraction of the median CTA's time (H100: FA4 b4 0.2%, its
# causal variant 2.9%, ws_gemm 0.1%)
DISPATCH_MATCH = 0.05


def dispatch_shift(data: PipelineData, unit_delta: np.ndarray, *,
                   gap_change_ns: float = 0.0) -> np.ndarray:
    """(units,) how much later than measured each unit starts when each is ``unit_delta``
    longer: its CTA dispatched where an SM frees (``dispatched_starts``), so a change that
    slows the first wave starts the next one later, and its CTAs in step where the first
    wave's ended in step. Zeros where the unchanged dispatch does not put the CTAs where
    they started (``DISPATCH_MATCH``): a launch whose CTAs came late for another reason than
    waiting for an SM (a trace of several launches, a synthetic one). ``gap_change_ns``:
    as ``dispatched_starts`` takes it."""
    group, first, last, sm, unchanged = cta_dispatch(data)
    if np.median(np.abs(unchanged - first)) > DISPATCH_MATCH * np.median(last - first):
        return np.zeros(group.size)
    delta = _cta_delta(group, unit_delta, first.size)
    return (dispatched_starts(first, last, sm, delta, gap_change_ns=gap_change_ns)
            - first)[group]


def cta_dispatch(data: PipelineData, keep: np.ndarray | None = None):
    """(each kept unit's CTA, each CTA's first start, last end and SM, and its start as
    ``dispatched_starts`` dispatches the CTAs unchanged), memoised per ``keep``."""
    def compute():
        kept = slice(None) if keep is None else keep
        _, group = np.unique(data.unit_group[kept], return_inverse=True)
        first = np.full(group.max() + 1, np.inf)
        np.minimum.at(first, group, data.unit_first[kept])
        last = np.full(group.max() + 1, -np.inf)
        np.maximum.at(last, group, data.unit_last[kept])
        sm = np.zeros(group.max() + 1, dtype=np.int64)
        sm[group] = data.unit_sm[kept]
        return group, first, last, sm, dispatched_starts(first, last, sm, np.zeros(first.size))
    return _memo(data, ("dispatch", None if keep is None else keep.tobytes()), compute)


def dispatched_span(first: np.ndarray, last: np.ndarray, sm: np.ndarray,
                    delta: np.ndarray, *, gap_change_ns: float = 0.0) -> float:
    """The span of CTAs that ran ``first`` -> ``last`` (ns) on ``sm``, each ``delta``
    longer, dispatched as the block scheduler does: the first wave (the CTAs that started
    before any ended) where they started, each later one, in the order they started, on
    the slot that frees first, after the launch gap the trace shows between one CTA's end
    and the next one's start on an SM. The greedy order reproduces the measured schedule:
    FA4 b4's 2,048 CTAs on 132 SMs gave 855.7 us against 856.0 measured (H100,
    ``bench/whatif_fa4_lockstep.py``). A static chain per SM would pile a slower CTA's delay onto the
    CTAs that followed it there, where the GPU hands them to the SMs that free first.
    ``gap_change_ns``: as ``dispatched_starts`` takes it."""
    starts = dispatched_starts(first, last, sm, delta, gap_change_ns=gap_change_ns)
    return float((starts + (last - first) + delta).max() - first.min())


def launch_gaps(first: np.ndarray, last: np.ndarray, sm: np.ndarray) -> np.ndarray:
    """Of CTAs that ran ``first`` -> ``last`` (ns) on ``sm``: each SM's gaps from one CTA's
    end to the next CTA's start there, in the order they started (CTAs resident together on
    one SM overlap: no gap between them)."""
    order = np.lexsort((first, sm))
    same = sm[order][1:] == sm[order][:-1]
    gaps = (first[order][1:] - last[order][:-1])[same]
    return gaps[gaps >= 0]


def dispatched_starts(first: np.ndarray, last: np.ndarray, sm: np.ndarray,
                      delta: np.ndarray, *, gap_change_ns: float = 0.0) -> np.ndarray:
    """Each CTA's start as ``dispatched_span`` dispatches them (ns, the first wave's
    unchanged): where a change that slows some CTAs starts the later ones.
    ``gap_change_ns``: the launch gap that much longer than the trace's (a change of the
    cluster shape moves what the block scheduler spends between one CTA and the next on an
    SM, which the base's trace cannot show: ``bench/cluster_launch_gap.py`` measures it)."""
    order = np.argsort(first, kind="stable")
    wave = max(int(np.count_nonzero(first < last.min())), 1)
    starts = np.asarray(first, dtype=np.float64).copy()
    if wave >= first.size:
        return starts
    gaps = launch_gaps(first, last, sm)
    gap = max((float(np.median(gaps)) if gaps.size else 0.0) + gap_change_ns, 0.0)
    slots = (last + delta)[order[:wave]].tolist()
    heapq.heapify(slots)
    later = order[wave:]
    begun = np.empty(later.size)
    # one Python float per later CTA: the loop is the launch's CTAs, not its events
    for n, duration in enumerate((last - first + delta)[later].tolist()):
        begun[n] = slots[0] + gap
        heapq.heapreplace(slots, begun[n] + duration)
    starts[later] = begun
    return starts


def steady_bound(data: PipelineData, terms, i: int) -> np.ndarray:
    """(units,) the steady state's latency of wait i: the blocked waits' latency where the
    unit has some, capped by the unblocked waits (they ended after their data arrived, so
    end - event bounds the latency); a unit whose waits never blocked has only the cap."""
    dep, e = terms[3][:, :, i], data.end[:, :, i]
    blocked, free = blocked_and_free(data, i, terms[2][i], dep)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        cap = np.nanmin(np.where(free, e - dep, np.nan), axis=1)
    bound = np.where(blocked.any(1), terms[1][:, i], cap)
    return np.maximum(bound[np.isfinite(bound)], 0.0)


def latency_sample(data: PipelineData, terms=None, *, region: str) -> tuple[np.ndarray, str]:
    """Observed latencies (ns) of the event that wait ``region`` (a ``consumes`` wait)
    waits on, and where they come from. Preferred: the first item of every unit that
    started while the machine was loaded (its first produce comes after some unit had
    finished, and it carries no ring from a previous tile): its consumer always waits for
    it, so its end - produce is the latency at the base's own memory load, unbiased by the
    consumer's slack. Else (every unit started together, e.g. a persistent kernel): the
    per-unit latencies inferred from blocked waits, capped by the unblocked ones."""
    spec = data.spec
    tags = [r.tag for r in spec.regions]
    if region not in tags:
        raise ProfileBufferError(f"latency_sample names an unknown region {region!r}")
    i = tags.index(region)
    rel = spec.regions[i].relations.get("consumes")
    if rel is None:
        raise ProfileBufferError(f"{region!r} is not a consumes wait")
    terms = terms if terms is not None else infer_terms(data)
    events, latency = terms[:2]
    produced = events[rel.resource][0]
    prev = data.unit_prev if data.unit_prev is not None else np.full(data.shape[0], -1)
    if rel.distance == 0:
        loaded = (produced[:, 0] > data.unit_last.min()) & (prev < 0)
        first = data.end[:, 0, i] - produced[:, 0]
        if loaded.sum() >= MIN_LATENCY_SAMPLE:
            return first[loaded], "first item of units started under load"
    if never_blocked(data, terms, i):
        return latency[:, i].copy(), ("no wait blocked: latency not observed (a what-if "
                                      "that depends on it gets bounds: at 0 and at the "
                                      "unblocked waits' bound)")
    return latency[:, i].copy(), "blocked waits (capped by unblocked ones), per unit"


def timer_step(data: PipelineData) -> float:
    """The trace timer's resolution (ns): the smallest step between distinct start times."""
    stamps = np.unique(data.start[np.isfinite(data.start)])
    steps = np.diff(stamps)
    return float(steps[steps > 0].min()) if (steps > 0).any() else 0.0


def with_latency(terms, column: int, value: float):
    """``terms`` (``infer_terms``) with the latency of wait region ``column``'s event set to
    ``value`` ns for every unit."""
    lat = terms[1].copy()
    lat[:, column] = float(value)
    return (terms[0], lat, *terms[2:])


def _window_starts(sorted_keys: np.ndarray, at: np.ndarray) -> np.ndarray:
    """For each of ``at``, the first index of the ``NEAREST_ARRIVALS`` sorted keys nearest
    it (the windows of ``sliding_window_view``)."""
    return np.clip(np.searchsorted(sorted_keys, at) - NEAREST_ARRIVALS // 2, 0,
                   sorted_keys.size - NEAREST_ARRIVALS)


def _place_windows(sorted_places: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each place in ``at``, (first index, count) of the sorted sampled loads (more than
    ``NEAREST_ARRIVALS`` of them) an item there draws from: those sampled at that very place
    where there are ``PLACE_SAMPLE_MIN``, else the ``NEAREST_ARRIVALS`` nearest. A CTA's
    first loads meet its start burst, and a window reaching into them from a later place
    carried their latency there (FA4 b1 s1024 samples 18 loads a place: 64 spanned four)."""
    first = np.searchsorted(sorted_places, at, side="left")
    count = np.searchsorted(sorted_places, at, side="right") - first
    own = count >= PLACE_SAMPLE_MIN
    return (np.where(own, first, _window_starts(sorted_places, at)),
            np.where(own, count, NEAREST_ARRIVALS))


def _place_picks(rng, sorted_places: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """(units, iterations) indices into the sorted sample: each item's draw from its
    place's window (``_place_windows``)."""
    first, count = _place_windows(sorted_places, np.arange(shape[1]))
    return first[None, :] + rng.integers(0, count[None, :], size=shape)


def _place_medians(sorted_values: np.ndarray, sorted_places: np.ndarray,
                   at: np.ndarray) -> np.ndarray:
    """The median of each place's window (``_place_windows``) of ``sorted_values``."""
    first, count = _place_windows(sorted_places, at)
    # one median per place of the loop, not per load
    return np.array([np.median(sorted_values[f:f + c])
                     for f, c in zip(first.tolist(), count.tolist())])


def _window_medians(values: np.ndarray, keys: np.ndarray, at: np.ndarray) -> np.ndarray:
    """The median of the ``NEAREST_ARRIVALS`` values whose keys lie nearest each of ``at``."""
    order = np.argsort(keys, kind="stable")
    windows = np.lib.stride_tricks.sliding_window_view(values[order], NEAREST_ARRIVALS)
    return np.median(windows[_window_starts(keys[order], at)], axis=1)


def load_congestion(latency: np.ndarray, issued: np.ndarray) -> np.ndarray:
    """Each sampled load's congestion: the median latency of the ``NEAREST_ARRIVALS`` loads
    issued nearest it in time (``issued``, ns), what every CTA's loads met then."""
    return _window_medians(latency, issued, issued)


def _draw_latencies(rng, sample, shape: tuple[int, int]
                    ) -> tuple[np.ndarray, np.ndarray, float, tuple[float, float] | None]:
    """(units, iterations) one latency per replayed item from a ring's sampled loads, as
    (queued, fixed, unqueued, loop): the part that scales with the memory's load
    (``queued_under_load``), the part that does not, and the least congested latency the
    queued part lies above; the item's latency is queued + fixed. ``loop``: the
    ``loop_queueing`` the items' queued part is, where the sample's issue times told the
    congestion (else None).

    With the loads' issue times (``ARRIVAL_SAMPLE_DTYPE``) a load's latency splits in two.
    Its congestion, the median latency of the ``NEAREST_ARRIVALS`` loads issued nearest it
    in time, is shared by every CTA then. Every item takes the loop's typical congestion
    (the mean over its places of the median over the loads sampled nearest each place), and
    the part of it above the least congested times' (``UNQUEUED_QUANTILE``) is queued. The
    load's own deviation from its congestion (its path, its CTA's start burst) is fixed,
    drawn from the loads sampled near the item's place.

    So the base's congested stretches are not carried into the change: on the GPU a 3-deep
    ring met loads as slow as its 4-deep base's own, but not its congested stretches
    (ws_gemm: the base's sample spread 330 ns, the 3-deep ring's waits 167), and independent
    draws of them stalled the replay (+8.1% predicted, +1.0% measured). Nor are the places
    where the base's own schedule congested it (stop 49): CTAs that start in step fill their
    rings together (as many loads each as the ring is deep, so the burst is the base's own),
    and a persistent GEMM refills its ring at each tile's start. On an H100 its 2-stage
    variant waited 704 / 704 ns over its first tile's halves, where the base's sampled loads
    took 822 / 598; over the loop the variant's waits came to 596 ns (mean of its eighths),
    the draws by place (stop 48) to 548, the loop's congestion to 568
    (bench/whatif_variants.py, gpu34).

    Without issue times, the part above the sample's ``UNQUEUED_QUANTILE`` is queued:
    iteration k draws from the loads sampled nearest place k, or without places from the
    whole sample."""
    latency, position = arrival_latencies(sample), arrival_positions(sample)
    issued = arrival_issue_times(sample)
    if position is None or latency.size <= NEAREST_ARRIVALS:
        drawn = rng.choice(latency, size=shape)
    else:
        order = np.argsort(position, kind="stable")
        pick = _place_picks(rng, position[order], shape)
        if issued is not None and np.ptp(issued) > 0:
            congestion = load_congestion(latency, issued)
            floor, typical = loop_queueing(sample, shape[1], congestion=congestion)
            # the loop's queued part, the same for every item (not its place's)
            queued = np.full(shape, typical)
            own = latency - congestion
            classes = miss_and_hit(sample)
            if classes is None:
                drawn = own[order][pick]
            else:  # (2, U, K): as a group's first load of the place (a miss), as an L2 hit
                drawn = np.stack([_draw_in_class(rng, own[order], c[order], shape,
                                                 position[order]) for c in classes])
            return queued, floor + drawn, float(floor), (floor, typical)
        drawn = latency[order][pick]  # no issue times to tell congestion by
    floor = np.quantile(latency, UNQUEUED_QUANTILE)
    return np.maximum(drawn - floor, 0.0), np.minimum(drawn, floor), float(floor), None


def loop_queueing(sample, places: int, *, floor: float | None = None,
                  congestion: np.ndarray | None = None) -> tuple[float, float]:
    """(floor, queued) of a ring's sampled loads (with their places and issue times): the
    least congested times' congestion (``UNQUEUED_QUANTILE`` of ``load_congestion``) unless
    ``floor`` is given, and the loop's typical queueing above it: the mean over its first
    ``places`` places of the median congestion sampled at each (``_place_windows``) less
    the floor, none below it."""
    latency, position = arrival_latencies(sample), arrival_positions(sample)
    issued = arrival_issue_times(sample)
    if position is None or issued is None or latency.size <= NEAREST_ARRIVALS:
        raise ValueError("the loop's queueing needs more than "
                         f"{NEAREST_ARRIVALS} sampled loads with their places and issue times")
    congestion = load_congestion(latency, issued) if congestion is None else congestion
    floor = float(np.quantile(congestion, UNQUEUED_QUANTILE)) if floor is None else float(floor)
    order = np.argsort(position, kind="stable")
    by_place = _place_medians(congestion[order], position[order], np.arange(places))
    return floor, float(np.maximum(by_place - floor, 0.0).mean())


def lighter_load_point(floor: float, queued: float,
                       lighter: list) -> tuple[float, float] | None:
    """The base kernel's loads at a lighter memory load, as ``queued_under_load`` takes it:
    (f, h), the loop's queued part (``loop_queueing``, above the base sample's ``floor``) in
    the lighter launches against the base's (``queued``), and their throughput against the
    base's (each the median over ``lighter``: (sample, throughput) per lighter launch,
    ``DerivedPipeline.lighter_load_terms``). None where the base's loads met no queue
    (nothing to scale) or no lighter launch sampled enough loads."""
    if queued <= 0.0:
        return None
    points = []  # each lighter launch's (queued part above the base's floor, throughput)
    for sample, throughput in lighter:
        if arrival_latencies(sample).size > NEAREST_ARRIVALS and 0.0 < throughput < 1.0:
            own_places = int(arrival_positions(sample).max()) + 1  # its own loop's length
            points.append((loop_queueing(sample, own_places, floor=floor)[1],
                           float(throughput)))
    if not points:
        return None
    lighter_queued, throughputs = zip(*points)
    return float(np.median(lighter_queued)) / queued, float(np.median(throughputs))


# a sampled load issued less than this many of the sample's median latency after its
# group's first load of the same place was that first load (a miss); one issued more than
# ``HIT_AFTER`` of them after it found the line in the L2
MISS_WITHIN, HIT_AFTER = 0.1, 1.5
# the least a miss takes over a hit (medians) for a group's loads to be coupled: FA4's
# first loads took 2.0-2.45x the hits (H100: 768-864 against 352-384 ns), a memory miss
# against an L2 hit; the GEMMs' 1.21-1.44x, where coupling every group over-predicted the
# 2-stage rows by 7-15 points (gpu27, gpu29: tiles shared along rows and columns, which
# one launch-order group does not describe)
MISS_OVER_HIT = 2.0
# ... and the least share of the sampled loads that hit for the groups to be real: FA4's
# hits were 45-70% of its K and V samples (b4 and b1 s4096, H100 and H200); ws_gemm's 0-25
# of its 4,096 (gpu50-79), stragglers that put its ratio at 1.91-1.98 (gpu69, gpu79): 10 ns
# less latency on every load coupled its groups, its 4 -> 2 -5.8 points (stop 64)
MIN_HIT_SHARE = 0.1


def miss_and_hit(sample) -> tuple[np.ndarray, np.ndarray] | None:
    """Masks of a ring's sampled loads that were their group's first load of the place (the
    L2 missed) and of those issued long enough after it to hit (``pipelines.leader_gaps``);
    None where the sample has no groups, fewer than ``MIN_HIT_SHARE`` of its loads hit, or
    its first loads do not take ``MISS_OVER_HIT`` times the hits. The loads between waited
    for the first one's line: the replay couples them to it instead of drawing from them."""
    gaps = arrival_leader_gaps(sample)
    if gaps is None:
        return None
    latency = arrival_latencies(sample)
    typical = float(np.median(latency))
    miss, hit = gaps[0] < MISS_WITHIN * typical, gaps[0] >= HIT_AFTER * typical
    if min(int(miss.sum()), int(hit.sum())) < MIN_LATENCY_SAMPLE or (
            hit.mean() < MIN_HIT_SHARE) or (
            np.median(latency[miss]) < MISS_OVER_HIT * np.median(latency[hit])):
        return None
    return miss, hit


def _draw_in_class(rng, values: np.ndarray, member: np.ndarray, shape: tuple[int, int],
                   position: np.ndarray) -> np.ndarray:
    """(units, iterations) draws of the members' ``values`` (all sorted by ``position``):
    iteration k's from the ``NEAREST_ARRIVALS`` members sampled nearest place k (from every
    sample where fewer than ``MIN_LATENCY_SAMPLE`` are members)."""
    if int(member.sum()) < MIN_LATENCY_SAMPLE:
        member = np.ones_like(member)
    values, position = values[member], position[member]
    if values.size <= NEAREST_ARRIVALS:
        return rng.choice(values, size=shape)
    return values[_place_picks(rng, position, shape)]


def _one_draw_per_cluster(data: PipelineData, spec: PipelineSpec, draws: dict) -> dict:
    """``draws`` (wait index -> (U, K) latencies) with every CTA of a cluster that shares the
    wait's ring taking its cluster's first CTA's draw: a multicast item is one load, landing
    in every peer's shared memory together. Measured on the sampled arrivals of ws_gemm,
    the persistent GEMM and quack (2x1 clusters): the peers' latencies of one item correlate
    0.97-0.99 and differ by one timer tick (median); independent draws made the later of
    two peers 145-195 ns late on average (real peers: 15-20), and the ring, which waits for
    both, paid that on every item of a starved pipeline."""
    out = {}
    for i, x in draws.items():
        shared = spec.resource(spec.regions[i].relations["consumes"].resource).shared_by
        if shared <= 1:
            out[i] = x
            continue
        cluster = _memo(data, ("cluster", shared), lambda: _cluster_index(data, shared))
        first = np.full(int(cluster.max()) + 1, cluster.size)
        np.minimum.at(first, cluster, np.arange(cluster.size))
        out[i] = x[..., first[cluster], :]
    return out


def _unit_ends(end: np.ndarray) -> np.ndarray:
    """(units,) each unit's last end of a (units, iterations, regions) array."""
    return np.nanmax(end.reshape(end.shape[0], -1), 1)


def worker_regions(spec: PipelineSpec) -> list[int]:
    """The regions of the roles whose work a recorder slows (``slowed_by_recorder``): the
    warps that do not produce, whose busy share and blocking the what-if follows."""
    own_work = set(slowed_by_recorder(spec))
    roles = {r.role for r in spec.regions if r.tag in own_work}
    return [i for i, r in enumerate(spec.regions) if r.role in roles]


def slowed_by_recorder(spec: PipelineSpec) -> list[str]:
    """The work regions a recorder's schedule slows: those of every role that does not
    produce (a producer's work is issuing copies, not the compiled loop ptxas reorders)."""
    producers = {r.role for r in spec.regions if "produces" in r.relations}
    return [r.tag for r in spec.regions if r.kind == "work" and r.role not in producers]


# replays of a what-if that re-dispatch its CTAs (``dispatch_shift``) until no start moves
# by a timer tick (H100: 32 ns)
DISPATCH_ROUNDS, DISPATCH_TOLERANCE_NS = 24, 32.0
RECORDER_SLOWDOWN_FLOOR = 0.5  # the most a recorder is taken to slow the work (x 1 / 0.5)
RECORDER_SLOWDOWN_STEPS = 8  # replays of the fit past its two ends (it needs 2-4)


def recorder_slowdown(data: PipelineData, recorder_cost: float, *, terms=None,
                      record_ns: float = 0.0, item_latency: dict | None = None,
                      leaders: dict | None = None,
                      recorded_end: np.ndarray | None = None,
                      release_sample: dict | None = None) -> float:
    """The factor on the non-producing roles' own work (``slowed_by_recorder``; their async
    jobs' engine time kept) that, with ``record_ns`` of each work region removed as well,
    replays the base ``recorder_cost`` faster (the recording kernel's time over the plain
    kernel's, less 1, both timed on the GPU). A record's own time on a dependency chain is
    only part of what recording costs: on FA4 the compiler's schedule around the records
    costs 12-16% of the kernel, and it slows the code between them. 1.0 where the records'
    own time already accounts for the cost, and where slowing the work cannot (the base's
    time is its async jobs', a GEMM's tensor core: the cost is not in the work, and the
    model leaves it). ``recorded_end``: each unit's end in the replay with nothing removed,
    where the caller has it."""
    tags = slowed_by_recorder(data.spec)
    if not recorder_cost > 0 or not tags:
        return 1.0
    terms = terms if terms is not None else infer_terms(data)
    if recorded_end is None:
        recorded = replay(data, terms=terms, item_latency=item_latency, leaders=leaders,
                          release_sample=release_sample)
        recorded_end = _unit_ends(recorded.end)
    target = 1.0 / (1.0 + float(recorder_cost)) - 1.0

    def change(factor: float) -> float:
        s = replay(data, terms=terms, record_ns=record_ns, item_latency=item_latency,
                   leaders=leaders, own_scale={t: factor for t in tags} if factor != 1.0 else None,
                   release_sample=release_sample)
        end = _unit_ends(s.end)
        measured, predicted = _kernel_time(data, end - recorded_end)
        return predicted / measured - 1.0

    # the change falls with the factor, nearly in proportion: regula falsi (Illinois) between
    # the floor and 1 finds it in a few replays
    low, high = RECORDER_SLOWDOWN_FLOOR, 1.0
    at_low, at_high = change(low) - target, change(high) - target
    if at_high <= 0 or at_low > 0:
        return 1.0
    side = 0
    for _ in range(RECORDER_SLOWDOWN_STEPS):
        factor = high - at_high * (high - low) / (at_high - at_low)
        at = change(factor) - target
        if abs(at) < 1e-4:
            return factor
        if at > 0:  # not yet fast enough: a smaller factor
            high, at_high = factor, at
            if side == 1:
                at_low /= 2
            side = 1
        else:
            low, at_low = factor, at
            if side == -1:
                at_high /= 2
            side = -1
    return factor


def what_if(data: PipelineData, *, depth: dict | None = None, shared_by: dict | None = None,
            scale: dict | None = None, latency: dict | None = None, terms=None,
            loaded_latency: bool = False, latency_quantile: float = 0.5,
            latency_shift_ns: float = 0.0, first_load: np.ndarray | None = None,
            record_ns: float = 0.0, arrivals: dict | None = None,
            recorder_cost: float = 0.0, slowdown: float | None = None,
            schedules: bool = False, release_sample: dict | None = None,
            queue_rule: str = "little", gap_change_ns: float = 0.0,
            lighter_load: dict | None = None) -> dict:
    """Predicted kernel-time change of a changed pipeline (ring depths, sharing, a region
    faster), from the replay of the change against the replay of the base. ``latency``:
    wait tag -> ns, replacing the inferred latency of that wait's event (when the trace
    holds no steady-state observation of it, e.g. a consumer that never waited).
    ``gap_change_ns``: ns the change adds to the gap between one CTA and the next on an SM
    (``dispatched_starts``: a cluster shape's own launch cost, measured apart from the
    kernel, e.g. -64 ns on an H100 going from clusters of two to none).

    ``loaded_latency``: the latency of every ``consumes`` wait not named in ``latency``
    depends on the load the change puts on memory (a slower pipeline sees shorter loads).
    The base latency L_b is the ``latency_quantile`` of :func:`latency_sample`; a load that
    met no queue takes its 5th percentile L_0; the change's latency is L_0 plus the queued
    part L_b - L_0 at the change's throughput (:func:`queued_under_load` by ``queue_rule``:
    Little's law unless told), solved as a fixed point with the replay;
    ``latency_shift_ns`` moves L_b (the timer's resolution in an interval).

    ``first_load``: latencies of each unit's first load (``DerivedPipeline.
    first_load_latency``) as the sample instead of :func:`latency_sample`. A unit's first
    load shares the memory with the burst of loads the unit issues at its start, so it can
    exceed the steady state's latency; the steady state's own bound (the per-unit latency
    of the wait inferred from the trace: blocked waits, capped by the unblocked ones, which
    ended after their data) caps it quantile by quantile.

    ``recorder_cost``: what recording cost the base on the GPU (the recording kernel's
    time over the plain kernel's, less 1): the part of it ``record_ns`` does not account
    for slows the warps' own work (``recorder_slowdown``), in the change's replay by each
    unit's busy share of it (the recorder's schedule costs where the warps work: FA4's
    1-deep variants paid 0.41-0.50 of the base's cost on an H100, causal's 0.65), so both
    replay the kernel unrecorded. The change's replay runs at each unit's busy share
    (``replay(load_share=)``, ``busy_share``), to a fixed point, and keeps a unit's own
    work's departure from the iteration's median only in the iterations whose waits
    block as the base's did (``replay(departure_kept=)``, ``blocked_as_base``; once
    dropped in the fixed point, dropped); ``slowdown``: that factor as an earlier call
    fitted it (its ``recorder_slowdown``), not fitted again.
    ``schedules``: also return the base's and the change's replays (``base_schedule``,
    ``changed_schedule``: each CTA's replayed spans, to set against a variant's own trace)
    and how much later than measured each unit started in them (``base_unit_shift``,
    ``changed_unit_shift``: ``dispatch_shift``), and each drawn wait's (U, K) latencies in
    both (``base_latency_draws``, ``changed_latency_draws``: wait tag -> ns).

    ``arrivals``: ring -> loads sampled as they arrived (``pipelines.load_arrival_sample``:
    every load, not only the late ones a consumer waited for; or plain latencies); a
    consumes wait on such a ring takes its L_b and L_0 from that sample, ahead of
    ``first_load``, and each item its own latency (``_draw_latencies``), one per item for
    the CTAs of a cluster that share the ring (a multicast load lands in all of them).
    Where the sample's CTAs share lines in groups (``miss_and_hit``), each item draws a
    miss and a hit, and the replay couples the loads of a group (``replay(leaders=)``): a
    change that holds CTAs in step makes all of them wait for the first one's miss.

    ``release_sample``: another launch's releases that did not wait for their job
    (``clean_releases``), for every replay (``replay(release_sample=)``).

    ``lighter_load``: ring -> [(sample, throughput), ...], the base kernel's loads sampled
    as they arrived in launches at a lighter memory load (``DerivedPipeline.
    lighter_load_terms``): a slower change's drawn loads on that ring queue as the
    curve through the base's and their point says (``lighter_load_point``,
    ``queued_under_load(lighter=)``), not by ``queue_rule``."""
    if queue_rule not in QUEUE_RULES:
        raise ValueError(f"unknown queue rule {queue_rule!r}: one of {sorted(QUEUE_RULES)}")
    terms = terms if terms is not None else infer_terms(data)
    tags = [r.tag for r in data.spec.regions]
    for tag, value in (latency or {}).items():
        if tag not in tags:
            raise ProfileBufferError(f"latency names an unknown region {tag!r}")
        terms = with_latency(terms, tags.index(tag), value)
    loaded, draws, leaders, lighter = {}, {}, {}, {}
    if loaded_latency:
        for i, r in enumerate(data.spec.regions):
            if "consumes" in r.relations and r.tag not in (latency or {}):
                sample = (arrivals or {}).get(r.relations["consumes"].resource, ())
                probed = arrival_latencies(sample)
                if probed.size >= MIN_LATENCY_SAMPLE:
                    at = np.quantile(probed, latency_quantile)
                    low = np.quantile(probed, UNQUEUED_QUANTILE)
                    # every item draws its own latency from the sample (one seed per wait:
                    # the base and the change see the same draws), its queued part moved
                    # by the quantile asked for less the sample's median
                    rng = np.random.default_rng(LATENCY_DRAW_SEED + i)
                    queued, fixed, unqueued, loop = _draw_latencies(rng, sample,
                                                                    data.shape[:2])
                    if fixed.ndim == 3:
                        leaders[i] = arrival_leader_gaps(sample)[1]
                    light = (lighter_load or {}).get(r.relations["consumes"].resource)
                    point = lighter_load_point(*loop, light) if light and loop else None
                    if point is not None:
                        lighter[i] = point
                    draws[i] = (queued + (at - np.median(probed)) + latency_shift_ns, fixed,
                                unqueued)
                elif first_load is not None and len(first_load) >= MIN_LATENCY_SAMPLE:
                    steady = steady_bound(data, terms, i)
                    steady = steady if steady.size else np.asarray(first_load, float)
                    at = min(np.quantile(first_load, latency_quantile),
                             np.quantile(steady, latency_quantile))
                    low = min(np.quantile(first_load, UNQUEUED_QUANTILE),
                              np.quantile(steady, UNQUEUED_QUANTILE))
                else:
                    sample, _ = latency_sample(data, terms, region=r.tag)
                    at = np.quantile(sample, latency_quantile)
                    low = np.quantile(sample, UNQUEUED_QUANTILE)
                loaded[i] = (float(at) + latency_shift_ns, float(low))
                terms = with_latency(terms, i, loaded[i][0])
    base_draws = _one_draw_per_cluster(
        data, data.spec, {i: queued + fixed for i, (queued, fixed, _) in draws.items()})
    recorded_end = None
    if record_ns > 0 or recorder_cost > 0:
        recorded = replay(data, terms=terms, item_latency=base_draws, leaders=leaders,
                          release_sample=release_sample)
        recorded_end = _unit_ends(recorded.end)
    # the recorder's cost beyond its records' own time, taken off the warps' work
    if slowdown is None:
        slowdown = recorder_slowdown(data, recorder_cost, terms=terms, record_ns=record_ns,
                                     item_latency=base_draws, leaders=leaders,
                                     recorded_end=recorded_end, release_sample=release_sample)
    unslowed = ({tag: slowdown for tag in slowed_by_recorder(data.spec)}
                if slowdown != 1.0 else None)
    changed_spec = data.spec.with_changes(depth=depth, shared_by=shared_by)

    def dispatched(spec, shift=None, gap_change_ns=0.0, **kw):
        """The replay with the CTAs past the first wave started where the replay frees
        an SM (``dispatch_shift``, to a fixed point from ``shift``: each round fixes at
        least one more wave), each unit's end as if it had started where measured, and the
        shifts it replayed with. Where no unit's replay depends on another's (no shared
        misses, no ring shared by a cluster), its span does not depend on its start: one
        round, unshifted, unless the schedules are asked for."""
        shift = np.zeros(data.shape[0]) if shift is None else shift
        replay_terms = kw.pop("terms", terms)
        kw.setdefault("own_scale", unslowed)
        alone = not (leaders or schedules or any(r.shared_by > 1 for r in spec.resources))
        nonlocal recorded_end
        for round_ in range(DISPATCH_ROUNDS):
            s = replay(data, spec, terms=replay_terms, record_ns=record_ns,
                       leaders=leaders, unit_shift=shift, release_sample=release_sample, **kw)
            end = _unit_ends(s.end) - shift
            if recorded_end is None:  # nothing removed: the base's first round is it
                recorded_end = end
            if alone or round_ == DISPATCH_ROUNDS - 1:
                break
            moved = dispatch_shift(data, end - recorded_end, gap_change_ns=gap_change_ns)
            if np.abs(moved - shift).max() < DISPATCH_TOLERANCE_NS:
                break
            shift = moved
        return s, end, shift

    base, base_end, base_shift = dispatched(data.spec, item_latency=base_draws)

    def kernel_ns(end, keep=None, gap_change_ns=0.0):
        """The kernel's time with each unit ending at ``end``: the measured kernel moved
        by each unit's replayed change from the recorded replay (so the change is measured
        against the base replayed unrecorded, as the GPU measures it against the plain
        kernel)."""
        return _kernel_time(data, end - recorded_end, keep, gap_change_ns=gap_change_ns)[1]

    base_ns = kernel_ns(base_end)
    changed_terms, ratio, changed_draws, changed_shift = terms, 1.0, {}, base_shift
    # each unit's busy share: how much of its non-producing roles' time stays work (not
    # blocked) in the change against the base, a fixed point with the replay
    base_busy = busy_share(data, base, terms[2])
    share, changed_own = np.ones(data.shape[0]), unslowed
    kept = np.ones(data.shape[:2])  # every departure, until the change blocks otherwise
    for _ in range(8):
        if unslowed:  # the recorder's schedule costs where the warps work
            changed_own = {t: 1.0 / (1.0 + (1.0 / f - 1.0) * share) for t, f in unslowed.items()}
        for i, (at_base, unqueued) in loaded.items():
            value = unqueued + queued_under_load(max(at_base - unqueued, 0.0), unqueued,
                                                 ratio, rule=queue_rule)
            changed_terms = with_latency(changed_terms, i, value)
        # each drawn load's queueing scales the same way
        changed_draws = _one_draw_per_cluster(data, changed_spec, {
            i: fixed + queued_under_load(queued, unqueued, ratio, rule=queue_rule,
                                         lighter=lighter.get(i))
            for i, (queued, fixed, unqueued) in draws.items()})
        changed, new_end, changed_shift = dispatched(
            changed_spec, changed_shift, scale=scale, terms=changed_terms,
            item_latency=changed_draws, own_scale=changed_own, load_share=share,
            departure_kept=kept, gap_change_ns=gap_change_ns)
        predicted = kernel_ns(new_end, gap_change_ns=gap_change_ns)
        previous_ratio, ratio = ratio, predicted / base_ns
        previous_share, share = share, np.minimum(
            busy_share(data, changed, terms[2]) / np.maximum(base_busy, 1e-9), 1.0)
        # an iteration once replayed in a changed schedule stays changed: the fixed point
        # only drops departures, so it settles
        previous_kept, kept = kept, np.minimum(kept, blocked_as_base(data, base, changed))
        # the ratio moves only the loads' queueing: without loaded latencies it settles nothing
        if (not loaded or abs(ratio - previous_ratio) < 1e-4) \
                and np.abs(share - previous_share).max() < BUSY_TOLERANCE \
                and np.array_equal(kept, previous_kept):
            break
    delta = new_end - base_end
    # per-CTA variation: the same change carried through each half of the SMs alone
    halves = []
    for parity in (0, 1):
        keep = data.unit_sm % 2 == parity
        if keep.any() and (~keep).any():
            halves.append(kernel_ns(new_end, keep, gap_change_ns=gap_change_ns)
                          / kernel_ns(base_end, keep) - 1)
    measured_end = _unit_ends(data.end)
    fidelity = float(np.median((base_end - measured_end)
                               / np.maximum(measured_end - data.start[:, 0, :].min(1), 1)))
    extra = {"base_schedule": base, "changed_schedule": changed, "base_unit_shift": base_shift,
             "changed_unit_shift": changed_shift,
             "base_latency_draws": {tags[i]: x for i, x in base_draws.items()},
             "changed_latency_draws": {tags[i]: x for i, x in changed_draws.items()}
             } if schedules else {}
    return {**extra, "change": {"depth": depth, "shared_by": shared_by, "scale": scale,
                                "latency": latency, "gap_change_ns": gap_change_ns},
            "kernel_ns": base_ns, "predicted_kernel_ns": predicted,
            "measured_kernel_ns": _kernel_time(data, np.zeros_like(base_end))[0],
            "predicted_change": predicted / base_ns - 1,
            "unit_delta_median_ns": float(np.median(delta)),
            "half_changes": halves,
            "replay_error_median": fidelity,
            "recorder_slowdown": slowdown,
            # the latency the change's replay waited on: the mean of its items' draws where
            # the ring's loads were sampled, else the one loaded latency
            "latency_ns": {tags[i]: float(np.mean(changed_draws[i])) if i in changed_draws
                           else float(changed_terms[1][0, i]) for i in loaded},
            # the lighter load's point each drawn wait's queueing followed: (f, h)
            "lighter_load_point": {tags[i]: x for i, x in lighter.items()}}


def blocked_as_base(data: PipelineData, base: Schedule, changed: Schedule) -> np.ndarray:
    """(units, iterations) 1.0 where each wait of the non-producing roles blocked in the
    ``changed`` replay as in the ``base`` one (the iteration ran in the schedule its work's
    departure from the iteration's median was measured in), else 0.0: there the departure
    is the base's situation, not the unit's work. FA4 b1 s1024 on an H100 (gpu68): each
    CTA's consumer work over its loop spread 258-267 ns (sd) in three traced launches of
    the base and correlated 0.05-0.25 between them; in the 1-deep variant, whose V waits
    block, it spread 75 ns and correlated 0.12-0.18 with the base's."""
    waits = [i for i in worker_regions(data.spec) if data.spec.regions[i].kind == "wait"]
    if not waits:
        return np.ones(data.shape[:2])
    same = (changed.blocked[:, :, waits] == base.blocked[:, :, waits]).all(axis=2)
    return same.astype(np.float64)


# the busy shares' fixed point stops once no unit's share moves by this much
BUSY_TOLERANCE = 1e-3


def busy_share(data: PipelineData, sched: Schedule, cost) -> np.ndarray:
    """(units,) the share of the non-producing roles' time (``slowed_by_recorder``'s: each
    unit's first start to last end of their regions) not spent blocked in a wait beyond its
    own cost (``cost``: each region's unblocked cost, ``infer_terms``): how much the SM's
    warps load each other."""
    idx = worker_regions(data.spec)
    if not idx:
        return np.ones(data.shape[0])
    start, end = sched.start[:, :, idx], sched.end[:, :, idx]
    span = (np.nanmax(end.reshape(end.shape[0], -1), 1)
            - np.nanmin(start.reshape(start.shape[0], -1), 1))
    blocked = np.zeros(span.shape)
    for j, i in enumerate(idx):
        if data.spec.regions[i].kind != "wait":
            continue
        extra = (end[:, :, j] - start[:, :, j]) - float(np.asarray(cost)[i])
        blocked += np.nansum(np.where(sched.blocked[:, :, i], np.maximum(extra, 0.0), 0.0), 1)
    return 1.0 - blocked / np.maximum(span, 1e-9)


def predict_what_if(data: PipelineData, change: dict, *, terms=None,
                    interval: tuple[float, float] = (0.25, 0.75),
                    first_load: np.ndarray | None = None, record_ns: float = 0.0,
                    arrivals: dict | None = None, recorder_cost: float = 0.0,
                    release_sample: dict | None = None, queue_rule: str = "little",
                    lighter_load: dict | None = None) -> dict:
    """One what-if with its uncertainty from the base trace's own spread: the prediction
    at the median loaded latency, and the interval spanned by the latency quantiles
    ``interval`` (per-unit and per-load variation of the base), each widened by one tick
    of the trace's timer (a latency is not known closer than that), and the predictions
    from each half of the SMs alone (the CTAs' own variation of work and latency: two
    halves of one kernel that disagree say the whole is not known closer); where a
    ``recorder_cost`` slowed the work (``recorder_slowdown``), also the prediction with the
    records' own time removed alone (how much of the cost is the work's is the model's
    reading, not a measurement). A change the model cannot make comes back as
    ``{"modelled": False, "reason": ...}`` instead of a number; so does one that hangs on
    a load latency the base never showed (its consumer never waited: with ``bounds``, the
    change at latency 0 and at the unblocked waits' bound). ``release_sample``,
    ``queue_rule``, ``lighter_load``: as :func:`what_if` takes them."""
    unknown = set(change) - {"depth", "shared_by", "scale", "latency", "gap_change_ns"}
    if unknown:
        return {"modelled": False, "reason": f"no model term for {sorted(unknown)}"}
    resources = {r.name for r in data.spec.resources}
    for key in ("depth", "shared_by"):
        missing = set(change.get(key) or {}) - resources
        if missing:
            return {"modelled": False, "reason": f"{key} names resources the pipeline does "
                                                 f"not have: {sorted(missing)}"}
    terms = terms if terms is not None else infer_terms(data)
    tick = timer_step(data)
    # a consumes wait that never blocked in the base has no observed latency (the replay
    # gives it 0, the least it can be): only the unblocked waits' bound says how long it
    # can be, so the interval reaches the prediction at that bound
    named = set(change.get("latency") or {})
    probed = {ring for ring, sample in (arrivals or {}).items()
              if len(sample) >= MIN_LATENCY_SAMPLE}
    unobserved = {} if first_load is not None and len(first_load) >= MIN_LATENCY_SAMPLE else {
        r.tag: float(np.quantile(bound, interval[1])) + tick
        for i, r in enumerate(data.spec.regions)
        if "consumes" in r.relations and r.tag not in named
        and r.relations["consumes"].resource not in probed and never_blocked(data, terms, i)
        and (bound := steady_bound(data, terms, i)).size}
    # one record's own time is read through the timer, to within half a tick: the kernel
    # without recording lies between the replays that remove half a tick more and less
    # (removing more shortens a starved ring's round trip, as a shorter latency does: the
    # interval's ends take both)
    record_spread = tick / 2 if record_ns > 0 else 0.0
    try:
        with warnings.catch_warnings():  # a deadlocked ring replays nan events first
            warnings.simplefilter("ignore", RuntimeWarning)
            runs = []
            # the recorder's slowdown is fitted at the median latency and kept for the ends
            # a launch gap's change is read through the timer too: one tick each way
            for q, shift, removed in ((0.5, 0.0, 0.0), (interval[0], -tick, record_spread),
                                      (interval[1], tick, -record_spread)):
                moved = ({**change, "gap_change_ns": change["gap_change_ns"] + shift}
                         if change.get("gap_change_ns") else change)
                runs.append(what_if(data, terms=terms, loaded_latency=True, latency_quantile=q,
                                    latency_shift_ns=shift, first_load=first_load,
                                    record_ns=max(record_ns + removed, 0.0), arrivals=arrivals,
                                    recorder_cost=recorder_cost, release_sample=release_sample,
                                    queue_rule=queue_rule, lighter_load=lighter_load, **moved,
                                    slowdown=runs[0]["recorder_slowdown"] if runs else None))
            if runs[0]["recorder_slowdown"] != 1.0:
                # how much of the recorder's cost slows the work is the model's reading:
                # the interval reaches the kernel with only its records' own time removed
                runs.append(what_if(data, terms=terms, loaded_latency=True,
                                    first_load=first_load, record_ns=record_ns,
                                    arrivals=arrivals, release_sample=release_sample,
                                    queue_rule=queue_rule, lighter_load=lighter_load, **change))
            if unobserved:
                upper = {**change, "latency": {**(change.get("latency") or {}), **unobserved}}
                runs.append(what_if(data, terms=terms, loaded_latency=True,
                                    latency_quantile=interval[1], latency_shift_ns=tick,
                                    first_load=first_load,
                                    record_ns=max(record_ns - record_spread, 0.0),
                                    arrivals=arrivals, recorder_cost=recorder_cost,
                                    release_sample=release_sample, queue_rule=queue_rule,
                                    lighter_load=lighter_load, **upper,
                                    slowdown=runs[0]["recorder_slowdown"]))
    except ProfileBufferError as err:
        return {"modelled": False, "reason": str(err)}
    changes = [w["predicted_change"] for w in runs] + list(runs[0]["half_changes"])
    detail = {**runs[0], "latency_unobserved_bound_ns": unobserved}
    if unobserved:
        # the replay at latency 0 is the least the change can be, not a prediction: say so,
        # with the bounds the base does give
        bounds = (min(changes), max(changes))
        return {"modelled": False, "bounds": bounds, "detail": detail, "reason": (
            f"the base never waited on {', '.join(sorted(unobserved))}: their load latency "
            f"is not observed, only bounded; the change lies in [{bounds[0]:+.2%}, "
            f"{bounds[1]:+.2%}]")}
    return {"modelled": True, "predicted_change": changes[0],
            "interval": (min(changes), max(changes)), "detail": detail}


def latency_sensitivity(data: PipelineData, change: dict, *, arrivals: dict,
                        shift_ns: float | None = None, **what_if_options) -> float:
    """How far a what-if's predicted change moves for ``shift_ns`` (default: one tick of the
    trace's timer) more latency on every sampled load (``arrivals``): half the difference of
    :func:`what_if` with the loads that much slower and that much faster; the other
    keywords as :func:`what_if` takes them. The whole sampled latency moves, base and change
    alike (``what_if(latency_shift_ns=)``, the interval's tick, moves the queued part only,
    which a slower change scales down). A change that starves a ring hangs on its loads'
    latency under the change, which the base does not show: on an H200 the 2-stage GEMMs
    moved 3.2-4.1 points per 32 ns (``bench/results/whatif/README.md``, stop 64), so such
    a prediction is no closer than the latency is known."""
    if not arrivals:
        raise ValueError("latency_sensitivity needs the base's sampled loads (arrivals)")
    step = timer_step(data) if shift_ns is None else float(shift_ns)
    if step <= 0:
        raise ValueError(f"shift_ns must be > 0, got {shift_ns!r}")

    def change_at(ns: float) -> float:
        return what_if(data, arrivals=shifted_arrivals(arrivals, ns), **what_if_options,
                       **change)["predicted_change"]

    return (change_at(step) - change_at(-step)) / 2


def never_blocked(data: PipelineData, terms, i: int) -> bool:
    """True when no instance of wait ``i`` in the trace was blocked by its dependency (every
    one lasted no longer than its unblocked cost + the margin): its latency is not observed,
    only bounded from above by the unblocked waits (end - event)."""
    blocked, _ = blocked_and_free(data, i, terms[2][i], terms[3][:, :, i])
    return not bool(blocked.any())


# ---------------------------------------------------------------------------- report
def pool_predictions(preds: list[dict], *, widen: bool = False) -> dict:
    """One prediction from several of :func:`predict_what_if`'s for the same change, each
    from another draw of the base's memory state (the probed launches that ran like the
    base: ``pipelines.probed_launches_like``): the median change, kernel time and latency,
    the interval the median of their bounds, every change kept (``changes``). A change
    that one of them cannot model stays unmodelled. ``widen``: the interval reaches every
    one's own change too, where each comes from another traced launch of the base (a
    launch's trace carries its own noise: quack's 4 -> 2 read +94.65% from one run's,
    +78.37% from another's)."""
    if not preds:
        raise ValueError("no predictions to pool")
    if len(preds) == 1 or not all(p["modelled"] for p in preds):
        return next((p for p in preds if not p["modelled"]), preds[0])
    median = lambda values: float(np.median(list(values)))  # noqa: E731
    changes = [p["predicted_change"] for p in preds]
    change = median(changes)
    detail = dict(preds[0]["detail"])
    detail["predicted_kernel_ns"] = detail["kernel_ns"] * (1.0 + change)
    detail["predicted_change"] = change
    detail["latency_ns"] = {tag: median(p["detail"]["latency_ns"][tag] for p in preds)
                            for tag in detail["latency_ns"]}
    lows, highs = zip(*(p["interval"] for p in preds))
    low, high = median(lows), median(highs)
    if widen:
        low, high = min(low, min(changes)), max(high, max(changes))
    return {"modelled": True, "predicted_change": change, "interval": (low, high),
            "detail": detail, "changes": changes}


def analyze_pipeline(trace: Trace, spec: PipelineSpec, *, worst: int = 5,
                     what_ifs: list[dict] | None = None,
                     first_load: np.ndarray | None = None, record_ns: float | None = None,
                     arrivals: dict | None = None, recorder_cost: float = 0.0,
                     release_sample: dict | None = None, alike: list[dict] = (),
                     sensitivity: bool = False) -> dict:
    """Everything above for every unit, aggregated (JSON-ready). With ``first_load``,
    ``record_ns``, ``arrivals``, ``recorder_cost`` or ``release_sample`` (a derived model:
    ``DerivedPipeline.what_if_terms``) each
    what-if is :func:`predict_what_if`'s, the
    prediction ``bench/whatif_check.py`` checks on the GPU: loaded latency, the kernel
    without recording, and an interval; else the plain replay of :func:`what_if`.
    ``alike``: the ``arrivals`` and ``release_sample`` of other probed launches that ran
    like the one given (``pipelines.probed_launches_like``): each what-if is then the
    pooled prediction from all of them (:func:`pool_predictions`). ``sensitivity`` (with
    ``arrivals``): each what-if also says how far it moves per timer tick of load latency
    (:func:`latency_sensitivity`: two more replays each; 2.1-2.3 -> 3.1-3.4 s on FA4 b4's 3.5 M
    records with one what-if, stop 64)."""
    data = match_records(trace, spec)
    terms = infer_terms(data)
    sched = replay(data, terms=terms, release_sample=release_sample)
    share, lat, _ = critical_path(data, sched)
    units = data.shape[0]
    total = share.sum(1) + lat.sum(1)
    tags = [r.tag for r in spec.regions]
    path = {f"{r.role}:{r.tag}": float(share[:, i].sum() / total.sum())
            for i, r in enumerate(spec.regions)}
    for i, r in enumerate(spec.regions):
        if r.kind == "wait":
            res = next(iter(r.relations.values())).resource
            path[f"latency:{res}->{r.tag}"] = float(lat[:, i].sum() / total.sum())
    span = np.nanmax(data.end.reshape(units, -1), 1) - np.nanmin(data.start.reshape(units, -1), 1)
    med = float(np.median(span))
    worst_units = np.argsort(-span)[:worst]
    occupancy = [ring_occupancy(data, resource=r.name)[0] for r in spec.resources
                 if r.kind == "ring"]
    per_sm = np.bincount(data.unit_sm, span) / np.maximum(np.bincount(data.unit_sm), 1)
    result = {
        "units": units, "iterations": data.shape[1], "regions": tags,
        "records_missing": data.missing, "records_extra": data.extra,
        "units_dropped": int(data.dropped_units.shape[0]),
        "critical_path_share": path,
        "unit_span_ns": {"median": med, "p90": float(np.percentile(span, 90)),
                         "max": float(span.max()), "min": float(span.min())},
        "sm_mean_span_ns": {"min": float(per_sm[per_sm > 0].min()),
                            "max": float(per_sm.max())},
        "worst_units": [{"group": int(data.unit_group[u]), "tile": int(data.unit_tile[u]),
                         "sm": int(data.unit_sm[u]), "span_ns": float(span[u]),
                         "vs_median": float(span[u] / med)} for u in worst_units],
        "blockers": blockers(data, terms),
        "occupancy": occupancy,
        "initiation_interval": initiation_interval(data, terms),
    }
    if what_ifs and first_load is None and record_ns is None and not arrivals \
            and not recorder_cost:
        result["what_if"] = [what_if(data, terms=terms, release_sample=release_sample, **w)
                             for w in what_ifs]
    elif what_ifs:
        result["what_if"] = []
        tick = timer_step(data) if sensitivity and arrivals else None
        for w in what_ifs:
            got = pool_predictions([
                predict_what_if(data, w, terms=terms, first_load=first_load,
                                record_ns=record_ns or 0.0, arrivals=draw["arrivals"],
                                recorder_cost=recorder_cost,
                                release_sample=draw["release_sample"])
                for draw in [{"arrivals": arrivals, "release_sample": release_sample},
                             *alike]])
            if not got["modelled"]:
                result["what_if"].append({"change": w, "modelled": False,
                                          "reason": got["reason"]})
                continue
            # how far the prediction stands on the loads' latency, where loads were sampled
            per_tick = {} if tick is None else {
                "latency_per_tick": latency_sensitivity(
                    data, w, arrivals=arrivals, shift_ns=tick, terms=terms,
                    loaded_latency=True, first_load=first_load, record_ns=record_ns or 0.0,
                    recorder_cost=recorder_cost, release_sample=release_sample),
                "timer_tick_ns": tick}
            # the record time removed from the replay, so a reader sees which estimate it was
            result["what_if"].append({**got["detail"], "predicted_change": got["predicted_change"],
                                      "interval": list(got["interval"]),
                                      "record_ns": float(record_ns or 0.0),
                                      "recorder_cost": float(recorder_cost), **per_tick,
                                      **({"changes_by_probed_launch": got["changes"]}
                                         if "changes" in got else {})})
    return result


def perfetto_outputs(trace: Trace, spec: PipelineSpec, *, max_units: int = 16):
    """(flows, counters, critical_rows) for the exporters' ``flows=`` / ``counters=``
    options: blocker edges (dependency record -> blocked wait record), ring occupancy per
    unit, and the trace rows on each unit's critical path."""
    data = match_records(trace, spec)
    terms = infer_terms(data)
    sched = replay(data, terms=terms)
    _, _, on_path = critical_path(data, sched)
    units, iters, n = data.shape
    src_rows, dst_rows = [], []
    for i, r in enumerate(spec.regions):
        if r.kind != "wait":
            continue
        rel_name = next(iter(r.relations))
        rl = r.relations[rel_name]
        if rel_name == "consumes":
            s, shift = spec.source_region("produces", rl.resource), rl.distance
        else:
            s = spec.source_region("releases", rl.resource)
            shift = spec.resource(rl.resource).depth + rl.distance \
                - spec.regions[s].relations["releases"].distance
        arm = terms[3][:, :, i] + terms[1][:, i][:, None]
        hit = (arm > data.start[:, :, i] + terms[2][i])
        uu, kk = np.nonzero(hit)
        ks = kk - shift
        ks = np.minimum(np.where(ks < 0, ks + iters, ks), iters - 1)  # < 0: previous tile
        ok = ks >= 0
        peer = terms[4][uu, kk, i]
        src_rows.append(data.row[peer[ok], ks[ok], s])
        dst_rows.append(data.row[uu[ok], kk[ok], i])
    src = np.concatenate(src_rows) if src_rows else np.zeros(0, np.int64)
    dst = np.concatenate(dst_rows) if dst_rows else np.zeros(0, np.int64)
    good = (src >= 0) & (dst >= 0)
    flows = np.zeros(int(good.sum()), dtype=[("src", np.int64), ("dst", np.int64)])
    flows["src"], flows["dst"] = src[good], dst[good]
    counters = []
    stride = spec.roles.tid_stride
    first_role = spec.roles.roles[spec.regions[0].role]
    for res in spec.resources:
        if res.kind != "ring":
            continue
        _, u, t, occ = ring_occupancy(data, resource=res.name)
        for unit in range(min(units, max_units)):
            sel = u == unit
            counters.append({"name": f"{res.name} slots held (unit {int(data.unit_group[unit])}"
                                     f" tile {int(data.unit_tile[unit])})",
                             "ts": t[sel].astype(np.int64) + data.origin_ns,
                             "value": occ[sel].astype(np.float64),
                             "tid": int(data.unit_group[unit] * stride + list(first_role)[0])})
    critical_rows = np.unique(data.row[on_path & (data.row >= 0)])
    return flows, counters, critical_rows


def format_pipeline_report(report: dict) -> str:
    """The report of :func:`analyze_pipeline` as text."""
    us = lambda ns: f"{ns / 1e3:.2f} us"  # noqa: E731
    lines = [f"pipeline: {report['units']} units x {report['iterations']} iterations; records "
             f"missing {report['records_missing']}, extra {report['records_extra']}, units "
             f"dropped {report['units_dropped']}",
             "critical path (share of the time, all units):"]
    for name, share in sorted(report["critical_path_share"].items(), key=lambda kv: -kv[1]):
        if share > 0:
            lines.append(f"  {share * 100:6.1f}%  {name}")
    lines.append("blockers (per wait region; margin = how late the event came):")
    for b in report["blockers"]:
        lines.append(f"  {b['role']}:{b['region']} waits on {b['blocked_by']} ({b['resource']}): "
                     f"blocked {b['blocked_fraction'] * 100:.1f}% of {b['instances']}, median "
                     f"margin {b['median_margin_ns']:.0f} ns, slack {b['median_slack_ns']:.0f} ns, "
                     f"latency {b['latency_ns_median']:.0f} ns")
    for o in report["occupancy"]:
        lines.append(f"ring {o['resource']} (depth {o['depth']}): peak {o['peak']}, mean "
                     f"{o['mean']:.2f}, full {o['time_full_fraction'] * 100:.1f}%, empty "
                     f"{o['time_empty_fraction'] * 100:.1f}% of the time")
    ii = report["initiation_interval"]
    lines.append("initiation interval: measured " + ", ".join(
        f"{k} {v:.0f} ns" for k, v in ii["measured_ns"].items()) + "; resource bound " + ", ".join(
        f"{k} {v:.0f} ns" for k, v in ii["resource_bound_ns"].items()) + "; recurrence bound "
        + (", ".join(f"{k} {v:.0f} ns" for k, v in ii["recurrence_bound_ns"].items()) or "-"))
    s = report["unit_span_ns"]
    lines.append(f"unit span: median {us(s['median'])}, p90 {us(s['p90'])}, max {us(s['max'])}")
    lines.append("worst units: " + "; ".join(
        f"cta {w['group']} tile {w['tile']} sm {w['sm']} {us(w['span_ns'])} "
        f"({w['vs_median']:.2f}x)" for w in report["worst_units"]))
    for w in report.get("what_if", []):
        change = {k: v for k, v in w["change"].items() if v}
        if w.get("modelled") is False:
            lines.append(f"what-if {change}: not modelled ({w['reason']})")
            continue
        interval = (f", interval {w['interval'][0] * 100:+.2f}% .. {w['interval'][1] * 100:+.2f}%"
                    if "interval" in w else "")
        pooled = (f"; the median of {' / '.join(f'{c * 100:+.2f}%' for c in w['changes_by_probed_launch'])}"
                  " from the probed launches that ran like the base"
                  if "changes_by_probed_launch" in w else "")
        per_tick = (f"; {w['latency_per_tick'] * 100:.2f} points per {w['timer_tick_ns']:.0f} ns"
                    " of load latency" if "latency_per_tick" in w else "")
        lines.append(f"what-if {change}: kernel {us(w['kernel_ns'])} -> "
                     f"{us(w['predicted_kernel_ns'])} ({w['predicted_change'] * 100:+.2f}%"
                     f"{interval}{pooled}{per_tick})")
    return "\n".join(lines)
