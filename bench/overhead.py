"""Overhead of each write path on an FMA-bound probe kernel, in one process, on the GPU.

Probe: 1056 CTAs x 128 threads; each thread runs ITERS iterations of a 64-FMA chain; a
region around every ``stride``-th iteration is recorded by one lane of every warp (or of
warp 0 only). Kernel time: CUDA events, warm-up, median of REPS launches, random inputs.
Per-record cost: slope of kernel time against records written, over several strides (R^2).

    python bench/overhead.py [--reps 35] [--json out.json]
"""


import argparse
import datetime
import json
import os
import platform
import sys

import numpy as np

CTAS, THREADS, ITERS, FMAS = 1056, 128, 256, 64
WARPS = THREADS // 32
STRIDES = (16, 8, 4, 2, 1)
MODES = ("off", "atomic", "staged")


def build():
    import cutlass
    import cutlass.cute as cute
    from cutlass import Float32, Int32

    import cute_prof.ops as cp

    @cute.kernel
    def probe(buf: cute.Tensor, data: cute.Tensor, max_events: Int32, stride: cutlass.Constexpr,
              mode: cutlass.Constexpr, only_warp0: cutlass.Constexpr):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        warp = cute.arch.warp_idx()
        gidx = bidx * THREADS + tidx
        x = data[gidx]
        a = x * 0.5 + 1.0
        b = x * 0.25
        track = bidx * WARPS + warp
        rec = cp.WarpRecorder(buf, max_events, track, enabled=mode == "staged")
        for i in cutlass.range(ITERS):
            record = (i % stride) == 0
            if cutlass.const_expr(only_warp0):
                record = record & (warp == 0)
            t = cp.profile_start(buf, max_events, enabled=mode != "off")
            for _ in cutlass.range_constexpr(FMAS):
                x = x * a + b
            if record:
                if cutlass.const_expr(mode == "atomic"):
                    cp.profile_stop(buf, t, 1, track, max_events, guard="lane0")
                if cutlass.const_expr(mode == "staged"):
                    rec.stop(t, 1)  # every lane of the warp closes a staged region
        rec.flush()
        data[gidx] = x

    @cute.jit
    def launch(buf: cute.Tensor, data: cute.Tensor, max_events: Int32, stride: cutlass.Constexpr,
               mode: cutlass.Constexpr, only_warp0: cutlass.Constexpr):
        probe(buf, data, max_events, stride, mode, only_warp0).launch(
            grid=(CTAS, 1, 1), block=(THREADS, 1, 1))

    return launch


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=35)
    parser.add_argument("--json", default=None, help="write all numbers here")
    args = parser.parse_args(argv)

    import torch
    from cutlass import Int32
    from cutlass.cute.runtime import from_dlpack

    from cute_prof.buffer import allocate_profile_buffer
    from cute_prof.ops import buffer_arg as cp_buffer_arg
    from cute_prof.decode import decode_buffer

    launch = build()
    max_events = CTAS * WARPS * ITERS
    prof = allocate_profile_buffer(max_events, device="cuda")
    data = torch.randn(CTAS * THREADS, device="cuda")
    compiled = {}
    results = []
    import cutlass.cute as cute

    def get(mode, only_warp0, stride):
        key = (mode, only_warp0, stride)
        if compiled.get(key) is None:
            compiled[key] = cute.compile(launch, cp_buffer_arg(prof.tensor), from_dlpack(data),
                                         Int32(max_events), stride, mode, only_warp0)
        return compiled[key]

    start_evt = torch.cuda.Event(enable_timing=True)
    stop_evt = torch.cuda.Event(enable_timing=True)
    buf_arg, data_arg = cp_buffer_arg(prof.tensor), from_dlpack(data)

    def time_one(mode, only_warp0, stride):
        fn = get(mode, only_warp0, stride)
        for _ in range(3):
            prof.reset()
            fn(buf_arg, data_arg, Int32(max_events))
        times = []
        for _ in range(args.reps):
            prof.reset()
            start_evt.record()
            fn(buf_arg, data_arg, Int32(max_events))
            stop_evt.record()
            stop_evt.synchronize()
            times.append(start_evt.elapsed_time(stop_evt) * 1e3)
        trace = decode_buffer(prof)
        return float(np.median(times)), trace

    # interleave modes per stride so drift hits every mode alike
    for only_warp0 in (False, True):
        for stride in STRIDES:
            for mode in MODES:
                us, trace = time_one(mode, only_warp0, stride)
                recorded_warps = CTAS * (1 if only_warp0 else WARPS)
                expected = 0 if mode == "off" else recorded_warps * len(range(0, ITERS, stride))
                results.append(dict(mode=mode, only_warp0=only_warp0, stride=stride, us=us,
                                    records=len(trace.events), expected=expected,
                                    attempted=trace.attempted, overflow=trace.overflow))
                assert trace.attempted == expected and len(trace.events) == expected, results[-1]

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    table = []
    for only_warp0 in (False, True):
        rows = [r for r in results if r["only_warp0"] == only_warp0]
        base = {r["stride"]: r["us"] for r in rows if r["mode"] == "off"}
        for mode in MODES:
            mine = [r for r in rows if r["mode"] == mode]
            full = next(r for r in mine if r["stride"] == 1)
            ratio = full["us"] / base[1]
            line = dict(mode=mode, only_warp0=only_warp0, us=full["us"], ratio=ratio,
                        records=full["records"])
            if mode != "off":
                recs = np.array([r["records"] for r in mine], float)
                extra = np.array([r["us"] - base[r["stride"]] for r in mine]) * 1e3  # ns
                slope, icpt = np.polyfit(recs, extra, 1)
                pred = slope * recs + icpt
                r2 = 1 - ((extra - pred) ** 2).sum() / max(((extra - extra.mean()) ** 2).sum(), 1e-30)
                line.update(ns_per_record_per_sm=slope * sms, r2=r2,
                            ns_per_record_per_sm_direct=(full["us"] - base[1]) * 1e3 * sms / full["records"])
            table.append(line)

    clock_hz = None
    meta = dict(device=torch.cuda.get_device_name(), sms=sms,
                driver=torch.cuda.driver_version() if hasattr(torch.cuda, "driver_version") else None,
                torch=torch.__version__, python=platform.python_version(),
                date=datetime.datetime.now().isoformat(timespec="seconds"),
                command="python bench/overhead.py " + " ".join(argv or sys.argv[1:]),
                reps=args.reps, ctas=CTAS, threads=THREADS, iters=ITERS, fmas=FMAS, clock_hz=clock_hz)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(dict(meta=meta, results=results, table=table), fh, indent=1)
    print(f"\n{meta['device']}  {meta['date']}  reps={args.reps}  {CTAS}x{THREADS}, {ITERS} iters x {FMAS} FMA")
    print(f"{'write path':<10} {'warps':<6} {'median us':>10} {'ratio':>7} {'records':>9} {'ns/rec/SM':>10} {'R^2':>6}")
    for line in table:
        who = "warp0" if line["only_warp0"] else "all"
        slope = f"{line['ns_per_record_per_sm']:10.2f}" if "r2" in line else f"{'-':>10}"
        r2 = f"{line['r2']:6.3f}" if "r2" in line else f"{'-':>6}"
        print(f"{line['mode']:<10} {who:<6} {line['us']:10.1f} {line['ratio']:6.3f}x {line['records']:9d} {slope} {r2}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
