"""Where a starved ring's loads stand against every base-only way of lowering the memory's
load: the GEMMs' probed launches of one GPU run (diagnosis: the variant's own probed launch
is never a model input). Per launch kind: the base, the base on half the SMs (``--lighter-load``),
the base with its consumers slowed by D ns after each release (``--slowed``,
``autoprofile(consumer_delay_ns=D)``: every SM running, at a lower throughput) and the
2-stage variant (``--probe-variants``): its span, its ring's commits per microsecond, and its
sampled loads' latency over the loop's middle half.

    python bench/whatif_slowed_loads.py GPU_OUT [GPU_OUT ...] [--out FILE]

(stop 64: ``bench/results/whatif/slowed_loads.md``; GPU_OUT as ``bench/whatif_all_gpu.sh``
leaves it, with GEMM_SLOWED, PERSISTENT_SLOWED, QUACK_SLOWED and the probe variants set.)
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from whatif_check import zero_edit_entry  # noqa: E402

from cute_prof.analysis.pipelines import load_arrival_sample, ring_commits  # noqa: E402

# the check's folders with the variant whose loads are compared, and its probed trace's name
KERNELS = {"gemm_ze": "stages2", "persistent_ze": "stages2", "quack": "stages_minus2"}
LAUNCH = re.compile(r"^trace_(?:ze_)?(?P<kind>.+)_arrivals(?:\.launch(?P<index>\d+))?\.npz$")


def launch_kinds(folder: Path) -> dict[str, list[Path]]:
    """Each probed launch kind of a part's folder (base, base_lighter, base_slowed<D>,
    <variant>) with its launches' files, in launch order."""
    kinds: dict[str, list[tuple[int, Path]]] = {}
    for path in folder.glob("*_arrivals*.npz"):
        match = LAUNCH.match(path.name)
        if match:
            index = int(match["index"]) if match["index"] else 0
            kinds.setdefault(match["kind"], []).append((index, path))
    return {kind: [p for _, p in sorted(paths)] for kind, paths in kinds.items()}


def launch_loads(entry, path: Path) -> dict:
    """One probed launch: its span (us), its ring's commits per us and its sampled loads'
    latencies (ns) past the loop's first and before its last quarter."""
    raw = entry.load(path)
    sample = next(iter(load_arrival_sample(raw).values()))
    _, stamps, _, _ = next(iter(ring_commits(raw).values()))
    position = sample["position"]
    low, high = np.quantile(position, (0.25, 0.75))
    middle = sample["latency_ns"][(position > low) & (position < high)]
    return {"span_us": float(np.ptp(raw.events["start_ns"])) / 1e3,
            "commits_per_us": stamps.size / float(np.ptp(stamps)) * 1e3, "latency": middle}


def kind_order(kind: str) -> tuple:
    slowed = re.match(r"base_slowed(\d+)$", kind)
    return ((0, 0) if kind == "base" else (1, 0) if kind == "base_lighter"
            else (2, int(slowed[1])) if slowed else (3, 0))


def kernel_table(run: Path, folder: str, variant: str) -> list[str]:
    entry = zero_edit_entry(folder)
    kinds = launch_kinds(run / entry.folder)
    if variant not in kinds:
        return [f"{run.name} {folder}: no probed {variant} launch (--probe-variants)", ""]
    rows = {kind: [launch_loads(entry, p) for p in kinds[kind]] for kind in kinds}
    variant_mean = float(np.mean(np.concatenate([r["latency"] for r in rows[variant]])))
    lines = [f"{run.name} {entry.kernel}", "",
             "| launch | launches | span (us) | commits / us | latency p10 / median / p90 (ns) "
             "| mean (ns) | mean less the variant's |", "|---|---:|---:|---:|---|---:|---:|"]
    for kind in sorted(rows, key=kind_order):
        lat = np.concatenate([r["latency"] for r in rows[kind]])
        mean = float(lat.mean())
        p10, p50, p90 = np.quantile(lat, (0.1, 0.5, 0.9))
        label = f"{kind} (the variant: diagnosis)" if kind == variant else kind
        lines.append(f"| {label} | {len(rows[kind])} "
                     f"| {np.median([r['span_us'] for r in rows[kind]]):.1f} "
                     f"| {np.median([r['commits_per_us'] for r in rows[kind]]):.1f} "
                     f"| {p10:.0f} / {p50:.0f} / {p90:.0f} | {mean:.0f} "
                     f"| {mean - variant_mean:+.0f} |")
    return lines + [""]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("gpu_out", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, help="also write the tables here (Markdown)")
    args = ap.parse_args(argv)
    lines = []
    for run in args.gpu_out:
        device = run / "device.txt"
        if device.exists():
            lines += [f"{run.name}: {device.read_text().strip()}", ""]
        for folder, variant in KERNELS.items():
            if (run / folder).is_dir():
                lines += kernel_table(run, folder, variant)
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
