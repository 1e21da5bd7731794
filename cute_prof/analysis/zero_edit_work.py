"""What a zero-edit trace's warps did between their pipeline calls, and which side of each ring
waited.

A zero-edit trace records the waits (regions) and the signals (instants) of every pipeline
call, so a consumer's track is blank while it computes. The work is there all the same: a
consumer holds item k of ring R from the end of its ``consumer_wait`` of k to its
``consumer_release`` of k, and a producer fills it from the end of its ``producer_acquire``
of k to its ``producer_commit`` of k. This module derives those regions
(:func:`work_regions`), adds them to a trace for the exporters and the report
(:func:`with_work_regions`, marked as derived by their names and by
``trace.metadata["derived_tags"]``), and reads per ring who waited on whom
(:func:`ring_waits`, :func:`ring_verdicts`, in the words of :func:`.waits.bound_verdict`).

It owns the derived work regions and the per-ring verdict; it may not build a pipeline model
(:mod:`.derived_pipeline` does), and may not import the exporters.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from .. import layout
from ..trace import EVENT_DTYPE, Trace
from .grouping import tags_in, unique_ints
from .waits import bound_kind, bound_verdict
from .zero_edit import role_windows, zero_edit_roles

__all__ = ["DERIVED_SUFFIX", "DERIVED_TAGS_KEY", "is_derived_tag", "derived_tag_ids",
           "work_regions", "with_work_regions", "ring_waits", "ring_verdicts",
           "ring_headline"]

# every derived tag's name ends so: each exporter shows it as it shows any name, and a reader
# of a file (a .pftrace keeps no metadata a reader could act on) still tells it apart
DERIVED_SUFFIX = " (derived)"
# trace.metadata key: the names of the tags a trace holds that were derived, not recorded
DERIVED_TAGS_KEY = "derived_tags"

# (side, opens a held item) of each pipeline call: the consumer holds an item from its wait's
# end to its release, the producer from its acquire's end to its commit
_CALLS = {"consumer_wait": ("consumer", True), "consumer_release": ("consumer", False),
          "producer_acquire": ("producer", True), "producer_commit": ("producer", False)}
SIDES = ("consumer", "producer")


def is_derived_tag(name: str) -> bool:
    """Whether a tag name is that of a derived region (not a recorded one)."""
    return str(name).endswith(DERIVED_SUFFIX)


def derived_tag_ids(trace: Trace) -> np.ndarray:
    """The tag ids of ``trace`` whose regions were derived (by name, so also in a trace read
    back from a file that kept no metadata)."""
    return np.array([t for t, name in enumerate(trace.tag_names or ()) if is_derived_tag(name)],
                    dtype=np.int64)


def work_tag_name(ring: str, side: str) -> str:
    """``pipeline_k.consumer_work (derived)``: ring, side, and the mark."""
    return f"{ring}.{side}_work{DERIVED_SUFFIX}"


def _call_tables(trace: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """Per tag id of ``trace``: its ring (index into the returned ring names, -1: not a
    pipeline call that opens or closes a held item), its side (index into ``SIDES``) and
    whether it opens the item. Tags are matched by name, so a derived trace's
    ``<tag>@prologue`` / ``@epilogue`` calls count as their site's."""
    meta = (trace.metadata or {}).get("autoprof") or {}
    sites = {s["name"]: s for s in meta.get("sites", [])}
    ring_names = {int(p["index"]): p["name"] for p in meta.get("pipelines", [])}
    names = list(trace.tag_names or ())
    ring = np.full(len(names) + 1, -1, dtype=np.int64)
    side = np.zeros(len(names) + 1, dtype=np.int64)
    opens = np.zeros(len(names) + 1, dtype=bool)
    rings: list[str] = []
    for tag, name in enumerate(names):
        site = sites.get(name.split("@")[0])
        if not site or site.get("op") not in _CALLS or site.get("pipeline") is None:
            continue
        ring_name = ring_names.get(int(site["pipeline"]), f"pipeline{site['pipeline']}")
        if ring_name not in rings:
            rings.append(ring_name)
        call_side, call_opens = _CALLS[site["op"]]
        ring[tag], side[tag], opens[tag] = rings.index(ring_name), SIDES.index(call_side), call_opens
    return ring, side, opens, rings


