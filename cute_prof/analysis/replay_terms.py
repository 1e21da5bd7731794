"""What the replay takes from the measurements rather than from the spec: each wait's
inferred latency and blocked cost (:func:`infer_terms`), the asynchronous jobs a wait waits
for, the drains, where releases fall after a wait, and which regions a recorder slows.

It owns :func:`infer_terms` and the measured offsets the replay reads. Reads matched data
(:mod:`.pipeline_data`, :mod:`.dispatch`); it may not replay or predict.
"""

from __future__ import annotations

import warnings

import numpy as np

from .model import PipelineSpec
from .pipeline_data import (BLOCKED_MARGIN_NS, cluster_index, event_times, memoized, mmax,
    PipelineData, pre_loop_releases, role_sequences, timer_step, work_spans)

__all__ = ["never_blocked", "slowed_by_recorder", "worker_regions"]

# loaded latency: at least this many observations of one kind before it is used
MIN_LATENCY_SAMPLE = 8
# the quantile of the loaded latencies taken for a load that met no queue (queued_under_load)
UNQUEUED_QUANTILE = 0.05


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
            cluster = cluster_index(data, res.shared_by)
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
    events = event_times(spec, data.start, data.end)
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
        per_unit = mmax(lat, axis=1)
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
    prev, _ = role_sequences(spec)
    out = {}
    for i, r in enumerate(spec.regions):
        if not _is_job_region(spec, i, prev):
            continue
        issued = data.end[:, :, prev[i]]  # nan where the unit did not run the iteration
        released = issued + dur[:, :, i]
        waited = _waited_for_job(dur[:, :, i], floor[i]) & ~np.isnan(issued)
        # before a drain (_drains) the region's end is the epilogue's: its job's release is
        # its own stamp, and the next job ends at the drain's stamp
        drained, _ = region_drains(data, i)
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


def async_after_wait(spec: PipelineSpec, i: int, prev: np.ndarray) -> bool:
    """Region i is asynchronous work issued right after its role's wait (a wgmma)."""
    return bool(spec.regions[i].asynchronous and prev[i] >= 0
                and spec.regions[prev[i]].kind == "wait")


def _is_job_region(spec: PipelineSpec, i: int, prev: np.ndarray) -> bool:
    """Region i issues an async job right after a wait and releases an earlier iteration's
    item once that job is done (ws_gemm's wgmma, ``wait_group(1)``, release k - 1)."""
    rel = spec.regions[i].relations.get("releases")
    return async_after_wait(spec, i, prev) and rel is not None and rel.distance >= 1


def job_regions(spec: PipelineSpec) -> list[int]:
    """The regions that issue an async job after a wait and release an earlier item once it
    is done (``_is_job_region``): where a model has none (FA4), nothing about jobs needs
    computing."""
    prev, _ = role_sequences(spec)
    return [i for i in range(len(spec.regions)) if _is_job_region(spec, i, prev)]


def shortest(data: PipelineData, dur: np.ndarray, quantile: float = 0.0) -> np.ndarray:
    """(n,) each region's shortest ``dur`` (U, K, n) over the iterations the units ran; a job
    region's over those without a drain (``region_drains``: such a region releases nothing after
    its wait, so its span says nothing of how soon a release can follow one). ``quantile``:
    the duration that share of the instances fall below instead (``SHORTEST_TYPICAL``)."""
    ran = data.valid
    out = np.quantile(dur[ran], quantile, axis=0, method="lower")
    prev, _ = role_sequences(data.spec)
    for i in range(len(data.spec.regions)):
        if _is_job_region(data.spec, i, prev):
            keep = ran & ~region_drains(data, i)[0]
            if keep.any():
                out[i] = np.quantile(dur[:, :, i][keep], quantile, method="lower")
    return out


# the share of a job region's instances below the duration that tells whether a release
# waited for its job (``_waited_for_job``). The shortest instance alone let one stray
# instance decide: a launch whose shortest work after a wait read a timer tick low counted
# fewer of its releases as not waiting, and its prediction parted from those of the other
# traced launches of the same base. Chosen so that those launches agree (the what-if
# check: bench/results/whatif/README.md)
SHORTEST_TYPICAL = 0.001


