"""NVIDIA IKET and Triton's Proton on the probe of ``bench/parts/overhead.py``, beside our write paths.

IKET's injection library and torch.profiler's CUPTI do not share a process, and Proton's
instrumentation session may hold CUPTI too, so every variant here is timed the same way:
CUDA events around batches of ``--batch`` launches enqueued behind a sleep kernel, so
that they run back to back whatever the host's launch overhead, variant order shuffled each round,
medians. Our own variants are timed in the IKET process too, so that their figures can be
set beside the CUPTI figures of ``bench/parts/overhead.py`` to show the two methods agree.
Per-record cost = (variant - unprofiled) / records per SM, all warps, one record per
iteration (8192 records per SM on 132 SMs).

  run-iket profile --postprocess json -- python bench/parts/overhead_peers.py iket --json iket.json
  python bench/parts/overhead_peers.py proton --json proton.json
  python bench/parts/overhead_peers.py table overhead.json iket.json proton.json [--capture DIR]
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import platform
import random
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import overhead as probe  # noqa: E402  (the probe's shape and its CuTe DSL kernel)

FS = probe.FS
SLEEP_CYCLES = 20_000_000  # ~10 ms at 2 GHz: longer than enqueueing any batch here
PROTON_MODES = {  # name -> (optimizations, buffer_type)
    "proton_default": ("", "shared"),
    "proton_clock32_time_shift": ("clock32,time_shift", "shared"),
    "proton_global": ("", "global"),
}


def device_facts():
    import torch

    props = torch.cuda.get_device_properties(0)
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip()
    return dict(date=datetime.datetime.now(datetime.timezone.utc).isoformat(), device=props.name,
                sms=props.multi_processor_count, smi=smi, python=platform.python_version(),
                torch=torch.__version__, command=" ".join(sys.argv), chains=probe.CHAINS,
                shape=dict(ctas=probe.CTAS, threads=probe.THREADS, iters=probe.ITERS))


def time_with_events(launchers: dict, *, rounds: int, batch: int, warmup: int = 3) -> dict:
    """Median ns per launch of each launcher, from CUDA events around ``batch`` launches."""
    import torch

    names = list(launchers)
    for _ in range(warmup):
        for name in names:
            launchers[name]()
        torch.cuda.synchronize()
    samples = {name: [] for name in names}
    # Launching a CuTe DSL kernel from Python takes ~30 us of host time, more than the F=16
    # probe runs: a sleep kernel first keeps the GPU busy while the batch is enqueued, so
    # the batch then runs back to back and the events time kernels, not launch overhead.
    for _ in range(rounds):
        random.shuffle(names)
        for name in names:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(SLEEP_CYCLES)
            start.record()
            for _ in range(batch):
                launchers[name]()
            end.record()
            end.synchronize()
            samples[name].append(start.elapsed_time(end) * 1e6 / batch)
    return {name: float(np.median(v)) for name, v in samples.items()}


# ---------------------------------------------------------------------------- IKET


def time_with_cupti(launchers: dict, *, rounds: int, warmup: int = 1) -> dict:
    """Median ns per launch from CUPTI kernel durations (torch.profiler), one launch per
    variant per round in a shuffled order: host gaps and launch hooks stay outside."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    names = list(launchers)
    for _ in range(warmup):
        for name in names:
            launchers[name]()
    torch.cuda.synchronize()
    order = []
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(rounds):
            random.shuffle(names)
            for name in names:
                launchers[name]()
                order.append(name)
        torch.cuda.synchronize()
    kernels = sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
                      and "probe" in e.name), key=lambda e: e.time_range.start)
    if len(kernels) != len(order):
        raise RuntimeError(f"CUPTI saw {len(kernels)} probe kernels for {len(order)} launches")
    samples = {name: [] for name in launchers}
    for name, e in zip(order, kernels, strict=True):
        samples[name].append(e.time_range.elapsed_us() * 1e3)
    return {name: float(np.median(v)) for name, v in samples.items()}


