"""Profile FlashAttention-4's Hopper forward without editing it (zero-edit mode).

FA4 (``flash-attn-4``, pinned in ``requirements-fa4.txt``) is 1,500 lines of CuTe DSL that
nobody here wrote: a producer warpgroup loads Q, K and V with TMA through
``cutlass.pipeline`` rings, two consumer warpgroups run QK^T, softmax and PV, and a named
barrier takes turns between them. ``cute_prof.autoprofile()`` records every one of those
pipeline and barrier calls, per warp, while the kernel compiles inside the block::

    with cute_prof.autoprofile(caches=[(fa._flash_attn_fwd, "compile_cache")]) as prof:
        out = flash_attn_func(q, k, v, causal=True)
    trace = prof.trace()

``caches=`` hands FA4 an empty compile cache for the block, so its kernel compiles again
(recording) even if this process ran it before. Run on an H100/H200::

    python examples/flash_attention.py                 # b=4, s=4096, h=16, d=128, both masks
    python examples/flash_attention.py --batch 1 --seqlen 1024 --no-save

It prints, per consumer warpgroup, the time spent waiting for K, for V and at the scheduler
barrier, the pipeline model derived from FA4's own pipeline objects (critical path, blockers,
ring occupancy), and writes the trace of one SM's CTAs (Perfetto JSON and .npz) to
``examples/traces/`` and its picture to ``docs/``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import cute_prof  # noqa: E402
from cute_prof.analysis import analyze_pipeline, derive_pipeline, format_pipeline_report  # noqa: E402
from cute_prof.analysis.zero_edit import (  # noqa: E402
    format_recording, format_wait_breakdown, wait_breakdown)

FA4_VERSION = "4.0.0b36"


def fa4_interface():
    from flash_attn.cute import interface

    return interface


def inputs(batch: int, seqlen: int, heads: int, dim: int, *, seed: int = 0):
    import torch

    gen = torch.Generator(device="cuda").manual_seed(seed)
    shape = (batch, seqlen, heads, dim)
    return [torch.randn(shape, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(3)]


def reference(q, k, v, causal: bool):
    import torch

    out = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal)
    return out.transpose(1, 2)


def profile_forward(q, k, v, *, causal: bool, per_warp: int = 4096, **options):
    """Run FA4's forward once inside ``autoprofile``; returns (out, AutoProfile)."""
    fa = fa4_interface()
    with cute_prof.autoprofile(per_warp=per_warp,
                               caches=[(fa._flash_attn_fwd, "compile_cache")]) as prof:
        out = fa._flash_attn_fwd(q, k, v, causal=causal, **options)[0]
    return out, prof


def one_sm(trace, sm: int = 0):
    """The events of the CTAs that ran on one SM: a trace small enough to commit and read."""
    events = trace.events[trace.events["sm"] == sm]
    tids = np.unique(events["tid"]).tolist()
    return dataclasses.replace(
        trace, events=events, track_names={t: trace.track_name(t) for t in tids},
        capacity=len(events), attempted=len(events), overflow=0,  # a whole part of the launch
        metadata={**trace.metadata, "subset": f"CTAs on SM {sm} (whole launch: "
                  f"{len(trace)} events)"})


def first_ctas(trace, count: int):
    """The events of the first ``count`` CTAs in a trace: one row per warp in a picture."""
    stride = trace.metadata["autoprof"]["warps_per_cta"]
    cta = trace.events["tid"] // stride
    keep = np.isin(cta, np.unique(cta)[:count])
    return dataclasses.replace(trace, events=trace.events[keep], capacity=int(keep.sum()),
                               attempted=int(keep.sum()), overflow=0)


def draw_picture(trace, path, device: str) -> None:
    """The picture in docs/: the first two CTAs of SM 0, one row per warp named by its role,
    the work between each warp's pipeline calls drawn as derived regions."""
    from cute_prof.analysis.roles import apply_roles
    from cute_prof.analysis.zero_edit import zero_edit_roles

    named = apply_roles(first_ctas(trace, 2), zero_edit_roles(trace))
    cute_prof.plot_timeline(named, path, max_tracks=48,
                            title=f"FA4 forward (causal), two CTAs of SM 0, {device}")


