"""What profiling costs the warp-specialised GEMM, per write path, timed with CUPTI in one process.

Variants at --mnk (default 8192^3, bf16): level 0 twice (an A/A pair: the noise floor),
levels 1 and 2 on each write path, the persistent kernel at levels 0 and 2, and cuBLAS.
Every round launches every variant once in shuffled order; ratios are per round against the
same kernel's level 0, then the median and the 10th-90th percentiles. Each profiled variant
then runs once more and its records are checked exactly (``ws_gemm.check_counts``).

    python bench/parts/gemm_overhead.py [--mnk 8192,8192,8192] [--rounds 40] [--json out.json]
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from tools.cupti import time_shuffled  # noqa: E402

# dense BF16 tensor-core peak at the boost clock, for "how far from the hardware bound"
PEAK_TFLOPS = {"H100": 989.4, "H200": 989.4}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mnk", default="8192,8192,8192")
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--json", default=None)
    ap.add_argument("--no-persistent", action="store_true")
    args = ap.parse_args(argv)

    import torch

    from cute_prof.decode import decode_buffer
    from cute_prof.decode_slices import reset_slices
    from examples import ws_gemm as W

    m, n, k = (int(x) for x in args.mnk.split(","))

    props = torch.cuda.get_device_properties(0)
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm",
                          "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
    print(f"# {datetime.datetime.now(datetime.timezone.utc).isoformat()} {props.name} | {smi} | "
          f"torch {torch.__version__} | {m}x{n}x{k} bf16", flush=True)
    torch.manual_seed(0)
    a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    b = torch.randn(n, k, device="cuda").to(torch.bfloat16)
    c_ref = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)

    runners = {}

    def runner(recorder, persistent):
        key = (recorder, persistent)
        if key not in runners:
            runners[key] = W.CompiledWsGemm(W.GemmConfig(recorder=recorder, persistent=persistent))
        return runners[key]

    # name -> (kernel family, level, recorder, persistent)
    specs = [("L0", "plain", 0, "slices", False), ("L0 again", "plain", 0, "staged", False),
             ("L1 slices", "plain", 1, "slices", False), ("L2 slices", "plain", 2, "slices", False),
             ("L1 staged", "plain", 1, "staged", False), ("L2 staged", "plain", 2, "staged", False)]
    if not args.no_persistent:
        specs += [("persistent L0", "persistent", 0, "slices", True),
                  ("persistent L2 slices", "persistent", 2, "slices", True),
                  ("persistent L2 staged", "persistent", 2, "staged", True)]
    variants = []
    t0 = time.time()
    for name, family, level, recorder, persistent in specs:
        r = runner(recorder, persistent)
        c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        if level:
            buf, max_events = W.alloc_prof_for(r.gemm, m, n, k, level)
        else:
            buf, max_events = W._dummy_prof(a.device), 0
        launch = r.prepare(a, b, c, buf, max_events, level)
        # a flat buffer's counter must restart every launch; a slices buffer is rewritten
        reset = (lambda buf=buf: buf[:1].zero_()) if level and recorder != "slices" else None
        variants.append(dict(name=name, family=family, level=level, recorder=recorder, gemm=r.gemm,
                             launch=launch, reset=reset, buf=buf, c=c))
    print(f"# compiled {len(runners)} configurations x levels in {time.time() - t0:.0f}s", flush=True)

    def run(v):
        if v["reset"] is not None:
            v["reset"]()
        v["launch"]()

    # cuBLAS in the same shuffled rounds (time_shuffled counts the kernels of each call)
    cublas = dict(name="cuBLAS torch.matmul", family="cublas", level=0, recorder="-", reset=None,
                  launch=lambda: torch.matmul(a, b.T, out=c_ref))
    everything = variants + [cublas]
    per_name = time_shuffled({v["name"]: v["launch"] for v in everything}, rounds=args.rounds,
                             warmup=args.warmup,
                             resets={v["name"]: v["reset"] for v in everything if v["reset"] is not None})
    clocks_after = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,clocks.max.sm,power.draw,temperature.gpu",
                                   "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()

    flops = 2.0 * m * n * k
    peak = next((v for key, v in PEAK_TFLOPS.items() if key in props.name), None)
    rows = []
    for v in variants + [cublas]:
        t = np.array(per_name[v["name"]])
        base_name = "persistent L0" if v["family"] == "persistent" else "L0"
        ratio = t / np.array(per_name[base_name])  # per round: the same round's level 0
        row = dict(name=v["name"], level=v["level"], recorder=v["recorder"], median_ms=float(np.median(t)),
                   tflops=flops / (np.median(t) * 1e-3) / 1e12, vs=base_name,
                   ratio_median=float(np.median(ratio)), ratio_p10=float(np.percentile(ratio, 10)),
                   ratio_p90=float(np.percentile(ratio, 90)))
        rows.append(row)

    # exactness: one more launch of each profiled variant, decoded and checked
    checks = []
    for v in variants:
        if not v["level"]:
            continue
        if v["recorder"] == "slices":
            reset_slices(v["buf"])
        run(v)
        torch.cuda.synchronize()
        trace = decode_buffer(v["buf"])
        errors = W.check_counts(trace.events, v["gemm"], m, n, k, v["level"])
        ok = not errors and trace.overflow == 0 and trace.incomplete == 0
        checks.append(dict(name=v["name"], ok=ok, events=len(trace.events), attempted=trace.attempted,
                           overflow=trace.overflow, errors=errors[:3]))
        print(f"# check {'OK ' if ok else 'BAD'} {v['name']}: {len(trace.events)} regions, "
              f"{trace.attempted} buffer records attempted, overflow {trace.overflow}"
              f"{'' if ok else ' ' + str(errors[:3])}", flush=True)
    torch.matmul(a, b.T, out=c_ref)
    for v in variants:
        err = ((v["c"].float() - c_ref.float()).norm() / c_ref.float().norm()).item()
        if err > 1e-2:
            checks.append(dict(name=v["name"] + " output", ok=False, rel_err=err))

    result = dict(date=datetime.datetime.now(datetime.timezone.utc).isoformat(), device=props.name, smi=smi,
                  clocks_after=clocks_after, command=" ".join([sys.executable] + sys.argv), mnk=[m, n, k],
                  rounds=args.rounds, peak_tflops=peak, timing="CUPTI kernel durations, shuffled every round",
                  rows=rows, checks=checks)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    print(f"# clocks right after timing: {clocks_after}")
    print()
    print(f"{'variant':24} {'median ms':>9} {'TFLOP/s':>8} {'% peak':>7} {'x L0 (p10-p90)':>22}")
    for r in rows:
        pk = f"{100 * r['tflops'] / peak:6.1f}%" if peak else "    -"
        print(f"{r['name']:24} {r['median_ms']:9.4f} {r['tflops']:8.1f} {pk:>7} "
              f"{r['ratio_median']:8.4f} ({r['ratio_p10']:.4f}-{r['ratio_p90']:.4f}) vs {r['vs']}")
    bad = [c["name"] for c in checks if not c["ok"]]
    print(f"{m}x{n}x{k}: exactness checks {'all OK' if not bad else 'FAILED ' + str(bad)}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
