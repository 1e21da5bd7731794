"""What a light recording answers from the producer's waits alone (``producer_acquire``,
``producer_tail``: ``autoprofile(mode="light")``, ``cute-prof record --mode light``):

* **bound by the consumers or not**: the producer's acquire of a slot ends when the consumers
  release it, so a producer blocked much of its time means the consumers hold the loop; one
  rarely blocked means the loads do, or nothing (which of the two needs a full recording);
* **the interval per iteration**: the median spacing of a ring's acquire ends;
* **tiles**: gaps in that spacing much longer than the interval;
* **stragglers**: each CTA's last producer record, and the SMs they ran on.

It reads a full recording's producer records the same way, so both modes compare directly.
It owns these light verdicts; it may not import the exporters, and it builds no pipeline
model (:mod:`.derived_pipeline` does).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..trace import Trace
from .grouping import tags_in
from .zero_edit import autoprof_metadata

__all__ = ["CONSUMER_BOUND_SHARE", "TILE_GAP_FACTOR", "light_verdicts", "format_light_verdicts"]

# judged share (the producer's blocked share on a ring, times the rings it waits on in turn)
# from which the ring counts as held by its consumers: waits.bound_kind's threshold. Rings
# a producer acquires in lockstep (the same warps, the same interval within one timer tick:
# FA4's K and V) are judged by at least their summed share: its wait for whichever slot frees last
# paces them all, and light recording at full speed puts nearly all of it on one of them
CONSUMER_BOUND_SHARE = 0.5
LOCKSTEP_NS = 32
# a gap between consecutive acquire ends this many intervals long starts a new tile
TILE_GAP_FACTOR = 4.0
# CTAs listed as stragglers: those whose producer finished last, at most this many
STRAGGLERS_LISTED = 5


def _ring_tags(trace: Trace) -> tuple[dict[str, list[int]], list[int]]:
    """``({ring: its producer_acquire tag ids}, producer_tail tag ids)`` by tag name."""
    meta = autoprof_metadata(trace)
    ring_names = {int(p["index"]): p["name"] for p in meta.get("pipelines", [])}
    by_name = {name: tag for tag, name in enumerate(trace.tag_names or ())}
    acquires: dict[str, list[int]] = {}
    tails = []
    for site in meta.get("sites", []):
        tag = by_name.get(site["name"])
        if tag is None or site.get("pipeline") is None:
            continue
        ring = ring_names.get(int(site["pipeline"]), f"pipeline{site['pipeline']}")
        if site["op"] == "producer_acquire":
            acquires.setdefault(ring, []).append(tag)
        elif site["op"] == "producer_tail":
            tails.append(tag)
    return acquires, tails


def light_verdicts(trace: Trace) -> dict[str, Any]:
    """Per ring the producer acquires: its blocked share (and judged share), bound
    (``"consumers"`` or ``"loads or balanced"``), interval per iteration (ns), tiles per
    producer warp; and the launch's stragglers. Reads only producer records, so a full
    trace gives what a light one of the same launch would."""
    acquires, tails = _ring_tags(trace)
    ev = trace.events
    if not acquires or ev.shape[0] == 0:
        return {"rings": [], "stragglers": {}}
    tid = ev["tid"].astype(np.int64)
    start = ev["start_ns"].astype(np.int64)
    end = start + ev["dur_ns"].astype(np.int64)
    all_acquires = np.flatnonzero(tags_in(ev["tag"].astype(np.int64),
                                          np.array(sum(acquires.values(), []), dtype=np.int64)))
    producer_rows = np.flatnonzero(tags_in(ev["tag"].astype(np.int64), np.array(
        sum(acquires.values(), []) + tails, dtype=np.int64)))
    warps, warp_of = np.unique(tid[producer_rows], return_inverse=True)
    first = np.full(warps.size, np.iinfo(np.int64).max)
    last = np.zeros(warps.size, dtype=np.int64)
    np.minimum.at(first, warp_of, start[producer_rows])
    np.maximum.at(last, warp_of, end[producer_rows])
    window = (last - first).astype(np.float64)
    rings_per_warp = np.zeros(warps.size, dtype=np.int64)
    rows_of = {}
    for ring, tags in acquires.items():
        rows = all_acquires[tags_in(ev["tag"][all_acquires].astype(np.int64),
                                    np.array(tags, dtype=np.int64))]
        rows_of[ring] = rows
        waiting = np.zeros(warps.size, dtype=bool)
        waiting[np.searchsorted(warps, tid[rows])] = True
        rings_per_warp += waiting
    out = []
    for ring, rows in rows_of.items():
        if rows.size == 0:
            continue
        index = np.searchsorted(warps, tid[rows])
        mine = np.unique(index)
        share = float(ev["dur_ns"][rows].astype(np.float64).sum() / max(window[mine].sum(), 1.0))
        rings = int(rings_per_warp[mine].max())
        judged = share * rings
        # spacing of acquire ends, per warp in time order
        order = np.lexsort((end[rows], index))
        same = index[order][1:] == index[order][:-1]
        gaps = np.diff(end[rows][order])[same]
        interval = float(np.median(gaps)) if gaps.size else None  # one acquire per warp
        new_tile = gaps > TILE_GAP_FACTOR * interval if interval else np.zeros(gaps.size, bool)
        tiles = (np.bincount(index[order][1:][same][new_tile], minlength=warps.size)[mine] + 1
                 if gaps.size else np.ones(mine.size, dtype=np.int64))
        out.append({
            "ring": ring, "producer_warps": int(mine.size), "acquires": int(rows.size),
            "producer_wait": share, "producer_rings": rings, "judged_wait": judged,
            "interval_ns": interval, "tiles_per_warp_median": float(np.median(tiles)),
            "lockstep": [], "_warps": tuple(mine.tolist()),
        })
    for row in out:
        if row["interval_ns"] is None:
            continue
        together = [o for o in out if o["_warps"] == row["_warps"] and o["interval_ns"] is not None
                    and abs(o["interval_ns"] - row["interval_ns"]) <= LOCKSTEP_NS]
        if len(together) > 1:
            row["lockstep"] = sorted(o["ring"] for o in together if o is not row)
            row["judged_wait"] = max(row["judged_wait"], sum(o["producer_wait"] for o in together))
    for row in out:
        del row["_warps"]
        row["bound_by"] = ("consumers" if row["judged_wait"] >= CONSUMER_BOUND_SHARE
                           else "loads or balanced")
    return {"rings": out, "stragglers": _stragglers(trace, tid[producer_rows], end[producer_rows])}


def _stragglers(trace: Trace, tid: np.ndarray, end: np.ndarray) -> dict[str, Any]:
    """Each CTA's last producer record: the latest CTAs and their SMs, against the median."""
    stride = int(autoprof_metadata(trace).get("warps_per_cta") or 1)
    cta = tid // stride
    ctas, of = np.unique(cta, return_inverse=True)
    cta_end = np.zeros(ctas.size, dtype=np.int64)
    np.maximum.at(cta_end, of, end)
    median = float(np.median(cta_end))
    latest = np.argsort(cta_end)[::-1][:STRAGGLERS_LISTED]
    rows = np.flatnonzero(np.isin(trace.events["tid"].astype(np.int64) // stride, ctas[latest]))
    found, first = np.unique(trace.events["tid"][rows].astype(np.int64) // stride, return_index=True)
    sm_of = dict(zip(found.tolist(), trace.events["sm"][rows[first]].tolist()))
    return {"ctas": int(ctas.size),
            "last": [{"cta": int(ctas[i]), "sm": sm_of.get(int(ctas[i])),
                      "after_median_ns": float(cta_end[i] - median)} for i in latest],
            "spread_ns": float(cta_end.max() - cta_end.min()) if ctas.size else 0.0}


def format_light_verdicts(result: dict[str, Any]) -> str:
    lines = []
    for row in result["rings"]:
        said = ("bound by the consumers (the ring stays full: the producer waits for released "
                "slots)" if row["bound_by"] == "consumers" else
                "not held by the consumers (the producer rarely waits): bound by the loads, "
                "or balanced; a full recording tells which")
        pace = (f"one iteration every {row['interval_ns']:.0f} ns, "
                f"{row['tiles_per_warp_median']:.0f} tile(s) per producer warp"
                if row["interval_ns"] is not None else "one acquire per producer warp")
        with_ = (f", {row['judged_wait']:.0%} with {', '.join(row['lockstep'])} (in lockstep)"
                 if row["lockstep"] else "")
        lines.append(f"{row['ring']}: producer blocked {row['producer_wait']:.0%} of its time "
                     f"(on {row['producer_rings']} ring(s){with_}): {said}; {pace}")
    late = result.get("stragglers") or {}
    if late.get("last"):
        worst = ", ".join(f"CTA {c['cta']} (SM {c['sm']}, +{c['after_median_ns'] / 1e3:.1f} us)"
                          for c in late["last"])
        lines.append(f"last CTAs of {late['ctas']} (their producer's last record after the "
                     f"median CTA's): {worst}")
    return "\n".join(lines)
