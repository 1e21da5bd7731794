"""Overhead of each write path on an FMA-bound probe kernel, in one process, on the GPU.

Probe: 1056 CTAs x 128 threads; each thread runs ITERS iterations of a 64-FMA chain; a
region around every ``stride``-th iteration is recorded by one lane of every warp (or of
warp 0 only). Kernel time: CUDA events, warm-up, REPS rounds that launch every variant once,
random inputs. Added time: the median over rounds of (variant - unprofiled) in the same
round. Per-record cost: slope of added time against records written, over several strides
(R^2).

    python bench/overhead.py [--reps 35] [--json out.json]
"""


import argparse
import datetime
import json
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
    from cutlass import Int32

    import cute_prof.device as cp

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
        # unroll=1 in every variant: the inline asm of the profiled variants keeps LLVM from
        # unrolling this loop, and the comparison is about recording, not loop overhead
        for i in cutlass.range(ITERS, unroll=1):
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


CAL_CTAS, CAL_REGIONS, CAL_SPIN_NS = 132, 64, 200_000
TAG_EMPTY, TAG_EMPTY_CLOCK, TAG_FMA16_CLOCK = 2, 3, 4


def build_calibration():
    """Empty regions (globaltimer and clock64), 16-FMA regions in clock mode, and clock
    sync pairs 200 us apart, so the SM clock is measured in the same launch."""
    import cutlass
    import cutlass.cute as cute
    from cutlass import Int32, Int64

    import cute_prof.device as cp

    @cute.kernel
    def calib(buf: cute.Tensor, data: cute.Tensor, max_events: Int32, spin_ns: Int64):
        bidx, _, _ = cute.arch.block_idx()
        tidx, _, _ = cute.arch.thread_idx()
        x = data[bidx * 32 + tidx]
        cp.clock_sync(buf, max_events, tid=bidx)
        for _ in cutlass.range(CAL_REGIONS):
            t = cp.profile_start(buf, max_events)
            cp.profile_stop(buf, t, TAG_EMPTY, bidx, max_events, guard="cta")
        for _ in cutlass.range(CAL_REGIONS):
            t = cp.profile_start(buf, max_events, clock=True)
            cp.profile_stop(buf, t, TAG_EMPTY_CLOCK, bidx, max_events, guard="cta", clock=True)
        for _ in cutlass.range(CAL_REGIONS):
            t = cp.profile_start(buf, max_events, clock=True)
            for _ in cutlass.range_constexpr(16):
                x = x * 0.999 + 0.001
            cp.profile_stop(buf, t, TAG_FMA16_CLOCK, bidx, max_events, guard="cta", clock=True)
        t0 = cp.read_globaltimer()
        now = cp.read_globaltimer()
        while now - t0 < spin_ns:
            now = cp.read_globaltimer()
        cp.clock_sync(buf, max_events, tid=bidx)
        data[bidx * 32 + tidx] = x

    @cute.jit
    def launch(buf: cute.Tensor, data: cute.Tensor, max_events: Int32, spin_ns: Int64):
        calib(buf, data, max_events, spin_ns).launch(grid=(CAL_CTAS, 1, 1), block=(32, 1, 1))

    return launch


