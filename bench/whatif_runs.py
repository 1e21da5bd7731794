"""The what-if check's error per row across several GPU runs of the same model: which rows
the model misses the same way every run (a bias to fix) and which move from run to run (the
launches' own noise). Reads the Markdown tables ``bench/whatif_check.py`` writes.

    python bench/whatif_runs.py bench/results/whatif/whatif_table.md RUN2/whatif_table.md ... \\
        [--labels gpu27,gpu26,...]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

WITHIN_PP = 3.0  # the bar (#27)


def table_errors(path: Path) -> dict[tuple[str, str, str], float]:
    """(kernel, base trace, what-if) -> error in pp, for every modelled row of one table."""
    lines = path.read_text().splitlines()
    header = next((i for i, line in enumerate(lines) if line.startswith("| kernel |")), None)
    if header is None:
        raise SystemExit(f"{path}: no what-if table (no '| kernel |' header)")
    columns = [c.strip() for c in lines[header].strip("|").split("|")]
    at = {name: columns.index(name) for name in ("kernel", "base trace", "what-if", "error (pp)")}
    errors = {}
    for line in lines[header + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        try:
            error = float(cells[at["error (pp)"]])
        except ValueError:  # "-": not modelled
            continue
        what_if = cells[at["what-if"]].split(" ")[0]
        errors[(cells[at["kernel"]], cells[at["base trace"]], what_if)] = error
    return errors


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tables", type=Path, nargs="+", help="whatif_table.md of each run")
    ap.add_argument("--labels", help="comma-separated run labels (default: the folders)")
    args = ap.parse_args(argv)
    labels = args.labels.split(",") if args.labels else [t.parent.name for t in args.tables]
    if len(labels) != len(args.tables):
        raise SystemExit("--labels needs one label per table")
    runs = [table_errors(t) for t in args.tables]
    # every row any run has, in the first run's order; a run without it shows "-"
    rows = list(dict.fromkeys(key for run in runs for key in run))
    print("| kernel | base | what-if | " + " | ".join(labels) + " | mean | spread | verdict |")
    print("|---|---|---|" + "---:|" * len(labels) + "---:|---:|---|")
    for key in rows:
        errors = [run[key] for run in runs if key in run]
        mean, spread = statistics.fmean(errors), max(errors) - min(errors)
        if all(abs(e) <= WITHIN_PP for e in errors):
            verdict = "within every run"
        elif abs(mean) > WITHIN_PP and spread < abs(mean):
            verdict = "biased: " + ("over" if mean > 0 else "under") + "-predicts every run"
        else:
            verdict = "noisy: moves run to run"
        print(f"| {key[0]} | {key[1]} | {key[2]} | "
              + " | ".join(f"{run[key]:+.2f}" if key in run else "-" for run in runs)
              + f" | {mean:+.2f} | {spread:.2f} | {verdict} |")
    within = [sum(abs(e) <= WITHIN_PP for e in run.values()) for run in runs]
    mae = [statistics.fmean(abs(e) for e in run.values()) for run in runs]
    every = [abs(e) for run in runs for e in run.values()]
    print(f"\n{len(rows)} rows; per run, within {WITHIN_PP:g} pp of its rows: "
          + ", ".join(f"{label} {w} of {len(run)}" for label, w, run in zip(labels, within, runs))
          + "; mean absolute error: "
          + ", ".join(f"{label} {m:.2f} pp" for label, m in zip(labels, mae))
          + f"; all runs: {sum(e <= WITHIN_PP for e in every)} of {len(every)} within, "
          f"{statistics.fmean(every):.2f} pp")
    return 0


if __name__ == "__main__":
    sys.exit(main())
