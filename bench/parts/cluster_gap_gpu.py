"""What a thread-block cluster adds between one CTA and the next on an SM (GPU).

The what-if model dispatches a kernel's later CTAs with the base trace's own launch gap; a
change of the cluster shape changes that gap, which the base cannot show. This probe
measures the gap per cluster size on a kernel of its own: each CTA (one per SM) runs
``--iters`` round trips of ``record_cost.py chain``'s ping-pong, recorded by
``cute_prof.autoprofile()``, a cluster launch adding the cluster barrier a multicast
kernel's prologue has. Gap = an SM's CTA's first record less the end of the last record of
the CTA before it, over ``--launches`` traced launches.

    python bench/whatif.py cluster-gap --sizes 1,2 --out $OUT/cluster_gap.json

Writes ``cluster_gap.json`` (``gap_ns`` per size), which the check's ``cluster_gaps`` reads.
H100: 352 ns alone, 416 ns in clusters of two (bench/results/whatif/cluster_gap.txt at d2970b0).
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from cute_prof.analysis.dispatch import launch_gaps  # noqa: E402

# one CTA per SM: a launch asks for this much dynamic shared memory (an H100 SM has 228 KB)
SMEM_BYTES = 160 * 1024
WARPS = 2  # record_chain's ping-pong with one consumer warp: a producer and a consumer


def cta_spans(trace, warps_per_cta: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each CTA's first record start, last record end (ns) and SM."""
    ev = trace.events
    _, inv = np.unique(ev["tid"].astype(np.int64) // warps_per_cta, return_inverse=True)
    first = np.full(inv.max() + 1, np.iinfo(np.int64).max)
    np.minimum.at(first, inv, ev["start_ns"])
    last = np.full(inv.max() + 1, np.iinfo(np.int64).min)
    np.maximum.at(last, inv, ev["start_ns"] + ev["dur_ns"])
    sm = np.zeros(inv.max() + 1, dtype=np.int64)
    sm[inv] = ev["sm"]
    return first, last, sm


def sm_gaps(trace, warps_per_cta: int) -> np.ndarray:
    """Each SM's gaps (ns) from one CTA's last record end to the next CTA's first start."""
    return launch_gaps(*cta_spans(trace, warps_per_cta))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1,2", help="cluster sizes (CTAs along x)")
    ap.add_argument("--waves", type=int, default=4, help="CTAs per SM over the launch")
    ap.add_argument("--iters", type=int, default=256, help="round trips per CTA")
    ap.add_argument("--launches", type=int, default=5, help="traced launches per size")
    ap.add_argument("--out", type=Path, default=None,
                    help="the JSON result (default $OUT/cluster_gap.json)")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    if any(s < 1 for s in sizes) or args.waves < 2 or args.launches < 1:
        ap.error("sizes >= 1, --waves >= 2 (a gap needs a CTA after another), --launches >= 1")
    import cuda.bindings.driver as cuda
    import cutlass
    import cutlass.cute as cute
    import torch
    from cutlass.cute.runtime import from_dlpack

    import cute_prof
    from parts.record_chain import build

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    n = cutlass.Int32(args.iters)
    result = {"device": f"{torch.cuda.get_device_name()}, CUDA {torch.version.cuda}",
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "command": "python bench/whatif.py cluster-gap " + " ".join(argv or sys.argv[1:]),
              "iters": args.iters, "sms": sms, "gap_ns": {}, "gap_quartiles_ns": {},
              "gaps": {}, "cta_ns": {}}
    for size in sizes:
        ctas = (args.waves * sms) // size * size
        out = torch.zeros(ctas, dtype=torch.int32, device="cuda")
        view = from_dlpack(out)
        with cute_prof.autoprofile(per_warp=3 * args.iters + 64, max_warps=ctas * WARPS) as prof:
            compiled = cute.compile(build(args.iters, cluster_size=size,
                                          smem_bytes=SMEM_BYTES), view, n, stream)
        gaps, cta_ns = [], []
        for _ in range(args.launches):
            prof.reset()
            for _ in range(3):  # warm: the traced launch follows launches of its own kernel
                compiled(view, n, stream)
            torch.cuda.synchronize()
            prof.reset()
            compiled(view, n, stream)
            torch.cuda.synchronize()
            if int(out.min()) != args.iters:
                raise SystemExit(f"cluster {size}: the ping-pong did not finish")
            trace = prof.trace()
            gaps.append(sm_gaps(trace, WARPS))
            first, last, _ = cta_spans(trace, WARPS)
            cta_ns.append(float(np.median(last - first)))
        pooled = np.concatenate(gaps)
        if not pooled.size:
            raise SystemExit(f"cluster {size}: no SM ran two CTAs one after the other")
        result["gap_ns"][str(size)] = float(np.median(pooled))
        result["gap_quartiles_ns"][str(size)] = [float(q) for q in np.quantile(pooled, [.25, .75])]
        result["gaps"][str(size)] = [float(np.median(g)) for g in gaps]
        result["cta_ns"][str(size)] = cta_ns
        print(f"cluster {size}: {ctas} CTAs, gap median {result['gap_ns'][str(size)]:.0f} ns "
              f"(per launch {', '.join(f'{g:.0f}' for g in result['gaps'][str(size)])}; "
              f"{pooled.size} gaps), CTA {np.median(cta_ns) / 1e3:.1f} us", flush=True)
    target = args.out or Path(os.environ.get("OUT", ".")) / "cluster_gap.json"
    target.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
