"""The variants' own traces set against their base's, for the rows the what-if model misses:
what changed on the GPU that the model had to foresee from the base alone.

For each zero-edit kernel of a GPU run (``bench/whatif_all_gpu.sh``'s output) and the
variants named, per stretch of the loop (eighths of the iterations):

- ``latency``: the loads' latency (the commit's stamp to the end of a consumer wait that
  blocked) in the base's blocked waits, each variant's, the base's sampled arrivals
  (``autoprofile(load_arrivals=7)``: the probed launch nearest the first traced launch in
  span, the one the check reads first) and the model's replay of each variant's change (the
  recorded kernel: nothing removed), with the share of waits that blocked;
- ``period``: the producer's commit-to-commit time, the same four ways, and where each
  stretch began;
- ``after wait``: the consumer's work from a blocked wait's end to its release (what a
  starved ring pays on every item) against the base's shortest instances;
- ``launches``: the model's prediction from each traced base launch with each probed
  launch's arrivals (which of the two carries a launch-to-launch spread), and each traced
  launch's shortest consumer work after a wait (the replay's floor for a starved ring) and
  its recorded replay's error against its own trace.

    python bench/whatif_variants.py GPU_OUT --kernel quack --variants stages_minus2 \
        [--launches] [--out FILE]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from cute_prof.analysis import critical_path as cp  # noqa: E402
from cute_prof.analysis.model import arrival_latencies, arrival_positions  # noqa: E402
from tools.pipeline_data import matched  # noqa: E402
from tools.report_text import emit  # noqa: E402
from whatif_diagnose import blocked_loads  # noqa: E402
from whatif_check import (  # noqa: E402
    base_recorder_cost, launch_model, launch_paths, lighter_launches, measured_inputs,
    nearest_probed_launch, point_prediction, record_chain, run_variants, zero_edit_entry)

STRETCHES = 8


def loop_stretches(iterations: int) -> list[np.ndarray]:
    """The loop's iterations in ``STRETCHES`` consecutive stretches; a loop of fewer
    iterations (FA4 b1 s1024: 7 in its loop) gets one stretch per iteration."""
    return [p for p in np.array_split(np.arange(iterations), STRETCHES) if p.size]


def ring_regions(data) -> list[tuple[str, int, int, int]]:
    """(ring, its consumes wait, its produce, the consumer's work after the wait)."""
    regions = data.spec.regions
    out = []
    for i, r in enumerate(regions):
        if "consumes" not in r.relations:
            continue
        ring = r.relations["consumes"].resource
        made = next(j for j, q in enumerate(regions)
                    if "produces" in q.relations and q.relations["produces"].resource == ring)
        after = next((j for j in range(i + 1, len(regions))
                      if regions[j].role == r.role and regions[j].kind == "work"), -1)
        out.append((ring, i, made, after))
    return out


def median_or_nan(values) -> float:
    return float(np.median(values)) if np.size(values) else float("nan")


def stretch_table(base, variants: dict, arrivals: dict, replays: dict) -> list[str]:
    """``replays``: variant -> the model's replay of its change (``what_if``'s
    ``changed_schedule``), set beside the variant's own trace."""
    lines = []
    for ring, wait, made, after in ring_regions(base):
        iters = base.shape[1]
        stretches = loop_stretches(iters)
        sample = arrivals.get(ring)
        lines.append(f"  ring {ring}: latency by stretch of the loop (ns, median over the "
                     "consumers' blocked waits of their end less the load's issue; the share "
                     "that blocked); sampled: the base's probed arrivals")
        modelled = {f"model {name}": s for name, s in replays.items()}
        head = f"    {'places':>9} {'sampled':>8} {'base':>12}" + "".join(
            f" {name:>16}" for name in [*variants, *modelled])
        lines.append(head)
        traces = {"base": base, **variants}
        cells = {name: blocked_loads(d, cp.infer_terms(d), wait) for name, d in traces.items()}
        # the replay's blocked waits: its end less the load's issue, as the trace's
        cells.update({name: (s.end[:, :, wait] - s.dep_time[:, :, wait], s.blocked[:, :, wait])
                      for name, s in modelled.items()})
        for places in stretches:
            row = f"    {places[0]:3d}-{places[-1]:3d}  "
            if sample is not None and arrival_positions(sample) is not None:
                at = np.isin(arrival_positions(sample), places)
                row += f" {median_or_nan(arrival_latencies(sample)[at]):8.0f}"
            else:
                row += f" {'-':>8}"
            for name in [*traces, *modelled]:
                latency, blocked = cells[name]
                here = places[places < latency.shape[1]]
                pick = blocked[:, here]
                row += (f" {median_or_nan(latency[:, here][pick]):7.0f} ({pick.mean():.2f})"
                        .rjust(13 if name == "base" else 17))
            lines.append(row)
        lines.append("  producer's commit-to-commit period (ns, median) by stretch, and where "
                     "the stretch began (us after the first CTA's start)")
        for name, d in {**traces, **modelled}.items():
            commits = d.start[:, :, made]
            period = np.diff(commits, axis=1)
            began = np.nanmin(commits)
            cols = []
            for places in stretches:
                here = places[places < period.shape[1]]
                cols.append(f"{np.nanmedian(period[:, here]):6.0f}")
            starts = [f"{(np.nanmedian(commits[:, p[0]]) - began) / 1e3:6.1f}"
                      for p in stretches]
            lines.append(f"    {name:>16} " + " ".join(cols) + "  | " + " ".join(starts))
        if after >= 0:
            lines.append(f"  consumer's work after its wait ({base.spec.regions[after].tag}, "
                         "the wait's end to the role's next wait, ns)")
            for name, d in traces.items():
                _, span = cp.work_spans(d)
                _, blocked = cells[name]
                work = span[:, :, after]
                ran = d.valid
                lines.append(
                    f"    {name:>16} after a blocked wait ({blocked.mean():.2f} of them): "
                    f"median {median_or_nan(work[blocked]):5.0f}; unblocked median "
                    f"{median_or_nan(work[ran & ~blocked]):5.0f}; shortest "
                    f"{np.nanmin(work[ran]):5.0f}, 0.1th percentile "
                    f"{np.quantile(work[ran], 0.001, method='lower'):5.0f}")
    return lines


def launch_table(root: Path, entry, folder: Path, change: dict) -> list[str]:
    """The prediction from every traced launch with every probed launch's arrivals."""
    timings = entry.load_timings(folder)
    recorder_cost = base_recorder_cost(timings, entry.base)
    chain_ns, _ = record_chain(root)
    probes = launch_paths(folder / entry.arrivals_trace)
    lines = [f"  predicted change (%) by traced launch (rows) and probed launch (columns): "
             f"{change}; then the traced launch's shortest work after a wait (ns, every "
             "iteration) and its recorded replay's error per CTA with its own probed launch"]
    for t, path in enumerate(launch_paths(folder / entry.trace)):
        raw = entry.load(path)
        _, data = matched(raw)
        _, span = cp.work_spans(data)
        shortest = [f"{np.nanmin(span[:, :, after][data.valid]):.0f}"
                    for _, _, _, after in ring_regions(data) if after >= 0]
        models = [launch_model(entry, raw, entry.load(probe), record_chain_ns=chain_ns,
                               recorder_cost=recorder_cost) for probe in probes]
        row = []
        for model in models:
            got = point_prediction(model["data"], model["inputs"], change,
                                   record_ns=model["record_ns"],
                                   recorder_cost=model["inputs"]["recorder_cost"])
            row.append(f"{got * 100:+7.2f}")
        # the recorded kernel's replay against its own trace, with its own probed launch
        # (median over the CTAs)
        own = models[t % len(models)]
        fidelity = cp.what_if(own["data"],
                              **measured_inputs(own["inputs"]))["replay_error_median"]
        lines.append(f"    launch {t}: " + " ".join(row) + " | " + ", ".join(shortest)
                     + f" ns, {fidelity * 100:+.2f}%")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("gpu_out", type=Path)
    ap.add_argument("--kernel", required=True, help="the entry's folder (gemm_ze, quack, ...)")
    ap.add_argument("--variants", nargs="+", required=True)
    ap.add_argument("--launches", action="store_true",
                    help="also predict from every traced x probed base launch (slow)")
    ap.add_argument("--lighter", action="store_true",
                    help="the model reads the base's probed launches at a lighter load "
                         "(whatif_check.py --lighter)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    entry = zero_edit_entry(args.kernel, ap)
    folder = args.gpu_out / entry.folder
    unknown = [v for v in args.variants if v not in entry.variants]
    if unknown:
        ap.error(f"{args.kernel} has no variants {unknown}: {sorted(entry.variants)}")
    raw = entry.load(folder / entry.trace)
    lighter = lighter_launches(entry, folder) if args.lighter else []
    model = launch_model(entry, raw, nearest_probed_launch(entry, folder, raw), lighter=lighter)
    variants = {v: matched(entry.load(folder / entry.variant_trace.format(variant=v)))[1]
                for v in args.variants}
    inputs = model["inputs"]
    changes = run_variants(entry, raw, folder)
    replays = {v: cp.what_if(model["data"], **measured_inputs(inputs), schedules=True,
                             **changes[v])["changed_schedule"]
               for v in args.variants}
    lines = [f"{entry.kernel}, {folder}"]
    lines += stretch_table(model["data"], variants, inputs["arrivals"], replays)
    if args.launches:
        for v in args.variants:
            lines += launch_table(args.gpu_out, entry, folder, changes[v])
    emit(lines, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
