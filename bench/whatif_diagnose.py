"""The figures the what-if README's diagnosis cites, from the same GPU output as the check:
each zero-edit base's replay against its measured iteration, and each variant's own trace
(never a model input): how often its consumer's waits blocked and how long its loads took.

    python bench/whatif_diagnose.py GPU_OUT [--out bench/results/whatif/diagnosis.txt]
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
from cute_prof.analysis.pipelines import derive_pipeline  # noqa: E402
from whatif_check import ENTRIES, folder_of  # noqa: E402

# the sensitivity sweeps the README cites: kernel folder -> (what-if, latencies in ns)
SWEEPS = {"gemm_ze": ({"depth": {"ab_pipe": 2}}, (768, 896, 1024, 1140)),
          "quack": ({"depth": {"pipeline_cls": 3}}, (896, 1000, 1056, 1150, 1250))}


def loads(trace) -> dict:
    """The loop's first consumes wait over the middle half of the iterations."""
    derived = derive_pipeline(trace)
    data = cp.match_records(derived.trace, derived.spec)
    terms = cp._infer_terms(data)
    w = next(i for i, r in enumerate(derived.spec.regions) if "consumes" in r.relations)
    iters = data.shape[1]
    mid = slice(iters // 4, 3 * iters // 4)
    dep, end = terms[3][:, mid, w], data.end[:, mid, w]
    blocked, _ = cp._blocked_and_free(data, w, terms[2][w], terms[3][:, :, w])
    blocked = blocked[:, mid]
    gap = (end - dep)[np.isfinite(dep)]
    return {"derived": derived, "data": data, "terms": terms, "wait": w,
            "period": float(np.nanmedian(np.diff(data.start[:, mid, w], axis=1))),
            "blocked_share": float(blocked.mean()),
            "blocked_latency": float(np.median((end - dep)[blocked])) if blocked.any() else None,
            "fastest": np.quantile(gap, [0.001, 0.01]) if gap.size else None}


def describe(name: str, got: dict) -> str:
    fast = got["fastest"]
    lat = "-" if got["blocked_latency"] is None else f"{got['blocked_latency']:.0f} ns"
    return (f"  {name:16s} period {got['period']:6.0f} ns, waits blocked "
            f"{got['blocked_share'] * 100:5.1f}%, blocked loads (end - issue, median) {lat}, "
            f"fastest loads p0.1 / p1 "
            + ("-" if fast is None else f"{fast[0]:.0f} / {fast[1]:.0f} ns"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("gpu_out", type=Path)
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/whatif/diagnosis.txt")
    args = ap.parse_args(argv)
    lines = [f"# {__doc__.splitlines()[0]}", f"# python bench/whatif_diagnose.py {args.gpu_out}", ""]
    for entry in [e for e in ENTRIES if e.derived]:
        folder = folder_of(args.gpu_out, entry)
        if folder is None:
            continue
        base_trace = entry.load(folder / entry.trace)
        base = loads(base_trace)
        data, terms = base["data"], base["terms"]
        replayed = cp.replay(data, terms=terms)
        w, iters = base["wait"], data.shape[1]
        mid = slice(iters // 4, 3 * iters // 4)
        fidelity = cp.what_if(data, terms=terms)["replay_error_median"]
        lines += [f"{entry.kernel} ({entry.folder})",
                  f"  base replay: {np.nanmedian(np.diff(replayed.start[:, mid, w], axis=1)):.0f} ns "
                  f"per iteration (measured {base['period']:.0f}), kernel end off by "
                  f"{fidelity * 100:+.1f}%; one record {base['derived'].record_ns:.0f} ns",
                  describe("base", base)]
        for name in entry.variants:
            path = folder / (entry.variant_trace or "").format(variant=name)
            if entry.variant_trace and path.exists():
                lines.append(describe(name, loads(entry.load(path))))
        if entry.folder in SWEEPS:
            change, latencies = SWEEPS[entry.folder]
            tag = data.spec.regions[w].tag
            sweep = [cp.what_if(data, terms=terms, latency={tag: value},
                                record_ns=base["derived"].record_ns, **change)["predicted_change"]
                     for value in latencies]
            lines.append(f"  {change} at a fixed load latency: " + ", ".join(
                f"{value} ns {p * 100:+.2f}%" for value, p in zip(latencies, sweep)))
        if base_trace.metadata.get("cluster"):
            no_cluster = base_trace.metadata.copy()
            no_cluster.pop("cluster")
            bare = derive_pipeline(type(base_trace)(**{**base_trace.__dict__,
                                                       "metadata": no_cluster}))
            first_change = next(c for c in entry.variants.values() if isinstance(c, dict))
            got = cp.predict_what_if(cp.match_records(bare.trace, bare.spec), first_change,
                                     **bare.what_if_terms())
            lines.append(f"  without the launch's cluster in the metadata, {first_change}: "
                         f"{got['predicted_change'] * 100:+.2f}%")
        lines.append("")
    text = "\n".join(lines)
    print(text)
    args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