def calibrate(torch, allocate_profile_buffer, decode_buffer, buffer_arg):
    import cutlass.cute as cute
    from cutlass import Int32, Int64
    from cutlass.cute.runtime import from_dlpack

    from cute_prof.calibration import empty_region_cost

    n = CAL_CTAS * (2 + 3 * CAL_REGIONS)
    prof = allocate_profile_buffer(n, device="cuda")
    data = torch.rand(CAL_CTAS * 32, device="cuda")
    fn = cute.compile(build_calibration(), buffer_arg(prof), from_dlpack(data), Int32(n), Int64(CAL_SPIN_NS))
    for _ in range(2):  # the second launch is the one kept: everything warm
        prof.reset()
        fn(buffer_arg(prof), from_dlpack(data), Int32(n), Int64(CAL_SPIN_NS))
    torch.cuda.synchronize()
    trace = decode_buffer(prof)
    assert trace.attempted == n and len(trace.events) == n - 2 * CAL_CTAS, (trace.attempted, len(trace.events))
    return dict(clock_hz=trace.metadata["clock_hz"],
                empty_globaltimer=empty_region_cost(trace, TAG_EMPTY),
                empty_clock=empty_region_cost(trace, TAG_EMPTY_CLOCK),
                fma16_clock=empty_region_cost(trace, TAG_FMA16_CLOCK))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=100)
    parser.add_argument("--warmup-s", type=float, default=3.0, help="seconds of GPU warm-up")
    parser.add_argument("--json", default=None, help="write all numbers here")
    args = parser.parse_args(argv)

    import torch
    from cutlass import Int32
    from cutlass.cute.runtime import from_dlpack

    from cute_prof.buffer import allocate_profile_buffer
    from cute_prof.device import buffer_arg as cp_buffer_arg
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

    def launch_once(fn):
        prof.reset()
        start_evt.record()
        fn(buf_arg, data_arg, Int32(max_events))
        stop_evt.record()
        stop_evt.synchronize()
        return start_evt.elapsed_time(stop_evt) * 1e3

    # a cold GPU runs the same kernel up to ~10% slower for its first seconds: keep it busy
    # for args.warmup_s before the first measurement
    import time

    warm_fn = get("off", False, 1)
    until = time.perf_counter() + args.warmup_s
    while time.perf_counter() < until:
        for _ in range(50):
            warm_fn(buf_arg, data_arg, Int32(max_events))
        torch.cuda.synchronize()

    # modes interleaved launch by launch, so clock and thermal drift hit every mode alike
    for only_warp0 in (False, True):
        for stride in STRIDES:
            fns = {mode: get(mode, only_warp0, stride) for mode in MODES}
            for fn in fns.values():
                for _ in range(3):
                    launch_once(fn)
            times = {mode: [] for mode in MODES}
            for _ in range(args.reps):
                for mode, fn in fns.items():
                    times[mode].append(launch_once(fn))
            for mode, fn in fns.items():
                launch_once(fn)
                trace = decode_buffer(prof)
                recorded_warps = CTAS * (1 if only_warp0 else WARPS)
                expected = 0 if mode == "off" else recorded_warps * len(range(0, ITERS, stride))
                # launches of one round ran back to back: their difference cancels the
                # drift that moves whole rounds (the off kernel alone wanders by ~5%)
                paired = np.asarray(times[mode]) - np.asarray(times["off"])
                results.append(dict(mode=mode, only_warp0=only_warp0, stride=stride,
                                    us=float(np.median(times[mode])),
                                    extra_us_paired=float(np.median(paired)),
                                    us_p10=float(np.percentile(times[mode], 10)),
                                    us_p90=float(np.percentile(times[mode], 90)),
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
            ratio = 1.0 + full["extra_us_paired"] / base[1]
            line = dict(mode=mode, only_warp0=only_warp0, us=full["us"], ratio=ratio,
                        records=full["records"])
            if mode != "off":
                recs = np.array([r["records"] for r in mine], float)
                extra = np.array([r["extra_us_paired"] for r in mine]) * 1e3  # ns
                slope, icpt = np.polyfit(recs, extra, 1)
                pred = slope * recs + icpt
                r2 = 1 - ((extra - pred) ** 2).sum() / max(((extra - extra.mean()) ** 2).sum(), 1e-30)
                line.update(ns_per_record_per_sm=slope * sms, r2=r2,
                            ns_per_record_per_sm_direct=full["extra_us_paired"] * 1e3 * sms / full["records"])
            table.append(line)

    cal = calibrate(torch, allocate_profile_buffer, decode_buffer, cp_buffer_arg)
    clock_hz = cal["clock_hz"]
    for line in table:
        if "ns_per_record_per_sm" in line:
            line["cycles_per_record_per_sm"] = line["ns_per_record_per_sm"] * clock_hz * 1e-9
    # the staged probe's regions, raw and with the empty-region cost taken off
    from cute_prof.calibration import subtract_overhead
    launch_once(get("staged", False, 1))
    probe_trace = decode_buffer(prof)
    corrected = subtract_overhead(probe_trace, cal["empty_globaltimer"]["median_ns"])
    region_raw_ns = float(probe_trace.events["dur_ns"].mean())
    region_corrected_ns = float(corrected.events["dur_ns"].mean())
    meta = dict(device=torch.cuda.get_device_name(), sms=sms,
                driver=torch.cuda.driver_version() if hasattr(torch.cuda, "driver_version") else None,
                torch=torch.__version__, python=platform.python_version(),
                date=datetime.datetime.now().isoformat(timespec="seconds"),
                command="python bench/overhead.py " + " ".join(argv or sys.argv[1:]),
                reps=args.reps, ctas=CTAS, threads=THREADS, iters=ITERS, fmas=FMAS, clock_hz=clock_hz)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(dict(meta=meta, results=results, table=table, calibration=cal,
                           probe_region_mean_ns=dict(raw=region_raw_ns, corrected=region_corrected_ns)),
                      fh, indent=1)
    print(f"\n{meta['device']}  {meta['date']}  reps={args.reps}  {CTAS}x{THREADS}, {ITERS} iters x {FMAS} FMA")
    eg, ec, f16 = cal["empty_globaltimer"], cal["empty_clock"], cal["fma16_clock"]
    print(f"SM clock measured in the calibration launch: {clock_hz / 1e9:.4f} GHz")
    print(f"empty region, %globaltimer: median {eg['median_ns']:.0f} ns, mean {eg['mean_ns']:.1f} ns "
          f"(min {eg['min_ns']:.0f}, max {eg['max_ns']:.0f}; the timer steps by 32 ns)")
    print(f"empty region, clock64: median {ec['median_cycles']:.0f} cycles = {ec['median_ns']:.1f} ns "
          f"(min {ec['min_cycles']} cycles); 16 dependent FMAs: median {f16['median_cycles']:.0f} cycles "
          f"= {f16['median_ns']:.1f} ns")
    print(f"staged probe region (64 FMAs) mean: raw {region_raw_ns:.1f} ns, "
          f"corrected {region_corrected_ns:.1f} ns")
    print(f"{'write path':<10} {'warps':<6} {'median us':>10} {'ratio':>7} {'records':>9} {'ns/rec/SM':>10} "
          f"{'cyc/rec/SM':>10} {'R^2':>6}")
    for line in table:
        who = "warp0" if line["only_warp0"] else "all"
        slope = f"{line['ns_per_record_per_sm']:10.2f}" if "r2" in line else f"{'-':>10}"
        cyc = f"{line['cycles_per_record_per_sm']:10.1f}" if "r2" in line else f"{'-':>10}"
        r2 = f"{line['r2']:6.3f}" if "r2" in line else f"{'-':>6}"
        print(f"{line['mode']:<10} {who:<6} {line['us']:10.1f} {line['ratio']:6.3f}x {line['records']:9d} "
              f"{slope} {cyc} {r2}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
