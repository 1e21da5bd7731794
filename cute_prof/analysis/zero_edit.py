"""A zero-edit trace read from its own records: roles, tracks and waits with no spec written.

A trace recorded by ``cute_prof.autoprofile`` knows, for every tag, which pipeline object and
which call it stands for (``trace.metadata["autoprof"]``: sites and pipelines with their
depth). This module owns what follows from that and from which warps made which calls: the
role of every warp slot, one track per warp named by it (:func:`finish_zero_edit_trace`), the
wait breakdown per role, the balance of waits and releases, what one record costs, and the
warpgroups' stagger. It may not build a pipeline model (:mod:`.derived_pipeline` does) or
replay one.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ..errors import ProfileBufferError
from ..trace import Trace
from .grouping import unique_ints, warp_order
from .roles import RoleSpec

__all__ = ["is_zero_edit", "finish_zero_edit_trace", "wait_breakdown", "format_wait_breakdown", "role_windows",
           "zero_edit_roles", "call_balance", "format_recording", "warpgroup_ends",
           "warpgroup_lead_shares", "RECORD_CHAIN_NS", "record_chain_ns_of", "cluster_ctas"]

PRODUCER_OPS = ("producer_acquire", "producer_commit")
CONSUMER_OPS = ("consumer_wait", "consumer_release")
BARRIER_OPS = ("barrier", "barrier_arrive", "sync_threads")
# a sampled load's arrival (autoprofile_probed(load_arrivals=N)): a region of the producer from just
# after the load's commit to when the load's full barrier completed; payload 1 = arrived, 0 =
# the probe gave up
LOAD_ARRIVAL_OP = "load_arrival"
WARPS_PER_WARPGROUP = 4


def is_zero_edit(trace: Trace) -> bool:
    """Whether ``trace`` is a finished zero-edit trace (``autoprofile``'s: its roles known)."""
    return bool(((trace.metadata or {}).get("autoprof") or {}).get("roles"))


def autoprof_metadata(trace: Trace) -> dict[str, Any]:
    meta = trace.metadata.get("autoprof")
    if not meta:
        raise ProfileBufferError("not a zero-edit trace: its metadata has no 'autoprof' entry")
    return meta


def sites_by_tag(meta) -> dict[int, dict]:
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
    return RoleSpec.from_dict(autoprof_metadata(trace)["roles"])


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
    meta = dict(autoprof_metadata(trace))
    sites = sites_by_tag(meta)
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
    pipeline_tags = np.array(sorted(t for t, s in sites.items() if s["pipeline"] is not None
                                    and s["op"] != LOAD_ARRIVAL_OP), dtype=np.int64)
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


# the quantile of a warp's instant -> next-record gaps where one record's own time lies: the
# low end is where nothing but the record and the loop's branch lies between the two stamps
RECORD_GAP_QUANTILE = 0.05

# what one zero-edit record adds to a dependency chain, by the GPU a trace ran on (its
# metadata's "device", as torch.cuda.get_device_name() reads it), in ns: measured with
# ``bench/record_cost.py chain`` (CUPTI medians; bench/results/record_cost/chain.md).
# DerivedPipeline.what_if_terms removes it per record where the caller gives no figure of
# their own; a GPU not listed keeps the trace's own gap estimate (record_cost_ns), which
# also holds the kernel's code between the stamps
RECORD_CHAIN_NS = {"NVIDIA H100 80GB HBM3": 12.1}


def record_chain_ns_of(trace: Trace) -> float | None:
    """The measured cost of one record on a dependency chain (``RECORD_CHAIN_NS``) on the GPU
    ``trace`` ran on; None where that GPU was not measured."""
    return RECORD_CHAIN_NS.get(str((trace.metadata or {}).get("device", "")).strip())


def record_cost_ns(trace: Trace) -> float:
    """The time one zero-edit record adds to its warp (timer read, store, cursor step), from
    the trace itself: between an instant's stamp and the warp's next stamp lie the instant's
    store, whatever the kernel does, and the next record's timer read; where the kernel does
    nothing in between (a producer's commit, then its next acquire) the gap is one record's
    own time. The what-if model removes it from the work it replays, to predict the kernel
    without recording.

    A timer that steps in ticks (``%globaltimer``: 32 ns) reads a constant gap g as the tick
    below it or the tick above, in the proportions that keep the mean at g (records fall at
    any phase of the tick). So the cost is the mean of the gaps at the low end's tick and the
    tick above it: the low end alone is always a whole tick, short of a record that takes
    a tick and a fraction."""
    ev = trace.events
    # columns first: gathering from one column reads less memory than from the records
    tid, start = np.ascontiguousarray(ev["tid"]), np.ascontiguousarray(ev["start_ns"])
    return record_cost(tid, start, np.ascontiguousarray(ev["dur_ns"]), warp_order(tid, start))


def record_cost(tid: np.ndarray, start: np.ndarray, dur: np.ndarray,
                 order: np.ndarray) -> float:
    """``record_cost_ns`` of the records with these columns, given their rows' order by
    warp then time (``grouping.warp_order``: derive_pipeline sorts once for both). In that
    order the warps follow each other by id: their sizes say where one ends, and only the
    start times are gathered in full."""
    if tid.size < 2:
        return 0.0
    instant = (dur == 0)[order[:-1]]
    _, size = unique_ints(tid, return_counts=True)
    same_warp = np.ones(tid.size - 1, dtype=bool)
    same_warp[np.cumsum(size)[:-1] - 1] = False
    instant &= same_warp
    gaps = np.diff(start[order])[instant]
    if not gaps.size:
        return 0.0
    # gaps is this function's own: the quantile may reorder it (what follows does not
    # depend on the order), rather than copy it
    low = float(np.quantile(gaps, RECORD_GAP_QUANTILE, overwrite_input=True))
    # the timer's tick: every gap is a whole number of them
    tick = float(np.gcd.reduce(gaps.astype(np.int64, copy=False)))
    return float(gaps[(gaps >= low) & (gaps <= low + tick)].mean())


def recorded_span_ns(trace: Trace) -> float:
    """The recorded kernel's span: its first record's start to its last record's end."""
    ev = trace.events
    if not ev.shape[0]:
        raise ProfileBufferError("the trace holds no records: it has no span")
    return float((ev["start_ns"] + ev["dur_ns"]).max() - ev["start_ns"].min())


def format_recording(trace: Trace) -> str:
    """What a zero-edit launch recorded, in three lines: records and losses, the kernel's
    pipeline objects, the warps' roles."""
    meta, auto = trace.metadata, autoprof_metadata(trace)
    return "\n".join([
        f"{len(trace):,} events from {meta['slices_opened']:,} warps; overflow "
        f"{trace.overflow}, unclosed {meta['slices_unclosed_warps']}, diverged "
        f"{meta['slices_diverged_warps']}",
        "pipelines: " + ", ".join(f"{p['name']} ({p['cls']}, {p['stages']} stages)"
                                  for p in auto["pipelines"]),
        "roles: " + ", ".join(f"{name} = warps {slots}"
                              for name, slots in auto["roles"]["roles"].items())])


# --------------------------------------------------------------------- wait breakdown
def role_windows(trace: Trace, spec: RoleSpec) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per warp (tid, ascending) of ``trace``: its window, from its first record's start to
    its last record's end (ns), and its role (index into ``spec.role_names``, -1: none)."""
    ev = trace.events
    tid = ev["tid"].astype(np.int64)
    end = ev["start_ns"] + ev["dur_ns"]
    utid, inverse = np.unique(tid, return_inverse=True)
    first = np.full(utid.size, np.iinfo(np.int64).max)
    last = np.full(utid.size, np.iinfo(np.int64).min)
    np.minimum.at(first, inverse, ev["start_ns"])
    np.maximum.at(last, inverse, end)
    return utid, last - first, spec.role_of(utid)


def wait_breakdown(trace: Trace) -> list[dict[str, Any]]:
    """Per role and wait tag: blocked time per warp (mean over the role's warps), and its
    share of those warps' time from their first to their last record."""
    spec = zero_edit_roles(trace)
    sites = sites_by_tag(autoprof_metadata(trace))
    ev = trace.events
    if ev.shape[0] == 0:
        return []
    role = spec.role_of(ev["tid"].astype(np.int64))
    _, window, track_role = role_windows(trace, spec)
    active = window.astype(np.float64)
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


def cluster_ctas(trace: Trace) -> int:
    """CTAs per cluster of the traced launch: from the trace's metadata ("cluster": [m, n])
    where the launcher saved it, else 1 (no cluster known: no ring shared)."""
    return int(np.prod((trace.metadata or {}).get("cluster") or [1]))


# one consumer warpgroup ends a ring's wait first in at least this share of the items: the
# warpgroups are staggered (FA4's ping-pong: one warpgroup leads on nearly every item), not
# peers that take turns by chance (a cooperative GEMM's two warpgroups each lead on a good
# part of the items). Set between the two from their zero-edit traces
STAGGER_SHARE = 0.9


def warpgroup_ends(ev: np.ndarray, tag: int, stride: int):
    """Per item (CTA and payload) and warpgroup that recorded region ``tag`` (events of a
    derived trace: payload = iteration): the item's key, the warpgroup and when its latest
    warp's record ended (int ns). Keys are sorted, and comparable across the tags of one
    ``ev``: ``tid // stride * (ev's largest payload + 1) + payload``."""
    return _warpgroup_ends(_warpgroup_columns(ev), tag, stride)


def _warpgroup_columns(ev: np.ndarray) -> dict[str, np.ndarray]:
    """The columns ``warpgroup_ends`` reads, each read once: gathering a packed record
    array's field row by row is several times slower than gathering its own copy, and a
    boolean index of the records copies every field."""
    return warpgroup_columns_of(*(np.ascontiguousarray(ev[field]) for field in
                                   ("tag", "tid", "payload", "start_ns", "dur_ns")))


def warpgroup_columns_of(tag: np.ndarray, tid: np.ndarray, payload: np.ndarray,
                          start: np.ndarray, dur: np.ndarray) -> dict[str, Any]:
    """``_warpgroup_columns`` of columns already read (derive_pipeline holds them), with the
    items' key span (the largest payload + 1)."""
    return {"tag": tag, "tid": tid, "payload": payload, "start": start, "dur": dur,
            "payload_span": int(payload.max()) + 1 if payload.size else 1}


def _warpgroup_ends(columns: dict[str, Any], tag: int, stride: int):
    """``warpgroup_ends`` from the events' columns (``_warpgroup_columns``)."""
    rows = np.flatnonzero(columns["tag"] == tag)
    if not rows.size:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    tid = columns["tid"][rows].astype(np.int64)
    group = tid % stride // WARPS_PER_WARPGROUP
    width = int(group.max()) + 1
    item = (tid // stride) * columns["payload_span"] + columns["payload"][rows].astype(np.int64)
    sub, sub_of = unique_ints(item * width + group, return_inverse=True)
    end = np.full(sub.size, np.iinfo(np.int64).min)
    np.maximum.at(end, sub_of, (columns["start"][rows] + columns["dur"][rows]).astype(np.int64))
    return sub // width, sub % width, end


def warpgroup_lead_shares(ev: np.ndarray, wait_tags: list[int], stride: int) -> dict[int, float]:
    """Per consumes wait made by more than one warpgroup (events of a derived trace:
    payload = iteration): the share of the items on which the warpgroup that most often
    ends its wait first (each warpgroup as late as its last warp) does so. About 1/2 for
    peers that take turns, near 1 for a staggered pair."""
    return _warpgroup_lead_shares(_warpgroup_columns(ev), wait_tags, stride)


def _warpgroup_lead_shares(columns: dict[str, Any], wait_tags: list[int],
                           stride: int) -> dict[int, float]:
    """``warpgroup_lead_shares`` from the events' columns (``_warpgroup_columns``)."""
    shares = {}
    for tag in wait_tags:
        sub_item, sub_group, end = _warpgroup_ends(columns, tag, stride)
        groups = unique_ints(sub_group)
        if groups.size < 2:
            continue
        items, members = unique_ints(sub_item, return_counts=True)
        whole = np.isin(sub_item, items[members == groups.size])
        order = np.lexsort((end[whole], sub_item[whole]))
        first_row = np.r_[True, sub_item[whole][order][1:] != sub_item[whole][order][:-1]]
        leader = sub_group[whole][order][first_row]
        if leader.size:
            shares[int(tag)] = float(np.bincount(leader).max() / leader.size)
    return shares


def staggered_warpgroups(columns: dict[str, Any], wait_tags: list[int], stride: int) -> bool:
    """True when, on a consumes wait of the loop made by more than one warpgroup, the same
    warpgroup gets its items first (``warpgroup_lead_shares`` >= ``STAGGER_SHARE``): the
    role then needs an item when its leading warpgroup waits for it
    (``PipelineSpec.track_group``). ``columns``: the derived events' (``_warpgroup_columns``)."""
    return any(share >= STAGGER_SHARE
               for share in _warpgroup_lead_shares(columns, wait_tags, stride).values())


# --------------------------------------------------------------------- completeness
def call_balance(trace: Trace) -> list[dict[str, Any]]:
    """Per pipeline: do the calls add up? Every consumer warp released as many items as it
    waited for, the warps of one warpgroup made the same number of waits (they run one
    program), and no warpgroup waited for more items than its CTA's producer acquired.
    A lost or doubled record shows here as a mismatch. (The producer count is the CTA's own:
    a ring one CTA fills for its whole cluster, such as a tile scheduler's, can exceed it.)"""
    meta = autoprof_metadata(trace)
    sites = sites_by_tag(meta)
    stride = int(meta["warps_per_cta"])
    ev = trace.events
    tid = ev["tid"].astype(np.int64)
    out = []
    for p in meta["pipelines"]:
        def tags(op, index=int(p["index"])):
            return [t for t, s in sites.items() if s.get("pipeline") == index and s["op"] == op]

        waits = np.isin(ev["tag"], tags("consumer_wait"))
        releases = np.isin(ev["tag"], tags("consumer_release"))
        acquires = np.isin(ev["tag"], tags("producer_acquire"))
        if not (waits.any() or acquires.any()):
            continue
        span = int(tid.max()) + 1
        n_wait = np.bincount(tid[waits], minlength=span)
        n_release = np.bincount(tid[releases], minlength=span)
        n_acquire = np.bincount(tid[acquires] // stride, minlength=span // stride + 1)
        consumer = np.flatnonzero(n_wait > 0)
        per_cta = -(-stride // WARPS_PER_WARPGROUP)
        group = consumer // stride * per_cta + consumer % stride // WARPS_PER_WARPGROUP
        lo = np.full(int(group.max(initial=0)) + 1, np.iinfo(np.int64).max)
        hi = np.zeros(int(group.max(initial=0)) + 1, dtype=np.int64)
        np.minimum.at(lo, group, n_wait[consumer])
        np.maximum.at(hi, group, n_wait[consumer])
        groups = np.unique(group)
        group_cta = groups // per_cta
        out.append({
            "pipeline": p["name"], "ctas": int(np.unique(tid[waits | acquires] // stride).size),
            "consumer_warps": int(consumer.size), "waits": int(waits.sum()),
            "acquires": int(acquires.sum()),
            "warps_wait_release_differ": int((n_wait[consumer] != n_release[consumer]).sum()),
            "warpgroups_disagree": int((lo[groups] != hi[groups]).sum()),
            "warpgroups_beyond_producer": int((hi[groups] > n_acquire[group_cta]).sum()),
        })
    return out