def region_drains(data: PipelineData, i: int) -> tuple[np.ndarray, np.ndarray]:
    """``_find_drains``, once per data and region."""
    return memoized(data, ("drains", i), lambda: _find_drains(data, i))


def _find_drains(data: PipelineData, i: int) -> tuple[np.ndarray, np.ndarray]:
    """For job region i: (U, K) True where iteration k's release came before the role's
    first wait of k, and (U, K) at k - 1 the time from that release to the wait's start.
    A persistent CTA's tile ends so: after its last wait the role waits for every job
    (``wait_group(0)``), releases the tile's last item and runs the epilogue, and the next
    tile's first wait follows; its calls, numbered per warp, put that release in the next
    iteration. The job issued before it ends at its stamp, and the epilogue is the role's
    own work after that job: taken as job time, a blocked wait before it would absorb the
    epilogue and replay every tile's end short."""
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


def unblocked_wait_times(data: PipelineData, cost: np.ndarray) -> np.ndarray:
    """(U, K, n) how long each wait takes when its event is already there: as measured
    where the base's wait was not blocked (a try_wait that succeeds at once still reads a
    few timer ticks, more in one instance than the next), else the region's median
    unblocked time.
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


def wait_leads(data: PipelineData, record_ns: float = 0.0) -> dict:
    """Per wait region: (U, K) where it starts against the end of the role's region before
    it, so that the replay keeps it. After another wait (FA4: V's wait after K's): the time
    between the two, which no region holds (the QK GEMM's issue, the records' own stores),
    less one record's own time without recording. After a work region (whose time runs to
    this wait's start: ``work_spans``), only a negative lead: a consumes wait is its role's
    first warp's, which may wait for the next item before the role's last warp released
    the one before (FA4's second consumer warpgroup trails the first)."""
    spec = data.spec
    prev, role_last = role_sequences(spec)
    begins, durations = memoized(data, ("work_spans",), lambda: work_spans(data))
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

    The lag is the phase the two groups hold, not work: it sits in one of two states (a
    CTA starts in the lower one and may take the upper one a few iterations in), and how
    many items take the upper state changes from launch to launch of the same kernel while
    the kernel's time does not. A starved ring, which makes both groups wait for the same
    load, holds them near the lower state. Kept item by item, the upper state moved a
    shallower ring's prediction with that launch-to-launch share
    (``bench/results/whatif/trailing_lag.txt`` at d2970b0)."""
    if data.lead_end is None:
        return None
    lag = data.end[:, :, i] - data.lead_end[:, :, i]
    lag = lag[data.valid & np.isfinite(lag)]
    return float(np.quantile(lag, TRAILING_LAG_QUANTILE)) if lag.size else None


def stamp_offsets_of(data: PipelineData, stamps: tuple, measured_begin: np.ndarray,
                   measured_dur: np.ndarray, lagging: tuple = ()) -> dict:
    """Per work region and the end of its record a relation reads (index, ``at``): (U, K)
    how far that stamp lies after the region's begin, and before its end. A release
    happens there; so does a produce (the commit, after the load's issue: the latency is
    read from it, so a 1- or 2-deep ring pays the gap from the acquire's end to the commit
    on every item). ``lagging``: regions whose stamp is a trailing
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


def leading_job_left(data: PipelineData, measured_begin: np.ndarray, jobs: dict) -> dict:
    """Per asynchronous work region that releases right after a wait, in a role of several
    track groups (``PipelineSpec.track_group``: FA4's two consumer warpgroups): (U, K) how
    long the leading group's release came after the wait's end, less one timer step (two
    records' stamps are at least that far apart). That is the leading group's own async job
    (its QK GEMM) still running when its wait ended; a wait that blocks runs it meanwhile,
    and the group's release, the trailing group's after it and the region's end come that
    much sooner after the wait. Without it the replay kept the base's whole time from the
    V wait to the trailing release in a change whose V wait blocks, and predicted FA4's
    shallower K/V rings too slow."""
    if data.lead_end is None:
        return {}
    out = {}
    for i in releases_after_wait(data.spec, jobs):
        left = data.lead_end[:, :, i] - measured_begin[:, :, i] - after_wait_floor(data, i)
        out[i] = np.nan_to_num(np.maximum(left, 0.0))
    return out


def releases_after_wait(spec: PipelineSpec, jobs) -> tuple[int, ...]:
    """The asynchronous work regions that release right after their role's wait and issue
    no job (``jobs``: the job regions' indices): FA4's K and V releases, whose staggered
    role keeps the leading group's release (``leading_job_left``) and holds the trailing
    one's lag (``trailing_lag``)."""
    prev, _ = role_sequences(spec)
    return tuple(i for i, r in enumerate(spec.regions)
                 if r.kind == "work" and "releases" in r.relations and i not in jobs
                 and async_after_wait(spec, i, prev))


def after_wait_floor(data: PipelineData, i: int) -> float:
    """The least a warp of region i's role takes from a wait's end to its next stamp with
    no job to wait for: the role's gaps from one wait's end to the next wait's start
    (FA4: K's wait to V's, the QK GEMM's issue and a record between them), their
    ``UNQUEUED_QUANTILE``; one timer step where the role has no such pair. A release after
    a wait that blocked still pays that issue work: the timer step alone is less than it,
    and replayed the fast CTAs' iterations short."""
    spec = data.spec
    prev, _ = role_sequences(spec)
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


def measured_jobs(data: PipelineData) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict]:
    """The measured work spans (begin, duration), each region's shortest typical duration
    and the async jobs (``_async_jobs``), once per data."""
    measured_begin, measured_dur = memoized(data, ("work_spans",), lambda: work_spans(data))
    floor = memoized(data, ("measured_floor",), lambda: shortest(
        data, measured_dur, SHORTEST_TYPICAL))
    jobs = memoized(data, ("async_jobs",), lambda: _async_jobs(data, measured_dur, floor))
    return measured_begin, measured_dur, floor, jobs


