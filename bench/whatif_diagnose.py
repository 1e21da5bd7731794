"""The figures the what-if README's diagnosis cites, from the same GPU output as the check:
each zero-edit base's replay against its measured iteration, and each variant's own trace
(never a model input): how often its consumer's waits blocked and how long its loads took.

    python bench/whatif_diagnose.py GPU_OUT [--out bench/results/whatif/diagnosis.txt]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from cute_prof.analysis import critical_path as cp  # noqa: E402
from cute_prof.analysis.pipelines import (  # noqa: E402
    derive_pipeline, recorded_span_ns, warpgroup_ends)
from tools.pipeline_data import matched  # noqa: E402
from whatif_check import (  # noqa: E402
    ENTRIES, base_recorder_cost, folder_of, paired_change, point_prediction, record_chain,
    recorded_changes, run_variants, traced_change)

# the sensitivity sweeps the README cites: kernel folder -> (what-if, latencies in ns)
SWEEPS = {"gemm_ze": ({"depth": {"ab_pipe": 2}}, (768, 896, 1024, 1140)),
          "quack": ({"depth": {"pipeline_cls": 3}}, (896, 1000, 1056, 1150, 1250))}
# rows whose recorded change is at least this large get the matched record time (a small
# change moves too little with the record's time to pin it), found in this many bisection
# steps (2 x ~50 ns / 2^7: under one ns)
MATCHED_RECORD_MIN_CHANGE = 0.05
MATCHED_RECORD_STEPS = 7


def loads(trace) -> dict:
    """The loop's first consumes wait over the middle half of the iterations."""
    derived, data = matched(trace)
    terms = cp.infer_terms(data)
    w = next(i for i, r in enumerate(derived.spec.regions) if "consumes" in r.relations)
    iters = data.shape[1]
    mid = slice(iters // 4, 3 * iters // 4)
    dep, end = terms[3][:, mid, w], data.end[:, mid, w]
    blocked, _ = cp.blocked_and_free(data, w, terms[2][w], terms[3][:, :, w])
    blocked = blocked[:, mid]
    gap = (end - dep)[np.isfinite(dep)]
    return {"derived": derived, "data": data, "terms": terms, "wait": w,
            "period": float(np.nanmedian(np.diff(data.start[:, mid, w], axis=1))),
            "blocked_share": float(blocked.mean()),
            "blocked_latency": float(np.median((end - dep)[blocked])) if blocked.any() else None,
            "blocked_mean": float(np.mean((end - dep)[blocked])) if blocked.any() else None,
            "fastest": np.quantile(gap, [0.001, 0.01]) if gap.size else None}


def blocked_loads(data, terms, w: int) -> tuple[np.ndarray, np.ndarray]:
    """(U, K) wait ``w``'s end less the event it waited on (its load's issue), and where it
    blocked (``critical_path.blocked_and_free``): the loads' latency as the consumers saw it."""
    dep = terms[3][:, :, w]
    blocked, _ = cp.blocked_and_free(data, w, terms[2][w], dep)
    return data.end[:, :, w] - dep, blocked


def quarters(got: dict) -> str:
    """Per quarter of the loop (a persistent CTA's tiles, roughly): how often the waits
    blocked and the blocked loads' median end - issue: a latency that moves along the launch
    (cold first tile from DRAM, warm later ones) that one latency per unit cannot carry."""
    latency, blocked = blocked_loads(got["data"], got["terms"], got["wait"])
    cells = []
    for part in np.array_split(np.arange(latency.shape[1]), 4):
        b = blocked[:, part]
        lat = latency[:, part][b]
        median = f"{np.median(lat):4.0f}" if lat.size else "   -"
        cells.append(f"{b.mean() * 100:3.0f}% / {median}")
    return " | ".join(cells)


def ring_cycle(spec, start, end, dep) -> str:
    """Median time of each step of every ring's item over the middle half of the loop: the
    producer's wake after the release of the slot (a), its commit's stamp after the acquire
    (p), the load until the consumer's wait ends (L), that wait's end to the item's release
    (r). In a starved ring of depth d, d items take a + p + L + r; ``dep``: the event each
    wait waited on (measured: ``infer_terms``; replayed: the schedule's ``dep_time``)."""
    iters = start.shape[1]
    mid = slice(iters // 4, 3 * iters // 4)
    cells = []
    for res in spec.resources:
        def region(relation):
            return next(i for i, r in enumerate(spec.regions) if relation in r.relations
                        and r.relations[relation].resource == res.name)
        acquire, consume = region("acquires"), region("consumes")
        released = np.full(start.shape[:2], np.nan)  # item k's release: the acquire of k + d
        released[:, :-res.depth] = dep[:, res.depth:, acquire]
        steps = {"a": end[:, :, acquire] - dep[:, :, acquire],
                 "p": dep[:, :, consume] - end[:, :, acquire],
                 "L": end[:, :, consume] - dep[:, :, consume],
                 "r": released - end[:, :, consume]}
        cells.append(f"{res.name} (depth {res.depth}) " + " ".join(
            f"{name} {np.nanmedian(x[:, mid]):.0f}" for name, x in steps.items()))
    return "; ".join(cells)


def recorder_share(folder: Path, entry, trace, data, terms, record_ns: float,
                   replayed: cp.Schedule) -> str:
    """How much the recorder slowed the base: its traced span against its CUPTI median
    (unrecorded), next to what the replay removes when it drops the records' own time. A
    base the replay cannot shed its recorder from is predicted as the recorded kernel.
    ``replayed``: the base's replay with the records' time kept."""
    timings = entry.load_timings(folder)
    cupti = statistics.median(timings[entry.base]) * entry.timings_ns
    units = data.start.shape[0]
    first = np.nanmin(data.start.reshape(units, -1), 1)

    def busy(schedule):  # the units' replayed spans, summed (each unit starts as measured:
        # the kernel's end alone would show only its last units)
        return float(np.nansum(np.nanmax(schedule.end.reshape(units, -1), 1) - first))
    kept, shed = busy(replayed), busy(cp.replay(data, terms=terms, record_ns=record_ns))
    span = recorded_span_ns(trace)
    recorded = timings.get(f"{entry.base}:recorded")
    if recorded:
        cost = statistics.median(recorded) / statistics.median(timings[entry.base]) - 1
        timed = f" (the recording kernel's CUPTI median: {cost * 100:+.1f}%)"
    else:
        timed = ""
    return (f"recorder: traced span {span / 1e3:.2f} us against {cupti / 1e3:.2f} us unrecorded "
            f"(CUPTI): {(span / cupti - 1) * 100:+.1f}%{timed}; the replay without recording "
            f"takes {(1 - shed / kept) * 100:.1f}% off the units' spans")


def measured_changes(folder: Path, entry) -> dict:
    """Each variant's change against the base, as the check reads them (paired by round)."""
    timings = entry.load_timings(folder)
    return {name: paired_change(timings, name, entry.base) for name, t in timings.items()
            if name != entry.base and t}


def exact_latency(data, terms, tags, record_ns, change, target) -> float | None:
    """The fixed load latency at which the replay predicts the measured change (bisection;
    the prediction rises with the latency): set against the variant's own latency, it says
    whether a row's error is the latency's or the recurrence's."""
    def predict(value):
        return cp.what_if(data, terms=terms, latency={t: value for t in tags},
                          record_ns=record_ns, **change)["predicted_change"]
    lo, hi = 0.0, 4000.0
    if not predict(lo) <= target <= predict(hi):
        return None
    for _ in range(14):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if predict(mid) < target else (lo, mid)
    return (lo + hi) / 2


def trailing_release(derived) -> str | None:
    """For a role whose warpgroups run staggered (FA4's two consumer warpgroups): where the
    trailing group releases the first ring's item, after the leading group's first and
    last consumes waits' ends (FA4: K's and V's), median (1st percentile) over the middle
    half of the loop; and the leading group's own release after its last wait (leading:
    the lower warp slots, FA4's first consumer warpgroup). The model keeps the release
    where the base had it after the last wait; a variant whose last wait blocks shows how
    much of that was the leading group's earlier work, still running in the base."""
    spec = derived.spec
    waits = [r for r in spec.regions if "consumes" in r.relations]
    if not spec.track_group or len(waits) < 2:
        return None
    ring = waits[0].relations["consumes"].resource
    release = next(r.tag for r in spec.regions if "releases" in r.relations
                   and r.relations["releases"].resource == ring)
    ev, names = derived.trace.events, list(derived.trace.tag_names)
    stride = int(spec.roles.tid_stride)
    first_wait, last_wait, released = (
        warpgroup_ends(ev, names.index(tag), stride)
        for tag in (waits[0].tag, waits[-1].tag, release))
    lead, trail = first_wait[1].min(), first_wait[1].max()
    keys = first_wait[0][first_wait[1] == lead]
    payload = keys % (int(ev["payload"].max()) + 1)
    iteration = payload % spec.tile_modulo if spec.tile_modulo else payload
    middle = (iteration >= iteration.max() // 4) & (iteration < 3 * iteration.max() // 4)

    def at(ends, group):  # each of ``keys``' end in ``group``, ns after the first key's
        mine = ends[1] == group
        item, end = ends[0][mine], ends[2][mine]
        pos = np.clip(np.searchsorted(item, keys), 0, item.size - 1)
        return np.where(item[pos] == keys, (end[pos] - ev["start_ns"].min()).astype(float),
                        np.nan)

    k1, e1 = at(first_wait, lead), at(last_wait, lead)
    t2, r1 = at(released, trail), at(released, lead)

    def cell(x):
        x = x[middle & np.isfinite(x)]
        return f"{np.median(x):.0f} ({np.quantile(x, 0.01):.0f})" if x.size else "-"
    return (f"{release} by the trailing warpgroup after the leading one's {waits[-1].tag} "
            f"ends {cell(t2 - e1)} ns, after its {waits[0].tag} ends {cell(t2 - k1)}; the "
            f"leading one's own {cell(r1 - e1)} after its {waits[-1].tag}")


def recorder_split(folder: Path, entry, raw, variants: dict, data, model_terms: dict,
                   gap_ns: float) -> list[str]:
    """Each variant's error split in two: the model of the recorded kernel (record_ns 0)
    against the recorded kernel's change, and the recorder's cost in the variant against the
    cost the model takes off it (its unrecorded and recorded predictions, from the base's
    measured cost, which ``recorder_share`` prints). Measured: the recording kernels' CUPTI
    medians where the GPU half timed them (``whatif_check.recorded_changes``), else each
    variant's traced span (one launch) against the base trace's and the CUPTI median;
    ``variants``: the entry's, as the model takes them (``whatif_check.run_variants``)."""
    timings = entry.load_timings(folder)
    cupti = {name: statistics.median(t) * entry.timings_ns for name, t in timings.items() if t}
    lines = []
    for name, change in variants.items():
        path = folder / (entry.variant_trace or "").format(variant=name)
        if not isinstance(change, dict) or name not in cupti:
            continue
        timed = recorded_changes(timings, entry.base, name)
        if timed:
            traced, base_cost = timed["measured_recorded"], 1 + timed["recorder_cost_base"]
            cost, source = timed["recorder_cost_variant"], "timed"
        elif entry.variant_trace and path.exists():
            traced, base_cost = traced_change(folder, entry, name, raw), \
                recorded_span_ns(raw) / cupti[entry.base]
            cost, source = recorded_span_ns(entry.load(path)) / cupti[name] - 1, "traced"
        else:
            continue
        recorded = point_prediction(data, model_terms, change, record_ns=0.0)
        unrecorded = point_prediction(data, model_terms, change,
                                      record_ns=model_terms["record_ns"],
                                      recorder_cost=model_terms["recorder_cost"])
        model_cost = (1 + recorded) / (1 + unrecorded) * base_cost
        lines.append(
            f"  {name:16s} recorded kernel: predicted {recorded * 100:+.2f}%, {source} "
            f"{traced * 100:+.2f}% (error {(recorded - traced) * 100:+.2f} pp); recorder's cost "
            f"in the variant {cost * 100:+.1f}%, the model's {(model_cost - 1) * 100:+.1f}%")
        if abs(recorded) >= MATCHED_RECORD_MIN_CHANGE:
            matched = matched_record_ns(data, model_terms, change, recorded, base_cost, cost,
                                        gap_ns)
            lines.append(
                f"  {'':16s} one record's time at which the model's recorder cost is the "
                f"measured one: " + ("none in [0, 2 x the gap estimate]" if matched is None else
                                     f"{matched:.1f} ns ({matched / gap_ns:.2f} of the gap "
                                     f"estimate {gap_ns:.1f} ns; the model removes "
                                     f"{model_terms['record_ns']:.1f})"))
    return lines


def matched_record_ns(data, model_terms: dict, change: dict, recorded: float,
                      base_cost: float, measured_cost: float, gap_ns: float) -> float | None:
    """The record time whose removal makes the model's recorder cost in the variant equal the
    measured one (bisection: removing more shortens the unrecorded replay, which raises the
    cost), or None where [0, 2 x the trace's gap estimate] does not bracket it. Set against
    ``bench/results/record_cost/chain.md`` (one record on a dependency chain) it says how
    much of the instant -> next stamp gap a starved ring really pays per record."""
    def model_cost(record_ns):
        unrecorded = point_prediction(data, model_terms, change, record_ns=record_ns)
        return (1 + recorded) / (1 + unrecorded) * base_cost - 1
    lo, hi = 0.0, 2.0 * gap_ns
    if not model_cost(lo) <= measured_cost <= model_cost(hi):
        return None
    for _ in range(MATCHED_RECORD_STEPS):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if model_cost(mid) < measured_cost else (lo, mid)
    return (lo + hi) / 2


def describe(name: str, got: dict) -> str:
    fast = got["fastest"]
    lat = "-" if got["blocked_latency"] is None else \
        f"{got['blocked_latency']:.0f} ns (mean {got['blocked_mean']:.0f})"
    return (f"  {name:16s} period {got['period']:6.0f} ns, waits blocked "
            f"{got['blocked_share'] * 100:5.1f}%, blocked loads (end - issue, median) {lat}, "
            f"fastest loads p0.1 / p1 "
            + ("-" if fast is None else f"{fast[0]:.0f} / {fast[1]:.0f} ns"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("gpu_out", type=Path)
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/whatif/diagnosis.txt")
    args = ap.parse_args(argv)
    lines = [f"# {__doc__.splitlines()[0]}",
             f"# python bench/whatif_diagnose.py {args.gpu_out}", ""]
    chain_ns, chain_source = record_chain(args.gpu_out)
    lines.append("# one record on a dependency chain: "
                 + (f"{chain_ns:.1f} ns ({chain_source})" if chain_ns is not None
                    else chain_source) + "; the model removes it per record")
    lines.append("")
    for entry in [e for e in ENTRIES if e.derived]:
        folder = folder_of(args.gpu_out, entry)
        if folder is None:
            continue
        base_trace = entry.load(folder / entry.trace)
        variants = run_variants(entry, base_trace, folder)
        base = loads(base_trace)
        data, terms = base["data"], base["terms"]
        replayed = cp.replay(data, terms=terms)
        w, iters = base["wait"], data.shape[1]
        mid = slice(iters // 4, 3 * iters // 4)
        fidelity = cp.what_if(data, terms=terms)["replay_error_median"]
        period = np.nanmedian(np.diff(replayed.start[:, mid, w], axis=1))
        lines += [f"{entry.kernel} ({entry.folder})",
                  f"  base replay: {period:.0f} ns "
                  f"per iteration (measured {base['period']:.0f}), kernel end off by "
                  f"{fidelity * 100:+.1f}%; one record's gap estimate "
                  f"{base['derived'].record_ns:.0f} ns",
                  describe("base", base)]
        lines.append(f"  {'':16s} per loop quarter, waits blocked / blocked loads' median (ns): "
                     f"{quarters(base)}")
        measured = measured_changes(folder, entry)
        consumes = [r.tag for r in data.spec.regions if "consumes" in r.relations]
        # the record time the model removes: the chain's where measured, else the gap
        record_ns = chain_ns if chain_ns is not None else base["derived"].record_ns
        lines.append("  " + recorder_share(folder, entry, base_trace, data, terms, record_ns,
                                           replayed))
        probed = folder / entry.arrivals_trace if entry.arrivals_trace else None
        model_terms = base["derived"].what_if_terms(
            arrivals_from=entry.load(probed) if probed and probed.exists() else None,
            record_chain_ns=chain_ns,
            recorder_cost=base_recorder_cost(entry.load_timings(folder), entry.base))
        lines += recorder_split(folder, entry, base_trace, variants, data, model_terms,
                                base["derived"].record_ns)
        lag = trailing_release(base["derived"])
        if lag:
            lines.append(f"  {'base':16s} {lag}")
        for name, change in variants.items():
            path = folder / (entry.variant_trace or "").format(variant=name)
            if not (entry.variant_trace and path.exists()):
                continue
            got = loads(entry.load(path))
            lag = trailing_release(got["derived"])
            lines += [describe(name, got)] + ([f"  {name:16s} {lag}"] if lag else []) + [
                      f"  {'':16s} per loop quarter, waits blocked / blocked loads' median (ns): "
                      f"{quarters(got)}"]
            if isinstance(change, dict) and got["blocked_latency"] is not None \
                    and name in measured:
                own = got["blocked_latency"]
                at_own = cp.what_if(data, terms=terms, latency={t: own for t in consumes},
                                    record_ns=record_ns, **change)["predicted_change"]
                exact = exact_latency(data, terms, consumes, record_ns, change, measured[name])
                tags = [r.tag for r in data.spec.regions]
                own_terms = terms
                for tag in consumes:
                    own_terms = cp.with_latency(own_terms, tags.index(tag), own)
                # record_ns 0: the recorded kernel, as the variant's own trace ran (the
                # ring's cycle: the spec's part of the change, not the launch gap's)
                changed_spec = data.spec.with_changes(depth=change.get("depth"),
                                                      shared_by=change.get("shared_by"))
                changed_replay = cp.replay(data, changed_spec, terms=own_terms)
                lines += [
                    f"  {'':16s} ring cycle, measured: " + ring_cycle(
                        got["data"].spec, got["data"].start, got["data"].end, got["terms"][3]),
                    f"  {'':16s} replayed from the base at that latency (recorded): "
                    + ring_cycle(changed_spec, changed_replay.start, changed_replay.end,
                                 changed_replay.dep_time)]
                lines.append(
                    f"  {'':16s} measured {measured[name] * 100:+.2f}%; the model at the "
                    f"variant's own latency ({own:.0f} ns) {at_own * 100:+.2f}%; exact at "
                    + ("-" if exact is None else f"{exact:.0f} ns"))
        if entry.folder in SWEEPS:
            change, latencies = SWEEPS[entry.folder]
            tag = data.spec.regions[w].tag
            sweep = [cp.what_if(data, terms=terms, latency={tag: value},
                                record_ns=record_ns, **change)["predicted_change"]
                     for value in latencies]
            lines.append(f"  {change} at a fixed load latency: " + ", ".join(
                f"{value} ns {p * 100:+.2f}%" for value, p in zip(latencies, sweep)))
        if base_trace.metadata.get("cluster"):
            no_cluster = base_trace.metadata.copy()
            no_cluster.pop("cluster")
            bare = derive_pipeline(type(base_trace)(**{**base_trace.__dict__,
                                                       "metadata": no_cluster}))
            first_change = next(c for c in variants.values() if isinstance(c, dict))
            got = cp.predict_what_if(cp.match_records(bare.trace, bare.spec), first_change,
                                     **bare.what_if_terms())
            lines.append(f"  without the launch's cluster in the metadata, {first_change}: "
                         f"{got['predicted_change'] * 100:+.2f}%")
        lines.append("")
    text = "\n".join(lines)
    print(text)
    args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
