"""Diagnosis, never the model: the what-if check re-made with the loads' queued part scaled
by another rule than the model's (``critical_path.queued_under_load``, one open queue), to
see which rows a rule moves and how far. A shallower ring lowers the kernel's throughput by
1 / r; each replayed load's queued time q (its latency above the least congested loads')
then becomes, by rule:

- ``open``: the model's, W0 q / ((W0 + q) r - q);
- ``little``: q / r (Little's law at a fixed occupancy; the model's until commit 6b24f64);
- ``none``: q (the base's queueing kept).

    python bench/whatif_queue_rules.py GPU_OUT... --rule little [--only quack ...]

prints each run's table (``whatif_check.py``'s, into ``--out``/<run>/) and, last, the
summary of ``whatif_runs.py`` over the runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from cute_prof.analysis import critical_path  # noqa: E402

import whatif_check  # noqa: E402
import whatif_runs  # noqa: E402

MODEL_RULE = critical_path.queued_under_load


def little(queued, unqueued: float, ratio: float):
    return np.maximum(queued, 0.0) / max(float(ratio), 1e-6)


def none(queued, unqueued: float, ratio: float):
    return np.maximum(queued, 0.0)


RULES = {"open": MODEL_RULE, "little": little, "none": none}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("gpu_out", type=Path, nargs="+")
    ap.add_argument("--rule", choices=sorted(RULES), required=True)
    ap.add_argument("--only", nargs="*", help="entry folders (default every entry)")
    ap.add_argument("--out", type=Path, default=Path("queue_rules_out"),
                    help="each run's table goes to OUT/<run>/whatif_table.md")
    args = ap.parse_args(argv)
    # the replay looks the rule up in its module at each call: swap it for this process
    critical_path.queued_under_load = RULES[args.rule]
    tables = []
    try:
        for root in args.gpu_out:
            out = args.out / root.name
            whatif_check.main([str(root), "--out", str(out),
                               *(["--only", *args.only] if args.only else [])])
            tables.append(str(out / "whatif_table.md"))
    finally:
        critical_path.queued_under_load = MODEL_RULE
    print(f"\n== rule {args.rule}", flush=True)
    return whatif_runs.main([*tables, "--labels", ",".join(r.name for r in args.gpu_out)])


if __name__ == "__main__":
    raise SystemExit(main())
