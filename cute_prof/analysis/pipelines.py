"""Roles, rings and waits of a kernel traced in zero-edit mode, read from its own records.

A zero-edit trace (``cute_prof.autoprofile``) knows, for every tag, which pipeline object
and which call it stands for (``trace.metadata["autoprof"]``: sites and pipelines with
their depth). From that and from which warps made which calls this module derives what a
hand-written spec would say: the role of every warp slot (producer, consumer, ...), one
track per warp named by it, and how much of each role's time goes to waiting on each
pipeline and barrier; and (``derive_pipeline``) the PipelineSpec a hand-written one would
be, so that the critical path, blockers, ring occupancy and what-ifs need no spec.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ..errors import ProfileBufferError
from ..trace import Trace
from .roles import RoleSpec

__all__ = ["finish_zero_edit_trace", "wait_breakdown", "format_wait_breakdown",
           "zero_edit_roles", "DerivedPipeline", "derive_pipeline"]

PRODUCER_OPS = ("producer_acquire", "producer_commit")
CONSUMER_OPS = ("consumer_wait", "consumer_release")
BARRIER_OPS = ("barrier", "barrier_arrive", "sync_threads")
WARPS_PER_WARPGROUP = 4


def _meta(trace: Trace) -> dict[str, Any]:
    meta = trace.metadata.get("autoprof")
    if not meta:
        raise ProfileBufferError("not a zero-edit trace: its metadata has no 'autoprof' entry")
    return meta


def _sites(meta) -> dict[int, dict]:
    return {int(s["tag"]): s for s in meta["sites"]}


def _split_barriers(trace: Trace, sites: dict[int, dict]) -> tuple[np.ndarray, list[str], dict]:
    """Barrier records whose id was only known on the device carry it in the payload: give
    each (call, id) its own tag ``bar<id>.sync`` / ``bar<id>.arrive``."""
    ev = trace.events
    names = list(trace.tag_names)
    tags = ev["tag"].astype(np.int64).copy()
    dynamic = [t for t, s in sites.items() if s["op"] in BARRIER_OPS and s["name"].startswith("bar.")]
    new_sites = dict(sites)
    for tag in dynamic:
        rows = np.flatnonzero(tags == tag)
        ids, inverse = np.unique(ev["payload"][rows], return_inverse=True)
        suffix = names[tag].split(".", 1)[1]
        lookup = np.empty(ids.size, dtype=np.int64)
        for i, barrier_id in enumerate(ids.tolist()):
            name = f"bar{barrier_id}.{suffix}"
            if name not in names:
                names.append(name)
            lookup[i] = names.index(name)
            new_sites[int(lookup[i])] = {**sites[tag], "tag": int(lookup[i]), "name": name}
        tags[rows] = lookup[inverse.reshape(-1)]
    return tags, names, new_sites


def zero_edit_roles(trace: Trace) -> RoleSpec:
    """Roles of the warp slots from the calls they made (the spec stored in the trace)."""
    return RoleSpec.from_dict(_meta(trace)["roles"])


def _role_spec(slots: np.ndarray, tags: np.ndarray, sites: dict[int, dict], stride: int,
               tag_names: list[str]) -> RoleSpec:
    ops = np.array([sites.get(int(t), {}).get("op", "") for t in range(len(tag_names))], dtype=object)
    pairs = np.unique(slots * len(tag_names) + tags)
    by_slot: dict[int, set] = {}
    for slot, tag in zip((pairs // len(tag_names)).tolist(), (pairs % len(tag_names)).tolist()):
        by_slot.setdefault(slot, set()).add(tag)
    groups: dict[tuple, list[int]] = {}
    for slot in sorted(by_slot):
        groups.setdefault(tuple(sorted(by_slot[slot])), []).append(slot)
    kinds = {}
    for signature, members in groups.items():
        used = {ops[t] for t in signature}
        produces = bool(used & set(PRODUCER_OPS))
        consumes = bool(used & set(CONSUMER_OPS))
        kind = ("producer+consumer" if produces and consumes else "producer" if produces
                else "consumer" if consumes else "sync")
        wgs = sorted({m // WARPS_PER_WARPGROUP for m in members})
        label = f"{kind} wg{wgs[0]}" if len(wgs) == 1 else f"{kind} wg{wgs[0]}-{wgs[-1]}"
        while label in kinds:
            label += "'"
        kinds[label] = members
    tag_kinds = {}
    for tag, site in sites.items():
        if tag < len(tag_names):
            tag_kinds[tag_names[tag]] = "wait" if site["kind"] == "wait" else "work"
    return RoleSpec(roles=kinds, tid_stride=stride, group_name="cta", tags=tag_kinds)


def finish_zero_edit_trace(trace: Trace) -> Trace:
    """Give a decoded zero-edit trace one track per warp (tid = CTA * warps + warp), its
    barrier tags by id, its roles and track names."""
    meta = dict(_meta(trace))
    sites = _sites(meta)
    ev = trace.events.copy()
    if ev.shape[0] == 0:
        return dataclasses.replace(trace, metadata={**trace.metadata, "autoprof": meta})
    tags, names, sites = _split_barriers(trace, sites)
    ev["tag"] = tags
    warp = ev["warp"].astype(np.int64)
    stride = int(warp.max()) + 1
    cta = ev["tid"].astype(np.int64) & 0xFFFFFFFF  # the device wrote the CTA's linear index
    ev["tid"] = cta * stride + warp
    # pipeline records: payload = the call's ordinal per warp and site (its iteration; the
    # stage is iteration mod the ring's depth). The device stores none: calls come in order
    pipeline_tags = np.array(sorted(t for t, s in sites.items() if s["pipeline"] is not None),
                             dtype=np.int64)
    rows = np.flatnonzero(np.isin(tags, pipeline_tags))
    if rows.size:
        key = ev["tid"][rows].astype(np.int64) * (len(names) + 1) + tags[rows]
        order = rows[np.lexsort((ev["start_ns"][rows], key))]
        sorted_key = ev["tid"][order].astype(np.int64) * (len(names) + 1) + tags[order]
        first = np.r_[True, sorted_key[1:] != sorted_key[:-1]]
        starts = np.flatnonzero(first)
        group = np.cumsum(first) - 1
        ev["payload"][order] = np.arange(order.size) - starts[group]
    spec = _role_spec(warp, tags, sites, stride, names)
    meta.update(sites=sorted(sites.values(), key=lambda s: s["tag"]), roles=spec.to_dict(),
                warps_per_cta=stride)
    return dataclasses.replace(
        trace, events=ev, tag_names=tuple(names),
        track_names=spec.track_names(np.unique(ev["tid"])),
        metadata={**trace.metadata, "autoprof": meta})


# --------------------------------------------------------------------- wait breakdown
def wait_breakdown(trace: Trace) -> list[dict[str, Any]]:
    """Per role and wait tag: blocked time per warp (mean over the role's warps), and its
    share of those warps' time from their first to their last record."""
    spec = zero_edit_roles(trace)
    sites = _sites(_meta(trace))
    ev = trace.events
    if ev.shape[0] == 0:
        return []
    tid = ev["tid"].astype(np.int64)
    role = spec.role_of(tid)
    end = ev["start_ns"] + ev["dur_ns"]
    utid, inverse = np.unique(tid, return_inverse=True)
    first = np.full(utid.size, np.iinfo(np.int64).max)
    last = np.full(utid.size, np.iinfo(np.int64).min)
    np.minimum.at(first, inverse, ev["start_ns"])
    np.maximum.at(last, inverse, end)
    active = (last - first).astype(np.float64)
    track_role = spec.role_of(utid)
    rows = []
    wait_tags = [t for t, s in sites.items() if s["kind"] == "wait"]
    for r, name in enumerate(spec.role_names):
        warps = np.flatnonzero(track_role == r)
        if warps.size == 0:
            continue
        span = float(active[warps].sum())
        in_role = role == r
        for tag in wait_tags:
            mask = in_role & (ev["tag"] == tag)
            if not mask.any():
                continue
            blocked = float(ev["dur_ns"][mask].sum())
            rows.append({"role": name, "tag": trace.tag_name(tag), "warps": int(warps.size),
                         "calls": int(mask.sum()),
                         "blocked_ns_per_warp": blocked / warps.size,
                         "share": blocked / span if span > 0 else 0.0})
    rows.sort(key=lambda row: (row["role"], -row["share"]))
    return rows


def format_wait_breakdown(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'role':<22} {'waits on':<28} {'warps':>6} {'calls':>9} {'us/warp':>9} {'share':>7}"]
    for row in rows:
        lines.append(f"{row['role']:<22} {row['tag']:<28} {row['warps']:>6} {row['calls']:>9} "
                     f"{row['blocked_ns_per_warp'] / 1e3:>9.2f} {100 * row['share']:>6.1f}%")
    return "\n".join(lines)


# --------------------------------------------------------------------- derived pipeline model
PRODUCER_ROLE, CONSUMER_ROLE = "producer", "consumer"
# a call site is in the loop if each warp makes it at least this share of the loop's count
# (Q's wait, once per tile, is not; K's and V's, once per K/V block, are)
LOOP_SHARE = 0.5
# a site keeps a fixed place in the loop if this share of its calls agree on the place
STEADY_SHARE = 0.9
_RELATION_OF_OP = {"producer_acquire": ("wait", "acquires"), "producer_commit": ("work", "produces"),
                   "consumer_wait": ("wait", "consumes"), "consumer_release": ("work", "releases")}


@dataclasses.dataclass(frozen=True)
class DerivedPipeline:
    """A zero-edit trace renumbered for the pipeline model, and the model read from it.

    ``trace``: the loop's records carry their loop iteration as payload; the calls before the
    first full iteration and after the last (a software-pipelined loop's prologue and
    epilogue) are renamed ``<tag>@prologue`` / ``<tag>@epilogue``. ``offsets``: per loop tag,
    iteration = call ordinal + offset (FA4: V's wait runs one iteration behind K's)."""

    trace: Trace
    spec: Any  # PipelineSpec
    offsets: dict[str, int]
    skipped: dict[str, str]  # tag -> why it is not in the model

    def describe(self) -> dict[str, Any]:
        return {"roles": {k: list(v) for k, v in self.spec.roles.roles.items()},
                "rings": {r.name: r.depth for r in self.spec.resources},
                "regions": [{"tag": r.tag, "role": r.role, "kind": r.kind,
                             **{k: v.resource for k, v in r.relations.items()},
                             "offset": self.offsets[r.tag]} for r in self.spec.regions],
                "skipped": dict(self.skipped)}

    def format_text(self) -> str:
        d = self.describe()
        lines = ["pipeline model derived from the kernel's pipeline objects (no spec given):",
                 "  roles: " + "; ".join(f"{k} = warp slots {v}" for k, v in d["roles"].items()),
                 "  rings: " + ", ".join(f"{k} (depth {v})" for k, v in d["rings"].items())]
        for role in d["roles"]:
            steps = [f"{r['tag']}{' (+%d)' % r['offset'] if r['offset'] else ''}"
                     for r in d["regions"] if r["role"] == role]
            lines.append(f"  {role} loop: " + " -> ".join(steps))
        for tag, why in d["skipped"].items():
            lines.append(f"  not in the loop: {tag} ({why})")
        return "\n".join(lines)


def derive_pipeline(trace: Trace) -> DerivedPipeline:
    """The pipeline model of a zero-edit trace, from the kernel's own pipeline objects.

    Roles: the warps that acquire and commit are the producer, the warps that wait and
    release are the consumer (all consumer warpgroups in one role: a slot is free once the
    last of them released it). Rings: each ``cutlass.pipeline`` object with the depth it was
    created with. Per role, the loop's calls in program order, each at a fixed place in the
    loop found from the records (its iteration offset); calls made once per tile (Q) or
    outside the loop stay out of the model and are listed in ``skipped``."""
    from .model import PipelineSpec, Region, Relation, Resource

    meta = _meta(trace)
    sites = _sites(meta)
    pipelines = {int(p["index"]): p for p in meta["pipelines"]}
    base_roles = zero_edit_roles(trace)
    ev = trace.events
    names = list(trace.tag_names)
    skipped: dict[str, str] = {}
    op_of = {t: s["op"] for t, s in sites.items() if s.get("pipeline") is not None
             and s["op"] in _RELATION_OF_OP}
    if not op_of:
        raise ProfileBufferError("no pipeline calls in this zero-edit trace: nothing to model")
    tid = ev["tid"].astype(np.int64)
    slot = base_roles.slot_of(tid)
    tag = ev["tag"].astype(np.int64)
    # merged roles: slots that make producer calls / consumer calls
    is_producer_op = np.isin(tag, [t for t, op in op_of.items() if op.startswith("producer")])
    is_consumer_op = np.isin(tag, [t for t, op in op_of.items() if op.startswith("consumer")])
    producer_slots = np.unique(slot[is_producer_op])
    consumer_slots = np.unique(slot[is_consumer_op])
    both = np.intersect1d(producer_slots, consumer_slots)
    if both.size:
        raise ProfileBufferError(f"warp slots {both.tolist()} both produce and consume a "
                                 "pipeline: the derived model needs separate roles (pass a spec)")
    role_slots = {PRODUCER_ROLE: producer_slots, CONSUMER_ROLE: consumer_slots}
    role_of_tag = {t: PRODUCER_ROLE if op.startswith("producer") else CONSUMER_ROLE
                   for t, op in op_of.items()}
    rows = np.flatnonzero(is_producer_op | is_consumer_op)
    order = rows[np.lexsort((ev["start_ns"][rows], tid[rows]))]
    # calls per warp and site: the loop's count is the most any site makes per warp
    n_tags = len(names)
    per_warp = np.unique(tid[order] * n_tags + tag[order], return_counts=True)
    site_of_pair, count_of_pair = per_warp[0] % n_tags, per_warp[1]
    loop_tags: dict[str, list[int]] = {PRODUCER_ROLE: [], CONSUMER_ROLE: []}
    for role in loop_tags:
        tags_here = [t for t, r in role_of_tag.items() if r == role and (site_of_pair == t).any()]
        if not tags_here:
            continue
        typical = {t: float(np.median(count_of_pair[site_of_pair == t])) for t in tags_here}
        longest = max(typical.values())
        for t in tags_here:
            if typical[t] >= LOOP_SHARE * longest and longest > 1:
                loop_tags[role].append(t)
            else:
                skipped[names[t]] = f"{typical[t]:.0f} call(s) per warp, the loop makes {longest:.0f}"
    if not loop_tags[PRODUCER_ROLE] or not loop_tags[CONSUMER_ROLE]:
        raise ProfileBufferError("the trace has no producer/consumer loop over a pipeline: "
                                 "nothing for the derived model (pass a spec)")
    # place in the loop: the iteration of a call = how many calls of the role's first loop
    # site the warp made up to it, minus one; offset = iteration - ordinal (constant)
    in_loop = np.isin(tag[order], sum(loop_tags.values(), []))
    order = order[in_loop]
    o_tid, o_tag = tid[order], tag[order]
    warp_start = np.r_[True, o_tid[1:] != o_tid[:-1]]
    warp_index = np.cumsum(warp_start) - 1
    first_rows = np.flatnonzero(warp_start)
    anchors = {}
    for role, tags_here in loop_tags.items():
        in_role = np.isin(o_tag[first_rows], tags_here)
        firsts = o_tag[first_rows][in_role]
        anchors[role] = int(np.bincount(firsts).argmax())
    is_anchor = np.zeros(order.size, dtype=bool)
    for role, anchor in anchors.items():
        is_anchor |= o_tag == anchor
    seen = np.cumsum(is_anchor)
    before_warp = np.r_[0, seen][first_rows][warp_index]
    place = seen - before_warp - 1
    ordinal = ev["payload"][order].astype(np.int64)
    shift = place - ordinal
    # a warp's first and last call of a site may sit outside the loop's anchors (prologue,
    # epilogue): the place is read from the calls in between
    site_key = o_tid * n_tags + o_tag
    by_site = np.lexsort((ordinal, site_key))
    edge = np.zeros(order.size, dtype=bool)
    new_site = np.r_[True, site_key[by_site][1:] != site_key[by_site][:-1]]
    edge[by_site[new_site]] = True
    edge[by_site[np.r_[new_site[1:], True]]] = True
    offsets: dict[str, int] = {}
    for t in sum(loop_tags.values(), []):
        here = shift[(o_tag == t) & ~edge]
        if here.size == 0:
            here = shift[o_tag == t]
        values, counts = np.unique(here, return_counts=True)
        best = int(values[counts.argmax()])
        if counts.max() < STEADY_SHARE * here.size:
            raise ProfileBufferError(f"{names[t]} does not keep one place in the loop "
                                     f"({100 * counts.max() / here.size:.0f}% of its calls "
                                     "agree): the derived model cannot place it (pass a spec)")
        offsets[names[t]] = best
    # full iterations: every loop site made its call; per warp, from the latest first to
    # the earliest last iteration
    offset_of = np.zeros(n_tags, dtype=np.int64)
    for name, off in offsets.items():
        offset_of[names.index(name)] = off
    iteration = ordinal + offset_of[o_tag]
    n_warps = int(warp_index.max()) + 1
    lo_site = np.full(n_warps * n_tags, np.iinfo(np.int64).max)
    hi_site = np.full(n_warps * n_tags, np.iinfo(np.int64).min)
    key = warp_index * n_tags + o_tag
    np.minimum.at(lo_site, key, iteration)
    np.maximum.at(hi_site, key, iteration)
    lo_site, hi_site = lo_site.reshape(n_warps, n_tags), hi_site.reshape(n_warps, n_tags)
    role_tags = {role: np.array(tags_here) for role, tags_here in loop_tags.items()}
    warp_role = np.where(np.isin(o_tag[first_rows], role_tags[PRODUCER_ROLE]), 0, 1)
    lo = np.where(warp_role == 0, lo_site[:, role_tags[PRODUCER_ROLE]].max(1),
                  lo_site[:, role_tags[CONSUMER_ROLE]].max(1))
    hi = np.where(warp_role == 0, hi_site[:, role_tags[PRODUCER_ROLE]].min(1),
                  hi_site[:, role_tags[CONSUMER_ROLE]].min(1))
    # one iteration numbering per CTA: its producer's and consumers' full ranges agree
    cta = o_tid[first_rows] // base_roles.tid_stride
    cta_u, cta_i = np.unique(cta, return_inverse=True)
    cta_lo = np.full(cta_u.size, np.iinfo(np.int64).min)
    cta_hi = np.full(cta_u.size, np.iinfo(np.int64).max)
    np.maximum.at(cta_lo, cta_i, lo)
    np.minimum.at(cta_hi, cta_i, hi)
    lo, hi = cta_lo[cta_i][warp_index], cta_hi[cta_i][warp_index]
    new_ev = ev.copy()
    new_names = list(names)
    new_tag = o_tag.copy()
    for label, outside in (("prologue", iteration < lo), ("epilogue", iteration > hi)):
        for t in np.unique(o_tag[outside]).tolist():
            name = f"{names[t]}@{label}"
            if name not in new_names:
                new_names.append(name)
            new_tag[outside & (o_tag == t)] = new_names.index(name)
    new_ev["tag"][order] = new_tag
    new_ev["payload"][order] = np.where((iteration >= lo) & (iteration <= hi), iteration - lo,
                                        ordinal)
    # program order inside an iteration: where each site's calls sit after the anchor
    anchor_time = np.full(order.size, np.nan)
    starts = ev["start_ns"][order].astype(np.float64)
    anchor_time[is_anchor] = starts[is_anchor]
    # the anchor of a call's own iteration is the latest anchor before it in its warp
    idx = np.where(is_anchor, np.arange(order.size), -1)
    idx = np.maximum.accumulate(idx)
    since_anchor = starts - np.where(idx >= 0, starts[np.maximum(idx, 0)], np.nan)
    resources = []
    regions_by_role: dict[str, list] = {PRODUCER_ROLE: [], CONSUMER_ROLE: []}
    for role, tags_here in loop_tags.items():
        position = {t: float(np.nanmedian(since_anchor[o_tag == t])) for t in tags_here}
        for t in sorted(tags_here, key=lambda t: (t != anchors[role], position[t])):
            kind, relation = _RELATION_OF_OP[op_of[t]]
            ring = pipelines[int(sites[t]["pipeline"])]["name"]
            regions_by_role[role].append(Region(tag=names[t], role=role, kind=kind,
                                                relations={relation: Relation(resource=ring)}))
    used = {r.relations[k].resource for rs in regions_by_role.values() for r in rs
            for k in r.relations}
    for p in sorted(pipelines.values(), key=lambda p: p["index"]):
        if p["name"] in used:
            resources.append(Resource(name=p["name"], kind="ring", depth=max(int(p["stages"]), 1)))
    roles = RoleSpec(roles={role: [int(s) for s in role_slots[role]] for role in regions_by_role},
                     tid_stride=base_roles.tid_stride, group_name="cta",
                     tags={r.tag: r.kind for rs in regions_by_role.values() for r in rs})
    try:
        spec = PipelineSpec(roles=roles, resources=resources,
                            regions=regions_by_role[PRODUCER_ROLE] + regions_by_role[CONSUMER_ROLE])
    except ProfileBufferError as err:
        raise ProfileBufferError(f"the pipeline calls of this trace do not make a model: {err} "
                                 "(pass a spec)") from None
    out = dataclasses.replace(trace, events=new_ev, tag_names=tuple(new_names))
    return DerivedPipeline(trace=out, spec=spec, offsets=offsets, skipped=skipped)
