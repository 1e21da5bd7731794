"""Diagnosis, never the model: the what-if check re-made with the loads' queued part scaled
by another rule than the model's (``critical_path.queued_under_load``), to see which rows a
rule moves and how far. A shallower ring lowers the kernel's throughput by 1 / r; each
replayed load's queued time q (its latency above the least congested loads') then becomes,
by rule:

- ``little``: q / r (Little's law at a fixed occupancy; the model's, and until commit
  6b24f64);
- ``open``: W0 q / ((W0 + q) r - q), one open queue (the model's in stops 41-53);
- ``none``: q (the base's queueing kept).

    python bench/whatif_queue_rules.py GPU_OUT... --rule open [--only quack ...]

prints each run's table (``whatif_check.py --queue-rule``'s, into ``--out``/<run>/) and,
last, the summary of ``whatif_runs.py`` over the runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from cute_prof.analysis.critical_path import QUEUE_RULES  # noqa: E402

import whatif_check  # noqa: E402
import whatif_runs  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("gpu_out", type=Path, nargs="+")
    ap.add_argument("--rule", choices=QUEUE_RULES, required=True)
    ap.add_argument("--only", nargs="*", help="entry folders (default every entry)")
    ap.add_argument("--out", type=Path, default=Path("queue_rules_out"),
                    help="each run's table goes to OUT/<run>/whatif_table.md")
    args = ap.parse_args(argv)
    tables = []
    for root in args.gpu_out:
        out = args.out / root.name
        whatif_check.main([str(root), "--out", str(out), "--queue-rule", args.rule,
                           *(["--only", *args.only] if args.only else [])])
        tables.append(str(out / "whatif_table.md"))
    print(f"\n== rule {args.rule}", flush=True)
    return whatif_runs.main([*tables, "--labels", ",".join(r.name for r in args.gpu_out)])


if __name__ == "__main__":
    raise SystemExit(main())
