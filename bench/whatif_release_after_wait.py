"""What a starved ring pays after each wait, as the base shows it and as the variants pay it
(what-if README, stop 50): for every traced base launch of a GEMM entry, the releases whose
job had surely ended when the wait did (``critical_path.clean_releases``), its own and its
probed launch's, pooled as the model pools them (``critical_path.unwaited_release``); beside
them the stop-49 rule's reading (the median release offset of the job region's instances
within 64 ns of its 0.1th percentile); and each variant's mean release offset after its
waits (its own trace, never a model input).

    python bench/whatif_release_after_wait.py GPU_OUT [GPU_OUT ...] [--kernel quack] [--out F]
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
from tools.columns import launch_paths  # noqa: E402
from tools.pipeline_data import matched  # noqa: E402
from tools.report_text import emit  # noqa: E402
from whatif_check import zero_edit_entry  # noqa: E402

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("gpu_out", type=Path, nargs="+")
    ap.add_argument("--kernel", default="quack", help="a GEMM entry's folder (quack, gemm_ze, "
                                                      "persistent_ze)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    entry = zero_edit_entry(args.kernel, ap)
    lines = [f"# python bench/whatif_release_after_wait.py {' '.join(map(str, args.gpu_out))} "
             f"--kernel {args.kernel}",
             "run    launch  stop-49 rule  clean: own probed  pooled mean  | variant: mean "
             "release after its waits (ns)"]
    for root in args.gpu_out:
        folder = root / entry.folder
        traced = launch_paths(folder / entry.trace)
        probed = launch_paths(folder / entry.arrivals_trace) if entry.arrivals_trace else []
        variants = {}
        for name in entry.variants:
            path = folder / entry.variant_trace.format(variant=name)
            if path.exists():
                data = matched(entry.load(path))[1]
                tag = next(r.tag for r in data.spec.regions
                           if r.tag in cp.clean_releases(data))
                begin, _ = cp.work_spans(data)
                i = [r.tag for r in data.spec.regions].index(tag)
                offset = data.end[:, :, i] - begin[:, :, i]
                variants[name] = float(np.mean(offset[data.valid & (offset >= 0)]))
        shown = ", ".join(f"{k} {v:.1f}" for k, v in variants.items())
        for index, path in enumerate(traced):
            derived, data = matched(entry.load(path))
            own = cp.clean_releases(data)
            tag = next(iter(own))
            # the probed launch's, as the model takes them (DerivedPipeline.what_if_terms)
            other = (derived.what_if_terms(arrivals_from=entry.load(
                probed[index % len(probed)]))["release_sample"].get(tag, np.empty(0))
                if probed else np.empty(0))
            sample = {tag: other} if other.size else None
            model = cp.unwaited_release(data, release_sample=sample)[tag][0]
            pooled = own[tag].size + other.size
            reading = (f"{model:11.1f}" if pooled >= cp.MIN_CLEAN_RELEASES
                       else "   too few")  # the stop-49 rule's, then
            stop49 = cp.unwaited_release(data, min_clean=np.inf)[tag][0]
            lines.append(f"{root.name:6s} {index:6d}  {stop49:12.1f}  "
                         f"{own[tag].size:10d} {other.size:6d}  {reading}  | "
                         + (shown if index == 0 else ""))
    emit(lines, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
