"""Overhead of each write path on an FMA-issue-bound probe, timed with CUPTI, in one process.

Probe: 1056 CTAs x 128 threads; each thread runs 256 iterations of an F-FMA dependent chain
(F = 64 and 16); every ``stride``-th iteration one region is recorded by every warp (or by
warp 0 of each CTA only). Kernel times come from CUPTI (torch.profiler kernel events), so
host launch overhead is excluded. Every round launches every variant once, in a fresh random
order; warm-up first; figures are medians over rounds. Added time = variant - unprofiled in
the same round; ns per record per SM = least-squares slope of added time against records
per SM over the strides (R^2 printed). Before timing, every write path is checked for exact
counts and exact overflow.

    python bench/parts/overhead.py [--rounds 30] [--json out.json] [--sass-dir DIR]
"""

import argparse
import datetime
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time

import numpy as np

from cute_prof.sass import disassemble, find_nvdisasm, loop_instructions

CTAS, THREADS, ITERS = 1056, 128, 256
WARPS = THREADS // 32
FS = (64, 16)
STRIDES = (1, 2, 4, 8)
# (name, what it is)
MODES = {
    "off": "unprofiled",
    "atomic": "profile_stop(guard='lane0'): one atomic per record (old)",
    "staged": "WarpRecorder: registers, flush per 32 records, 32 B records (old default)",
    "slices": "SliceRecorder: per-warp slice, lane 0, 8 B record, shared boundaries (new)",
    "slices_unordered": "SliceRecorder(ordered=False): same, no bar.warp.sync before the read",
    "span_pairs": "SliceRecorder.span / RoleRecorder('slices'): explicit start and end (2 timer reads), "
                   "two 8 B records per region; regions may overlap (the GEMM's path)",
    "scaffold": "the bench's own per-iteration record test and branch around an empty asm block",
}
CHAINS = int(os.environ.get("OVERHEAD_CHAINS", "4"))  # independent FMA chains per thread (1, 2 or 4)
if CHAINS not in (1, 2, 4):
    raise SystemExit(f"OVERHEAD_CHAINS must be 1, 2 or 4, got {CHAINS}")
PER_WARP = ITERS  # slice capacity for timing: every record fits


