"""Profile quack's Hopper GEMM without editing it (zero-edit mode).

``quack-kernels`` (pinned in ``requirements-fa4.txt``) has its own ``quack.pipeline``
classes, subclasses of ``cutlass.pipeline``'s, a persistent tile scheduler and producer /
consumer warpgroups. Nothing here knows its source: ``cute_prof.autoprofile()`` wraps the
pipeline classes while the kernel compiles, and the pipeline model comes from the calls
the kernel made::

    with cute_prof.autoprofile() as prof:
        out = gemm(a, b, tuned=False)
    derived = derive_pipeline(prof.trace())

quack keeps compiled kernels on disk; this script turns that cache off before importing
quack (``QUACK_CACHE_ENABLED=0``) so the kernel compiles in this process, inside the block.
Run on an H100/H200::

    python examples/quack_gemm.py                       # 4096^3 bf16, cooperative
    python examples/quack_gemm.py --schedule pingpong --json out.json

``--schedule``: ``cooperative`` (both consumer warpgroups work on every tile: every A/B
stage goes to both, as FA4's K and V do; the derived model covers it) or ``pingpong``
(quack's default on Hopper: the warpgroups take tiles in turn; the trace and the waits are
complete, and the derived model says why it does not cover a ring split that way).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("QUACK_CACHE_ENABLED", "0")  # compile in this process, not from disk

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import cute_prof  # noqa: E402
from cute_prof.analysis import analyze_pipeline, derive_pipeline, format_pipeline_report  # noqa: E402
from cute_prof.analysis.zero_edit import (  # noqa: E402
    call_balance, format_recording, format_wait_breakdown, wait_breakdown)

QUACK_VERSION = "0.6.5"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mnk", default="4096,4096,4096")
    ap.add_argument("--schedule", choices=("cooperative", "pingpong"), default="cooperative")
    ap.add_argument("--json", help="write the checks and the analysis here")
    args = ap.parse_args(argv)
    import torch
    from quack.gemm_config import GemmConfig
    from quack.gemm_interface import gemm_tuned

    m, n, k = (int(x) for x in args.mnk.split(","))
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    cooperative = args.schedule == "cooperative"
    config = GemmConfig(tile_m=256 if cooperative else 128, tile_n=128 if cooperative else 192,
                        pingpong=not cooperative, cluster_m=2, cluster_n=1,
                        is_dynamic_persistent=False, device_capacity=9)
    with cute_prof.autoprofile(per_warp=4096) as prof:
        gemm_tuned.fn(a, b, out, config=config)
    error = float(((out.float() - a.float() @ b.float()).abs().max()) / (k ** 0.5))
    trace = prof.trace()
    # the launch's cluster: the CTAs of a cluster share each A/B slot (multicast), which the
    # derived model reads from here (the kernel's records do not carry it)
    trace.metadata["cluster"] = [config.cluster_m, config.cluster_n]
    meta = trace.metadata
    print(f"== quack GEMM {m}x{n}x{k} bf16, {args.schedule} ({config.tile_m}x{config.tile_n} "
          f"tiles): max |out - torch| / sqrt(k) = {error:.2e}")
    print(f"kernels recorded: {[name[:70] for name in prof.kernels]}")
    print(format_recording(trace))
    balance = call_balance(trace)
    for row in balance:
        print("calls:", row)
    print(format_wait_breakdown(wait_breakdown(trace)))
    result = {"mnk": [m, n, k], "schedule": args.schedule, "error": error, "kernels": prof.kernels,
              "events": len(trace), "overflow": trace.overflow,
              "unclosed": meta["slices_unclosed_warps"], "diverged": meta["slices_diverged_warps"],
              "pipelines": meta["autoprof"]["pipelines"], "roles": meta["autoprof"]["roles"]["roles"],
              "balance": balance}
    try:
        derived = derive_pipeline(trace)
    except cute_prof.ProfileBufferError as err:  # a schedule the derived model does not cover
        print(f"derived pipeline model: {err}")
        result["derived_error"] = str(err)
    else:
        print(derived.format_text())
        depth = {r.name: r.depth for r in derived.spec.resources}
        # one ring stage fewer and one more, predicted as bench/whatif_check.py checks them
        report = analyze_pipeline(derived.trace, derived.spec, what_ifs=[
            {"depth": {name: max(d - 1, 1) for name, d in depth.items()}},
            {"depth": {name: d + 1 for name, d in depth.items()}}],
            **derived.what_if_terms())
        print(format_pipeline_report(report))
        result.update(derived=derived.describe(), analysis=report)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
