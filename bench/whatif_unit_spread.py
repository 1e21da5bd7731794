"""Diagnosis, never a model input: how far apart the CTAs of a variant end, measured (the
variant's own zero-edit trace, cut to some SMs) against the model's replay of it (the
recorded kernel: no record's time or recorder's cost removed; the first traced launch with
the probed launch nearest it in span). The kernel lasts as long as
its slowest CTA, so a replay whose CTAs spread wider than the GPU's predicts the change too
high even where its median CTA is right.

    python bench/whatif_unit_spread.py GPU_OUT [GPU_OUT ...] [--kernels fa4_small,fa4]
        [--what-ifs stages1]

Prints, per kernel and what-if, each CTA's span (first record to last, ns) as median, p90
and max, for the base as measured and replayed and the variant as measured and replayed, and
the change of the median CTA, of the slowest, and of the kernel (first start to last end:
where the variant's trace holds every CTA of a one-wave launch) each way.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import whatif_check as check  # noqa: E402

from cute_prof.analysis import critical_path as cp  # noqa: E402
from tools.pipeline_data import matched  # noqa: E402


def spans(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, float]:
    """Each unit's span and the kernel's (first start to last end) from (U, K, n) arrays."""
    first = np.nanmin(starts.reshape(starts.shape[0], -1), 1)
    last = np.nanmax(ends.reshape(ends.shape[0], -1), 1)
    return last - first, float(last.max() - first.min())


def replayed_variant(data, inputs: dict, change: dict):
    """The base's replay and the variant's, as ``what_if`` runs them for the recorded
    kernel (no record time removed, no recorder cost)."""
    result = cp.what_if(data, **check.measured_inputs(inputs), schedules=True, **change)
    return result["base_schedule"], result["changed_schedule"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("roots", nargs="+", type=Path)
    ap.add_argument("--kernels", default="fa4_small,fa4_causal,fa4",
                    help="entry folders (whatif_check.ENTRIES) to show")
    ap.add_argument("--what-ifs", default="stages1", help="variants to show ('' for all)")
    args = ap.parse_args(argv)
    folders = args.kernels.split(",")
    print(f"{'run':<6} {'kernel':<12} {'what-if':<8} {'schedule':<14} {'CTA p50':>8} "
          f"{'p90':>7} {'max':>7} {'kernel':>8}")
    for root in args.roots:
        for entry in check.ENTRIES:
            folder = root / entry.folder
            if entry.folder not in folders or not (folder / entry.trace).is_file():
                continue
            raw = entry.load(folder / entry.trace)
            model = check.launch_model(entry, raw, check.nearest_probed_launch(entry, folder, raw))
            data = model["data"]
            for name, change in check.run_variants(entry, raw, folder).items():
                path = folder / (entry.variant_trace or "").format(variant=name)
                if not isinstance(change, dict) or not path.is_file() or (
                        args.what_ifs and name not in args.what_ifs.split(",")):
                    continue
                _, measured = matched(entry.load(path))
                base_replay, variant_replay = replayed_variant(data, model["inputs"], change)
                rows = {"base measured": spans(data.start, data.end),
                        "base replayed": spans(base_replay.start, base_replay.end),
                        "measured": spans(measured.start, measured.end),
                        "replayed": spans(variant_replay.start, variant_replay.end)}
                # the kernel's span compares only where the variant's trace holds every CTA
                # (a multi-wave variant is traced on some SMs): a one-wave launch
                whole = measured.shape[0] == data.shape[0] == np.unique(data.unit_sm).size
                for label, (unit, kernel) in rows.items():
                    print(f"{root.name:<6} {entry.folder:<12} {name:<8} {label:<14} "
                          f"{np.median(unit):>8.0f} {np.percentile(unit, 90):>7.0f} "
                          f"{unit.max():>7.0f} " + (f"{kernel:>8.0f}" if whole else f"{'-':>8}"))
                for a, b in (("base measured", "measured"), ("base replayed", "replayed")):
                    print(f"{'':<6} {'':<12} {'':<8} {b + ' change':<14} median CTA "
                          f"{np.median(rows[b][0]) / np.median(rows[a][0]) - 1:+.2%}, "
                          f"slowest CTA {rows[b][0].max() / rows[a][0].max() - 1:+.2%}"
                          + (f", kernel {rows[b][1] / rows[a][1] - 1:+.2%}" if whole else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
