"""NVIDIA IKET and Triton's Proton on the probe of ``bench/overhead.py``, beside our write paths.

IKET's injection library and torch.profiler's CUPTI do not share a process, and Proton's
instrumentation session may hold CUPTI too, so every variant here is timed the same way:
CUDA events around batches of back-to-back launches (host launch overhead hides behind the
previous kernel; ``--batch`` launches per sample), variant order shuffled each round,
medians. Our own variants are timed in the IKET process too, so that their figures can be
set beside the CUPTI figures of ``bench/overhead.py`` to show the two methods agree.
Per-record cost = (variant - unprofiled) / records per SM, all warps, one record per
iteration (8192 records per SM on 132 SMs).

  run-iket profile --postprocess json -- python bench/overhead_peers.py iket --json iket.json
  python bench/overhead_peers.py proton --json proton.json
  python bench/overhead_peers.py table overhead.json iket.json proton.json [--capture DIR]
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


def time_with_events(launchers: dict, *, rounds: int, batch: int, warmup_s: float = 1.0) -> dict:
    """Median ns per launch of each launcher, from CUDA events around ``batch`` launches."""
    import torch

    names = list(launchers)
    until = time.perf_counter() + warmup_s
    while time.perf_counter() < until:
        for name in names:
            launchers[name]()
        torch.cuda.synchronize()
    samples = {name: [] for name in names}
    for _ in range(rounds):
        random.shuffle(names)
        for name in names:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(batch):
                launchers[name]()
            end.record()
            end.synchronize()
            samples[name].append(start.elapsed_time(end) * 1e6 / batch)
    return {name: float(np.median(v)) for name, v in samples.items()}


def rows_from_times(times: dict, base_key, *, sms: int, n_records: int, source: str) -> list:
    rows = []
    per_sm = n_records / sms
    for (mode, fmas), ns in times.items():
        if mode == "off":
            continue
        base = times[(base_key, fmas)]
        rows.append(dict(mode=mode, F=fmas, us=ns / 1e3, unprofiled_us=base / 1e3, ratio=ns / base,
                         ns_per_rec_sm=(ns - base) / per_sm, timing=source))
    return rows


# ---------------------------------------------------------------------------- IKET


def run_iket(args) -> dict:
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
    launchers = {}
    for fmas in FS:
        for mode in ("off", "iket", "slices", "slices_unordered"):
            buf = slices_arg if mode.startswith("slices") else flat_arg
            fn = cute.compile(launch, buf, data_arg, Int32(n_records), Int32(0), Int32(probe.WARPS), fmas, mode, True)
            launchers[(mode, fmas)] = (lambda fn=fn, buf=buf: fn(buf, data_arg, Int32(n_records), Int32(0),
                                                                   Int32(probe.WARPS)))
    times = time_with_events(launchers, rounds=args.rounds, batch=args.batch)
    result = dict(facts, tool="iket", timing=f"CUDA events around {args.batch} back-to-back launches, "
                  f"{args.rounds} rounds shuffled, medians; process under run-iket",
                  rows=rows_from_times(times, "off", sms=facts["sms"], n_records=n_records, source="events"),
                  launches_per_variant=args.rounds * args.batch)
    return result


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
    base_before = time_with_events({("off", f): launcher(f, False) for f in FS}, rounds=args.rounds, batch=args.batch)
    out_dir = args.capture or "."
    for name, (opts, buffer_type) in PROTON_MODES.items():
        try:
            mode = proton.mode.Default(optimizations=opts, buffer_type=buffer_type) if opts else \
                proton.mode.Default(buffer_type=buffer_type)
            # one launch per F in its own session: how many of its records the trace kept
            for fmas in FS:
                path = os.path.join(out_dir, f"{name}_F{fmas}")
                proton.start(path, data="trace", backend="instrumentation", mode=mode)
                launcher(fmas, True)()
                torch.cuda.synchronize()
                proton.finalize()
                kept[(name, fmas)] = count_proton_records(path)
            proton.start(os.path.join(out_dir, f"{name}_timing"), data="trace", backend="instrumentation", mode=mode)
            times = time_with_events({(name, f): launcher(f, True) for f in FS} |
                                     {("off", f): launcher(f, False) for f in FS},
                                     rounds=args.rounds, batch=args.batch)
            proton.finalize()
        except Exception as exc:  # noqa: BLE001 - an unsupported mode is a finding, not a crash
            notes.append(f"{name}: {type(exc).__name__}: {exc}".splitlines()[0])
            continue
        for f in FS:
            base = base_before[("off", f)]
            ns = times[(name, f)]
            rows.append(dict(mode=name, F=f, us=ns / 1e3, unprofiled_us=base / 1e3, ratio=ns / base,
                             ns_per_rec_sm=(ns - base) / (n_records / facts["sms"]), timing="events",
                             unprofiled_in_session_us=times[("off", f)] / 1e3,
                             records_kept=kept.get((name, f)), records_issued=n_records))
    base_after = time_with_events({("off", f): launcher(f, False) for f in FS}, rounds=args.rounds, batch=args.batch)
    return dict(facts, tool="proton", rows=rows, notes=notes,
                unprofiled_before_us={f: base_before[("off", f)] / 1e3 for f in FS},
                unprofiled_after_us={f: base_after[("off", f)] / 1e3 for f in FS},
                timing=f"CUDA events around {args.batch} back-to-back launches, {args.rounds} rounds shuffled, "
                       f"medians; unprofiled Triton probe timed before and after the Proton sessions")


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
    """Ranges named 'iter' in IKET's decoded JSON capture(s)."""
    total, files = 0, sorted(glob.glob(os.path.join(capture_dir, "**", "*.json"), recursive=True))
    for f in files:
        try:
            with open(f) as fh:
                doc = json.load(fh)
        except (OSError, ValueError):
            continue
        events = doc.get("traceEvents") if isinstance(doc, dict) else None
        if isinstance(events, list):
            total += sum(1 for e in events if isinstance(e, dict) and e.get("name") == "iter" and e.get("ph") in ("X", "B"))
    return total, files


