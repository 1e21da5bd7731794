"""Each probed base launch of a what-if run against the traced ones: how much longer it ran
than its base, what its sampled loads took, and which probed launches each traced launch
reads (``pipelines.probed_launches_like``: the nearest in span and any within
``PROBED_SPAN_TIE`` of it) -- the figures behind the stop-52 rule.

    python bench/whatif_probed_launches.py GPU_OUT... [--only quack ...]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from cute_prof.analysis.model import arrival_latencies  # noqa: E402
from cute_prof.analysis.pipelines import (  # noqa: E402
    PROBED_SPAN_TIE, load_arrival_sample, probed_launches_like, recorded_span_ns)
from tools.columns import launch_paths  # noqa: E402
from whatif_check import ENTRIES, folder_of, probed_launch_paths  # noqa: E402


def report(root: Path, only: list[str] | None) -> list[str]:
    lines = [f"== {root.name}"]
    for entry in ENTRIES:
        if not entry.derived or not entry.arrivals_trace or (only and entry.folder not in only):
            continue
        folder = folder_of(root, entry)
        if folder is None:
            continue
        bases = [entry.load(path) for path in launch_paths(folder / entry.trace)]
        probed = [entry.load(path) for path in probed_launch_paths(entry, folder)]
        base_spans = [recorded_span_ns(b) for b in bases]
        lines.append(f"{entry.folder}: base spans "
                     + " / ".join(f"{span / 1e3:.2f}" for span in base_spans) + " us")
        for k, launch in enumerate(probed):
            # the launch of the same index where there is one, else the traced launches' median
            paired = base_spans[k] if k < len(bases) else float(np.median(base_spans))
            against = (f"{recorded_span_ns(launch) / paired - 1:+.2%} against "
                       + (f"base launch {k + 1}" if k < len(bases) else "the bases' median"))
            rings = "; ".join(
                f"{ring} p5 {np.quantile(lat, 0.05):.0f} median {np.median(lat):.0f} ns"
                for ring, lat in ((ring, arrival_latencies(sample))
                                  for ring, sample in load_arrival_sample(launch).items()))
            lines.append(f"  probed {k + 1}: {against}; {rings}")
        reads = [probed_launches_like(b, probed) for b in bases]
        lines.append(f"  each traced launch reads (within {PROBED_SPAN_TIE:.1%} of the nearest): "
                     + " / ".join("+".join(str(k + 1) for k in r) for r in reads))
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("gpu_out", type=Path, nargs="+")
    ap.add_argument("--only", nargs="*", help="entry folders (default: every zero-edit one)")
    args = ap.parse_args(argv)
    for root in args.gpu_out:
        print("\n".join(report(root, args.only)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
