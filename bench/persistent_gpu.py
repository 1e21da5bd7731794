"""GPU check of the persistent ws_gemm (issue #17): level-0 timings (persistent vs the
non-persistent kernel vs cuBLAS at 8192^3), a level-2 trace of the persistent kernel
analysed with ``cute-prof analyze --pipeline examples/ws_gemm_persistent_pipeline.json``,
and one what-if checked: the stage-count change predicted from that trace against the
measured kernel times of the 3- and 2-stage persistent kernels.

    python bench/persistent_gpu.py [--rounds 20] [--per-round 10]

Writes into $OUT (or ./persistent_out): persistent_gpu.log, timings.json, whatif.json,
trace_persistent_l2.npz (a cute_prof.storage buffer file), analysis.txt, analysis.json.
Timing: CUPTI kernel durations (torch.profiler), after a warm-up, ``--per-round``
back-to-back launches per variant per round, variant order shuffled every round; medians.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from cute_prof.calibration import cuda_kernels, kernels_per_call  # noqa: E402

SPEC = ROOT / "examples" / "ws_gemm_persistent_pipeline.json"
TRACE_MNK = (4096, 4096, 1024)  # 512 output tiles: ~3.9 per CTA on 132 SMs, 16 k-tiles
BIG_MNK = (8192, 8192, 8192)
WHATIF = {"p_stages3": {"depth": {"smem_ab": 3}}, "p_stages2": {"depth": {"smem_ab": 2}}}


def cupti_times(launches: dict, rounds: int, per_round: int, log, seed=17) -> dict:
    """Median-ready per-launch kernel times (ns) of every variant: kernels per call are
    counted once, then each round runs the variants in a shuffled order inside one
    profiler window and assigns the kernel events in launch order."""
    from torch.profiler import ProfilerActivity, profile

    def kernels(prof):
        return cuda_kernels(prof, exclude=("Memcpy", "Memset"))

    per_call = {}
    for name, fn in launches.items():
        per_call[name] = max(1, kernels_per_call(fn, exclude=("Memcpy", "Memset")))
        log(f"  {name}: {per_call[name]} kernel(s) per call")
    names = list(launches)
    for _ in range(3):
        for name in names:
            for _ in range(per_round):
                launches[name]()
    torch.cuda.synchronize()
    times = {name: [] for name in names}
    rng = random.Random(seed)
    for r in range(rounds):
        order = names[:]
        rng.shuffle(order)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for name in order:
                for _ in range(per_round):
                    launches[name]()
            torch.cuda.synchronize()
        ks = kernels(prof)
        want = sum(per_call[n] * per_round for n in order)
        if len(ks) != want:
            log(f"  round {r}: {len(ks)} kernel events, expected {want}: skipped")
            continue
        pos = 0
        for name in order:
            for _ in range(per_round):
                group = ks[pos:pos + per_call[name]]
                times[name].append(sum(e.time_range.elapsed_us() for e in group) * 1000.0)
                pos += per_call[name]
    return times


def table(times: dict, base: str, log) -> dict:
    base_med = statistics.median(times[base])
    out = {}
    log(f"  {'variant':<14} {'median us':>10} {'p10':>9} {'p90':>9} {'n':>5} {'vs ' + base:>12}")
    for name, v in times.items():
        if not v:
            log(f"  {name:<14} no timings")
            continue
        med = statistics.median(v)
        q = np.percentile(v, [10, 90])
        out[name] = {"median_ns": med, "p10_ns": float(q[0]), "p90_ns": float(q[1]), "n": len(v),
                     "vs_base": (med - base_med) / base_med}
        log(f"  {name:<14} {med / 1e3:>10.2f} {q[0] / 1e3:>9.2f} {q[1] / 1e3:>9.2f} {len(v):>5} "
            f"{(med - base_med) / base_med * 100:>+11.2f}%")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--per-round", type=int, default=10)
    ap.add_argument("--big-rounds", type=int, default=None,
                    help="rounds of the 8192^3 timing (default: --rounds)")
    args = ap.parse_args(argv)
    out = Path(os.environ.get("OUT", "persistent_out"))
    out.mkdir(parents=True, exist_ok=True)
    log_file = open(out / "persistent_gpu.log", "w")

    def log(s=""):
        print(s, flush=True)
        log_file.write(s + "\n")
        log_file.flush()

    from examples import ws_gemm as W
    import cute_prof
    from cute_prof.storage import save_buffer
    from cute_prof.tags import default_tag_table

    dev = torch.cuda.get_device_name()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    log(f"device: {dev} ({sms} SMs), torch {torch.__version__}, CUDA {torch.version.cuda}, "
        f"date {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}")
    log(f"command: python bench/persistent_gpu.py {' '.join(argv or sys.argv[1:])}")
    results = {"device": dev, "sms": sms}

    def operands(m, n, k):
        g = torch.Generator(device="cuda").manual_seed(0)
        a = torch.randn(m, k, device="cuda", generator=g).to(torch.bfloat16)
        b = torch.randn(n, k, device="cuda", generator=g).to(torch.bfloat16)
        return a, b

    dummy = W.alloc_prof(1)

    def prepared(runner, a, b, level=0):
        c = torch.empty(a.shape[0], b.shape[0], device="cuda", dtype=torch.bfloat16)
        if level == 0:
            return runner.prepare(a, b, c, dummy, 0, 0), c
        exp = W.expected_counts(runner.gemm, a.shape[0], b.shape[0], a.shape[1], level)
        buf = W.alloc_prof(exp["total"])
        return runner.prepare(a, b, c, buf, exp["total"], level), c

    def check(name, c, a, b):
        ref = a.float() @ b.float().T
        err = ((c.float() - ref).norm() / ref.norm()).item()
        log(f"  {name}: rel err {err:.2e}")
        if not err < 1e-2:
            raise SystemExit(f"{name}: wrong result")

    # ---------------------------------------------------------------- 1. 8192^3, level 0
    m, n, k = BIG_MNK
    log(f"\n[1] level 0 at {m}x{n}x{k}: persistent vs non-persistent vs cuBLAS")
    a, b = operands(m, n, k)
    runners = {"persistent": W.CompiledWsGemm(W.GemmConfig(persistent=True)),
               "non_persistent": W.CompiledWsGemm(W.GemmConfig()),
               "persistent_1x1": W.CompiledWsGemm(W.GemmConfig(persistent=True, cluster_m=1)),
               "non_persistent_1x1": W.CompiledWsGemm(W.GemmConfig(cluster_m=1))}
    launches = {}
    for name, r in runners.items():
        t0 = time.time()
        fn, c = prepared(r, a, b)
        fn()
        torch.cuda.synchronize()
        check(f"{name} (compile+run {time.time() - t0:.1f}s)", c, a, b)
        launches[name] = fn
    bt = b.t()
    c_blas = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    launches["cublas"] = lambda: torch.matmul(a, bt, out=c_blas)
    launches["cublas"]()
    torch.cuda.synchronize()
    check("cublas", c_blas, a, b)
    times_big = cupti_times(launches, args.big_rounds or args.rounds, args.per_round, log)
    big = table(times_big, "persistent", log)
    flops = 2.0 * m * n * k
    for name, row in big.items():
        log(f"  {name}: {flops / row['median_ns'] / 1e3:.0f} TFLOP/s")
    results["big"] = {"mnk": [m, n, k], "table": big}
    a = b = bt = c_blas = launches = None  # free the big problem's buffers (a del reads to
    # pyflakes as unbound in the lambda above)

    # ---------------------------------------------------------------- 2. level-2 trace
    m, n, k = TRACE_MNK
    log(f"\n[2] level-2 trace of the persistent kernel at {m}x{n}x{k}")
    a, b = operands(m, n, k)
    pers = W.CompiledWsGemm(W.GemmConfig(persistent=True))
    g = pers.gemm
    exp = W.expected_counts(g, m, n, k, 2)
    log(f"  {g.num_ctas(m, n)} CTAs ({g.launched_clusters(m, n)} clusters of "
        f"{g.cluster_size}), tiles per CTA {np.bincount(exp['tiles_per_cta']).nonzero()[0].tolist()}"
        f", {g.k_tiles(k)} k-tiles, {g.num_stages} stages, expected {exp['total']} records")
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    pers.compile(a, b, c, W.alloc_prof(1), 2)
    for rep in range(2):  # the second launch is kept (warm caches and clocks)
        with cute_prof.profile_session(exp["total"] + 64, None, None, device="cuda") as prof:
            pers.prepare(a, b, c, prof.tensor, exp["total"] + 64, 2)()
    check("persistent level 2", c, a, b)
    trace = prof.trace
    recs = trace.events
    errs = W.check_counts(recs, g, m, n, k, 2)
    log(f"  records {len(recs)} (attempted {trace.attempted}, expected {exp['total']}); "
        f"count errors: {errs or 'none'}")
    trace_path = out / "trace_persistent_l2.npz"
    save_buffer(trace_path, prof, default_tag_table(), compress=True,
                metadata={"mnk": [m, n, k], "device": dev, "stages": g.num_stages,
                          "persistent": True, "cluster": list(g.cluster_mn)})
    log(f"  saved {trace_path.name}: {trace_path.stat().st_size / 1e6:.2f} MB")

    from cute_prof.cli import main as cli

    for fmt, fname in (([], "analysis.txt"), (["--json"], "analysis.json")):
        buf = io.StringIO()
        t0 = time.time()
        with contextlib.redirect_stdout(buf):
            rc = cli(["-q", "analyze", str(trace_path), "--pipeline", str(SPEC),
                      "--depth", "smem_ab=3", "--depth", "smem_ab=2", *fmt])
        (out / fname).write_text(buf.getvalue())
        log(f"  cute-prof analyze --pipeline {' '.join(fmt)} -> {fname} (rc {rc}, "
            f"{time.time() - t0:.1f}s)")
    log((out / "analysis.txt").read_text())

    # ---------------------------------------------------------------- 3. what-if check
    log(f"\n[3] what-if: stage count, predicted from the trace vs measured at {m}x{n}x{k}")
    report = json.loads((out / "analysis.json").read_text())
    predicted = {name: w["predicted_change"] for name, w in zip(WHATIF, report["what_if"])}
    variants = {"p_base": W.CompiledWsGemm(W.GemmConfig(persistent=True)),
                "p_stages3": W.CompiledWsGemm(W.GemmConfig(persistent=True, num_stages=3)),
                "p_stages2": W.CompiledWsGemm(W.GemmConfig(persistent=True, num_stages=2)),
                "p_cluster1x1": W.CompiledWsGemm(W.GemmConfig(persistent=True, cluster_m=1)),
                "non_persistent": W.CompiledWsGemm(W.GemmConfig())}
    # the variants' own level-2 traces: what really changed (and the load latency under a
    # 2-deep ring, which the 4-stage trace hardly ever shows: the "calibrated" prediction)
    for name in ("p_stages2", "p_stages3", "p_cluster1x1"):
        r = variants[name]
        vexp = W.expected_counts(r.gemm, m, n, k, 2)
        c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        r.compile(a, b, c, W.alloc_prof(1), 2)
        for rep in range(2):
            with cute_prof.profile_session(vexp["total"] + 64, None, None, device="cuda") as vp:
                r.prepare(a, b, c, vp.tensor, vexp["total"] + 64, 2)()
        verr = W.check_counts(vp.trace.events, r.gemm, m, n, k, 2)
        path = out / f"trace_{name}_l2.npz"
        save_buffer(path, vp, default_tag_table(), compress=True,
                    metadata={"mnk": [m, n, k], "device": dev, "stages": r.gemm.num_stages,
                              "persistent": True, "cluster": list(r.gemm.cluster_mn)})
        log(f"  {name}: level-2 trace {len(vp.trace.events)} records, count errors "
            f"{verr or 'none'}, {path.stat().st_size / 1e6:.2f} MB")
    launches = {}
    for name, r in variants.items():
        fn, c = prepared(r, a, b)
        fn()
        torch.cuda.synchronize()
        check(f"{name} ({r.gemm.num_stages} stages)", c, a, b)
        launches[name] = fn
    fn, c = prepared(pers, a, b, level=2)
    launches["p_base_level2"] = fn
    times_w = cupti_times(launches, args.rounds, args.per_round, log)
    wt = table(times_w, "p_base", log)
    rows = []
    log(f"  {'variant':<10} {'model change':<26} {'predicted':>10} {'measured':>10} {'error pp':>9}")
    for name, change in WHATIF.items():
        meas = wt[name]["vs_base"]
        pred = predicted[name]
        rows.append({"variant": name, "change": change, "predicted": pred, "measured": meas,
                     "error_pp": (pred - meas) * 100})
        log(f"  {name:<10} {json.dumps(change):<26} {pred * 100:>+9.2f}% {meas * 100:>+9.2f}% "
            f"{(pred - meas) * 100:>+8.2f}")
    results["whatif"] = {"mnk": [m, n, k], "table": wt, "rows": rows,
                         "traced_kernel_ns": report["what_if"][0]["kernel_ns"]}
    (out / "timings.json").write_text(json.dumps({"unit": "ns", "big": times_big,
                                                  "whatif": times_w, "summary": results},
                                                 default=float))
    # the full table (calibrated latency, cluster what-if): the host-side check
    import persistent_whatif_check  # bench/ is on sys.path (this script's folder)

    with open(out / "whatif_table.md", "w") as f, contextlib.redirect_stdout(f):
        persistent_whatif_check.main([str(out)])
    log((out / "whatif_table.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
