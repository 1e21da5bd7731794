"""What a replay says about the measured kernel: each unit's critical path and each
region's share of it, the waits' blockers, ring occupancy and initiation intervals.

It owns those four readings of a schedule. Reads a replay's
:class:`~cute_prof.analysis.replay.Schedule`; it may not change the pipeline (that is
:mod:`.what_if`).
"""

from __future__ import annotations

import warnings

import numpy as np

from .pipeline_data import cluster_index, event_times, PipelineData, role_sequences, work_durations
from .replay import Schedule
from .replay_terms import blocked_and_free, infer_terms, wait_leads

__all__ = ["critical_path", "blockers", "ring_occupancy", "initiation_interval"]


# ---------------------------------------------------------------------------- critical path
def critical_path(data: PipelineData, sched: Schedule):
    """Walk back from each unit's last event: a blocked wait jumps to the region whose
    event it waited on (possibly a peer unit's), everything else to the role's previous
    region. Returns (share (U, n) ns of each region's work/cost on the path, latency (U, n)
    ns spent in the dependency latency of each wait, on_path (U, K, n) bool)."""
    spec = data.spec
    units, iters, n = data.shape
    prev, role_last = role_sequences(spec)
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
            src_shift[i] = spec.resource(rl.resource).depth + rl.distance\
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
    events = event_times(spec, data.start, data.end)
    acq_step = [i for i, r in enumerate(spec.regions)
                if "acquires" in r.relations and r.relations["acquires"].resource == resource]
    prod, rel = events[resource]
    if res.shared_by > 1:
        # a multicast slot is free again only once every CTA sharing it released it
        cluster = cluster_index(data, res.shared_by)
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
    dur = work_durations(data)
    leads = wait_leads(data)  # what lies between two waits belongs to the role's work too
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