def completeness(trace) -> dict:
    """Every consumer warp of a CTA waits on K and V as often as the CTA's producer acquires
    them: per CTA, the counts must agree (nothing lost, nothing doubled)."""
    ev = trace.events
    names = np.array(trace.tag_names, dtype=object)[ev["tag"]]
    stride = trace.metadata["autoprof"]["warps_per_cta"]
    cta = ev["tid"] // stride
    out = {"ctas": int(np.unique(cta).size), "mismatched_ctas": 0}
    for ring in ("pipeline_k", "pipeline_v"):
        waits = names == f"{ring}.consumer_wait"
        acquires = names == f"{ring}.producer_acquire"
        if not waits.any():
            continue
        per_warp = np.unique(ev["tid"][waits], return_counts=True)
        warp_cta = per_warp[0] // stride
        lo = np.full(cta.max() + 1, np.iinfo(np.int64).max)
        hi = np.zeros(cta.max() + 1, dtype=np.int64)
        np.minimum.at(lo, warp_cta, per_warp[1])
        np.maximum.at(hi, warp_cta, per_warp[1])
        produced = np.bincount(cta[acquires], minlength=cta.max() + 1)
        seen = np.unique(warp_cta)
        bad = (lo[seen] != hi[seen]) | (hi[seen] != produced[seen])
        out["mismatched_ctas"] += int(bad.sum())
        out[f"{ring}_waits"] = int(waits.sum())
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seqlen", type=int, default=4096)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--masks", default="full,causal", help="full, causal or both (comma list)")
    ap.add_argument("--out", default=str(ROOT / "examples" / "traces"))
    ap.add_argument("--picture", default=str(ROOT / "docs" / "fa4_zero_edit_timeline.png"))
    ap.add_argument("--no-save", action="store_true", help="print the analysis only")
    ap.add_argument("--picture-from", metavar="TRACE",
                    help="only draw --picture from a saved causal trace (no GPU needed), e.g. "
                         "examples/traces/fa4_fwd_causal_h100.json.gz")
    args = ap.parse_args(argv)
    if args.picture_from:
        trace = cute_prof.load_trace(args.picture_from)
        device = str(trace.metadata.get("device", "")).split()[1].lower() \
            if len(str(trace.metadata.get("device", "")).split()) > 1 else "gpu"
        draw_picture(trace, args.picture, device)
        print(f"wrote {args.picture}")
        return 0

    import torch

    device = torch.cuda.get_device_name().split()[1].lower() if torch.cuda.is_available() else "cpu"
    q, k, v = inputs(args.batch, args.seqlen, args.heads, args.dim)
    for mask in args.masks.split(","):
        causal = mask == "causal"
        out, prof = profile_forward(q, k, v, causal=causal)
        error = float((out.float() - reference(q, k, v, causal).float()).abs().max())
        trace = prof.trace()
        print(f"\n== FA4 forward, {mask} mask, b={args.batch} s={args.seqlen} h={args.heads} "
              f"d={args.dim}: max |out - SDPA| = {error:.2e}")
        print(f"kernel {prof.kernels[0][:60]}...")
        print(format_recording(trace))
        print("complete:", completeness(trace))
        print(format_wait_breakdown(wait_breakdown(trace)))
        # the pipeline model from FA4's own pipeline objects: where the critical path runs
        derived = derive_pipeline(trace)
        print(derived.format_text())
        print(format_pipeline_report(analyze_pipeline(derived.trace, derived.spec)))
        if not args.no_save:
            os.makedirs(args.out, exist_ok=True)
            small = one_sm(trace)
            stem = Path(args.out) / f"fa4_fwd_{mask}_{device}"
            # the records as recorded (gzip it to commit it): no derived work regions
            cute_prof.export_trace(small, f"{stem}.json", derived=False)
            cute_prof.save_trace(f"{stem}.npz", small, compress=True)
            if mask == "causal":
                draw_picture(small, args.picture, device)
            print(f"wrote {stem}.json and .npz")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
