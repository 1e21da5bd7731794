"""Roles, rings and waits of a kernel traced in zero-edit mode, read from its own records.

A zero-edit trace (``cute_prof.autoprofile``) knows, for every tag, which pipeline object
and which call it stands for (``trace.metadata["autoprof"]``: sites and pipelines with
their depth). From that and from which warps made which calls this module derives what a
hand-written spec would say: the role of every warp slot (producer, consumer, ...), one
track per warp named by it, and how much of each role's time goes to waiting on each
pipeline and barrier. (Turning the same facts into a PipelineSpec for the critical path
and what-ifs is not done yet: a hand-written spec is still needed there.)
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ..errors import ProfileBufferError
from ..trace import Trace
from .roles import RoleSpec

__all__ = ["finish_zero_edit_trace", "wait_breakdown", "format_wait_breakdown",
           "zero_edit_roles"]

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
