"""The pipeline model's report: every stage run over one trace and aggregated into a
JSON-ready dict (:func:`analyze_pipeline`), its text (:func:`format_pipeline_report`) and
the flows, counters and critical rows the exporters draw (:func:`perfetto_outputs`).

It owns :func:`analyze_pipeline`, :func:`format_pipeline_report` and
:func:`perfetto_outputs`. It aggregates and formats what the stages compute, and may not
hold the model's arithmetic: that stays in them.
"""

from __future__ import annotations

import numpy as np

from ..trace import Trace
from .critical_path import blockers, critical_path, initiation_interval, ring_occupancy
from .model import PipelineSpec
from .pipeline_data import match_records, timer_step
from .replay import replay
from .replay_terms import infer_terms
from .what_if import latency_sensitivity, pool_predictions, predict_what_if, what_if

__all__ = ["analyze_pipeline", "perfetto_outputs", "format_pipeline_report"]


def analyze_pipeline(trace: Trace, spec: PipelineSpec, *, worst: int = 5,
                     what_ifs: list[dict] | None = None,
                     first_load: np.ndarray | None = None, record_ns: float | None = None,
                     arrivals: dict | None = None, recorder_cost: float = 0.0,
                     release_sample: dict | None = None, alike: list[dict] = (),
                     sensitivity: bool = False) -> dict:
    """Everything above for every unit, aggregated (JSON-ready). With ``first_load``,
    ``record_ns``, ``arrivals``, ``recorder_cost`` or ``release_sample`` (a derived model:
    ``DerivedPipeline.what_if_terms``) each what-if is :func:`predict_what_if`'s, the
    prediction the what-if check (``bench/whatif.py check``) sets against the GPU: loaded
    latency, the kernel without recording, and an interval; else the plain replay of
    :func:`what_if`.
    ``alike``: the ``arrivals`` and ``release_sample`` of other probed launches that ran
    like the one given (``load_arrivals.probed_launches_like``): each what-if is then the
    pooled prediction from all of them (:func:`pool_predictions`). ``sensitivity`` (with
    ``arrivals``): each what-if also says how far it moves per timer tick of load latency
    (:func:`latency_sensitivity`: two more replays for each what-if; their time is in
    bench/results/analysis_speed/)."""
    data = match_records(trace, spec)
    terms = infer_terms(data)
    sched = replay(data, terms=terms, release_sample=release_sample)
    share, lat, _ = critical_path(data, sched)
    units = data.shape[0]
    total = share.sum(1) + lat.sum(1)
    tags = [r.tag for r in spec.regions]
    path = {f"{r.role}:{r.tag}": float(share[:, i].sum() / total.sum())
            for i, r in enumerate(spec.regions)}
    for i, r in enumerate(spec.regions):
        if r.kind == "wait":
            res = next(iter(r.relations.values())).resource
            path[f"latency:{res}->{r.tag}"] = float(lat[:, i].sum() / total.sum())
    span = np.nanmax(data.end.reshape(units, -1), 1) - np.nanmin(data.start.reshape(units, -1), 1)
    med = float(np.median(span))
    worst_units = np.argsort(-span)[:worst]
    occupancy = [ring_occupancy(data, resource=r.name)[0] for r in spec.resources
                 if r.kind == "ring"]
    per_sm = np.bincount(data.unit_sm, span) / np.maximum(np.bincount(data.unit_sm), 1)
    result = {
        "units": units, "iterations": data.shape[1], "regions": tags,
        "records_missing": data.missing, "records_extra": data.extra,
        "units_dropped": int(data.dropped_units.shape[0]),
        "critical_path_share": path,
        "unit_span_ns": {"median": med, "p90": float(np.percentile(span, 90)),
                         "max": float(span.max()), "min": float(span.min())},
        "sm_mean_span_ns": {"min": float(per_sm[per_sm > 0].min()),
                            "max": float(per_sm.max())},
        "worst_units": [{"group": int(data.unit_group[u]), "tile": int(data.unit_tile[u]),
                         "sm": int(data.unit_sm[u]), "span_ns": float(span[u]),
                         "vs_median": float(span[u] / med)} for u in worst_units],
        "blockers": blockers(data, terms),
        "occupancy": occupancy,
        "initiation_interval": initiation_interval(data, terms),
    }
    if what_ifs and first_load is None and record_ns is None and not arrivals\
            and not recorder_cost:
        result["what_if"] = [what_if(data, terms=terms, release_sample=release_sample, **w)
                             for w in what_ifs]
    elif what_ifs:
        result["what_if"] = []
        tick = timer_step(data) if sensitivity and arrivals else None
        for w in what_ifs:
            got = pool_predictions([
                predict_what_if(data, w, terms=terms, first_load=first_load,
                                record_ns=record_ns or 0.0, arrivals=draw["arrivals"],
                                recorder_cost=recorder_cost,
                                release_sample=draw["release_sample"])
                for draw in [{"arrivals": arrivals, "release_sample": release_sample},
                             *alike]])
            if not got["modelled"]:
                result["what_if"].append({"change": w, "modelled": False,
                                          "reason": got["reason"]})
                continue
            # how far the prediction stands on the loads' latency, where loads were sampled
            per_tick = {} if tick is None else {
                "latency_per_tick": latency_sensitivity(
                    data, w, arrivals=arrivals, shift_ns=tick, terms=terms,
                    loaded_latency=True, first_load=first_load, record_ns=record_ns or 0.0,
                    recorder_cost=recorder_cost, release_sample=release_sample),
                "timer_tick_ns": tick}
            # the record time removed from the replay, so a reader sees which estimate it was
            result["what_if"].append({**got["detail"], "predicted_change": got["predicted_change"],
                                      "interval": list(got["interval"]),
                                      "record_ns": float(record_ns or 0.0),
                                      "recorder_cost": float(recorder_cost), **per_tick,
                                      **({"changes_by_probed_launch": got["changes"]}
                                         if "changes" in got else {})})
    return result


