"""The trailing consumer warpgroup's release after the leading one's, per GPU run: the phase
the two groups hold (``critical_path.trailing_lag`` keeps its lower state in a replay).
Reads each run's base trace and, as a diagnosis only (no model input), the 1-deep variant's
own trace (cut to some SMs) of one FA4 part.

    python bench/whatif_trailing_lag.py /work/data/gpu21 /work/data/gpu33 ... \\
        [--part fa4_causal] > bench/results/whatif/trailing_lag.txt
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from cute_prof.analysis.critical_path import match_records, trailing_lag  # noqa: E402
from cute_prof.analysis.pipelines import derive_pipeline  # noqa: E402
from tools.columns import load_columns  # noqa: E402

UPPER_NS = 640  # between the two states FA4's bases hold (480-512 and 736-800 ns)


def lags(path: Path) -> tuple[dict, int]:
    """Per release ring: every item's trailing-group lag, and the launch's CTAs."""
    derived = derive_pipeline(load_columns(path))
    data = match_records(derived.trace, derived.spec)
    out = {}
    for i, r in enumerate(data.spec.regions):
        kept = trailing_lag(data, i)
        if kept is None:
            continue
        lag = data.end[:, :, i] - data.lead_end[:, :, i]
        out[r.tag.split(".")[0]] = (lag[data.valid & np.isfinite(lag)], kept)
    return out, data.shape[0]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--part", default="fa4_causal")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore", RuntimeWarning)
    print(f"# python bench/whatif_trailing_lag.py {' '.join(str(r) for r in args.runs)} "
          f"--part {args.part}")
    print(f"# per ring: the trailing group's lag behind the leading one's release, ns: its "
          f"10/25/50/75/90th percentiles, the share of items above {UPPER_NS} ns (the upper "
          "state), and the lag the replay keeps (trailing_lag: its 25th percentile). "
          "trace_base: the base's first traced launch (every CTA); trace_stages1: the 1-deep "
          "variant's own trace (diagnosis only, cut to some SMs)")
    for run in args.runs:
        for name in ("trace_base", "trace_stages1"):
            path = run / args.part / f"{name}.npz"
            if not path.exists():
                continue
            per_ring, units = lags(path)
            cells = []
            for ring, (lag, kept) in per_ring.items():
                q = np.percentile(lag, [10, 25, 50, 75, 90]).astype(int).tolist()
                cells.append(f"{ring} {q} upper {np.mean(lag > UPPER_NS):.3f} kept {kept:.0f}")
            print(f"{run.name:8s} {name:14s} {units:5d} CTAs  " + "  ".join(cells), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
