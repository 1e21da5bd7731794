"""The replay: the measured work durations re-scheduled under a
:class:`~cute_prof.analysis.model.PipelineSpec` (a wait ends when its resource event plus
its latency arrives), vectorised over units with a loop over iterations only, and the rule
by which a load's queueing follows a change of throughput.

It owns :func:`replay` and :class:`Schedule`. It takes its terms and latencies from
:mod:`.replay_terms` and :mod:`.loads`, and may not judge the result (:mod:`.critical_path`)
or predict a change (:mod:`.what_if`).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from ..errors import ProfileBufferError
from .dispatch import cta_ranks
from .model import PipelineSpec
from .pipeline_data import (by_iteration, by_unit, cluster_index, FLOAT_MAX, memoized,
    PipelineData, prologue_slots, role_sequences)
from .replay_terms import (async_after_wait, infer_terms, leading_job_left, measured_jobs,
    region_drains, releases_after_wait, sample_key, shortest, slowed_by_recorder,
    stamp_offsets_of, unblocked_wait_times, UNQUEUED_QUANTILE, unwaited_release_offsets,
    wait_leads)

__all__ = ["Schedule", "replay", "queued_under_load"]


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
    ``record_ns``: one record's own time (``zero_edit.record_cost_ns``); a work region
    spans two stamps' worth of recording (from the record before it, past its own, to the
    read of the next), so each loses twice that: the replay of the kernel unrecorded.
    ``item_latency``: wait region index -> (units, iterations) latency of each item's
    event, in place of the terms' one latency per unit (loads whose latencies vary);
    ``leaders``: wait region index -> CTAs per group, where that wait's latencies are
    (2, units, iterations), as an L2 miss and as a hit: each group's first load of a place
    (CTAs ranked by their first start) misses, and a load of the same place lands no sooner
    than that miss, nor sooner than its own hit would (``load_arrivals.leader_gaps``).
    ``unit_shift``: (units,) ns each unit starts later than measured (``dispatch_shift``:
    the CTAs past the first wave start where the change frees an SM).
    ``load_share``: (units,) how much of each unit's non-producing roles' time stays work in
    the change against the base (``what_if``'s fixed point, ``busy_share``; None: the
    base's load): the load the SM's warps put on each other shrinks with it. The issue
    times on a ring's recurrence (a produce's stamp after its acquire: the copies' issue; a
    release after a wait that did not wait for its job: the next job's issue) keep their
    least loaded part (``UNQUEUED_QUANTILE`` of the base's) and that share of the rest:
    under the base's load the SM issues them later than a starved ring does, and kept whole
    they made a replayed shallow ring slow. The share follows the warps' own load, not the
    kernel's throughput: scaled by the throughput ratio instead, a shallow ring's replayed
    commits and releases still came later than the GPU's. Each unit's own work keeps that
    share of its departure from the iteration's median over the units: a starved ring
    evens out the units' work as it shortens their issue times. ``departure_kept``:
    (units, iterations) 1 where that departure stays, 0 where the iteration runs the
    median's work (``what_if`` keeps it only where the change blocks the roles' waits as
    the base did: ``blocked_as_base``).
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
    measured_begin, measured_dur, measured_floor, jobs = measured_jobs(data)
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
        return memoized(data, ("stamp_at", stamps), lambda: {
            i: tuple(by_iteration(x) for x in offsets) for i, offsets
            in stamp_offsets_of(data, stamps, measured_begin, measured_dur,
                              releases_after_wait(data.spec, jobs)).items()})
    release_at, produce_at = stamp_offsets(releasing), stamp_offsets(producing)
    # a stamp's offset from the wait before it holds that wait's record (its store): one
    # record less without recording
    def issue_scaled(value, low):
        """An issue time under the change's load: its part above the least loaded one
        keeps each unit's busy share."""
        return value if load_share is None else low + (value - low) * load_share
    release_own = {i: np.maximum(issue_scaled(x, low) - record_ns, 0.0)
                   for i, (x, low) in memoized(
        data, ("unwaited_release_at", sample_key(release_sample)),
        lambda: unwaited_release_offsets(data, jobs, measured_begin, measured_dur,
                                          measured_floor, release_sample)).items()}
    produce_low = memoized(data, ("produce_low", producing), lambda: {
        i: float(np.quantile(offsets[0][by_iteration(ran)], UNQUEUED_QUANTILE))
        for i, offsets in produce_at.items()})
    lead = memoized(data, ("wait_leads", record_ns), lambda: {
        i: by_iteration(x) for i, x in wait_leads(data, record_ns).items()})
    own_time = memoized(data, ("unblocked_wait_times", np.asarray(cost).tobytes()),
                     lambda: by_iteration(unblocked_wait_times(data, cost)))
    ran_k = memoized(data, ("valid",), lambda: by_iteration(ran))
    # how long each wait blocked in the base: its measured work after it already holds that
    # much of an async job run meanwhile, so a replay absorbs only blocking beyond it
    base_blocked = memoized(data, ("base_blocked", np.asarray(cost).tobytes()), lambda: np.nan_to_num(
        np.maximum(by_iteration(data.end - data.start) - own_time, 0.0)))
    absorbable = memoized(data, ("leading_job_left",), lambda: {
        i: by_iteration(x) for i, x in leading_job_left(data, measured_begin, jobs).items()})
    # shortest measured duration of each work region: a minimum, so a scaled region's is
    # its own scaled (one pass over the data per record time)
    floor = np.array(memoized(data, ("floor", record_ns), lambda: shortest(data, dur)))
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
            typical = memoized(data, ("iteration_medians", record_ns, i), medians)
            kept = load_share[:, None] if departure_kept is None\
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
    prev, role_last = role_sequences(spec)
    order = spec.step_order()
    dur = by_iteration(dur)
    jobs = {i: by_iteration(job) for i, job in jobs.items()}
    # job regions whose releases drain a tile's jobs: (K, U) where, and the epilogue after
    drains = memoized(data, ("drains_by_iteration",), lambda: {
        i: tuple(by_iteration(x) for x in region_drains(data, i)) for i in jobs
        if region_drains(data, i)[0].any()})
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
    clusters = {r.name: memoized(data, ("cluster", r.shared_by),
                              lambda shared_by=r.shared_by: cluster_index(data, shared_by))
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
                        or "consumes" in r.relations and k - rl.distance >= 0)\
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
                is_dep = (np.minimum(np.maximum(arm, -FLOAT_MAX), FLOAT_MAX) > own) & here
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
                elif async_after_wait(spec, i, prev):
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
    return Schedule(start=by_unit(start), end=by_unit(end), latency=latency, cost=cost,
                    dep_time=by_unit(dep_all), dep_peer=by_unit(peer_all),
                    blocked=by_unit(blocked))


