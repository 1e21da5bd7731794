"""GPU half of the what-if check for this repository's ws_gemm: trace the base kernel in
zero-edit mode (and with its producer probing sampled loads) and time it next to the variants
whose kernel time the pipeline model predicts.

    python bench/whatif.py gemm --mnk 4096,4096,4096 --rounds 30
    python bench/whatif.py gemm --persistent --mnk 4096,4096,1024

Writes to $OUT (or ./whatif_out): ``trace_ze_<variant>.npz`` (compressed columns, meta),
``timings.json`` (per-variant CUPTI kernel times of every launch, plain and recording) and
``whatif_gpu.log``. Timing: CUPTI kernel durations from torch.profiler, ``--per-round``
back-to-back launches per variant per round, variant order shuffled every round, after a
warm-up. The host half (``bench/whatif.py check``) builds the model from the base trace,
predicts, and compares.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import torch  # noqa: E402
from tools.columns import launch_path, save_columns  # noqa: E402
from tools.cupti import add_traced_base_options, traced_launches  # noqa: E402

VARIANTS = {  # name -> GemmConfig overrides; "base" is the default (4 stages, 2x1 cluster)
    "base": {},
    "stages3": {"num_stages": 3},
    "stages2": {"num_stages": 2},
    "cluster1x1": {"cluster_m": 1, "cluster_n": 1},
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mnk", default="4096,4096,4096")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--per-round", type=int, default=10)
    ap.add_argument("--persistent", action="store_true",
                    help="the persistent kernel (GemmConfig(persistent=True)) and its variants")
    add_traced_base_options(ap, "trace_ze_base")
    args = ap.parse_args(argv)
    m, n, k = (int(x) for x in args.mnk.split(","))
    out = Path(os.environ.get("OUT", "whatif_out"))
    out.mkdir(parents=True, exist_ok=True)
    log_file = open(out / "whatif_gpu.log", "w")

    def log(s):
        print(s, flush=True)
        log_file.write(s + "\n")
        log_file.flush()

    from examples import ws_gemm as W
    from cute_prof.experimental import autoprofile_probed

    dev = torch.cuda.get_device_name()
    log(f"device: {dev}, torch {torch.__version__}, driver/cuda {torch.version.cuda}, "
        f"date {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, mnk {m}x{n}x{k}")
    torch.manual_seed(0)
    a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    b = torch.randn(n, k, device="cuda").to(torch.bfloat16)
    ref = a.float() @ b.float().T
    dummy = W.alloc_prof(1)
    launches = {}
    recordings = []  # the zero-edit blocks, alive while their recording kernels are timed
    for name, over in VARIANTS.items():
        t0 = time.time()
        runner = W.CompiledWsGemm(W.GemmConfig(**over, persistent=args.persistent))
        c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        launches[name] = runner.prepare(a, b, c, dummy, 0, 0)
        launches[name]()
        torch.cuda.synchronize()
        err = ((c.float() - ref).norm() / ref.norm()).item()
        g = runner.gemm
        log(f"{name}: stages {g.num_stages}, cluster {g.cfg.cluster_m}x{g.cfg.cluster_n}, "
            f"rel err {err:.2e}, compile+run {time.time() - t0:.1f}s")

    # every variant at level 0, recorded by autoprofile(); the base again with probed loads
    traced = dict(VARIANTS)
    if args.load_arrivals:
        traced["base_arrivals"] = VARIANTS["base"]
    for name, over in traced.items():
        t0 = time.time()
        runner = W.CompiledWsGemm(W.GemmConfig(**over, persistent=args.persistent))
        c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        warps = runner.gemm.num_ctas(m, n) * (runner.gemm.threads_per_cta // 32)
        probes = args.load_arrivals if name.endswith("_arrivals") else 0
        with autoprofile_probed(per_warp=4096, max_warps=warps, load_arrivals=probes) as zprof:
            launch = runner.prepare(a, b, c, dummy, 0, 0)
            launch()
        # the base (with and without probes): several launches, predicted from each
        count = args.traces if name.startswith("base") else 1
        for index, ztrace in enumerate(traced_launches(zprof, launch, count)):
            save_columns(launch_path(out / f"trace_ze_{name}.npz", index), ztrace,
                         mnk=[m, n, k], device=dev, stages=runner.gemm.num_stages,
                         persistent=args.persistent,
                         cluster=[runner.gemm.cfg.cluster_m, runner.gemm.cfg.cluster_n])
        if not name.endswith("_arrivals"):  # timed next to the plain kernels: the recorder's cost
            launches[f"{name}:recorded"] = launch  # each launch rewrites its slices
            recordings.append(zprof)
        log(f"{name}: zero-edit trace {len(ztrace)} records, overflow {ztrace.overflow}, "
            f"{time.time() - t0:.1f}s")

    # timing: CUPTI kernel durations, shuffled variant order per round
    from torch.profiler import ProfilerActivity, profile

    names = list(launches)
    for _ in range(3):  # warm-up
        for name in names:
            for _ in range(args.per_round):
                launches[name]()
    torch.cuda.synchronize()
    times = {name: [] for name in names}
    rng = random.Random(17)
    for r in range(args.rounds):
        order = names[:]
        rng.shuffle(order)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for name in order:
                for _ in range(args.per_round):
                    launches[name]()
            torch.cuda.synchronize()
        kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
                   and not e.name.lower().startswith(("memcpy", "memset"))]
        kernels.sort(key=lambda e: e.time_range.start)
        if len(kernels) != len(order) * args.per_round:
            log(f"round {r}: {len(kernels)} kernel events, expected {len(order) * args.per_round}")
            continue
        for i, name in enumerate(order):
            for e in kernels[i * args.per_round:(i + 1) * args.per_round]:
                times[name].append(e.time_range.elapsed_us() * 1000.0)
    (out / "timings.json").write_text(json.dumps({"unit": "ns", "times": times,
                                                  "rounds": args.rounds,
                                                  "per_round": args.per_round}))
    log(f"{'variant':<18} {'median us':>10} {'p10':>9} {'p90':>9} {'n':>5} {'vs base':>9}")
    base_med = statistics.median(times["base"])
    for name, v in ((name, times[name]) for name in names if times[name]):
        q, med = np.percentile(v, [10, 90]), statistics.median(v)
        log(f"{name:<18} {med / 1e3:>10.2f} {q[0] / 1e3:>9.2f} {q[1] / 1e3:>9.2f} {len(v):>5} "
            f"{(med - base_med) / base_med * 100:>+8.2f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
