"""The pipeline model derived from a zero-edit trace's own pipeline calls: the
:class:`~cute_prof.analysis.model.PipelineSpec` a hand-written spec would be (roles, rings
and their depth, each call's place in the loop, the prologue and epilogue calls kept out of
it), and the terms the what-ifs take from the recording (:class:`DerivedPipeline`).

It owns :func:`derive_pipeline` and :class:`DerivedPipeline`. It builds the spec and reads
the records, and may not replay or predict: that stays in the stages of the pipeline model
(:mod:`.replay`, :mod:`.what_if`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ..errors import ProfileBufferError
from ..trace import Trace
from .grouping import rows_by_value, tags_in, unique_ints, warp_order
from .load_arrivals import load_arrival_sample
from .pipeline_data import match_records
from .replay_terms import clean_releases, job_regions
from .roles import RoleSpec
from .zero_edit import (autoprof_metadata, cluster_ctas, LOAD_ARRIVAL_OP, record_chain_ns_of,
    record_cost, sites_by_tag, staggered_warpgroups, warpgroup_columns_of, WARPS_PER_WARPGROUP,
    zero_edit_roles)

__all__ = ["DerivedPipeline", "derive_pipeline"]


# --------------------------------------------------------------------- derived pipeline model
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
    record_ns: float = 0.0  # one record's own time in the recorded trace (record_cost_ns)
    # (events, {field: column}): columns of ``trace.events`` derive_pipeline already read, so
    # that first_load_latency does not read the records again (each column is a pass over
    # every record); used only while ``trace.events`` is still that array
    event_columns: tuple[np.ndarray, dict[str, np.ndarray]] | None = dataclasses.field(
        default=None, repr=False, compare=False)

    def describe(self) -> dict[str, Any]:
        return {"roles": {k: list(v) for k, v in self.spec.roles.roles.items()},
                "rings": {r.name: r.depth for r in self.spec.resources},
                "regions": [{"tag": r.tag, "role": r.role, "kind": r.kind,
                             **{k: v.resource for k, v in r.relations.items()},
                             "offset": self.offsets[r.tag]} for r in self.spec.regions],
                "skipped": dict(self.skipped)}

    def _column(self, name: str) -> np.ndarray:
        """Field ``name`` of ``trace.events`` as its own array: derive_pipeline's copy where
        it kept one for these events, else read now."""
        events = self.trace.events
        if self.event_columns is not None and self.event_columns[0] is events\
                and name in self.event_columns[1]:
            return self.event_columns[1][name]
        return np.ascontiguousarray(events[name])

    def first_load_latency(self) -> tuple[np.ndarray, str]:
        """The loaded memory latency at each CTA's start, from its own records: the time from
        the issue of the first load the CTA waits for (its first ``consumer_wait``, any ring,
        in the loop or not: FA4's Q, a GEMM's first k-tile) to that wait's end (the latest of
        the waiting warps), for the CTAs that started while others were running (the first
        issue after the earliest CTA's end): nothing of the CTA's own is in flight before
        its first load, so its consumer waits for all of it."""
        trace = self.trace
        meta = autoprof_metadata(trace)
        sites = {s["name"]: s for s in meta["sites"]}
        names = list(trace.tag_names)
        stride = int(self.spec.roles.tid_stride)

        def op_tags(ops):
            out = {}
            by_name = {p["name"]: int(p["index"]) for p in meta["pipelines"]}
            for t, name in enumerate(names):
                base = name.split("@")[0]
                if base.endswith(".issued") and "producer_commit" in ops\
                        and base[:-len(".issued")] in by_name:  # a TMA ring's issue point
                    out[t] = by_name[base[:-len(".issued")]]
                    continue
                site = sites.get(base)
                if site is not None and site.get("pipeline") is not None and site["op"] in ops:
                    out[t] = int(site["pipeline"])
            return out

        waits, issues = op_tags(("consumer_wait",)), op_tags(("producer_commit",))
        # each column read once: gathers from a packed record field are slow
        start, dur = self._column("start_ns"), self._column("dur_ns")
        event_tid, event_tag = self._column("tid"), self._column("tag")
        origin = int(start.min())  # float64 offsets (absolute ns: 256 ns steps)
        ctas, inv = unique_ints(event_tid // stride, return_inverse=True)
        # the earliest last end of a CTA, in integer ns (float64 rounds monotonically: the
        # same as over float offsets)
        last = np.full(ctas.size, np.iinfo(np.int64).min)
        np.maximum.at(last, inv, start + dur)
        loaded_after = float(last.min() - origin)
        n_pipes = max([*waits.values(), *issues.values()], default=0) + 1
        # the issue and wait calls, from one pass over the trace: their own columns, and
        # their positions per tag
        wanted = sorted({*waits, *issues})
        calls = np.flatnonzero(tags_in(event_tag, wanted))
        tid, inv = event_tid[calls].astype(np.int64), inv[calls]
        since_origin = start[calls] - origin
        starts = since_origin.astype(np.float64)
        ends = (since_origin + dur[calls]).astype(np.float64)
        slot_of_tag = np.zeros(max(wanted, default=0) + 1, dtype=np.int64)
        slot_of_tag[wanted] = np.arange(len(wanted))
        by_slot = rows_by_value(slot_of_tag[event_tag[calls]], len(wanted))
        rows_of = {t: by_slot[i] for i, t in enumerate(wanted)}
        # per CTA and ring: the first issue; per CTA: the first wait (any ring) and its ring
        first_issue = np.full((ctas.size, n_pipes), np.inf)
        first_wait = np.full(ctas.size, np.inf)
        wait_ring = np.zeros(ctas.size, dtype=np.int64)
        for t, pipe in issues.items():
            m = rows_of[t]
            np.minimum.at(first_issue[:, pipe], inv[m], starts[m])
        per_tag = {}
        for t, pipe in waits.items():
            m = rows_of[t]
            if not m.size:
                continue
            first = np.full(ctas.size, np.inf)
            np.minimum.at(first, inv[m], starts[m])
            per_tag[t] = first
            better = first < first_wait
            first_wait[better], wait_ring[better] = first[better], pipe
        # the end of the first wait: per warp its first call of that site (the earliest
        # start, ties: the first row), latest warp
        wait_end = np.full(ctas.size, -np.inf)
        for t, first in per_tag.items():
            rows = rows_of[t]
            warps, warp = unique_ints(tid[rows], return_inverse=True)
            earliest = np.full(warps.size, np.inf)
            np.minimum.at(earliest, warp, starts[rows])
            at_earliest = starts[rows] == earliest[warp]
            head = np.full(warps.size, calls.size)
            np.minimum.at(head, warp[at_earliest], rows[at_earliest])
            chosen = first[inv[head]] == first_wait[inv[head]]
            np.maximum.at(wait_end, inv[head[chosen]], ends[head[chosen]])
        # a ring armed before its copies issues them one record after the commit's stamp
        delay = self.copy_issue_delay_ns()
        late = np.zeros(n_pipes)
        for p in meta["pipelines"]:
            if int(p["index"]) < n_pipes:
                late[int(p["index"])] = delay.get(p["name"], 0.0)
        issue = first_issue[np.arange(ctas.size), wait_ring] + late[wait_ring]
        ok = np.isfinite(issue) & np.isfinite(wait_end) & (issue > loaded_after)\
            & (wait_end >= issue)
        return (wait_end - issue)[ok], "first load of CTAs started under load"

    def copy_issue_delay_ns(self) -> dict[str, float]:
        """Per ring whose copies issue after its commit's record: how long after its commit's
        stamp the recorded kernel issues the ring's copies. One record where the commit is
        the arm a kernel makes before its copies (``commit_arms_copies``: ws_gemm's
        ``sync_object_full.arrive``), whose store comes before them; a load's latency read
        from that stamp holds it, and the kernel without recording does not. Nothing where
        the copies come before the commit (``PipelineTmaAsync``'s own ``producer_acquire``
        arms), or in a trace recorded before the flag existed."""
        return {p["name"]: self.record_ns
                for p in autoprof_metadata(self.trace)["pipelines"] if p.get("commit_arms_copies")}

    def commits_before_loop(self) -> dict[str, int]:
        """Per ring: how many commits each producer warp makes before the loop's first
        iteration (its ``@prologue`` calls), the shift from a commit's ordinal in its warp
        (a sampled load's ``position``) to the loop iteration whose item it loads. FA4's
        first K tile is loaded before the loop, so the item of iteration k is K's commit
        k + 1: drawn at place k, each K item would take the latency of the load before its
        own, and the slow loads of a CTA's start burst would land one item late."""
        names = list(self.trace.tag_names)
        event_tid, event_tag = self._column("tid"), self._column("tag")
        out = {}
        for r in self.spec.regions:
            if "produces" not in r.relations:
                continue
            tag = f"{r.tag}@prologue"
            if tag not in names:
                continue
            mine = event_tag == names.index(tag)
            _, per_warp = np.unique(event_tid[mine], return_counts=True)
            out[r.relations["produces"].resource] = int(np.median(per_warp))
        return out

    def what_if_terms(self, *, arrivals_from: Trace | None = None,
                      record_chain_ns: float | None = None,
                      recorder_cost: float | None = None) -> dict[str, Any]:
        """What ``analyze_pipeline`` / ``predict_what_if`` take to predict the unrecorded
        kernel as the what-if check (``bench/whatif.py check``) does: each CTA's first load
        as the loaded latency, one record's own time, and the sampled loads
        (:func:`load_arrival_sample`, their latencies from the copies' issue:
        ``copy_issue_delay_ns``) of
        ``arrivals_from``, a run of the same kernel with ``autoprofile_probed(load_arrivals=N)``
        (this trace's own, if it was that run).

        ``record_chain_ns``: what one record adds to a dependency chain on this GPU, ns
        (measured with ``bench/record_cost.py chain``), the time the replay removes per
        record; by default the figure measured on the trace's GPU
        (:func:`record_chain_ns_of`), and where that GPU was not measured, the trace's own gap
        between back-to-back stamps (``record_ns``). The gap holds the kernel's code between
        the stamps too: removed per record, it takes more of the recorder's cost off a
        starved ring than the GPU pays, so the measured chain figure is preferred.

        ``release_sample``: the probed launch's releases that did not wait for their async job
        (``replay_terms.clean_releases``): the replay pools them with this trace's own.

        ``recorder_cost``: how much longer the recording kernel ran than the plain one on the
        GPU, as a fraction (0.15: 15% longer; time both, e.g. with torch.profiler, in the
        same rounds): what the records' own time does not account for is taken as the
        compiler's slower schedule of the warps' work (``what_if.recorder_slowdown``; on FA4
        most of the cost is that schedule, not the records' own time: docs/performance.md).
        Without it only the records' own time is removed."""
        if record_chain_ns is not None and not record_chain_ns >= 0:
            raise ValueError(f"record_chain_ns must be a time >= 0 ns, got {record_chain_ns!r}")
        if recorder_cost is not None and not -1 < recorder_cost < 10:
            raise ValueError(f"recorder_cost must be the recording kernel's time over the "
                             f"plain kernel's, less 1 (0.15 for 15% longer), got "
                             f"{recorder_cost!r}")
        chain = record_chain_ns if record_chain_ns is not None else record_chain_ns_of(self.trace)
        return {"first_load": self.first_load_latency()[0],
                "record_ns": float(chain) if chain is not None else self.record_ns,
                "recorder_cost": float(recorder_cost or 0.0),
                **self.probed_terms(arrivals_from)}

    def probed_terms(self, arrivals_from: Trace | None = None) -> dict[str, Any]:
        """The terms of :meth:`what_if_terms` that come from the probed launch: its sampled
        loads (``arrivals``) and clean releases (``release_sample``); what
        ``analyze_pipeline(alike=)`` takes for each other probed launch that ran alike."""
        probed = self.arrival_sample(arrivals_from if arrivals_from is not None else self.trace)
        return {"arrivals": probed, "release_sample": self._probed_releases(arrivals_from)}

    def arrival_sample(self, probed: Trace) -> dict[str, np.ndarray]:
        """``load_arrival_sample`` of a probed launch of this kernel, each latency from the
        copies' issue (``copy_issue_delay_ns``) and each place the loop iteration's
        (``commits_before_loop``)."""
        sample = load_arrival_sample(probed)
        late = self.copy_issue_delay_ns()
        before_loop = self.commits_before_loop()
        for ring, loads in sample.items():
            loads["latency_ns"] -= late.get(ring, 0.0)
            loads["position"] -= before_loop.get(ring, 0)
        return sample

    def _probed_releases(self, probed: Trace | None) -> dict[str, np.ndarray]:
        """The probed launch's releases that did not wait for their async job
        (``replay_terms.clean_releases``), where this model has such a region: a producer
        held on its probes starves the consumers now and then, and each such release shows
        the time a starved ring pays after every wait. Empty without a probed launch, and
        where its records make no model of their own (a trace of the probes alone)."""
        if probed is None or not job_regions(self.spec):  # FA4: no job, nothing to derive
            return {}
        try:
            other = derive_pipeline(probed)
        except ProfileBufferError:
            return {}
        if [r.tag for r in other.spec.regions] != [r.tag for r in self.spec.regions]:
            return {}  # not the same loop: nothing to pool
        return clean_releases(match_records(other.trace, self.spec))

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


def _issue_points(trace: Trace, sites: dict[int, dict],
                  meta) -> tuple[list[np.ndarray], list[str], dict[int, dict]]:
    """A ring whose producer never calls ``producer_commit`` (a TMA load completes the full
    barrier itself) gets an issue point: an instant at the end of each acquire, named
    ``<ring>.issued``, where the model lets the load start. Returns the issue points' rows
    (to follow the trace's events), the tag names and the sites with theirs."""
    ev = trace.events
    names = list(trace.tag_names)
    new_sites = dict(sites)
    extra = []
    recorded = np.bincount(ev["tag"].astype(np.int64), minlength=len(names) + 1) > 0
    for p in meta["pipelines"]:
        index = int(p["index"])
        ops = {s["op"]: t for t, s in sites.items() if s.get("pipeline") == index
               and t < recorded.size and recorded[t]}
        if "producer_acquire" not in ops or "producer_commit" in ops:
            continue
        rows = ev[ev["tag"] == ops["producer_acquire"]]
        issued = rows.copy()
        issued["start_ns"] = rows["start_ns"] + rows["dur_ns"]
        issued["dur_ns"] = 0
        name = f"{p['name']}.issued"
        names.append(name)
        issued["tag"] = len(names) - 1
        new_sites[len(names) - 1] = {"tag": len(names) - 1, "name": name, "op": "producer_commit",
                                     "kind": "signal", "pipeline": index, "synthesized": True}
        extra.append(issued)
    return extra, names, new_sites


def _concatenate_records(parts: list[np.ndarray]) -> np.ndarray:
    """``np.concatenate(parts)`` of event arrays (one record dtype) as raw bytes: numpy
    copies a packed record dtype field by field, several times slower than the bytes."""
    raw = np.dtype((np.void, parts[0].dtype.itemsize))
    return np.concatenate([part.view(raw) for part in parts]).view(parts[0].dtype)


def derive_pipeline(trace: Trace) -> DerivedPipeline:
    """The pipeline model of a zero-edit trace, from the kernel's own pipeline objects.

    Loop calls: the pipeline calls a warp makes about as often as the most frequent one
    (K/V per block, A/B per k-tile); calls made once per tile (FA4's Q, a tile scheduler's
    ring, an epilogue store) stay out of the model and are listed in ``skipped``. Roles: the
    warp slots that make the same loop calls (FA4's two consumer warpgroups are one role:
    a slot is free once the last of them released it). Rings: each ``cutlass.pipeline``
    object in the loop, with the depth it was created with. Per role, the loop's calls in
    program order, each at the fixed place in the loop its records show (its offset)."""
    from .model import PipelineSpec, Region, Relation, Resource

    meta = autoprof_metadata(trace)
    extra, names, sites = _issue_points(trace, sites_by_tag(meta), meta)
    # the derived trace's events (the recorded ones, then the issue points): read below as
    # recorded, then renumbered in place
    new_ev = _concatenate_records([trace.events, *extra])
    pipelines = {int(p["index"]): p for p in meta["pipelines"]}
    base_roles = zero_edit_roles(trace)
    stride = int(base_roles.tid_stride)
    n_tags = len(names)
    skipped: dict[str, str] = {}
    op_of = {t: s["op"] for t, s in sites.items() if s.get("pipeline") is not None
             and s["op"] in _RELATION_OF_OP}
    if not op_of:
        raise ProfileBufferError("no pipeline calls in this zero-edit trace: nothing to model")
    # each column read once: gathers and scatters on a packed record field are slow
    tid = new_ev["tid"].astype(np.int64)
    tag = np.ascontiguousarray(new_ev["tag"])
    start = np.ascontiguousarray(new_ev["start_ns"])
    dur = np.ascontiguousarray(new_ev["dur_ns"])
    payload = np.ascontiguousarray(new_ev["payload"])
    # the recorded rows by warp, then time: for one record's time (from the trace as
    # recorded: the synthesized issue points would read 0) and the loop's calls below
    recorded = trace.events.shape[0]
    recorded_order = warp_order(tid[:recorded], start[:recorded])
    record_ns = record_cost(tid[:recorded], start[:recorded], dur[:recorded], recorded_order)
    rows = np.flatnonzero(tags_in(tag, op_of))
    pair, count = unique_ints(tid[rows] * n_tags + tag[rows], return_counts=True)
    pair_tid, pair_tag = pair // n_tags, pair % n_tags
    typical = {t: float(np.median(count[pair_tag == t])) for t in np.unique(pair_tag).tolist()}
    longest = max(typical.values())
    loop = sorted(t for t, c in typical.items() if c >= LOOP_SHARE * longest and longest > 1)
    for t, c in typical.items():
        if t not in loop:
            skipped[names[t]] = f"{c:.0f} call(s) per warp, the loop makes {longest:.0f}"
    for t, site in sites.items():
        if site["op"] == LOAD_ARRIVAL_OP and t < len(names):
            skipped[names[t]] = ("load-arrival probes: the producer waited for these loads, so "
                                 "its loop times here include the probes (model the timings "
                                 "from a run without load_arrivals)")
    if not loop:
        raise ProfileBufferError("the trace has no producer/consumer loop over a pipeline "
                                 "(every call is made once per warp): nothing for the derived "
                                 "model (pass a spec)")
    # roles: slots grouped by the loop calls they make (the most common set over the CTAs).
    # A ring only some of the warps sharing another loop ring use (quack's epilogue store,
    # made by one warp per consumer warpgroup) is set aside, so those warps stay one role
    while True:
        by_signature = _slots_by_signature(pair_tid, pair_tag, loop, stride)
        distinguishing = set()
        signatures = list(by_signature)
        for i, a in enumerate(signatures):
            for b in signatures[i + 1:]:
                if set(a) & set(b):
                    distinguishing |= set(a) ^ set(b)
        if not distinguishing:
            break
        rings = {sites[t]["pipeline"] for t in distinguishing}
        for t in [t for t in loop if sites[t]["pipeline"] in rings]:
            skipped[names[t]] = ("made by only some of the warps that share the loop's other "
                                 "pipeline calls")
        loop = [t for t in loop if sites[t]["pipeline"] not in rings]
        if not loop:
            raise ProfileBufferError("the warps' pipeline calls do not split into roles: the "
                                     "derived model cannot place them (pass a spec)")
    role_of_slot, role_tags, role_slots = {}, {}, {}
    for sig, slots_here in by_signature.items():
        ops = {op_of[t].split("_")[0] for t in sig}
        label = "producer+consumer" if len(ops) == 2 else ops.pop()
        name, i = label, 2
        while name in role_tags:
            name, i = f"{label} {i}", i + 1
        role_tags[name], role_slots[name] = list(sig), slots_here
        for slot_id in slots_here:
            role_of_slot[slot_id] = name
    # place in the loop: the iteration of a call = how many calls of its role's first loop
    # site the warp made up to it, minus one; offset = iteration - ordinal (constant).
    # The loop's calls by warp, then time: the recorded rows' order where they are all
    # recorded ones (no issue point in the loop), else their own
    in_loop = tags_in(tag, loop)
    if in_loop[recorded:].any():
        loop_rows = np.flatnonzero(in_loop)
        order = loop_rows[warp_order(tid[loop_rows], start[loop_rows])]
    else:
        order = recorded_order[in_loop[recorded_order]]
    o_tid, o_tag = tid[order], tag[order]
    _check_rings_not_split(o_tid, o_tag, sites, loop, stride, names)
    warp_start = np.r_[True, o_tid[1:] != o_tid[:-1]]
    warp_index = np.cumsum(warp_start) - 1
    first_rows = np.flatnonzero(warp_start)
    warp_role = np.array([role_of_slot.get(int(t) % stride, "") for t in o_tid[first_rows]],
                         dtype=object)
    anchors = {}
    for role in role_tags:
        firsts = o_tag[first_rows][warp_role == role]
        anchors[role] = int(np.bincount(firsts).argmax())
    is_anchor = (o_tag == np.array([anchors.get(r, -1) for r in warp_role])[warp_index])
    seen = np.cumsum(is_anchor)
    before_warp = np.r_[0, seen][first_rows][warp_index]
    place = seen - before_warp - 1
    ordinal = payload[order].astype(np.int64)
    shift = place - ordinal
    # per warp and site: the first and last ordinal of its calls
    n_warps = int(warp_index.max()) + 1
    site = warp_index * n_tags + o_tag
    first_call = np.full(n_warps * n_tags, np.iinfo(np.int64).max)
    last_call = np.full(n_warps * n_tags, np.iinfo(np.int64).min)
    np.minimum.at(first_call, site, ordinal)
    np.maximum.at(last_call, site, ordinal)
    # a warp's first and last call of a site may sit outside the loop's anchors (prologue,
    # epilogue): the place is read from the calls in between
    edge = _first_and_last_calls(site, ordinal, first_call, last_call)
    offsets: dict[str, int] = {}
    offset_of = np.zeros(n_tags, dtype=np.int64)
    loop_slot = np.zeros(n_tags, dtype=np.int64)
    loop_slot[loop] = np.arange(len(loop))
    slot = loop_slot[o_tag]
    inner = np.bincount(slot[~edge], minlength=len(loop))
    counted = ~edge | (inner == 0)[slot]  # a site with no call in between: all its calls
    mode, agree, sizes = _mode_per_group(slot[counted], shift[counted], len(loop))
    for t, value, top, size in zip(loop, mode.tolist(), agree.tolist(), sizes.tolist()):
        if top < STEADY_SHARE * size:
            raise ProfileBufferError(f"{names[t]} does not keep one place in the loop "
                                     f"({100 * top / size:.0f}% of its calls "
                                     "agree): the derived model cannot place it (pass a spec)")
        offsets[names[t]] = offset_of[t] = int(value)
    # full iterations: every loop site of the role made its call; one numbering per CTA
    iteration = ordinal + offset_of[o_tag]
    called = first_call != np.iinfo(np.int64).max
    site_tag = np.tile(np.arange(n_tags), n_warps)
    lo_site = np.full(n_warps * n_tags, np.iinfo(np.int64).min)
    hi_site = np.full(n_warps * n_tags, np.iinfo(np.int64).max)
    lo_site[called] = first_call[called] + offset_of[site_tag[called]]
    hi_site[called] = last_call[called] + offset_of[site_tag[called]]
    lo = lo_site.reshape(n_warps, n_tags).max(1)
    hi = hi_site.reshape(n_warps, n_tags).min(1)
    cta = o_tid[first_rows] // stride
    cta_u, cta_i = np.unique(cta, return_inverse=True)
    cta_lo = np.full(cta_u.size, np.iinfo(np.int64).min)
    cta_hi = np.full(cta_u.size, np.iinfo(np.int64).max)
    np.maximum.at(cta_lo, cta_i, lo)
    np.minimum.at(cta_hi, cta_i, hi)
    lo, hi = cta_lo[cta_i][warp_index], cta_hi[cta_i][warp_index]
    new_names = list(names)
    new_tag = o_tag.copy()
    for label, outside in (("prologue", iteration < lo), ("epilogue", iteration > hi)):
        outside = np.flatnonzero(outside)
        renamed = np.arange(n_tags)
        for t in np.unique(o_tag[outside]).tolist():
            name = f"{names[t]}@{label}"
            if name not in new_names:
                new_names.append(name)
            renamed[t] = new_names.index(name)
        new_tag[outside] = renamed[o_tag[outside]]
    derived_tag = tag.copy()
    derived_tag[order] = new_tag
    new_ev["tag"] = derived_tag
    inside = (iteration >= lo) & (iteration <= hi)
    payload[order] = np.where(inside, iteration - lo, ordinal)
    new_ev["payload"] = payload
    # program order inside an iteration: where each site's calls sit after the anchor
    starts = start[order]
    starts = (starts - starts.min()).astype(np.float64)
    latest_anchor = np.maximum.accumulate(np.where(is_anchor, np.arange(order.size), -1))
    since_anchor = np.where(latest_anchor >= 0, starts - starts[np.maximum(latest_anchor, 0)],
                            np.nan)
    # item numbering: the model counts a ring's items by the iteration of its produce; a
    # call at iteration k with offset o handles item (its ordinal) k - o, i.e. model item
    # k - o + o_produce: its relation's distance is o - o_produce (ws_gemm's consumer
    # releases item k - 1 in iteration k: distance 1)
    produce_offset = {pipelines[int(sites[t]["pipeline"])]["name"]: int(offset_of[t])
                      for t in loop if op_of[t] == "producer_commit"}
    regions = []
    inside = np.flatnonzero(inside)
    # a site's rows by one comparison per site (the loop has few): its median does not
    # depend on the rows' order, so they need no sort
    inside_tag, inside_since = o_tag[inside], since_anchor[inside]
    for role, tags_here in role_tags.items():
        position = {}
        for t in tags_here:
            here = inside_since[inside_tag == t]
            position[t] = float(np.nanmedian(here)) if here.size else 0.0
        follows_consumes = False
        for t in sorted(tags_here, key=lambda t: (t != anchors[role], position[t])):
            kind, relation = _RELATION_OF_OP[op_of[t]]
            ring = pipelines[int(sites[t]["pipeline"])]["name"]
            distance = int(offset_of[t]) - produce_offset.get(ring, int(offset_of[t]))
            if distance < 0:
                raise ProfileBufferError(
                    f"{names[t]} runs ahead of its ring's produce ({distance} iterations): "
                    "the derived model cannot number its items (pass a spec)")
            # work right after a consumer's wait is issued asynchronous work (wgmma): it
            # runs while the role's next wait waits (see Region.asynchronous)
            regions.append(Region(tag=names[t], role=role, kind=kind,
                                  relations={relation: Relation(resource=ring, distance=distance)},
                                  asynchronous=kind == "work" and follows_consumes))
            follows_consumes = relation == "consumes"
    used = {rel.resource for r in regions for rel in r.relations.values()}
    # a cluster's CTAs share a TMA ring's slots (multicast: a slot is free once every CTA
    # it was loaded into released it)
    cluster = cluster_ctas(trace)
    # items a ring's producer issued before the loop (its commits renamed @prologue, the
    # median over its warps): they hold slots until the loop's first releases free them
    before_loop = iteration < lo
    prologue_items = {}
    for t in loop:
        if op_of[t] == "producer_commit":
            calls = o_tag == t
            per_warp = np.bincount(warp_index[calls & before_loop], minlength=n_warps)
            callers = np.unique(warp_index[calls])
            prologue_items[pipelines[int(sites[t]["pipeline"])]["name"]] = int(
                np.median(per_warp[callers])) if callers.size else 0
    resources = [Resource(name=p["name"], kind="ring", depth=max(int(p["stages"]), 1),
                          shared_by=cluster if "TmaAsync" in str(p.get("cls", "")) else 1,
                          prologue_items=prologue_items.get(p["name"], 0))
                 for p in sorted(pipelines.values(), key=lambda p: p["index"]) if p["name"] in used]
    roles = RoleSpec(roles={role: [int(s) for s in role_slots[role]] for role in role_tags},
                     tid_stride=stride, group_name="cta", tags={r.tag: r.kind for r in regions})
    consumes = [new_names.index(r.tag) for r in regions if "consumes" in r.relations]
    staggered = staggered_warpgroups(warpgroup_columns_of(derived_tag, tid, payload, start, dur),
                                      consumes, stride)
    try:
        spec = PipelineSpec(roles=roles, resources=resources, regions=regions,
                            track_group=WARPS_PER_WARPGROUP if staggered else None)
    except ProfileBufferError as err:
        raise ProfileBufferError(f"the pipeline calls of this trace do not make a model: {err} "
                                 "(pass a spec)") from None
    out = dataclasses.replace(trace, events=new_ev, tag_names=tuple(new_names))
    columns = {"start_ns": start, "dur_ns": dur, "tid": tid, "tag": derived_tag}
    for column in columns.values():
        column.setflags(write=False)
    return DerivedPipeline(trace=out, spec=spec, offsets=offsets, skipped=skipped,
                           record_ns=record_ns, event_columns=(new_ev, columns))


def _first_and_last_calls(site: np.ndarray, ordinal: np.ndarray, first_call: np.ndarray,
                          last_call: np.ndarray) -> np.ndarray:
    """Rows that are a warp's first or last call of a site (``site``: one id per warp and
    site; ``first_call`` / ``last_call``: its least and greatest ordinal): the first row
    with the least ordinal and the last with the greatest, as sorting the rows by (site,
    ordinal) would put them first and last, without the sort."""
    head = np.full(first_call.size, site.size)
    at_first = np.flatnonzero(ordinal == first_call[site])  # positions of the rows
    np.minimum.at(head, site[at_first], at_first)
    tail = np.full(last_call.size, -1)
    at_last = np.flatnonzero(ordinal == last_call[site])
    np.maximum.at(tail, site[at_last], at_last)
    edge = np.zeros(site.size, dtype=bool)
    edge[head[head < site.size]] = True
    edge[tail[tail >= 0]] = True
    return edge


def _mode_per_group(group: np.ndarray, values: np.ndarray,
                    n_groups: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per group in ``range(n_groups)``: the most common of its integer values (ties: the
    least, as ``np.unique`` then ``argmax``), how many rows hold it and how many rows the
    group has. Counted in one ``bincount`` where the values span little, else per group."""
    sizes = np.bincount(group, minlength=n_groups)
    if values.size == 0:
        return np.zeros(n_groups, np.int64), np.zeros(n_groups, np.int64), sizes
    low = int(values.min())
    span = int(values.max()) - low + 1
    if n_groups * span <= 4 * values.size + (1 << 20):
        cell = np.multiply(group, span, dtype=np.int64)  # then, in place: + values - low
        cell += values
        cell -= low
        counts = np.bincount(cell, minlength=n_groups * span).reshape(n_groups, span)
        return counts.argmax(1) + low, counts.max(1), sizes
    mode, agree = np.zeros(n_groups, np.int64), np.zeros(n_groups, np.int64)
    for g, rows in enumerate(rows_by_value(group, n_groups)):
        if rows.size:
            uniq, counts = np.unique(values[rows], return_counts=True)
            mode[g], agree[g] = uniq[counts.argmax()], counts.max()
    return mode, agree, sizes


def _slots_by_signature(pair_tid, pair_tag, loop, stride) -> dict[tuple, list[int]]:
    """Warp slots grouped by the set of loop sites they call (each slot: its most common set
    over the CTAs). Vectorised: a warp's set is a bit mask over the loop's sites."""
    loop = sorted(loop)
    if len(loop) > 62:
        raise ProfileBufferError(f"{len(loop)} pipeline call sites in the loop: the derived "
                                 "model handles up to 62 (pass a spec)")
    in_loop = np.isin(pair_tag, loop)
    tids = pair_tid[in_loop]
    bits = np.left_shift(1, np.searchsorted(loop, pair_tag[in_loop])).astype(np.int64)
    warps, inverse = np.unique(tids, return_inverse=True)
    mask = np.zeros(warps.size, dtype=np.int64)
    np.bitwise_or.at(mask, inverse.reshape(-1), bits)
    slot = warps % stride
    pairs, votes = np.unique(np.stack([slot, mask], 1), axis=0, return_counts=True)
    # per slot, the mask with the most votes (ties: the smallest mask)
    order = np.lexsort((pairs[:, 1], -votes, pairs[:, 0]))
    first = np.r_[True, pairs[order][1:, 0] != pairs[order][:-1, 0]]
    by_signature: dict[tuple, list[int]] = {}
    for slot_id, bitmask in pairs[order][first].tolist():
        sig = tuple(t for i, t in enumerate(loop) if bitmask >> i & 1)
        by_signature.setdefault(sig, []).append(int(slot_id))
    return by_signature


def _check_rings_not_split(tid, tag, sites, loop, stride, names) -> None:
    """Every consumer warpgroup must see every item of a ring (FA4's K and V): a ring whose
    items go to the warpgroups in turn (a ping-pong GEMM's A/B) is not in the model.
    ``tid``, ``tag``: the pipeline calls' rows (any subset holding the loop's calls)."""
    for t in loop:
        site = sites[t]
        if site["op"] != "consumer_wait":
            continue
        acquire = [a for a in loop if sites[a]["op"] == "producer_acquire"
                   and sites[a]["pipeline"] == site["pipeline"]]
        if not acquire:
            continue
        waits = tid[tag == t]
        per_cta = -(-stride // WARPS_PER_WARPGROUP)
        warps, per_warp = unique_ints(waits, return_counts=True)
        group = warps // stride * per_cta + warps % stride // WARPS_PER_WARPGROUP
        most = np.zeros(int(group.max()) + 1, dtype=np.int64)
        np.maximum.at(most, group, per_warp)
        groups = np.unique(group)
        acquired = np.bincount(tid[tag == acquire[0]] // stride,
                               minlength=int(groups.max()) // per_cta + 1)
        share = most[groups] / np.maximum(acquired[groups // per_cta], 1)
        if np.median(share) < 0.75:
            ring = names[t].split(".")[0]
            raise ProfileBufferError(
                f"the items of {ring} go to the consumer warpgroups in turn (each waited for "
                f"{100 * np.median(share):.0f}% of what its CTA's producer loaded: a ping-pong "
                "schedule); the derived model covers rings whose every item every consumer "
                "warpgroup sees (pass a spec)")
