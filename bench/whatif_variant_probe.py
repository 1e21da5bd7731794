"""Diagnosis, never a model input: the load latencies a variant met, against its base's, per
wave. ``bench/fa4_whatif_gpu.py --probe-variants NAME`` traces the variant with the producer
probing one load in 7 (``trace_NAME_arrivals.npz`` beside ``trace_base_arrivals.npz``);
this prints each wave's (CTAs ranked by their first commit) sampled latencies per ring, past
each CTA's first three loads (the start burst).

    python bench/whatif_variant_probe.py FOLDER [--variant stages1] [--wave-ctas 132]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from tools.columns import load_columns  # noqa: E402

from cute_prof.analysis.pipelines import load_arrival_pairs  # noqa: E402

START_BURST = 3  # each CTA's first loads meet its start burst


def wave_latencies(pairs: dict, wave_ctas: int) -> dict:
    """{(wave, ring): sampled latencies (ns)} past each CTA's start burst; a CTA is its
    producer warp, its wave its rank by first commit over ``wave_ctas``."""
    latency = (pairs["arrived"] - pairs["commit"]).astype(np.float64)
    warps, warp = np.unique(pairs["tid"], return_inverse=True)
    first = np.full(warps.size, np.inf)
    np.minimum.at(first, warp, pairs["commit"].astype(np.float64))
    rank = np.empty(warps.size, dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(warps.size)
    wave = (rank // wave_ctas)[warp]
    steady = pairs["position"] >= START_BURST
    return {(int(w), int(r)): latency[steady & (wave == w) & (pairs["ring"] == r)]
            for w in np.unique(wave) for r in np.unique(pairs["ring"])}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--variant", default="stages1")
    ap.add_argument("--wave-ctas", type=int, default=132, help="CTAs a wave (one per SM)")
    args = ap.parse_args(argv)
    print(f"{'trace':<28} {'wave':>4} {'ring':>4} {'loads':>6} {'p10':>5} {'p50':>5} {'p90':>5}")
    for name in ("base", args.variant):
        path = args.folder / f"trace_{name}_arrivals.npz"
        for (wave, ring), lat in wave_latencies(load_arrival_pairs(load_columns(path)),
                                                args.wave_ctas).items():
            if lat.size:
                p10, p50, p90 = np.percentile(lat, [10, 50, 90])
                print(f"{path.name:<28} {wave:>4} {ring:>4} {lat.size:>6} {p10:>5.0f} {p50:>5.0f} "
                      f"{p90:>5.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