def table(args) -> int:
    docs = [json.load(open(p)) for p in args.inputs]
    lines = []
    for doc in docs:
        tool = doc.get("tool", "cute_prof (bench/overhead.py, CUPTI)")
        lines.append(f"- {tool}: {doc.get('device')} | {doc.get('smi')} | {doc.get('date')} | chains={doc.get('chains')}"
                     f" | timing: {doc.get('timing')}")
        for note in doc.get("notes", []):
            lines.append(f"  - note: {note}")
    lines.append("")
    lines.append("| variant | F | timing | unprofiled us | x unprofiled | ns/rec/SM | records kept |")
    lines.append("|---|---:|---|---:|---:|---:|---|")
    for doc in docs:
        for r in doc["rows"]:
            if "warps" in r and r["warps"] != "all":
                continue
            if doc.get("tool") is None:  # overhead.py: CUPTI slope over strides
                unprof = doc["unprofiled_us"][str(r["F"])] if isinstance(next(iter(doc["unprofiled_us"])), str) else doc["unprofiled_us"][r["F"]]
                kept = "all (checked)"
                lines.append(f"| {r['mode']} | {r['F']} | CUPTI slope (R2 {r['r2']:.3f}) | {unprof:.1f} | "
                             f"{r['ratio_stride1']:.3f} | {r['ns_per_rec_sm']:.2f} | {kept} |")
            else:
                kept = ""
                if r.get("records_kept") is not None:
                    kept = f"{r['records_kept']:,} of {r['records_issued']:,}"
                elif r["mode"] == "iket" and args.iket_ranges is not None:
                    kept = f"{args.iket_ranges:,} ranges in the capture"
                lines.append(f"| {r['mode']} | {r['F']} | {r['timing']} ({doc['tool']} process) | "
                             f"{r['unprofiled_us']:.1f} | {r['ratio']:.3f} | {r['ns_per_rec_sm']:.2f} | {kept} |")
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text + "\n")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    for name in ("iket", "proton"):
        p = sub.add_parser(name)
        p.add_argument("--rounds", type=int, default=15)
        p.add_argument("--batch", type=int, default=10)
        p.add_argument("--json", required=True)
        p.add_argument("--capture", default=None, help="where Proton writes its traces")
    t = sub.add_parser("table")
    t.add_argument("inputs", nargs="+")
    t.add_argument("--iket-capture", default=None)
    t.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if args.what == "table":
        args.iket_ranges = None
        if args.iket_capture:
            args.iket_ranges, files = count_iket_ranges(args.iket_capture)
            print(f"# IKET capture: {len(files)} JSON files, {args.iket_ranges} 'iter' ranges")
        return table(args)
    result = run_iket(args) if args.what == "iket" else run_proton(args)
    path = args.json
    if os.path.exists(path):  # run-iket may run the program twice (a counting pass first)
        stem, ext = os.path.splitext(path)
        path = f"{stem}.pass{int(time.time())}{ext}"
    with open(path, "w") as fh:
        json.dump(result, fh, indent=1)
    for r in result["rows"]:
        print(f"{r['mode']:28} F={r['F']:>2} {r['us']:8.1f} us  x{r['ratio']:.3f}  {r['ns_per_rec_sm']:6.2f} ns/rec/SM"
              + (f"  kept {r.get('records_kept')}" if 'records_kept' in r else ""), flush=True)
    for note in result.get("notes", []):
        print("note:", note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
