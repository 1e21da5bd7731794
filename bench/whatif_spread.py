"""Where the base's load-latency spread lives, against the spread the variants' loads show
(the figures behind the what-if README's stop-37 section): per zero-edit GEMM base, the
sampled loads' std, the std of the medians of the 64 loads issued nearest each load in time
(the congestion shared by every CTA), the lag-one correlation of one warp's probes about their
warp's mean; per variant, end - issue of the blocked consumes waits (quantiles, std).

    python bench/whatif_spread.py GPU_OUT [--out FILE]
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import cute_prof.analysis.critical_path as cp  # noqa: E402
from cute_prof.analysis.pipelines import derive_pipeline, load_arrival_pairs  # noqa: E402
from tools.columns import load_columns  # noqa: E402
from tools.pipeline_data import matched  # noqa: E402
from tools.report_text import emit  # noqa: E402

KERNELS = {"gemm_ze": ("ze_base", ("ze_stages3", "ze_stages2")),
           "persistent_ze": ("ze_base", ("ze_stages3", "ze_stages2")),
           "quack": ("base", ("stages_minus1", "stages_minus2"))}


def base_spread(folder: Path, base: str) -> str:
    derived = derive_pipeline(load_columns(folder / f"trace_{base}_arrivals.npz"))
    pairs = load_arrival_pairs(derived.trace)
    latency = (pairs["arrived"] - pairs["commit"]).astype(np.float64)
    congestion = cp.load_congestion(latency, pairs["commit"].astype(np.float64))
    warps, of = np.unique(pairs["tid"], return_inverse=True)
    residual = latency - (np.bincount(of, latency) / np.bincount(of))[of]
    order = np.lexsort((pairs["position"], pairs["tid"]))
    same = pairs["tid"][order][1:] == pairs["tid"][order][:-1]
    lag1 = np.corrcoef(residual[order][1:][same], residual[order][:-1][same])[0, 1]
    return (f"  base sample: {latency.size} loads, std {latency.std():.0f} ns; congestion "
            f"(median of the {cp.NEAREST_ARRIVALS} issued nearest in time) std "
            f"{np.std(congestion):.0f} ns; one warp's consecutive probes, lag-one correlation "
            f"{lag1:.2f}")


def variant_spread(folder: Path, variant: str) -> str:
    derived, data = matched(load_columns(folder / f"trace_{variant}.npz"))
    terms = cp.infer_terms(data)
    w = next(i for i, r in enumerate(derived.spec.regions) if "consumes" in r.relations)
    dep = terms[3][:, :, w]
    blocked, _ = cp.blocked_and_free(data, w, terms[2][w], dep)
    x = (data.end[:, :, w] - dep)[blocked]
    q = " / ".join(f"{v:.0f}" for v in np.quantile(x, [0.05, 0.25, 0.5, 0.75, 0.95]))
    return (f"  {variant}: {blocked.mean():.0%} of waits blocked; blocked end - issue p5/p25/"
            f"median/p75/p95 {q} ns, std {x.std():.0f} ns")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("gpu_out", type=Path)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    lines = [f"# python bench/whatif_spread.py GPU_OUT  (GPU_OUT: {args.gpu_out})"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for name, (base, variants) in KERNELS.items():
            folder = args.gpu_out / name
            lines += [name, base_spread(folder, base),
                      *(variant_spread(folder, v) for v in (base, *variants))]
    emit(lines, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