def slope_row(mode, fmas, added_by_stride: dict, base_stride1: float, t_stride1: float, *, n_warps: int, sms: int,
              source: str) -> dict:
    """Least-squares ns per record per SM over the strides, as bench/parts/overhead.py computes it."""
    xs = np.array([n_warps * (probe.ITERS // st) / sms for st in sorted(added_by_stride)], dtype=float)
    ys = np.array([added_by_stride[st] for st in sorted(added_by_stride)], dtype=float)
    slope, icpt = np.polyfit(xs, ys, 1)
    pred = slope * xs + icpt
    r2 = 1 - np.sum((ys - pred) ** 2) / max(np.sum((ys - ys.mean()) ** 2), 1e-30)
    return dict(mode=mode, F=fmas, ns_per_rec_sm=float(slope), r2=float(r2), intercept_ns=float(icpt),
                us=t_stride1 / 1e3, unprofiled_us=base_stride1 / 1e3, ratio=t_stride1 / base_stride1,
                ns_per_rec_sm_stride1=float(ys[0] / xs[0]), timing=source)


def run_cute(args, modes) -> dict:
    """Time CuTe DSL probe variants with CUDA events at every stride (IKET's only do something
    under run-iket). IKET's ranges need a loop nest (``iket_sN``) and are set against the
    same nest unprofiled (``nest_sN``); ours use the record mask of bench/parts/overhead.py."""
    import torch
    from cutlass import Int32
    from cutlass.cute.runtime import from_dlpack

    import cutlass.cute as cute
    from cute_prof.buffer import allocate_profile_buffer
    from cute_prof.decode_slices import allocate_slices_buffer
    from cute_prof.device import buffer_arg

    facts = device_facts()
    n_warps = probe.CTAS * probe.WARPS
    n_records = n_warps * probe.ITERS
    launch = probe.build()
    data = torch.randn(probe.CTAS * probe.THREADS, device="cuda")
    flat = allocate_profile_buffer(n_records, device="cuda")
    slices = allocate_slices_buffer(n_warps, probe.ITERS, device="cuda")
    flat_arg, slices_arg, data_arg = buffer_arg(flat.tensor), buffer_arg(slices), from_dlpack(data)
    strides = (1,) if args.what == "iket-count" else probe.STRIDES
    compiled, launchers = {}, {}
    for fmas in FS:
        for mode in modes:
            nested = mode in ("iket", "nest", "slices_nest", "slicesu_nest")
            prefix = {"slices_nest": "slices", "slicesu_nest": "slicesu"}.get(mode, mode)
            kernel_modes = [f"{prefix}_s{st}" for st in strides] if nested else [mode]
            for kmode in kernel_modes:
                buf = slices_arg if kmode.startswith("slices") else flat_arg
                compiled[(kmode, fmas)] = fn = cute.compile(launch, buf, data_arg, Int32(n_records), Int32(0),
                                                            Int32(probe.WARPS), fmas, kmode, True)
                if nested:
                    launchers[(kmode, fmas, 0)] = (lambda fn=fn, buf=buf: fn(buf, data_arg, Int32(n_records),
                                                                             Int32(0), Int32(probe.WARPS)))
                else:
                    for st in (strides if mode != "off" else (1,)):
                        launchers[(kmode, fmas, st)] = (lambda fn=fn, buf=buf, st=st: fn(
                            buf, data_arg, Int32(n_records), Int32(st - 1), Int32(probe.WARPS)))
    checks = []
    for fmas in FS:  # the nested slices variants keep every record, like the masked ones
        for kmode in ("slices_s1", "slicesu_s1", "slices_s4"):
            if (kmode, fmas, 0) in launchers:
                slices.zero_()
                fresh = allocate_slices_buffer(n_warps, probe.ITERS, device="cuda")
                slices.copy_(fresh)
                launchers[(kmode, fmas, 0)]()
                torch.cuda.synchronize()
                from cute_prof.decode import decode_buffer

                tr = decode_buffer(slices)
                want = n_records // int(kmode.split("_s")[1])
                checks.append(dict(variant=f"{kmode} F={fmas}", events=len(tr.events), want=want,
                                   overflow=int(tr.overflow), ok=len(tr.events) == want and tr.overflow == 0))
                print(f"# check {kmode} F={fmas}: {len(tr.events)} events (want {want}), overflow {tr.overflow}",
                      flush=True)
    times = time_with_events(launchers, rounds=args.rounds, batch=args.batch,
                             warmup=0 if args.what == "iket-count" else 3)
    if args.what == "iket-count":
        return dict(facts, tool="iket-count", rows=[], launches=len(launchers))
    rows = []
    for fmas in FS:
        for mode in modes:
            if mode in ("off", "nest"):
                continue
            if mode in ("iket", "slices_nest", "slicesu_nest"):
                prefix = {"slices_nest": "slices", "slicesu_nest": "slicesu"}.get(mode, mode)
                added = {st: times[(f"{prefix}_s{st}", fmas, 0)] - times[(f"nest_s{st}", fmas, 0)] for st in strides}
                base1, t1 = times[("nest_s1", fmas, 0)], times[(f"{prefix}_s1", fmas, 0)]
            else:
                added = {st: times[(mode, fmas, st)] - times[("off", fmas, 1)] for st in strides}
                base1, t1 = times[("off", fmas, 1)], times[(mode, fmas, 1)]
            rows.append(slope_row(mode, fmas, added, base1, t1, n_warps=n_warps, sms=facts["sms"], source="events"))
    under = "under run-iket" if "iket" in modes else "plain process"
    return dict(facts, tool="iket" if "iket" in modes else "cute_prof (events)",
                timing=f"CUDA events around {args.batch} launches enqueued behind a sleep kernel, "
                       f"{args.rounds} rounds shuffled, medians; {under}",
                rows=rows, checks=checks, unprofiled_us={f: times[("off", f, 1)] / 1e3 for f in FS if ("off", f, 1) in times},
                launches_per_variant=args.rounds * args.batch)


# ---------------------------------------------------------------------------- Proton


def run_proton(args) -> dict:
    import torch
    import triton
    import triton.language as tl
    import triton.profiler as proton
    import triton.profiler.language as pl

    pl.enable_semantic("triton")
    facts = device_facts()
    facts["triton"] = triton.__version__

    @triton.jit
    def proton_probe(data, ITERS: tl.constexpr, F: tl.constexpr, CHAINS: tl.constexpr, SCOPED: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid * 128 + tl.arange(0, 128)
        x = tl.load(data + offs)
        a = x * 0.5 + 1.0
        b = x * 0.25
        y = x + 1.0
        z = x + 2.0
        w = x + 3.0
        for _ in range(ITERS):
            if SCOPED:
                pl.enter_scope("iter")
            for _j in tl.static_range(F // CHAINS):
                x = x * a + b
                if CHAINS >= 2:
                    y = y * a + b
                if CHAINS == 4:
                    z = z * a + b
                    w = w * a + b
            if SCOPED:
                pl.exit_scope("iter")
        tl.store(data + offs, x + y + z + w)

    data = torch.randn(probe.CTAS * probe.THREADS, device="cuda")
    n_records = probe.CTAS * probe.WARPS * probe.ITERS

    def launcher(fmas, scoped):
        return lambda: proton_probe[(probe.CTAS,)](data, ITERS=probe.ITERS, F=fmas, CHAINS=probe.CHAINS,
                                                   SCOPED=scoped, num_warps=probe.WARPS)

    rows, notes, kept = [], [], {}
    # Proton processes every launch's buffer on the host: few launches, CUPTI durations
    base_before = time_with_cupti({("off", f): launcher(f, False) for f in FS}, rounds=args.rounds)
    out_dir = args.capture or "."
    for name, (opts, buffer_type) in PROTON_MODES.items():
        if args.proton_mode and name != args.proton_mode:
            continue
        print(f"# proton mode {name}", flush=True)
        mode = proton.mode.Default(optimizations=opts, buffer_type=buffer_type) if opts else \
            proton.mode.Default(buffer_type=buffer_type)
        for fmas in FS:  # one launch per session: how many of its records the trace kept
            path = os.path.join(out_dir, f"{name}_F{fmas}")
            proton.start(path, data="trace", backend="instrumentation", mode=mode)
            launcher(fmas, True)()
            torch.cuda.synchronize()
            proton.finalize()
            kept[(name, fmas)] = count_proton_records(path)
            print(f"# {name} F={fmas}: {kept[(name, fmas)]} scopes kept of {n_records}", flush=True)
        proton.start(os.path.join(out_dir, f"{name}_timing"), data="trace", backend="instrumentation", mode=mode)
        how = "CUPTI"
        try:
            times = time_with_cupti({(name, f): launcher(f, True) for f in FS}, rounds=args.rounds)
        except Exception as exc:  # noqa: BLE001 - Proton may hold CUPTI itself
            notes.append(f"{name}: CUPTI timing failed ({type(exc).__name__}: {exc}); CUDA events instead"
                         .splitlines()[0])
            how = "events"
            times = time_with_events({(name, f): launcher(f, True) for f in FS}, rounds=args.rounds, batch=1,
                                     warmup=0)
        for f in FS:
            print(f"# {name} F={f}: {times[(name, f)] / 1e3:.1f} us per launch ({how})", flush=True)
            base = base_before[("off", f)]
            ns = times[(name, f)]
            rows.append(dict(mode=name, F=f, us=ns / 1e3, unprofiled_us=base / 1e3, ratio=ns / base,
                             ns_per_rec_sm=(ns - base) / (n_records / facts["sms"]), timing=how,
                             records_kept=kept.get((name, f)), records_issued=n_records))
        with open(args.json + ".partial", "w") as fh:  # before finalize: it has crashed (SIGFPE)
            json.dump(dict(facts, tool="proton", proton_mode=name, rows=rows, notes=notes), fh, indent=1)
        proton.finalize()
    base_after = {("off", f): float("nan") for f in FS}
    try:  # drift check; Proton has crashed on unscoped launches in this process before
        base_after = time_with_cupti({("off", f): launcher(f, False) for f in FS}, rounds=args.rounds)
    except Exception as exc:  # noqa: BLE001
        notes.append(f"unprofiled re-timing after the sessions failed: {type(exc).__name__}: {exc}".splitlines()[0])
    return dict(facts, tool="proton", proton_mode=args.proton_mode or "all", rows=rows, notes=notes,
                unprofiled_before_us={f: base_before[("off", f)] / 1e3 for f in FS},
                unprofiled_after_us={f: base_after[("off", f)] / 1e3 for f in FS},
                timing=f"CUPTI kernel durations, {args.rounds} launches per variant, shuffled, medians; "
                       f"the unprofiled Triton probe timed before and after the Proton sessions, same process")


def count_proton_records(path_stem: str):
    """Scope instances named 'iter' in the Chrome trace Proton wrote for one launch."""
    files = sorted(glob.glob(path_stem + "*chrome_trace*")) or sorted(glob.glob(path_stem + "*"))
    for f in files:
        try:
            with open(f) as fh:
                doc = json.load(fh)
        except (OSError, ValueError):
            continue
        events = doc.get("traceEvents", doc) if isinstance(doc, dict) else doc
        if not isinstance(events, list):
            continue
        spans = [e for e in events if isinstance(e, dict) and e.get("name") == "iter"]
        complete = sum(1 for e in spans if e.get("ph") == "X")
        begins = sum(1 for e in spans if e.get("ph") == "B")
        return complete + begins
    return None


# ---------------------------------------------------------------------------- IKET capture and table


def count_iket_ranges(capture_dir: str):
    """Ranges per launch in IKET's decoded JSON capture, read with cute_prof's IKET reader."""
    from cute_prof.readers.iket import load_iket

    files = sorted(glob.glob(os.path.join(capture_dir, "**", "*.json"), recursive=True))
    counts = []
    for f in files:
        trace = load_iket(f)
        counts.extend(np.bincount(trace.events["launch"], minlength=len(trace.launches)).tolist())
    return counts, files


def table_rows(doc: dict, *, iket_ranges=None) -> list:
    """One table row per (variant, F), all warps recording: [variant, F, timing, unprofiled,
    x unprofiled, slope, per record at one record per iteration, kept]."""
    rows = []
    per_sm = probe.CTAS * probe.WARPS * probe.ITERS / doc.get("sms", 132)
    tool = doc.get("tool")
    for r in doc["rows"]:
        if r.get("warps", "all") != "all" or r["mode"] == "scaffold":
            continue
        if tool is None:  # bench/parts/overhead.py: CUPTI, slope over four record densities
            unprof = doc["unprofiled_us"][str(r["F"])]
            per_record_1 = (r["median_us_stride1"] - unprof) * 1e3 / per_sm
            rows.append([r["mode"], r["F"], "CUPTI, our process", unprof, r["ratio_stride1"],
                         f"{r['ns_per_rec_sm']:.2f} ({r['r2']:.3f})", per_record_1, "all (checked exactly)"])
        elif tool == "proton":
            kept = f"{r['records_kept']:,} of {r['records_issued']:,}" if r.get("records_kept") else ""
            rows.append([r["mode"], r["F"], f"{r['timing']}, Triton process", r["unprofiled_us"], r["ratio"],
                         "-", r["ns_per_rec_sm"], kept])
        else:
            where = "under run-iket" if tool == "iket" else "plain process"
            kept = ""
            if r["mode"] == "iket" and iket_ranges:
                kept = f"{iket_ranges:,} of 1,081,344 (one-launch capture)"
            rows.append([r["mode"], r["F"], f"events, {where}", r["unprofiled_us"], r["ratio"],
                         f"{r['ns_per_rec_sm']:.2f} ({r['r2']:.3f})", r["ns_per_rec_sm_stride1"], kept])
    return rows


def table(args) -> int:
    docs = [json.load(open(p)) for p in args.inputs]
    lines = ["| variant | F | timing | unprofiled us | x unprofiled | ns/rec/SM slope (R2) | "
             "ns/rec/SM, one record per iteration | records kept |", "|---|---:|---|---:|---:|---:|---:|---|"]
    for doc in docs:
        for v, f, how, unprof, ratio, slope, per1, kept in table_rows(doc, iket_ranges=args.iket_ranges):
            lines.append(f"| {v} | {f} | {how} | {unprof:.1f} | {ratio:.3f} | {slope} | {per1:.2f} | {kept} |")
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text + "\n")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    for name in ("iket", "iket-count", "ours", "proton"):
        p = sub.add_parser(name)
        p.add_argument("--proton-mode", default=None, choices=list(PROTON_MODES))
        p.add_argument("--rounds", type=int, default=15)
        p.add_argument("--batch", type=int, default=10)
        p.add_argument("--json", required=True)
        p.add_argument("--capture", default=None, help="where Proton writes its traces")
        p.add_argument("--modes", default=None,
                       help="ours: a comma list of the modes to time (default: all of ours)")
    t = sub.add_parser("table")
    t.add_argument("inputs", nargs="+")
    t.add_argument("--iket-capture", default=None)
    t.add_argument("--iket-ranges", type=int, default=None, help="ranges per launch, when counted already")
    t.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if args.what == "table":
        if args.iket_capture:
            per_launch, files = count_iket_ranges(args.iket_capture)
            print(f"# IKET capture: {len(files)} JSON files, ranges per launch {per_launch}")
            args.iket_ranges = min(per_launch) if per_launch else None
        return table(args)
    if args.what == "iket-count":  # one launch per F, for the capture's range count
        args.rounds, args.batch = 1, 1
        result = run_cute(args, ("iket",))
    elif args.what == "iket":
        result = run_cute(args, ("off", "nest", "iket", "slices_nest", "slicesu_nest"))
    elif args.what == "ours":
        modes = ("off", "nest", "slices", "slices_unordered", "slices_nest", "slicesu_nest")
        if args.modes:
            unknown = set(args.modes.split(",")) - set(modes)
            if unknown:
                raise SystemExit(f"--modes: unknown {sorted(unknown)}; choose from {modes}")
            modes = tuple(m for m in modes if m in args.modes.split(","))
        result = run_cute(args, modes)
    else:
        result = run_proton(args)
    path = args.json
    if os.path.exists(path):  # run-iket may run the program twice (a counting pass first)
        stem, ext = os.path.splitext(path)
        path = f"{stem}.pass{int(time.time())}{ext}"
    with open(path, "w") as fh:
        json.dump(result, fh, indent=1)
    for r in result["rows"]:
        print(f"{r['mode']:28} F={r['F']:>2} {r['us']:8.1f} us  x{r['ratio']:.3f}  {r['ns_per_rec_sm']:6.2f} ns/rec/SM"
              + (f" (R2 {r['r2']:.3f}, stride-1 {r['ns_per_rec_sm_stride1']:.2f})" if "r2" in r else "")
              + (f"  kept {r.get('records_kept')}" if 'records_kept' in r else ""), flush=True)
    for note in result.get("notes", []):
        print("note:", note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
