"""A variant's slowest CTAs against the model's replay of its change, over several GPU runs:
whether a row the model misses is set by a few CTAs that the base does not single out.

The kernel's time is its last CTA's end. For each run (``bench/whatif_all_gpu.sh``'s
output) this prints the CTAs' ends (median, 90th percentile, last) in the variant's own
trace and in the model's replay of the change (the recorded kernel, from the base launch
and its nearest probed launch, as ``whatif_variants.py`` replays it), the spans' change,
and the variant's stragglers: CTAs that lost more than ``--lost-ns`` to the median CTA
within one stretch of the loop (eighths of the iterations), with that stretch and what the
same CTAs took there in the base's own trace.

    python bench/whatif_stragglers.py GPU_OUT [GPU_OUT ...] --kernel persistent_ze \
        --variant stages2 [--out FILE]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from cute_prof.analysis import critical_path as cp  # noqa: E402
from tools.pipeline_data import matched  # noqa: E402
from tools.report_text import emit  # noqa: E402
from whatif_check import (  # noqa: E402
    launch_model, measured_inputs, nearest_probed_launch, run_variants, zero_edit_entry)
from whatif_variants import loop_stretches, ring_regions  # noqa: E402


def unit_ends(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """(units,) each unit's last end, ns after the trace's (or replay's) first start."""
    return np.nanmax(end.reshape(end.shape[0], -1), 1) - np.nanmin(start)


def stretch_times(data, wait: int) -> np.ndarray:
    """(units, stretches) each unit's time from a stretch's first consumes-wait end to the
    next stretch's (the last: to its own last one)."""
    ends = data.end[:, :, wait]
    bounds = [p[0] for p in loop_stretches(ends.shape[1])]
    bounds.append(ends.shape[1] - 1)
    return np.stack([ends[:, b] - ends[:, a] for a, b in zip(bounds[:-1], bounds[1:])], 1)


def run_lines(entry, folder: Path, variant: str, lost_ns: float) -> list[str]:
    raw = entry.load(folder / entry.trace)
    model = launch_model(entry, raw, nearest_probed_launch(entry, folder, raw))
    data, inputs = model["data"], model["inputs"]
    got = cp.what_if(data, **measured_inputs(inputs), schedules=True,
                     **run_variants(entry, raw, folder)[variant])
    own = matched(entry.load(folder / entry.variant_trace.format(variant=variant)))[1]
    if not np.array_equal(own.unit_group, data.unit_group):
        return [f"  {folder.parent.name}: the variant's CTAs do not match the base's"]
    base_end = unit_ends(data.start, data.end)
    own_end = unit_ends(own.start, own.end)
    replayed = got["changed_schedule"]
    model_end = unit_ends(replayed.start, replayed.end)
    q = lambda a: np.percentile(a, [50, 90, 100])  # noqa: E731
    o, m = q(own_end), q(model_end)
    lines = [f"  {folder.parent.name}: variant {o[0]:6.0f} / {o[1]:6.0f} / {o[2]:6.0f} "
             f"(last - p90 {o[2] - o[1]:5.0f}) | model {m[0]:6.0f} / {m[1]:6.0f} / {m[2]:6.0f} "
             f"(last - p90 {m[2] - m[1]:5.0f}) | spans' change: variant "
             f"{own_end.max() / base_end.max() - 1:+.2%}, model {got['predicted_change']:+.2%}"]
    wait = ring_regions(data)[0][1]
    own_stretch, base_stretch = stretch_times(own, wait), stretch_times(data, wait)
    lost = own_stretch - np.nanmedian(own_stretch, 0)
    for s in range(lost.shape[1]):
        slow = np.flatnonzero(lost[:, s] > lost_ns)
        if slow.size:
            ctas = ", ".join(str(int(g)) for g in own.unit_group[slow])
            lines.append(
                f"      stretch {s}: CTAs {ctas} took {np.nanmedian(own_stretch[slow, s]):6.0f} ns "
                f"(the median CTA {np.nanmedian(own_stretch[:, s]):6.0f}); in the base "
                f"{np.nanmedian(base_stretch[slow, s]):6.0f} "
                f"({np.nanmedian(base_stretch[:, s]):6.0f}); they ended at "
                f"{', '.join(f'{e:.0f}' for e in own_end[slow])}")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("gpu_out", type=Path, nargs="+")
    ap.add_argument("--kernel", required=True, help="the entry's folder (persistent_ze, ...)")
    ap.add_argument("--variant", required=True)
    ap.add_argument("--lost-ns", type=float, default=2000.0,
                    help="a straggler lost more than this to the median CTA in one stretch")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    entry = zero_edit_entry(args.kernel, ap)
    if args.variant not in entry.variants:
        ap.error(f"{args.kernel} has no variant {args.variant!r}: {sorted(entry.variants)}")
    lines = [f"{entry.kernel}, {args.variant}: CTA ends (ns after the first start: median / "
             f"90th percentile / last), the variant's own trace against the model's replay "
             f"of the change (recorded kernel); stragglers: CTAs that lost more than "
             f"{args.lost_ns:.0f} ns to the median CTA in one stretch (eighths of the loop)"]
    for root in args.gpu_out:
        lines += run_lines(entry, root / entry.folder, args.variant, args.lost_ns)
    emit(lines, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
