"""One what-if row's measured change round by round, per GPU run: its quartiles over the
timing rounds and over the first and the last third of them. Tells a change that moves
within a run (the clock, the rounds' order) from one that sits at its own level in each run.

    python bench/whatif_round_changes.py /work/data/gpu21 ... --part persistent_ze \\
        --variant stages2
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from cute_prof.calibration import round_changes  # noqa: E402
from whatif_check import ENTRIES  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--part", default="persistent_ze", help="the run's folder of one kernel")
    ap.add_argument("--variant", default="stages2")
    args = ap.parse_args(argv)
    entry = next((e for e in ENTRIES if e.folder == args.part), None)
    if entry is None:
        raise SystemExit(f"no check entry reads {args.part!r}: "
                         f"{sorted({e.folder for e in ENTRIES})}")
    print(f"# python bench/whatif_round_changes.py {' '.join(r.name for r in args.runs)} "
          f"--part {args.part} --variant {args.variant}")
    print("# run: rounds, change % (25th / 50th / 75th percentile over the rounds), "
          "median of the first and of the last third of the rounds")
    for run in args.runs:
        folder = run / args.part
        if not folder.is_dir():
            continue
        changes = [100 * c for c in round_changes(entry.load_timings(folder), args.variant,
                                                  entry.base)]
        q1, q2, q3 = statistics.quantiles(changes, n=4)
        third = len(changes) // 3
        print(f"{run.name:8s} {len(changes):4d}  {q1:+6.2f} {q2:+6.2f} {q3:+6.2f}  "
              f"{statistics.median(changes[:third]):+6.2f} "
              f"{statistics.median(changes[-third:]):+6.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