def build():
    import cutlass
    import cutlass.cute as cute
    from cutlass import Int32, Int64

    import cute_prof.device as cp
    from cute_prof.device.ptx import inline_asm
    from cute_prof.device.slices import SliceRecorder, prefetch_header

    def fma_iteration(x, y, z, w, a, b, fmas):
        """One probe iteration: ``fmas`` FMAs in CHAINS independent dependent chains
        (unrolled while tracing)."""
        for _ in range(fmas // CHAINS):
            x = x * a + b
            if CHAINS >= 2:
                y = y * a + b
            if CHAINS == 4:
                z = z * a + b
                w = w * a + b
        return x, y, z, w

    @cute.kernel
    def probe(buf: cute.Tensor, data: cute.Tensor, max_events: Int32, mask: Int32,
              rec_warps: Int32, fmas: cutlass.Constexpr, mode: cutlass.Constexpr, close: cutlass.Constexpr):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        warp = cute.arch.warp_idx()
        gidx = bidx * THREADS + tidx
        slices_path = mode in ("slices", "slices_unordered", "span_pairs")
        # the slices buffer's header loads go out first, beside the data load, as the
        # library tells kernel authors to (prefetch_header): the open then does not wait
        header = prefetch_header(buf) if slices_path else None
        x = data[gidx]
        a = x * 0.5 + 1.0
        b = x * 0.25
        y = x + 1.0
        z = x + 2.0
        w = x + 3.0
        track = bidx * WARPS + warp
        rec = cp.WarpRecorder(buf, max_events, track, enabled=mode == "staged")
        srec = SliceRecorder(buf, track, ordered=mode in ("slices", "span_pairs"),
                             enabled=slices_path, header=header)
        for i in cutlass.range(ITERS, unroll=1):
            record = ((i & mask) == 0) & (warp < rec_warps)
            t = Int64(0)
            t32 = Int32(0)
            if cutlass.const_expr(mode in ("atomic", "staged")):
                if record:
                    t = cp.read_globaltimer()
            if cutlass.const_expr(mode == "span_pairs"):
                if record:
                    t32 = srec.now()
            x, y, z, w = fma_iteration(x, y, z, w, a, b, fmas)
            if cutlass.const_expr(mode != "off"):
                if record:
                    if cutlass.const_expr(mode == "atomic"):
                        cp.profile_stop(buf, t, 1, track, max_events, guard="lane0")
                    if cutlass.const_expr(mode == "staged"):
                        rec.stop(t, 1)
                    if cutlass.const_expr(mode in ("slices", "slices_unordered")):
                        srec.end(1)
                    if cutlass.const_expr(mode == "span_pairs"):
                        srec.span(t32, 1)
                    if cutlass.const_expr(mode == "scaffold"):
                        inline_asm(None, [], "{\n}", "~{memory}")
        if cutlass.const_expr(close):
            rec.flush()
            srec.close()
        data[gidx] = x + y + z + w

    @cute.jit
    def launch(buf: cute.Tensor, data: cute.Tensor, max_events: Int32, mask: Int32, rec_warps: Int32,
               fmas: cutlass.Constexpr, mode: cutlass.Constexpr, close: cutlass.Constexpr):
        probe(buf, data, max_events, mask, rec_warps, fmas, mode, close).launch(
            grid=(CTAS, 1, 1), block=(THREADS, 1, 1))

    return launch


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--warmup-s", type=float, default=2.0)
    parser.add_argument("--json", default=None)
    parser.add_argument("--sass-dir", default=None)
    args = parser.parse_args(argv)

    import torch
    import cutlass.cute as cute
    from cutlass import Int32
    from cutlass.base_dsl.compiler import DumpDir
    from cutlass.cute.runtime import from_dlpack

    from cute_prof.buffer import allocate_profile_buffer
    from cute_prof.decode import decode_buffer
    from cute_prof.decode_slices import allocate_slices_buffer
    from cute_prof.device import buffer_arg

    props = torch.cuda.get_device_properties(0)
    sms = props.multi_processor_count
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm",
                              "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
        max_mhz = float(smi.split(",")[2].split()[0])
    except Exception:  # noqa: BLE001 - facts only
        smi, max_mhz = "?", 1980.0
    print(f"# {datetime.datetime.now(datetime.timezone.utc).isoformat()}Z {props.name} SMs={sms} | {smi} | "
          f"python {platform.python_version()} torch {torch.__version__}", flush=True)

    n_warps = CTAS * WARPS
    n_records = n_warps * ITERS
    launch = build()
    data = torch.randn(CTAS * THREADS, device="cuda")
    flat = allocate_profile_buffer(n_records, device="cuda")
    slices = allocate_slices_buffer(n_warps, PER_WARP, device="cuda")
    pairs = allocate_slices_buffer(n_warps, 2 * PER_WARP, device="cuda")  # span_pairs: 2 words a region
    flat_arg, slices_arg, data_arg = buffer_arg(flat.tensor), buffer_arg(slices), from_dlpack(data)
    pairs_arg = buffer_arg(pairs)

    compiled, sass_counts = {}, {}
    sass_dir = args.sass_dir or tempfile.mkdtemp()
    os.makedirs(sass_dir, exist_ok=True)
    nvdisasm = find_nvdisasm()

    def buf_for(mode):
        if mode == "span_pairs":
            return pairs_arg
        return slices_arg if mode.startswith("slices") else flat_arg

    def get(mode, fmas, close=True):
        key = (mode, fmas, close)
        if key not in compiled:
            d = tempfile.mkdtemp()
            opts = cute.compile[cute.KeepCUBIN(), DumpDir(d)]
            compiled[key] = opts(launch, buf_for(mode), data_arg, Int32(n_records), Int32(0), Int32(WARPS),
                                 fmas, mode, close)
            cubins = [os.path.join(d, f) for f in os.listdir(d) if f.endswith(".cubin")]
            if cubins and nvdisasm and close:
                sass = disassemble(cubins[0], nvdisasm=nvdisasm)
                with open(os.path.join(sass_dir, f"probe_chains{CHAINS}.sass"), "a") as fh:
                    fh.write(f"\n##### {mode} F={fmas}\n" + sass)
                sass_counts[f"{mode}_F{fmas}"] = loop_instructions(sass)
        return compiled[key]

    t0 = time.time()
    for fmas in FS:
        for mode in MODES:
            get(mode, fmas)
    print(f"# compiled {len(compiled)} variants in {time.time() - t0:.0f}s", flush=True)

    def run(mode, fmas, mask, rec_warps, buf=None, max_events=n_records, close=True):
        fn = get(mode, fmas, close)
        fn(buf if buf is not None else buf_for(mode), data_arg, Int32(max_events), Int32(mask), Int32(rec_warps))

    # ---- exactness: every record kept, overflow exact, for every write path
    checks = []

    def check(name, ok, detail):
        checks.append(dict(name=name, ok=bool(ok), detail=detail))
        print(f"# check {'OK ' if ok else 'BAD'} {name}: {detail}", flush=True)

    for mode in ("atomic", "staged"):
        for cap in (n_records, n_records // 3):
            small = allocate_profile_buffer(cap, device="cuda")
            run(mode, 16, 0, WARPS, buf=buffer_arg(small.tensor), max_events=cap)
            torch.cuda.synchronize()
            tr = decode_buffer(small)
            ok = (tr.attempted == n_records and len(tr.events) == min(cap, n_records)
                  and tr.overflow == n_records - min(cap, n_records) and tr.incomplete == 0)
            check(f"{mode} cap={cap}", ok, f"attempted {tr.attempted} events {len(tr.events)} "
                  f"overflow {tr.overflow} incomplete {tr.incomplete}")
    for mode in ("slices", "slices_unordered", "span_pairs"):
        words = 2 if mode == "span_pairs" else 1  # buffer records per region
        for per_warp, n_sl in ((words * ITERS, n_warps), (101, n_warps), (words * ITERS, n_warps - 7)):
            sb = allocate_slices_buffer(n_sl, per_warp, device="cuda")
            run(mode, 16, 0, WARPS, buf=buffer_arg(sb))
            torch.cuda.synchronize()
            tr = decode_buffer(sb)
            stored = n_sl * min(per_warp, words * ITERS)
            kept = n_sl * (min(per_warp, words * ITERS) // words)  # an odd slice ends on a lone START
            ev = tr.events
            ok = (tr.attempted == words * n_records and len(ev) == kept
                  and tr.overflow == words * n_records - stored
                  and tr.incomplete == 0 and tr.metadata["slices_unclosed_warps"] == 0
                  and (ev["dur_ns"] >= 0).all() and np.bincount(ev["payload"]).sum() == kept)
            check(f"{mode} per_warp={per_warp} slices={n_sl}", ok,
                  f"attempted {tr.attempted} events {len(ev)} overflow {tr.overflow} "
                  f"(want {words * n_records - stored}) "
                  f"dur median {np.median(ev['dur_ns']) if len(ev) else -1:.0f} ns")
    # forgotten close(): records still there, warning raised
    import warnings
    sb = allocate_slices_buffer(n_warps, ITERS, device="cuda")
    run("slices", 16, 0, WARPS, buf=buffer_arg(sb), close=False)
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tr = decode_buffer(sb)
    check("slices without close()", len(tr.events) == n_records and tr.metadata["slices_unclosed_warps"] == n_warps
          and any("never called close" in str(w.message) for w in caught),
          f"events {len(tr.events)} unclosed warps {tr.metadata['slices_unclosed_warps']} warnings {len(caught)}")

    # ---- timing
    cases = []
    for fmas in FS:
        cases.append(("off", fmas, 1, 0, WARPS))
        for mode in MODES:
            if mode == "off":
                continue
            for stride in STRIDES:
                for warps in ("all", "warp0"):
                    cases.append((mode, fmas, stride, warps, WARPS if warps == "all" else 1))
    until = time.perf_counter() + args.warmup_s
    while time.perf_counter() < until:
        for _ in range(20):
            run("off", 64, 0, WARPS)
        torch.cuda.synchronize()

    from torch.profiler import ProfilerActivity, profile

    order = []
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(args.rounds):
            random.shuffle(cases)
            for case in cases:
                mode, fmas, stride, _, rec_warps = case
                if mode in ("atomic", "staged"):
                    flat.reset()
                run(mode, fmas, stride - 1, rec_warps)
                order.append(case)
            torch.cuda.synchronize()
    clocks_after = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,clocks.max.sm,power.draw,temperature.gpu",
                                   "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
    print(f"# clocks right after timing: {clocks_after}", flush=True)
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
               and "probe" in e.name]
    if len(kernels) != len(order):  # the DSL named the kernel otherwise: drop torch's own
        kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
                   and not any(k in e.name for k in ("at::", "elementwise", "fill", "emset", "Memcpy"))]
    kernels.sort(key=lambda e: e.time_range.start)
    if len(kernels) != len(order):
        names = sorted({e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA})
        raise SystemExit(f"CUPTI saw {len(kernels)} probe kernels for {len(order)} launches: {names[:8]}")
    times = {}
    for case, e in zip(order, kernels, strict=True):
        times.setdefault(case[:4], []).append(e.time_range.elapsed_us() * 1e3)  # ns
    rounds = args.rounds
    # per-round pairing: the i-th launch of each case is in round i
    base = {f: np.array(times[("off", f, 1, 0)]) for f in FS}
    issue_bound_us = {f: n_warps / sms * ITERS * f / 4 / (max_mhz * 1e6) * 1e6 for f in FS}

    rows = []
    for fmas in FS:
        for mode in MODES:
            if mode == "off":
                continue
            for warps in ("all", "warp0"):
                xs, ys = [], []
                for stride in STRIDES:
                    t = np.array(times[(mode, fmas, stride, warps)])
                    added = np.median(t - base[fmas])
                    rec_per_sm = n_warps * (1 if warps == "all" else 1 / WARPS) * (ITERS // stride) / sms
                    xs.append(rec_per_sm)
                    ys.append(added)
                slope, icpt = np.polyfit(xs, ys, 1)
                pred = slope * np.array(xs) + icpt
                r2 = 1 - np.sum((np.array(ys) - pred) ** 2) / max(np.sum((np.array(ys) - np.mean(ys)) ** 2), 1e-30)
                t1 = np.array(times[(mode, fmas, 1, warps)])
                rows.append(dict(mode=mode, F=fmas, warps=warps, ns_per_rec_sm=float(slope), r2=float(r2),
                                 intercept_ns=float(icpt),
                                 ratio_stride1=float(np.median(t1 / base[fmas])),
                                 median_us_stride1=float(np.median(t1) / 1e3),
                                 sass_loop_instructions=sass_counts.get(f"{mode}_F{fmas}")))
    result = dict(
        date=datetime.datetime.now(datetime.timezone.utc).isoformat() + "Z", device=props.name, smi=smi, sms=sms,
        command=" ".join(sys.argv), rounds=rounds, chains=CHAINS, clocks_after=clocks_after, shape=dict(ctas=CTAS, threads=THREADS, iters=ITERS),
        unprofiled_us={f: float(np.median(base[f]) / 1e3) for f in FS},
        issue_bound_us=issue_bound_us, sass_loop_instructions=sass_counts, checks=checks, rows=rows,
        modes=MODES, timing="CUPTI kernel durations (torch.profiler), shuffled every round, medians",
    )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=1)
    print()
    for f in FS:
        print(f"chains={CHAINS} F={f}: unprofiled {result['unprofiled_us'][f]:.1f} us, FMA-issue bound {issue_bound_us[f]:.1f} us "
              f"({result['unprofiled_us'][f] / issue_bound_us[f]:.2f}x), loop SASS instr off="
              f"{sass_counts.get(f'off_F{f}')}")
    print(f"{'mode':18} {'F':>3} {'warps':6} {'ns/rec/SM':>9} {'R2':>6} {'x unprof':>8} {'loop instr':>10}")
    for r in rows:
        print(f"{r['mode']:18} {r['F']:>3} {r['warps']:6} {r['ns_per_rec_sm']:9.2f} {r['r2']:6.3f} "
              f"{r['ratio_stride1']:8.3f} {str(r['sass_loop_instructions']):>10}")
    bad = [c["name"] for c in checks if not c["ok"]]
    print("exactness checks:", "all OK" if not bad else f"FAILED {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
