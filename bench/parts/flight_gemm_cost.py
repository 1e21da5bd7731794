"""What the flight recorder costs on the warp-specialised GEMM (examples/ws_gemm.py).

Variants, all non-persistent, cluster 2x1, one launch each per round in a shuffled order:
level 0 (no profiling), level 2 (every k-tile region recorded into a device buffer) and
level 2 + flight (the same records, plus every warp marking where it waits -- both
mainloops, each ``wait_empty`` and ``wait_full`` -- in pinned, mapped host memory).
Kernel times from CUPTI (torch.profiler), medians over rounds. Before timing, one flight
launch is checked: exact record counts, and every recording warp left every region.

    python bench/parts/flight_gemm_cost.py [--mnk 8192,8192,8192] [--rounds 20] [--json out.json]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mnk", action="append", default=None, help="M,N,K (repeatable)")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    shapes = [tuple(int(v) for v in s.split(",")) for s in (args.mnk or ["8192,8192,8192", "2048,2048,8192"])]

    import torch
    from torch.profiler import ProfilerActivity, profile

    from cute_prof import layout
    from cute_prof.flight import allocate_flight_recorder, diagnose
    from examples.ws_gemm import (CompiledWsGemm, GemmConfig, alloc_prof, check_counts, decode_records,
                                  expected_counts)

    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip()
    result = dict(date=datetime.datetime.now(datetime.timezone.utc).isoformat(), device=smi,
                  command=" ".join(sys.argv), rounds=args.rounds, shapes=[])
    print(f"# {result['date']} {smi}", flush=True)
    for m, n, k in shapes:
        torch.manual_seed(0)
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        plain = CompiledWsGemm(GemmConfig())
        expected = expected_counts(plain.gemm, m, n, k, 2)
        warps = plain.gemm.num_ctas(m, n) * plain.gemm.threads_per_cta // 32
        recorder = allocate_flight_recorder(16, warps=warps)  # its record buffer is unused here
        flown = CompiledWsGemm(GemmConfig(flight_address=recorder.positions_address(),
                                          flight_slots=recorder.slots))
        prof = alloc_prof(expected["total"] + 1024)
        dummy = alloc_prof(1)
        launches = {
            "level0": plain.prepare(a, b, c, dummy, 0, 0),
            "level2": plain.prepare(a, b, c, prof, prof.numel() // 4, 2),
            "level2_flight": flown.prepare(a, b, c, prof, prof.numel() // 4, 2),
        }

        # ---- exactness of one flight launch: records and positions
        prof.zero_()
        launches["level2_flight"]()
        torch.cuda.synchronize()
        ref = a.float() @ b.float().t()
        err = float((c.float() - ref).norm() / ref.norm())
        records, _ = decode_records(prof)
        problems = check_counts(records, plain.gemm, m, n, k, 2)
        report = diagnose(recorder.position_words(), tag_table=None)
        still_open = int(report.warps["open"].sum())
        marked = int(report.warps["open"].size)
        recording = expected["producers"] + expected["consumer_warps"]
        check = dict(rel_err=err, count_problems=problems, warps_marked=marked, recording_warps=recording,
                     open_after_finish=still_open)
        ok = err < 1e-2 and not problems and marked == recording and still_open == 0
        print(f"# {m}x{n}x{k}: check {'OK' if ok else 'BAD'} {check}", flush=True)

        # ---- timing
        names = list(launches)
        for _ in range(3):
            for name in names:
                prof[layout.COUNTER_INDEX] = 0
                launches[name]()
        torch.cuda.synchronize()
        order = []
        with profile(activities=[ProfilerActivity.CUDA]) as p:
            for _ in range(args.rounds):
                random.shuffle(names)
                for name in names:
                    prof[layout.COUNTER_INDEX] = 0  # a fill kernel, told apart by name below
                    launches[name]()
                    order.append(name)
            torch.cuda.synchronize()
        kernels = sorted((e for e in p.events() if e.device_type == torch.autograd.DeviceType.CUDA
                          and "kernel" in e.name.lower() and "fill" not in e.name.lower()
                          and "elementwise" not in e.name.lower()), key=lambda e: e.time_range.start)
        if len(kernels) != len(order):
            raise SystemExit(f"CUPTI saw {len(kernels)} GEMM kernels for {len(order)} launches: "
                             f"{sorted({e.name for e in kernels})[:5]}")
        times = {name: [] for name in launches}
        for name, e in zip(order, kernels, strict=True):
            times[name].append(e.time_range.elapsed_us())
        med = {name: float(np.median(v)) for name, v in times.items()}
        flops = 2.0 * m * n * k
        row = dict(mnk=[m, n, k], records=expected["total"], check=check, ok=ok, median_us=med,
                   tflops={name: flops / (us * 1e-6) / 1e12 for name, us in med.items()},
                   level2_over_level0=med["level2"] / med["level0"],
                   flight_over_level0=med["level2_flight"] / med["level0"],
                   flight_over_level2=med["level2_flight"] / med["level2"])
        result["shapes"].append(row)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=1)
    print(f"{'shape':>16} {'records':>9} {'level0 us':>10} {'level2 us':>10} {'+flight us':>10} "
          f"{'l2/l0':>6} {'fl/l0':>6} {'fl/l2':>6}")
    for r in result["shapes"]:
        md = r["median_us"]
        print(f"{'x'.join(map(str, r['mnk'])):>16} {r['records']:>9} {md['level0']:10.1f} {md['level2']:10.1f} "
              f"{md['level2_flight']:10.1f} {r['level2_over_level0']:6.3f} {r['flight_over_level0']:6.3f} "
              f"{r['flight_over_level2']:6.3f}")
    return 0 if all(r["ok"] for r in result["shapes"]) else 1


if __name__ == "__main__":
    sys.exit(main())
