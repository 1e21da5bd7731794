"""Records matched to a pipeline spec: the dense (unit x iteration x region) arrays every
later stage of the pipeline model reads.

Owns :class:`PipelineData` and :func:`match_records` (missing and extra records are reported,
never guessed; with ``tile_modulo`` each unit is one output tile and knows its CTA's previous
tile), the per-data memo of what is derived from the arrays alone, the timer step and the
small array helpers the later stages share. It reads a Trace and a PipelineSpec; it may not
replay, predict or format: the stages above import it, never the reverse.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np

from ..errors import ProfileBufferError
from ..trace import Trace
from .grouping import unique_ints
from .model import PipelineSpec

__all__ = ["PipelineData", "match_records", "timer_step"]

BLOCKED_MARGIN_NS = 64.0
FLOAT_MAX = np.finfo(np.float64).max


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


def memoized(data: PipelineData, key: tuple, compute):
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


def mmax(a, axis):
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
    # first group waits for it (FA4's second consumer warpgroup trails the first)
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
def role_sequences(spec: PipelineSpec):
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
    prev, role_last = role_sequences(spec)
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


def work_durations(data: PipelineData) -> np.ndarray:
    return memoized(data, ("work_spans",), lambda: work_spans(data))[1]


def event_times(spec: PipelineSpec, start: np.ndarray, end: np.ndarray) -> dict:
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
    after waiting for k-tile 1, so the producer's acquire of the last free slot blocks until
    that release; without them the replay's ring holds one slot more at each CTA's start
    than the kernel's."""
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
    prev, role_last = role_sequences(spec)
    following = [j for j, p in enumerate(prev) if p == i]
    if following:
        return start[:, :, following[0]]
    first = [j for j, q in enumerate(spec.regions) if q.role == spec.regions[i].role][0]
    return np.concatenate([start[:, 1:, first], end[:, -1:, i]], axis=1)


def cluster_index(data: PipelineData, shared_by: int) -> np.ndarray:
    return np.unique(np.stack([data.unit_group // shared_by, data.unit_tile], 1), axis=0,
                     return_inverse=True)[1].reshape(-1)


def by_iteration(a: np.ndarray) -> np.ndarray:
    """(U, K[, n]) -> (K[, n], U), contiguous: what the replay reads one iteration at a time."""
    return np.ascontiguousarray(np.moveaxis(a, 0, -1))


def by_unit(a: np.ndarray) -> np.ndarray:
    """(K[, n], U) -> (U, K[, n]): the replay's arrays in the layout of the data (a view: a
    what-if reads only the ends of its replays, no copy of the rest)."""
    return np.moveaxis(a, -1, 0)


def timer_step(data: PipelineData) -> float:
    """The trace timer's resolution (ns): the smallest step between distinct start times."""
    stamps = np.unique(data.start[np.isfinite(data.start)])
    steps = np.diff(stamps)
    return float(steps[steps > 0].min()) if (steps > 0).any() else 0.0