# how a load's queued time scales with the change's throughput (queued_under_load)
QUEUE_RULES = ("little", "open", "none")


def queued_under_load(queued, unqueued: float, ratio: float, *, rule: str = "little"):
    """A load's queued time (its latency above the least congested ``unqueued`` one) when the
    kernel's throughput changes by 1 / ``ratio`` (the change's time against the base's), by
    ``rule`` (one of ``QUEUE_RULES``):

    - ``"little"`` (the model's): Little's law at a fixed occupancy, queued / ratio;
    - ``"open"``: one open queue, W = W0 / (1 - rho), the base's utilisation rho = queued /
      (unqueued + queued), the change's rho / ratio (kept to compare against);
    - ``"none"``: the base's queueing kept.

    The open queue shrinks a slower change's queueing the most: a shallower ring's drawn
    loads came out faster than the same variant's loads probed on the GPU, which stay near
    the base's median whatever the base's congestion. Little's law follows them closer and
    was chosen from the what-if check's runs, where it put at least as many rows within
    the check's bound as the open queue, held-out runs included
    (``bench/results/whatif/README.md``). A faster change
    (``ratio`` < 1) loads memory more: every rule but ``"none"`` takes Little's law there
    (the open queue has no steady state once rho reaches 1)."""
    if rule not in QUEUE_RULES:
        raise ValueError(f"unknown queue rule {rule!r}: one of {sorted(QUEUE_RULES)}")
    r = max(float(ratio), 1e-6)
    q = np.maximum(queued, 0.0)
    if rule == "none":
        return q
    if rule == "little" or r <= 1.0:
        return q / r
    w0 = max(float(unqueued), 1e-9)
    return w0 * q / ((w0 + q) * r - q)  # > 0: (w0 + q) r > w0 + q > q
