"""What the load-arrival probes measured and cost, and where FA4's depth-1 slowdown comes
from (issue #27), from the GPU output of ``bench/whatif_all_gpu.sh``:

* per kernel: the sampled loads' latency per ring (commit -> full barrier complete), the
  probed launch's span against the unprobed base trace's (one launch each), and the time
  from a commit's stamp to its probe's first timer read (a commit followed by nothing but
  the probe: one record's own time, where the kernel issues nothing in between);
* FA4 (base and 1-stage variant): per consumer warpgroup, its mean blocked time on K's and
  V's waits and how far the second warpgroup's calls trail the first's. The derived model
  merges the two warpgroups into one role (a slot is free once the later one released it),
  so the earlier one's waits, which a 1-deep ring makes block, are not in it.

    python bench/whatif_probes.py GPU_OUT [--out FILE]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from cute_prof.analysis.pipelines import (  # noqa: E402
    STAGGER_SHARE, derive_pipeline, load_arrival_latency, load_arrival_pairs, warpgroup_lead_shares)
from tools.columns import load_columns  # noqa: E402

WARPS_PER_WARPGROUP = 4
# (GPU_OUT sub-folder, base trace, probed base trace, label)
KERNELS = [("gemm_ze", "trace_ze_base.npz", "trace_ze_base_arrivals.npz", "ws_gemm 4096^3"),
           ("persistent_ze", "trace_ze_base.npz", "trace_ze_base_arrivals.npz",
            "persistent ws_gemm 4096x4096x1024"),
           ("quack", "trace_base.npz", "trace_base_arrivals.npz", "quack GEMM 4096^3"),
           ("fa4", "trace_base.npz", "trace_base_arrivals.npz", "FA4 b4 s4096"),
           ("fa4_causal", "trace_base.npz", "trace_base_arrivals.npz", "FA4 causal b4 s4096"),
           ("fa4_small", "trace_base.npz", "trace_base_arrivals.npz", "FA4 b1 s1024")]


def span(trace) -> float:
    ev = trace.events
    return float((ev["start_ns"] + ev["dur_ns"]).max() - ev["start_ns"].min())


def commit_to_probe(trace) -> np.ndarray:
    """Per probe: its first timer read less the stamp of the commit it measures."""
    pairs = load_arrival_pairs(trace)
    return (pairs["probe"] - pairs["commit"]).astype(np.float64)


def probes(root: Path) -> list[str]:
    lines = ["sampled loads (commit -> full barrier complete), ns; probe cost: the probed "
             "launch's span against the base trace's (one launch each)"]
    for folder, base_name, probed_name, label in KERNELS:
        base_path, probed_path = root / folder / base_name, root / folder / probed_name
        if not probed_path.exists():
            lines.append(f"  {label}: no {folder}/{probed_name}")
            continue
        probed, base = load_columns(probed_path), load_columns(base_path)
        gap = commit_to_probe(probed)
        lines.append(f"  {label}: span {span(probed) / 1e3:.2f} us probed vs {span(base) / 1e3:.2f}"
                     f" us ({span(probed) / span(base) - 1:+.2%}); commit stamp -> probe's "
                     f"timer read mean {gap.mean():.1f} ns, median {np.median(gap):.0f} ns")
        for ring, x in load_arrival_latency(probed).items():
            p5, p25, p50, p75, p95 = np.percentile(x, [5, 25, 50, 75, 95])
            lines.append(f"    {ring}: {x.size:,} loads, p5 {p5:.0f}, p25 {p25:.0f}, median "
                         f"{p50:.0f}, mean {x.mean():.0f}, p75 {p75:.0f}, p95 {p95:.0f}")
    return lines


def lead_shares(root: Path) -> list[str]:
    lines = ["", "consumer warpgroups: on each consumes wait of the derived loop, the share of "
             "items whose wait the leading warpgroup ends first (the derived model takes a "
             f"role as staggered at >= {STAGGER_SHARE:.0%}: track_group)"]
    for folder, base_name, _, label in KERNELS:
        path = root / folder / base_name
        if not path.exists():
            continue
        derived = derive_pipeline(load_columns(path))
        names = list(derived.trace.tag_names)
        waits = [names.index(r.tag) for r in derived.spec.regions if "consumes" in r.relations]
        shares = warpgroup_lead_shares(derived.trace.events, waits,
                                       int(derived.spec.roles.tid_stride))
        lines.append(f"  {label}: " + ", ".join(f"{names[t]} {v:.3f}" for t, v in shares.items())
                     + f"; track_group {derived.spec.track_group}")
    return lines


def warpgroups(root: Path) -> list[str]:
    lines = ["", "FA4 consumer warpgroups (slots 4-7 = wg1, 8-11 = wg2): mean blocked time per "
             "wait (ns) and how far wg2's call ends trail wg1's (median, ns)"]
    for folder in ("fa4", "fa4_causal", "fa4_small"):
        for name in ("trace_base.npz", "trace_stages1.npz"):
            path = root / folder / name
            if not path.exists():
                continue
            derived = derive_pipeline(load_columns(path))
            ev, names = derived.trace.events, list(derived.trace.tag_names)
            stride = int(derived.spec.roles.tid_stride)
            cost = {}
            parts = []
            for tag in ("pipeline_k.consumer_wait", "pipeline_v.consumer_wait",
                        "pipeline_k.consumer_release"):
                rows = ev[ev["tag"] == names.index(tag)]
                slot = rows["tid"] % stride
                wg = slot // WARPS_PER_WARPGROUP
                dur = rows["dur_ns"].astype(np.float64)
                cost[tag] = float(dur.min()) if dur.size else 0.0
                key = (rows["tid"] // stride) * (1 << 20) + rows["payload"].astype(np.int64)
                ends = {}
                for g in (1, 2):
                    here = wg == g
                    k, inv = np.unique(key[here], return_inverse=True)
                    last = np.full(k.size, -np.inf)
                    # offsets from the trace's first stamp: absolute ns as float64 would
                    # round to 256 ns
                    end = rows["start_ns"] + rows["dur_ns"] - ev["start_ns"].min()
                    np.maximum.at(last, inv, end[here].astype(np.float64))
                    ends[g] = dict(zip(k.tolist(), last.tolist()))
                    if tag.endswith("wait"):
                        blocked = np.maximum(dur[here] - cost[tag], 0.0)
                        parts.append(f"{tag.split('.')[0][9:]} wait wg{g} {blocked.mean():.0f}")
                common = sorted(set(ends[1]) & set(ends[2]))
                if tag.endswith("release") and common:
                    trail = np.median([ends[2][c] - ends[1][c] for c in common])
                    parts.append(f"wg2's K release trails wg1's by {trail:.0f}")
            lines.append(f"  {folder}/{name}: " + ", ".join(parts))
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("gpu_out", type=Path)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    text = "\n".join([f"# python bench/whatif_probes.py GPU_OUT  (GPU_OUT: {args.gpu_out})",
                      *probes(args.gpu_out), *lead_shares(args.gpu_out),
                      *warpgroups(args.gpu_out)]) + "\n"
    print(text, end="")
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
