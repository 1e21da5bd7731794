"""Profile the warp-specialised GEMM (examples/ws_gemm.py) with cute_prof and check the trace.

    python examples/ws_gemm_profile.py                       # 2048 x 2048 x 8192, level 2
    python examples/ws_gemm_profile.py --mnk 4096,4096,4096 --level 1 -o /tmp/ws.json
    python examples/ws_gemm_profile.py --cluster-m 1                # no cluster / multicast

Default size: 16 x 8 = 128 CTAs (one wave on a 132-SM H100/H200), 128 k-tiles each.

What it does:
1. runs the instrumented GEMM inside ``cute_prof.profile_session`` and checks C against
   torch.matmul;
2. writes the trace as Chrome/Perfetto JSON (and ``.pftrace`` when ``cute_prof.export.pftrace_writer``
   exists);
3. prints the per-tag summary (``cute_prof.analysis.summarize``) and who waited on what
   (``cute_prof.analysis.waits.analyze_waits`` with ``examples/ws_gemm_roles.json``);
4. checks: exact record counts per role; per consumer warp, the per-k-tile MMA times sum
   to within 5% of that warp's mainloop span (figure reported); no two regions of the same
   warp and tag overlap.
Exit status 0 when every check passes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

from cute_prof.analysis import apply_roles, format_duration, load_role_spec, summarize
from cute_prof.analysis.waits import analyze_waits

ROOT = Path(__file__).resolve().parents[1]
ROLE_SPEC = ROOT / "examples" / "ws_gemm_roles.json"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

MMA_COVERAGE_TOL = 0.05


# ----------------------------------------------------------------------------- running
def run_profiled(W, m, n, k, level, trace_path, recorder="staged", tile_n=256, cluster=None):
    """Launch once under profile_session; returns (c, a, b, records, attempted, trace).
    ``cluster``: (cluster_m, cluster_n), None = the GemmConfig default."""
    import torch

    import cute_prof

    cfg = dict(recorder=recorder, tile_n=tile_n)
    if cluster is not None:
        cfg.update(cluster_m=cluster[0], cluster_n=cluster[1])
    runner = W.CompiledWsGemm(W.GemmConfig(**cfg))
    exp = W.expected_counts(runner.gemm, m, n, k, level)
    max_events = exp["total"] + 64  # a little slack: an excess would show as a count error
    torch.manual_seed(0)
    a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    b = torch.randn(n, k, device="cuda").to(torch.bfloat16)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    # compile first, outside the session (compilation is not what we profile)
    runner.compile(a, b, c, W.alloc_prof(1), level)

    with cute_prof.profile_session(max_events, None, str(trace_path), device="cuda") as prof:
        runner.prepare(a, b, c, prof.tensor, max_events, level)()
    trace = prof.trace
    return runner, c, a, b, trace.events, trace.attempted, trace


def write_pftrace(trace, json_path):
    """The same trace as a native .pftrace next to the JSON; None where this machine has
    no ``perfetto`` package."""
    from cute_prof.errors import ProfileBufferError
    from cute_prof.export.pftrace_writer import write_pftrace as write

    try:
        return write(trace, Path(json_path).with_suffix(".pftrace"))
    except ProfileBufferError as exc:
        print(f"(no .pftrace: {exc})")
        return None


# ----------------------------------------------------------------------------- analysis
def mma_coverage(W, gemm, records, ids):
    """Per consumer warp: sum(mma_ktile) / consumer_mainloop span, and the share of the span
    spent in "wait full" (nested inside the mma periods, except the pipeline fill)."""
    main = records[records["tag"] == ids[W.TAG_CONSUMER_MAINLOOP]]
    if main.size == 0:
        return None
    mma = records[records["tag"] == ids[W.TAG_MMA_KTILE]]
    wf = records[records["tag"] == ids[W.TAG_WAIT_FULL]]
    tids = main["tid"].astype(np.int64)
    order = np.argsort(tids)
    tids, span = tids[order], main["dur_ns"][order].astype(np.float64)

    def per_warp(r):
        idx = np.searchsorted(tids, r["tid"].astype(np.int64))
        return np.bincount(idx, weights=r["dur_ns"].astype(np.float64), minlength=tids.size)

    mma_sum, wf_sum = per_warp(mma), per_warp(wf)
    ratio = mma_sum / span
    waiting = wf_sum / span
    first_wait = wf[wf["payload"] == 0]["dur_ns"].astype(np.float64)
    return {
        "warps": int(tids.size),
        "mma_over_span": {"min": float(ratio.min()), "median": float(np.median(ratio)),
                          "max": float(ratio.max()), "mean": float(ratio.mean())},
        "wait_full_over_span": {"min": float(waiting.min()), "median": float(np.median(waiting)),
                                "max": float(waiting.max())},
        "within_tol_fraction": float((np.abs(1.0 - ratio) <= MMA_COVERAGE_TOL).mean()),
        "first_ktile_wait_ns_mean": float(first_wait.mean()) if first_wait.size else 0.0,
        "mainloop_span_ns_mean": float(span.mean()),
    }


def overlaps(records):
    """Number of (warp, tag) pairs of consecutive regions that overlap."""
    if records.size == 0:
        return 0
    key = (records["tid"].astype(np.int64) << 16) | records["tag"].astype(np.int64)
    order = np.lexsort((records["start_ns"], key))
    k, s = key[order], records["start_ns"][order]
    e = s + records["dur_ns"][order]
    same = k[1:] == k[:-1]
    return int((same & (s[1:] < e[:-1])).sum())


# ----------------------------------------------------------------------------- main
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mnk", default="2048,2048,8192")
    ap.add_argument("--level", type=int, default=2, choices=[1, 2])
    ap.add_argument("--recorder", default="staged", choices=["staged", "direct"],
                    help="cute_prof write path: WarpRecorder (staged) or profile_stop (direct)")
    ap.add_argument("--tile-n", type=int, default=256, choices=[128, 256],
                    help="CTA tile N (128 leaves room for 6 pipeline stages instead of 4)")
    ap.add_argument("--cluster-m", type=int, default=None, choices=[1, 2],
                    help="CTAs per cluster along M (share B by TMA multicast); default: "
                    "GemmConfig's")
    ap.add_argument("--cluster-n", type=int, default=None, choices=[1, 2],
                    help="CTAs per cluster along N (share A); default: GemmConfig's")
    ap.add_argument("-o", "--output", default=None, help="trace path (.json); default $OUT or /tmp")
    args = ap.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        print("no CUDA GPU: nothing to profile")
        return 2
    from examples import ws_gemm as W

    m, n, k = (int(x) for x in args.mnk.split(","))
    cluster = (W.GemmConfig.cluster_m if args.cluster_m is None else args.cluster_m,
               W.GemmConfig.cluster_n if args.cluster_n is None else args.cluster_n)
    ctag = f"c{cluster[0]}x{cluster[1]}"
    out_dir = Path(os.environ.get("OUT") or "/tmp")
    trace_path = (Path(args.output) if args.output
                  else out_dir / f"ws_gemm_l{args.level}_{args.recorder}_{ctag}_{m}x{n}x{k}.json")
    if trace_path.exists():
        trace_path.unlink()

    runner, c, a, b, records, attempted, trace = run_profiled(
        W, m, n, k, args.level, trace_path, args.recorder, args.tile_n, cluster)
    gemm = runner.gemm
    ok = True
    ref = a.float() @ b.float().T
    err = ((c.float() - ref).norm() / ref.norm()).item()
    print(f"device {torch.cuda.get_device_name()}: {m}x{n}x{k}, tile 128x{args.tile_n}, "
          f"cluster {cluster[0]}x{cluster[1]}, level {args.level} ({args.recorder}), "
          f"{gemm.num_ctas(m, n)} CTAs x {gemm.k_tiles(k)} k-tiles; rel err {err:.3e}")
    ok &= err < 1e-2

    print(f"trace: {trace_path} ({trace_path.stat().st_size / 1e6:.1f} MB)" if trace_path.exists()
          else f"trace: NOT written ({trace_path})")
    pf = write_pftrace(trace, trace_path)
    if pf:
        print(f"trace: {pf}")

    # --- summary
    ids = W.tag_ids()
    summary = summarize(trace)  # per tag: count, mean, p50, p90, p99, ...
    print(summary)

    # --- who waited on what: the library's analysis with the GEMM's role spec
    spec = load_role_spec(ROLE_SPEC)
    analysis = analyze_waits(apply_roles(trace, spec), spec)
    print(analysis.format_text())

    # --- checks
    errors = W.check_counts(records, gemm, m, n, k, args.level)
    print(f"record counts: {len(records)} records, attempted {attempted}, expected "
          f"{W.expected_counts(gemm, m, n, k, args.level)['total']}: {'ok' if not errors else 'FAIL'}")
    for e in errors:
        print(f"  {e}")
    ok &= not errors

    cov = None
    if args.level >= 2:
        cov = mma_coverage(W, gemm, records, ids)
        r = cov["mma_over_span"]
        verdict = "ok" if abs(1 - r["min"]) <= MMA_COVERAGE_TOL and abs(1 - r["max"]) <= MMA_COVERAGE_TOL else "FAIL"
        print(f"MMA coverage: sum(mma_ktile) / consumer mainloop span over {cov['warps']} consumer warps: "
              f"min {r['min']:.4f}, median {r['median']:.4f}, max {r['max']:.4f}  "
              f"(within {MMA_COVERAGE_TOL:.0%}: {100 * cov['within_tol_fraction']:.1f}% of warps) -> {verdict}")
        b2 = cov["wait_full_over_span"]
        print(f"  of which waiting for data (wait_full) / span: min {b2['min']:.4f}, median {b2['median']:.4f}, "
              f"max {b2['max']:.4f}; "
              f"first k-tile wait (pipeline fill) mean {format_duration(cov['first_ktile_wait_ns_mean'])}, "
              f"mainloop span mean {format_duration(cov['mainloop_span_ns_mean'])}")
        ok &= verdict == "ok"

    ov = overlaps(records)
    print(f"overlapping regions (same warp and tag): {ov} -> {'ok' if ov == 0 else 'FAIL'}")
    ok &= ov == 0

    out = os.environ.get("OUT")
    if out:
        (Path(out) / f"ws_gemm_profile_l{args.level}_{args.recorder}_{ctag}.json").write_text(json.dumps({
            "mnk": [m, n, k], "level": args.level, "recorder": args.recorder,
            "cluster": list(cluster), "tile_n": args.tile_n, "rel_err": err, "records": int(len(records)),
            "attempted": attempted, "count_errors": errors, "pipeline": analysis.to_dict(),
            "mma_coverage": cov,
            "overlaps": ov, "summary": summary.to_dict(), "ok": bool(ok)}, indent=2, default=float))
    print("ALL CHECKS PASSED" if ok else "SOME CHECKS FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