def perfetto_outputs(trace: Trace, spec: PipelineSpec, *, max_units: int = 16):
    """(flows, counters, critical_rows) for the exporters' ``flows=`` / ``counters=``
    options: blocker edges (dependency record -> blocked wait record), ring occupancy per
    unit, and the trace rows on each unit's critical path."""
    data = match_records(trace, spec)
    terms = infer_terms(data)
    sched = replay(data, terms=terms)
    _, _, on_path = critical_path(data, sched)
    units, iters, n = data.shape
    src_rows, dst_rows = [], []
    for i, r in enumerate(spec.regions):
        if r.kind != "wait":
            continue
        rel_name = next(iter(r.relations))
        rl = r.relations[rel_name]
        if rel_name == "consumes":
            s, shift = spec.source_region("produces", rl.resource), rl.distance
        else:
            s = spec.source_region("releases", rl.resource)
            shift = spec.resource(rl.resource).depth + rl.distance\
                - spec.regions[s].relations["releases"].distance
        arm = terms[3][:, :, i] + terms[1][:, i][:, None]
        hit = (arm > data.start[:, :, i] + terms[2][i])
        uu, kk = np.nonzero(hit)
        ks = kk - shift
        ks = np.minimum(np.where(ks < 0, ks + iters, ks), iters - 1)  # < 0: previous tile
        ok = ks >= 0
        peer = terms[4][uu, kk, i]
        src_rows.append(data.row[peer[ok], ks[ok], s])
        dst_rows.append(data.row[uu[ok], kk[ok], i])
    src = np.concatenate(src_rows) if src_rows else np.zeros(0, np.int64)
    dst = np.concatenate(dst_rows) if dst_rows else np.zeros(0, np.int64)
    good = (src >= 0) & (dst >= 0)
    flows = np.zeros(int(good.sum()), dtype=[("src", np.int64), ("dst", np.int64)])
    flows["src"], flows["dst"] = src[good], dst[good]
    counters = []
    stride = spec.roles.tid_stride
    first_role = spec.roles.roles[spec.regions[0].role]
    for res in spec.resources:
        if res.kind != "ring":
            continue
        _, u, t, occ = ring_occupancy(data, resource=res.name)
        for unit in range(min(units, max_units)):
            sel = u == unit
            counters.append({"name": f"{res.name} slots held (unit {int(data.unit_group[unit])}"
                                     f" tile {int(data.unit_tile[unit])})",
                             "ts": t[sel].astype(np.int64) + data.origin_ns,
                             "value": occ[sel].astype(np.float64),
                             "tid": int(data.unit_group[unit] * stride + list(first_role)[0])})
    critical_rows = np.unique(data.row[on_path & (data.row >= 0)])
    return flows, counters, critical_rows