def clean_releases(data: PipelineData) -> dict[str, np.ndarray]:
    """Per region that releases after an async job (by tag): the offsets, ns, from the wait's
    end to the release of the releases that did not wait for their job
    (``_clean_release_offsets``). A launch whose producer was probed
    (``autoprofile_probed(load_arrivals=N)``) starves its consumers now and then and has many more
    of them than a plain one: ``replay(release_sample=)`` pools that launch's with the
    trace's own."""
    measured_begin, _, _, jobs = measured_jobs(data)
    return {data.spec.regions[i].tag: offsets for i, offsets
            in _clean_release_offsets(data, jobs, measured_begin).items()}


# releases that did not wait for their job (_clean_release_offsets), pooled: at least this
# many before their mean stands for the unwaited release (else the shortest regions' offsets)
MIN_CLEAN_RELEASES = 32


def unwaited_release_offsets(data: PipelineData, jobs: dict, measured_begin: np.ndarray,
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
    typical one and the blocked margin, their median. That fallback reads long: those
    regions still waited for part of their job, so their median lies above what a starved
    ring pays (``bench/results/whatif/release_after_wait.txt`` at d2970b0); and a 32 ns timer moves a
    median of so few by whole ticks, which moves a starved ring's prediction from one
    traced launch to the next."""
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
        offset = _stamp(data, i, data.spec.regions[i].relations["releases"].at)\
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
    the replay takes it (``unwaited_release_offsets``); ``min_clean=inf`` reads it by the
    shortest regions alone (the fallback where too few clean releases were seen)."""
    measured_begin, measured_dur, floor, jobs = measured_jobs(data)
    return {data.spec.regions[i].tag: value for i, value in unwaited_release_offsets(
        data, jobs, measured_begin, measured_dur, floor, release_sample, min_clean).items()}


def sample_key(release_sample: dict | None) -> tuple:
    """A memo key for ``release_sample`` (tag -> offsets): its tags, sizes and sums."""
    return tuple(sorted((tag, int(np.size(x)), float(np.nansum(x)))
                        for tag, x in (release_sample or {}).items()))


def unit_ends(end: np.ndarray) -> np.ndarray:
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


def never_blocked(data: PipelineData, terms, i: int) -> bool:
    """True when no instance of wait ``i`` in the trace was blocked by its dependency (every
    one lasted no longer than its unblocked cost + the margin): its latency is not observed,
    only bounded from above by the unblocked waits (end - event)."""
    blocked, _ = blocked_and_free(data, i, terms[2][i], terms[3][:, :, i])
    return not bool(blocked.any())