def work_regions(trace: Trace) -> tuple[np.ndarray, list[str]]:
    """The derived work regions of a zero-edit trace: ``(events, tag names)``, the events in
    the trace's record layout with tag ids indexing the names given (append them to
    ``trace.tag_names`` past its own, as :func:`with_work_regions` does).

    Per warp (and launch), ring and side, the k-th call that opens an item (``consumer_wait``
    / ``producer_acquire``, any of the ring's sites, in time order) pairs with the k-th that
    closes one (``consumer_release`` / ``producer_commit``), as ``derive_pipeline`` numbers
    calls. Each pair gives a region from the opening call's end to the closing call's stamp,
    tag ``<ring>.<side>_work (derived)``, payload k (the item's iteration). A pair whose close
    comes before its open's end (a lost record shifted the numbering) gives none; a warp
    that made no pipeline call gets none."""
    ev = trace.events
    ring_of, side_of, opens_of, rings = _call_tables(trace)
    empty = np.zeros(0, dtype=EVENT_DTYPE)
    if not rings or ev.shape[0] == 0:
        return empty, []
    tag = np.ascontiguousarray(ev["tag"])
    rows = np.flatnonzero(tags_in(tag, np.flatnonzero(ring_of >= 0)))
    if rows.size == 0:
        return empty, []
    tag = tag[rows].astype(np.int64)
    tid = ev["tid"][rows].astype(np.int64)
    launch = ev["launch"][rows].astype(np.int64)
    start = ev["start_ns"][rows].astype(np.int64)
    # a warp: one (launch, tid); a stream: one warp's calls on one ring's side
    tid_low, launch_low = int(tid.min()), int(launch.min())
    warp_key = (launch - launch_low) * (int(tid.max()) - tid_low + 1) + (tid - tid_low)
    _, warp = unique_ints(warp_key, return_inverse=True)
    stream = (warp.reshape(-1) * len(rings) + ring_of[tag]) * len(SIDES) + side_of[tag]
    opens = opens_of[tag]
    group = stream * 2 + opens
    order = np.lexsort((start, group))
    sorted_group = group[order]
    first = np.r_[True, sorted_group[1:] != sorted_group[:-1]]
    ordinal_sorted = np.arange(order.size) - np.flatnonzero(first)[np.cumsum(first) - 1]
    ordinal = np.empty(order.size, dtype=np.int64)
    ordinal[order] = ordinal_sorted
    # the moment each call opens (its wait's end) or closes (its stamp) an item
    moment = start + np.where(opens, ev["dur_ns"][rows].astype(np.int64), 0)
    span = int(ordinal.max()) + 1
    item = stream * span + ordinal
    opening, closing = np.flatnonzero(opens), np.flatnonzero(~opens)
    by_item = opening[np.argsort(item[opening], kind="stable")]
    where = np.searchsorted(item[by_item], item[closing])
    found = where < by_item.size
    found[found] = item[by_item[where[found]]] == item[closing[found]]
    close = closing[found]
    opened = by_item[where[found]]
    ends = moment[close]
    begins = moment[opened]
    keep = ends >= begins
    close, begins, ends = close[keep], begins[keep], ends[keep]
    # tag per (ring, side), numbered in the order the names are listed
    pair = ring_of[tag[close]] * len(SIDES) + side_of[tag[close]]
    present = np.bincount(pair, minlength=len(rings) * len(SIDES)) > 0
    used, new_tag = np.flatnonzero(present), (np.cumsum(present) - 1)[pair]
    names = [work_tag_name(rings[p // len(SIDES)], SIDES[p % len(SIDES)]) for p in used.tolist()]
    out = np.zeros(close.size, dtype=EVENT_DTYPE)
    out["start_ns"] = begins
    out["dur_ns"] = ends - begins
    out["tag"] = new_tag
    source = rows[close]
    for field in ("tid", "sm", "warp", "launch"):  # a column at a time: a record gather is slow
        out[field] = ev[field][source]
    out["payload"] = ordinal[close]
    out["kind"] = layout.KIND_SPAN
    out["dur_cycles"] = -1
    out["slot"] = -1  # in no buffer slot: derived on the host
    order_out = np.argsort(out["start_ns"], kind="stable")
    return out[order_out], names


def with_work_regions(trace: Trace) -> Trace:
    """``trace`` with its derived work regions (:func:`work_regions`) appended after its
    recorded rows, which keep their row numbers (flow arrows index them), their tag names
    added, and ``metadata["derived_tags"]`` listing them. The trace itself where it is no
    zero-edit trace, holds none, or has them already (its metadata says so, or, read back
    from a file that kept no metadata, a tag's name does)."""
    metadata = trace.metadata or {}
    if not metadata.get("autoprof") or DERIVED_TAGS_KEY in metadata \
            or derived_tag_ids(trace).size:
        return trace
    regions, names = work_regions(trace)
    if not names:
        return trace
    tag_names = list(trace.tag_names or ())
    ids = []
    for name in names:
        if name not in tag_names:
            tag_names.append(name)
        ids.append(tag_names.index(name))
    regions["tag"] = np.asarray(ids, dtype=np.int64)[regions["tag"]]
    events = np.concatenate([trace.events, regions.astype(trace.events.dtype)])
    return dataclasses.replace(trace, events=events, tag_names=tuple(tag_names),
                               metadata={**metadata, DERIVED_TAGS_KEY: names})


# --------------------------------------------------------------------- who waited, per ring
def ring_waits(trace: Trace) -> list[dict[str, Any]]:
    """Per ring that both a producer and a consumer called: which roles fill and drain it,
    and the share of their time they were blocked on it: ``producer_wait`` (their
    ``producer_acquire`` of it: waiting for empty stages) and ``consumer_wait`` (their
    ``consumer_wait``: waiting for full ones), each over the windows (first to last record)
    of the warps of the roles on that side; ``producer_rings`` / ``consumer_rings``: on how
    many rings that side waits; ``bound_by``: what the ring is bound by
    (:func:`.waits.bound_kind`: ``consumers``, ``producer`` (its loads), ``both`` or
    ``balanced``)."""
    spec = zero_edit_roles(trace)
    ring_of, side_of, opens_of, rings = _call_tables(trace)
    ev = trace.events
    if not rings or ev.shape[0] == 0:
        return []
    warps, window, warp_role = role_windows(trace, spec)
    n_roles = len(spec.role_names) + 1  # the last: warps of no role
    warp_role = np.where(warp_role < 0, n_roles - 1, warp_role)
    tag = np.ascontiguousarray(ev["tag"]).astype(np.int64)
    # waits and acquires: the calls that block
    calls = np.flatnonzero(tags_in(tag, np.flatnonzero((ring_of >= 0) & opens_of)))
    row_role = warp_role[np.searchsorted(warps, ev["tid"][calls].astype(np.int64))]
    cell = (ring_of[tag[calls]] * len(SIDES) + side_of[tag[calls]]) * n_roles + row_role
    size = len(rings) * len(SIDES) * n_roles
    blocked = np.bincount(cell, weights=ev["dur_ns"][calls].astype(np.float64), minlength=size)
    made = np.bincount(cell, minlength=size).reshape(len(rings), len(SIDES), n_roles) > 0
    blocked = blocked.reshape(len(rings), len(SIDES), n_roles)
    role_window = np.bincount(warp_role, weights=window.astype(np.float64), minlength=n_roles)
    names = [*spec.role_names, "unassigned"]
    depth = {p["name"]: int(p["stages"]) for p in trace.metadata["autoprof"].get("pipelines", [])}
    sides_waiting = made.any(axis=2).sum(axis=0)  # per side: rings it waits on
    out = []
    for r, ring in enumerate(rings):
        producers, consumers = made[r, 1], made[r, 0]
        if not (producers.any() and consumers.any()):
            continue

        def share(side: int, roles: np.ndarray) -> float:
            total = role_window[roles].sum()
            return float(blocked[r, side, roles].sum() / total) if total > 0 else 0.0

        out.append({"ring": ring, "stages": depth.get(ring),
                    "producers": [names[i] for i in np.flatnonzero(producers)],
                    "consumers": [names[i] for i in np.flatnonzero(consumers)],
                    "producer_wait": share(1, producers), "consumer_wait": share(0, consumers),
                    "producer_rings": int(sides_waiting[1]),
                    "consumer_rings": int(sides_waiting[0])})
        out[-1]["bound_by"] = bound_kind(out[-1]["producer_wait"], out[-1]["consumer_wait"],
                                         (out[-1]["producer_rings"], out[-1]["consumer_rings"]))
    return out


def ring_verdicts(rows: list[dict[str, Any]]) -> list[str]:
    """One sentence per ring of :func:`ring_waits` (``rows``): which ring, its stages, who fills and
    drains it, the shares of time each side waited on it, and whether it is bound by its
    loads or by its consumers, in the words of the hand-placed verdict
    (:func:`.waits.bound_verdict`). A side that waits on n rings in turn can spend about
    1/n of its time on each, so each ring is judged against the thresholds over n."""
    out = []
    for row in rows:
        stages = (f"{row['stages']} stage{'s' if row['stages'] != 1 else ''}; "
                  if row["stages"] else "")
        head = (f"{row['ring']} ({stages}filled by {', '.join(row['producers'])}, drained by "
                f"{', '.join(row['consumers'])})")
        verdict = bound_verdict("producer", "consumer", row["producer_wait"],
                                row["consumer_wait"], subject="the ring",
                                rings=(row["producer_rings"], row["consumer_rings"]))
        out.append(f"{head}: {verdict}")
    return out


def ring_headline(rows: list[dict[str, Any]]) -> str:
    """The rings of :func:`ring_waits` grouped by what bounds them, in one line:
    ``pipeline_k, pipeline_v: bound by the consumers; pipeline_q: balanced``."""
    said = {"consumers": "bound by the consumers", "producer": "bound by the loads (producer)",
            "both": "too shallow (both sides wait)", "balanced": "balanced"}
    groups: dict[str, list[str]] = {}
    for row in rows:
        groups.setdefault(row["bound_by"], []).append(row["ring"])
    return "; ".join(f"{', '.join(rings)}: {said[kind]}" for kind, rings in groups.items())
