"""NVIDIA IKET on the probe of ``bench/parts/overhead.py``, beside our write paths.

IKET's injection library and torch.profiler's CUPTI do not share a process, so every
variant here is timed the same way:
CUDA events around batches of ``--batch`` launches enqueued behind a sleep kernel (back to
back whatever the host's launch overhead), variants shuffled each round, medians; ours are
timed in the IKET process too, beside the CUPTI figures of ``bench/parts/overhead.py``.
Per-record cost = (variant - unprofiled) / records per SM, all warps, one record per
iteration (8192 records per SM on 132 SMs).

  run-iket profile --postprocess json -- python bench/parts/overhead_peers.py iket --json iket.json
  python bench/parts/overhead_peers.py table overhead.json iket.json [--iket-capture DIR]

Triton Proton's side of the committed table (proton_*.json) came from this script's
``proton`` sub-command, retired at a7be1fc.
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
    for name in ("iket", "iket-count", "ours"):
        p = sub.add_parser(name)
        p.add_argument("--rounds", type=int, default=15)
        p.add_argument("--batch", type=int, default=10)
        p.add_argument("--json", required=True)
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
    else:
        modes = ("off", "nest", "slices", "slices_unordered", "slices_nest", "slicesu_nest")
        if args.modes:
            unknown = set(args.modes.split(",")) - set(modes)
            if unknown:
                raise SystemExit(f"--modes: unknown {sorted(unknown)}; choose from {modes}")
            modes = tuple(m for m in modes if m in args.modes.split(","))
        result = run_cute(args, modes)
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
