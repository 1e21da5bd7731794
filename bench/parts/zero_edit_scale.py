"""The derived pipeline model on a whole zero-edit trace, as the CLI runs it: derive_pipeline,
the checked prediction's terms (each CTA's first load, one record's time), then
analyze_pipeline with one what-if and its interval, timed in rounds (CPU). The trace is a
columns file from a GPU run (``bench/fa4_whatif_gpu.py`` writes FA4's as ``trace_base.npz``).

    python bench/parts/zero_edit_scale.py FA4_OUT/trace_base.npz --rounds 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from tools.columns import load_columns  # noqa: E402
from tools.machine import cpu_model  # noqa: E402

from cute_prof.analysis.pipeline_report import analyze_pipeline  # noqa: E402
from cute_prof.analysis.pipelines import derive_pipeline  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--recorder-cost", type=float, default=None,
                    help="the recording kernel's time over the plain one's, less 1 (the "
                         "what-if then fits the recorder's slowdown of the work)")
    args = ap.parse_args(argv)
    trace = load_columns(args.trace)
    depth = None
    rows = []
    for _ in range(args.rounds):
        t0 = time.perf_counter()
        derived = derive_pipeline(trace)
        terms = derived.what_if_terms(recorder_cost=args.recorder_cost)
        t1 = time.perf_counter()
        depth = depth or {r.name: 1 for r in derived.spec.resources}
        analyze_pipeline(derived.trace, derived.spec, what_ifs=[{"depth": depth}], **terms)
        rows.append((t1 - t0, time.perf_counter() - t1))
    derive = statistics.median(r[0] for r in rows)
    total = statistics.median(r[0] + r[1] for r in rows)
    print(f"{cpu_model()}; {len(trace):,} records; {args.rounds} rounds, medians")
    print(f"derive_pipeline + what_if_terms {derive:.2f} s, analyze_pipeline with one "
          f"checked what-if "
          f"{total - derive:.2f} s, total {total:.2f} s "
          f"({total / len(trace) * 5e6:.2f} s scaled to 5,000,000 records)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