def format_pipeline_report(report: dict) -> str:
    """The report of :func:`analyze_pipeline` as text."""
    us = lambda ns: f"{ns / 1e3:.2f} us"  # noqa: E731
    lines = [f"pipeline: {report['units']} units x {report['iterations']} iterations; records "
             f"missing {report['records_missing']}, extra {report['records_extra']}, units "
             f"dropped {report['units_dropped']}",
             "critical path (share of the time, all units):"]
    for name, share in sorted(report["critical_path_share"].items(), key=lambda kv: -kv[1]):
        if share > 0:
            lines.append(f"  {share * 100:6.1f}%  {name}")
    lines.append("blockers (per wait region; margin = how late the event came):")
    for b in report["blockers"]:
        lines.append(f"  {b['role']}:{b['region']} waits on {b['blocked_by']} ({b['resource']}): "
                     f"blocked {b['blocked_fraction'] * 100:.1f}% of {b['instances']}, median "
                     f"margin {b['median_margin_ns']:.0f} ns, slack {b['median_slack_ns']:.0f} ns, "
                     f"latency {b['latency_ns_median']:.0f} ns")
    for o in report["occupancy"]:
        lines.append(f"ring {o['resource']} (depth {o['depth']}): peak {o['peak']}, mean "
                     f"{o['mean']:.2f}, full {o['time_full_fraction'] * 100:.1f}%, empty "
                     f"{o['time_empty_fraction'] * 100:.1f}% of the time")
    ii = report["initiation_interval"]
    lines.append("initiation interval: measured " + ", ".join(
        f"{k} {v:.0f} ns" for k, v in ii["measured_ns"].items()) + "; resource bound " + ", ".join(
        f"{k} {v:.0f} ns" for k, v in ii["resource_bound_ns"].items()) + "; recurrence bound "
        + (", ".join(f"{k} {v:.0f} ns" for k, v in ii["recurrence_bound_ns"].items()) or "-"))
    s = report["unit_span_ns"]
    lines.append(f"unit span: median {us(s['median'])}, p90 {us(s['p90'])}, max {us(s['max'])}")
    lines.append("worst units: " + "; ".join(
        f"cta {w['group']} tile {w['tile']} sm {w['sm']} {us(w['span_ns'])} "
        f"({w['vs_median']:.2f}x)" for w in report["worst_units"]))
    for w in report.get("what_if", []):
        change = {k: v for k, v in w["change"].items() if v}
        if w.get("modelled") is False:
            lines.append(f"what-if {change}: not modelled ({w['reason']})")
            continue
        interval = (f", interval {w['interval'][0] * 100:+.2f}% .. {w['interval'][1] * 100:+.2f}%"
                    if "interval" in w else "")
        pooled = (f"; the median of {' / '.join(f'{c * 100:+.2f}%' for c in w['changes_by_probed_launch'])}"
                  " from the probed launches that ran like the base"
                  if "changes_by_probed_launch" in w else "")
        per_tick = (f"; {w['latency_per_tick'] * 100:.2f} points per {w['timer_tick_ns']:.0f} ns"
                    " of load latency" if "latency_per_tick" in w else "")
        lines.append(f"what-if {change}: kernel {us(w['kernel_ns'])} -> "
                     f"{us(w['predicted_kernel_ns'])} ({w['predicted_change'] * 100:+.2f}%"
                     f"{interval}{pooled}{per_tick})")
    return "\n".join(lines)
