"""How the what-if check's errors move with the record time the model removes: every
zero-edit row predicted (median of the traced launches, as the check does) with one record's
time scaled to each of ``--scales`` of the time the check removes (one record on a
dependency chain, ``bench/results/record_cost/chain.md``, where the run measured it, else the
trace's own gap estimate, ``record_cost_ns``), the recorder's measured cost on the base
passed as the check passes it. 1 is what the check ships; below 1 the part of the
recorder's cost the records' own time no longer accounts for is taken off the work as its
slowdown (``critical_path.recorder_slowdown``), all of it at 0.

    python bench/whatif_record_sweep.py GPU_OUT [--scales 0,0.5,1,2] [--out FILE]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from whatif_check import (  # noqa: E402
    ENTRIES, base_recorder_cost, folder_of, paired_change, point_prediction, record_chain,
    run_variants, traced_launch_models)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("gpu_out", type=Path)
    ap.add_argument("--scales", default="0,0.5,1,2")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    scales = [float(x) for x in args.scales.split(",")]
    chain_ns, chain_source = record_chain(args.gpu_out)
    lines = [f"# python bench/whatif_record_sweep.py {args.gpu_out} --scales {args.scales}",
             "# error (pp) of each zero-edit row with one record's time scaled to each "
             f"fraction of the one the check removes ({chain_source})", "",
             "| kernel | what-if | measured | " + " | ".join(f"x{s:g}" for s in scales) + " |",
             "|---|---|---:|" + "---:|" * len(scales)]
    errors = {s: [] for s in scales}
    for entry in [e for e in ENTRIES if e.derived]:
        folder = folder_of(args.gpu_out, entry)
        if folder is None:
            continue
        timings = entry.load_timings(folder)
        # each traced launch with the probed launches that ran like it, as the check reads them
        models = traced_launch_models(entry, folder, record_chain_ns=chain_ns,
                                      recorder_cost=base_recorder_cost(timings, entry.base))
        for name, change in run_variants(entry, models[0][0]["raw"], folder).items():
            if not isinstance(change, dict) or not timings.get(name):
                continue
            measured = paired_change(timings, name, entry.base)
            cells = []
            for s in scales:
                predicted = statistics.median(statistics.median(
                    point_prediction(run["data"], run["inputs"], change,
                                     record_ns=run["record_ns"] * s,
                                     recorder_cost=run["inputs"]["recorder_cost"])
                    for run in runs)
                    for runs in models)
                errors[s].append((predicted - measured) * 100)
                cells.append(f"{errors[s][-1]:+.2f}")
            lines.append(f"| {entry.kernel} | {name} | {measured * 100:+.2f}% | "
                         + " | ".join(cells) + " |")
            print(lines[-1], flush=True)
    lines.append("| mean absolute error | | | " + " | ".join(
        f"{statistics.fmean(abs(e) for e in errors[s]):.2f}" for s in scales) + " |")
    lines.append("| within 3 pp | | | " + " | ".join(
        f"{sum(abs(e) <= 3 for e in errors[s])} of {len(errors[s])}" for s in scales) + " |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
