"""Warp-specialised GEMM benchmark: correctness, then speed at 8192^3 with and without
profiling, next to cuBLAS (torch.matmul) in the same process.

    python bench/parts/ws_gemm_bench.py                 # full run (needs a Hopper GPU)
    python bench/parts/ws_gemm_bench.py --size 4096 --reps 30

Steps:
1. correctness: several sizes (tile multiples and not) at profile level 0, one at level 2
   with exact record counts; relative Frobenius error vs an fp32 reference.
2. timing at --size (default 8192): CUPTI kernel-duration medians over --reps rounds
   (variants in a fresh random order each round) after
   --warmup launches, random normal inputs. Rows: cuBLAS, level 0, level 1, level 2 (the
   default staged WarpRecorder write path), levels 1 and 2 with the direct write path
   (one profile_stop atomic per record) and level 2 with the slices path, all with the default GemmConfig (2 x 1 cluster,
   B multicast); then level 0 without a cluster (1 x 1) for comparison. The profile counter is zeroed
   before every timed launch (outside the events), so every launch writes all its records.
3. a table (last thing printed) with ms, TFLOP/s, % of cuBLAS, overhead vs level 0;
   ``$OUT/ws_gemm_bench.json`` when OUT is set.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import torch  # noqa: E402

from tools.cupti import time_shuffled  # noqa: E402


def rel_err(c, ref):
    return ((c.float() - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def correctness(W, runner, sizes, log):
    results = []
    ok = True
    for m, n, k in sizes:
        torch.manual_seed(m * 7 + n * 3 + k)
        a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
        b = torch.randn(n, k, device="cuda").to(torch.bfloat16)
        c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        t0 = time.time()
        runner.prepare(a, b, c, W._dummy_prof(a.device), 0, 0)()
        torch.cuda.synchronize()
        ref = a.float() @ b.float().T
        err = rel_err(c, ref)
        nan = bool(torch.isnan(c.float()).any())
        good = err < 1e-2 and not nan
        ok &= good
        results.append({"m": m, "n": n, "k": k, "rel_err": err, "nan": nan, "ok": good})
        log(f"  {m:>6} x {n:>6} x {k:>6}: rel err {err:.3e}{'  NaN!' if nan else ''}  "
            f"{'ok' if good else 'FAIL'}  ({time.time() - t0:.1f}s)")
    return ok, results


def count_check(W, runner, m, n, k, level, log):
    exp = W.expected_counts(runner.gemm, m, n, k, level)
    a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    b = torch.randn(n, k, device="cuda").to(torch.bfloat16)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    buf, max_events = W.alloc_prof_for(runner.gemm, m, n, k, level)
    runner.prepare(a, b, c, buf, max_events, level)()
    torch.cuda.synchronize()
    recs, attempted = W.decode_records(buf.cpu().numpy())
    attempted //= W.words_per_region(runner.gemm)  # regions
    errors = W.check_counts(recs, runner.gemm, m, n, k, level)
    err = rel_err(c, a.float() @ b.float().T)
    log(f"  level {level} {m}x{n}x{k}: {len(recs)} records (attempted {attempted}, expected "
        f"{exp['total']}), rel err {err:.3e}; count check: {'ok' if not errors else errors}")
    return not errors and err < 1e-2 and attempted == exp["total"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=8192, help="M = N = K for timing")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--skip-correctness", action="store_true")
    args = ap.parse_args(argv)
    args.reps = max(args.reps, 20)

    if not torch.cuda.is_available():
        print("no CUDA GPU: nothing to benchmark (CPU-only checks: pytest tests/test_ws_gemm_compile.py)")
        return 2
    from examples import ws_gemm as W

    dev = torch.cuda.get_device_name()
    cap = torch.cuda.get_device_capability()
    log = lambda s: print(s, flush=True)  # noqa: E731
    log(f"device: {dev} (sm_{cap[0]}{cap[1]}), torch {torch.__version__}, ops: {W.PROF_OPS_SOURCE}")
    runner = W.CompiledWsGemm()
    runner_d = W.CompiledWsGemm(W.GemmConfig(recorder="direct"))
    runner_s = W.CompiledWsGemm(W.GemmConfig(recorder="slices"))
    runner_1x1 = W.CompiledWsGemm(W.GemmConfig(cluster_m=1, cluster_n=1))
    g = runner.gemm
    cl = f"{g.cfg.cluster_m}x{g.cfg.cluster_n}"
    log(f"tile {g.tile_shape_mnk}, stages {g.num_stages}, epi stages {g.epi_stages}, "
        f"threads {g.threads_per_cta}, group_m {g.cfg.group_m}, recorder {g.cfg.recorder}, "
        f"cluster {cl}")

    report = {"device": dev, "capability": list(cap), "config": {
        "tile_mnk": list(g.tile_shape_mnk), "stages": g.num_stages, "epi_stages": g.epi_stages,
        "threads": g.threads_per_cta, "cluster_mn": list(g.cluster_mn)}}
    all_ok = True
    if not args.skip_correctness:
        log("correctness (level 0, relative Frobenius error vs fp32 reference):")
        sizes = [(128, 256, 64), (256, 512, 1024), (1000, 1032, 520), (129, 264, 72),
                 (100, 200, 40), (1001, 136, 8), (3000, 2056, 1000), (4096, 4096, 4096)]
        ok, res = correctness(W, runner, sizes, log)
        all_ok &= ok
        report["correctness"] = res
        if g.cluster_size > 1:
            log("correctness, 1 x 1 (no cluster):")
            ok, res = correctness(W, runner_1x1, sizes[:6], log)
            all_ok &= ok
            report["correctness_1x1"] = res
        log("record counts:")
        cnt_ok = count_check(W, runner, 1000, 1032, 520, 2, log)
        cnt_ok &= count_check(W, runner, 1000, 1032, 520, 1, log)
        cnt_ok &= count_check(W, runner_d, 1000, 1032, 520, 2, log)
        cnt_ok &= count_check(W, runner_d, 1000, 1032, 520, 1, log)
        cnt_ok &= count_check(W, runner_1x1, 1000, 1032, 520, 2, log)
        cnt_ok &= count_check(W, runner_s, 1000, 1032, 520, 2, log)
        cnt_ok &= count_check(W, runner_s, 1000, 1032, 520, 1, log)
        all_ok &= cnt_ok
        report["counts_ok"] = cnt_ok

    s = args.size
    flops = 2.0 * s * s * s
    torch.manual_seed(0)
    a = torch.randn(s, s, device="cuda").to(torch.bfloat16)
    b = torch.randn(s, s, device="cuda").to(torch.bfloat16)
    c = torch.empty(s, s, device="cuda", dtype=torch.bfloat16)
    rows = []

    def add(name, t, extra=None):
        row = {"name": name, **{k: v for k, v in t.items() if k != "times_ms"},
               "tflops": flops / (t["median_ms"] * 1e-3) / 1e12}
        if extra:
            row.update(extra)
        rows.append(row)
        log(f"  {name:<26} median {t['median_ms']:.4f} ms  ({row['tflops']:.1f} TFLOP/s)")

    log(f"timing at {s}^3 (warm-up {args.warmup}, {args.reps} rounds, CUPTI kernel durations; every "
        f"round launches each variant once in a fresh order, so clock and thermal drift hit them alike):")
    c_ref = torch.empty_like(c)
    levels = [(0, runner, "ws_gemm level 0"), (1, runner, "ws_gemm level 1"),
              (2, runner, "ws_gemm level 2"), (1, runner_d, "ws_gemm level 1 direct"),
              (2, runner_d, "ws_gemm level 2 direct"), (2, runner_s, "ws_gemm level 2 slices")]
    if g.cluster_size > 1:
        levels.append((0, runner_1x1, "ws_gemm level 0 1x1"))
    variants = [("cuBLAS torch.matmul", lambda: torch.matmul(a, b.T, out=c_ref), None, None)]
    for level, r, name in levels:
        exp = W.expected_counts(r.gemm, s, s, s, level)
        buf, max_events = W.alloc_prof_for(r.gemm, s, s, s, level) if level else (W._dummy_prof(a.device), 0)
        launch = r.prepare(a, b, c, buf, max_events, level)
        # a flat buffer's counter restarts every launch; a slices buffer is rewritten in place
        reset = (lambda buf=buf: buf[:1].zero_()) if level and r.gemm.cfg.recorder != "slices" else None
        variants.append((name, launch, reset, (level, r, buf, exp)))
    # CUPTI kernel durations, every variant once per round in a fresh order (CUDA events
    # around one Python launch would also time the host's launch overhead)
    times = time_shuffled({name: fn for name, fn, _, _ in variants}, rounds=args.reps,
                          warmup=args.warmup,
                          resets={name: reset for name, _, reset, _ in variants if reset is not None})
    torch.matmul(a, b.T, out=c_ref)
    for name, fn, reset, info in variants:
        t = {"median_ms": statistics.median(times[name]), "min_ms": min(times[name]),
             "p90_ms": float(np.percentile(times[name], 90))}
        if info is None:
            add(name, t)
            continue
        level, r, buf, exp = info
        if reset is not None:
            reset()
        fn()  # once more, alone, for its output and its record count
        torch.cuda.synchronize()
        extra = {"level": level, "expected_records": exp["total"],
                 "cluster_mn": list(r.gemm.cluster_mn)}
        if level:
            recs_attempted = int(W.decode_records(buf.cpu().numpy())[1]) // W.words_per_region(r.gemm)
            extra["records_last_launch"] = recs_attempted
            if recs_attempted != exp["total"]:
                all_ok = False
                log(f"  !! {name}: last launch attempted {recs_attempted} records, expected {exp['total']}")
        err = rel_err(c, c_ref.float())
        extra["rel_err_vs_cublas"] = err
        if err > 1e-2:
            all_ok = False
            log(f"  !! {name}: relative error vs cuBLAS {err:.3e}")
        add(name, t, extra)

    base = next(r for r in rows if r["name"] == "ws_gemm level 0")["median_ms"]
    cublas = next(r for r in rows if r["name"].startswith("cuBLAS"))["median_ms"]
    for r in rows:
        r["pct_of_cublas"] = 100.0 * cublas / r["median_ms"]
        r["overhead_vs_level0"] = r["median_ms"] / base if r["name"].startswith("ws_gemm") else None
    report["size"] = s
    report["timing"] = rows
    report["all_ok"] = all_ok

    out = os.environ.get("OUT")
    if out:
        path = Path(out) / "ws_gemm_bench.json"
        path.write_text(json.dumps(report, indent=2))
        log(f"wrote {path}")

    print()
    print(f"{'':<28}{'median ms':>11}{'min ms':>10}{'TFLOP/s':>10}{'% cuBLAS':>10}{'vs L0':>8}{'records':>10}")
    for r in rows:
        ov = "" if r["overhead_vs_level0"] is None else f"{r['overhead_vs_level0']:.3f}x"
        rec = r.get("expected_records") or ""
        print(f"{r['name']:<28}{r['median_ms']:>11.4f}{r['min_ms']:>10.4f}{r['tflops']:>10.1f}"
              f"{r['pct_of_cublas']:>9.1f}%{ov:>8}{rec:>10}")
    print(f"{s}^3 bf16, {dev}; ws_gemm rows: cluster {cl} unless marked 1x1; "
          f"checks {'PASSED' if all_ok else 'FAILED'}")
    return 0 if all_ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
