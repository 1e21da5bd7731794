"""The GEMMs' loads at three memory loads (issue #27, stop 62): the base's probed launches,
the base kernel's probed launches at half its load (the GPU half's ``--lighter-load``) and
the 2-stage variant's own probed launch (``QUACK_PROBE_VARIANTS`` / ``GEMM_PROBE_VARIANTS``),
and the load latency each queue rule reads for that variant at the throughput it ran at.

    python bench/whatif_lighter_load.py GPU_OUT [GPU_OUT ...]

Per part and kind of launch (medians over its launches): the rate its sampled loads were
issued at against the base's probed launches' (``arrival_issue_rate``: the throughput, where
the probes sample alike; a variant with another ring depth samples at another density, so
its throughput is read from CUPTI instead: 1 / (1 + its measured change)), the loop's floor
and congestion (``critical_path.loop_queueing``: the floor, the least congested times'
5th percentile, and the loop's typical congestion above it). Then, for the variant at its
measured throughput T, the congestion the model's rule reads (Little's law: floor + queued
x T) and the lighter-load curve (``queued_under_load(lighter=)``), each against the
variant's own. Diagnosis: no prediction reads the variant's probes.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from cute_prof.analysis.critical_path import (  # noqa: E402
    lighter_load_point, loop_queueing, match_records, queued_under_load)
from cute_prof.analysis.model import arrival_issue_rate  # noqa: E402
from cute_prof.analysis.pipelines import derive_pipeline  # noqa: E402
from cute_prof.calibration import paired_change  # noqa: E402
from tools.columns import launch_paths  # noqa: E402
from whatif_check import zero_edit_entry  # noqa: E402

# part -> (its 2-stage variant's timings key, that variant's probed trace)
STARVED = {"quack": ("stages_minus2", "trace_stages_minus2_arrivals.npz"),
           "gemm_ze": ("stages2", "trace_ze_stages2_arrivals.npz"),
           "persistent_ze": ("stages2", "trace_ze_stages2_arrivals.npz")}


def launch_points(derived, iters: int, paths: list[Path], load) -> list[dict]:
    """Each probed launch's ring sample (the ring it sampled most): its loads and rate,
    the loop's floor and congestion."""
    points = []
    for path in paths:
        samples = derived.arrival_sample(load(path))
        loads = max(samples.values(), key=len)
        floor, queued = loop_queueing(loads, iters)
        points.append({"loads": loads, "rate": arrival_issue_rate(loads), "floor": floor,
                       "congestion": floor + queued})
    return points


def part_rows(root: Path, part: str) -> list[str]:
    entry = zero_edit_entry(part)
    folder = root / part
    variant, variant_trace = STARVED[part]
    derived = derive_pipeline(entry.load(folder / entry.trace))
    iters = match_records(derived.trace, derived.spec).shape[1]
    kinds = {"base": launch_paths(folder / entry.arrivals_trace),
             "lighter": launch_paths(folder / entry.lighter_trace),
             variant: launch_paths(folder / variant_trace)}
    if not all(kinds.values()):
        missing = [k for k, v in kinds.items() if not v]
        return [f"| {root.name} | {part} | no probed launches of {', '.join(missing)} |"]
    points = {k: launch_points(derived, iters, v, entry.load) for k, v in kinds.items()}
    base_rate = statistics.median(p["rate"] for p in points["base"])
    timings = entry.load_timings(folder)
    measured = 1.0 / (1.0 + paired_change(timings, variant, entry.base))

    def med(kind, key):
        return statistics.median(p[key] for p in points[kind])

    rows = []
    for kind in kinds:
        throughput = measured if kind == variant else med(kind, "rate") / base_rate
        rows.append(f"| {root.name} | {part} | {kind} | {throughput:.2f} | "
                    f"{med(kind, 'floor'):.0f} | {med(kind, 'congestion'):.0f} |")
    # what each rule reads for the variant at its throughput, from each base probed launch
    lighter = [(p["loads"], p["rate"] / base_rate) for p in points["lighter"]]
    little, curve = [], []
    for p in points["base"]:
        queued = p["congestion"] - p["floor"]
        little.append(p["floor"] + float(queued_under_load(queued, p["floor"], 1 / measured)))
        point = lighter_load_point(p["floor"], queued, lighter)
        curve.append(p["floor"] + float(queued_under_load(queued, p["floor"], 1 / measured,
                                                          lighter=point)))
    own = med(variant, "congestion")
    rows.append(f"| {root.name} | {part} | {variant}: Little's law / the lighter curve | "
                f"{measured:.2f} | | {np.median(little):.0f} ({np.median(little) - own:+.0f}) / "
                f"{np.median(curve):.0f} ({np.median(curve) - own:+.0f}) |")
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("gpu_out", type=Path, nargs="+", help="GPU halves' output folders")
    args = ap.parse_args(argv)
    print("| run | part | launches | throughput (vs base) | floor ns | congestion ns "
          "(rule: read for the variant, its error) |")
    print("|---|---|---|---:|---:|---|")
    for root in args.gpu_out:
        for part in STARVED:
            if (root / part).is_dir():
                print("\n".join(part_rows(root, part)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
