"""Purpose-built broken kernels for the flight recorder (and the healthy twin).

A one-stage producer/consumer pipeline on two mbarriers (full: 1 arrive, empty: one arrive
per consumer warp). Warp 0 produces k-tiles 0..k_tiles-1 inside region 'issue_tma'
(depth 1); warps 1..3 wait for each inside 'wait_full' (depth 1) under 'mainloop'
(depth 0). ``stop_k`` < k_tiles makes the producer quit after k-tile stop_k - 1: every
consumer then waits for k-tile stop_k forever. The trap kernel records, enters 'doomed'
and executes ``trap``.

Run as a script: ``python tests/gpu/flight_kernels.py MODE [options]`` (the GPU tests run
hanging and trapping kernels in such a child process and kill it)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import cutlass
import cutlass.cute as cute
import cutlass.memory  # noqa: F401
from cutlass import Int32
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import dsl_user_op

import cute_prof.device as cp
from cute_prof.device.flight import flight_enter, flight_leave

TAGS = ["mainloop", "wait_full", "issue_tma", "consume", "doomed", "work"]
T_MAIN, T_WAIT, T_TMA, T_CONSUME, T_DOOMED, T_WORK = range(6)
WARPS_PER_CTA = 4
THREADS = 32 * WARPS_PER_CTA
CONSUMER_WARPS = WARPS_PER_CTA - 1
TRAP_RECORDS_PER_WARP = 5


@dsl_user_op
def trap(*, loc=None, ip=None):
    llvm.inline_asm(None, [], "trap;", "~{memory}", has_side_effects=True, is_align_stack=False,
                    asm_dialect=llvm.AsmDialect.AD_ATT, loc=loc, ip=ip)


@cute.kernel
def pipeline_kernel(rec: cute.Pointer, max_events: Int32, pos: cute.Pointer, slots: Int32,
                    k_tiles: Int32, stop_k: Int32, fence: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    warp = cute.arch.warp_idx()
    warp = cute.arch.make_warp_uniform(warp)
    smem = cutlass.memory.SmemAllocator()
    bars = smem.allocate_array(cutlass.Int64, 2, byte_alignment=8)
    full = bars
    empty = bars + 1
    if tidx == 0:
        cute.arch.mbarrier_init(full, 1)
        cute.arch.mbarrier_init(empty, CONSUMER_WARPS)
    cute.arch.mbarrier_init_fence()
    cute.arch.sync_threads()
    track = bidx * WARPS_PER_CTA + warp
    if warp == 0:
        for k in cutlass.range(k_tiles, unroll=1):
            if k < stop_k:
                flight_enter(pos, slots, T_TMA, payload=k, depth=1, fence=fence)
                t = cp.profile_start(rec, max_events)
                cute.arch.mbarrier_wait(empty, (k & 1) ^ 1)
                if cute.arch.lane_idx() == 0:
                    cute.arch.mbarrier_arrive(full)
                cp.profile_stop(rec, t, T_TMA, track, max_events, guard="lane0", payload=k)
                flight_leave(pos, slots, depth=1, fence=fence)
    else:
        flight_enter(pos, slots, T_MAIN, payload=0, depth=0, fence=fence)
        for k in cutlass.range(k_tiles, unroll=1):
            flight_enter(pos, slots, T_WAIT, payload=k, depth=1, fence=fence)
            t = cp.profile_start(rec, max_events)
            cute.arch.mbarrier_wait(full, k & 1)
            cp.profile_stop(rec, t, T_WAIT, track, max_events, guard="lane0", payload=k)
            flight_leave(pos, slots, depth=1, fence=fence)
            if cute.arch.lane_idx() == 0:
                cute.arch.mbarrier_arrive(empty)
        flight_leave(pos, slots, depth=0, fence=fence)


@dsl_user_op
def store_to_unmapped_address(*, loc=None, ip=None):
    """A global store to an address no allocation covers: an illegal-address fault."""
    llvm.inline_asm(None, [], "{ .reg .b64 bad; mov.b64 bad, 0x7f0000000008; st.global.u32 [bad], 1; }",
                    "~{memory}", has_side_effects=True, is_align_stack=False,
                    asm_dialect=llvm.AsmDialect.AD_ATT, loc=loc, ip=ip)


@cute.kernel
def trap_kernel(rec: cute.Pointer, max_events: Int32, pos: cute.Pointer, slots: Int32,
                fence: cutlass.Constexpr, fault: cutlass.Constexpr = "trap"):
    bidx, _, _ = cute.arch.block_idx()
    warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    track = bidx * WARPS_PER_CTA + warp
    for i in cutlass.range_constexpr(TRAP_RECORDS_PER_WARP):
        flight_enter(pos, slots, T_WORK, payload=i, depth=0, fence=fence)
        t = cp.profile_start(rec, max_events)
        cp.profile_stop(rec, t, T_WORK, track, max_events, guard="lane0", payload=i)
        flight_leave(pos, slots, depth=0, fence=fence)
    cute.arch.sync_threads()
    flight_enter(pos, slots, T_DOOMED, payload=7, depth=0, fence=fence)
    cute.arch.sync_threads()
    if warp == 0:
        if cutlass.const_expr(fault == "trap"):
            trap()
        else:
            store_to_unmapped_address()


def _ptr(address, align=8):
    from cutlass.cute.runtime import make_ptr

    return make_ptr(cutlass.Int64, address, cute.AddressSpace.gmem, assumed_align=align)


@cute.jit
def launch_pipeline(rec: cute.Pointer, max_events: Int32, pos: cute.Pointer, slots: Int32,
                    k_tiles: Int32, stop_k: Int32, ctas: cutlass.Constexpr, fence: cutlass.Constexpr):
    pipeline_kernel(rec, max_events, pos, slots, k_tiles, stop_k, fence).launch(
        grid=(ctas, 1, 1), block=(THREADS, 1, 1))


@cute.jit
def launch_trap(rec: cute.Pointer, max_events: Int32, pos: cute.Pointer, slots: Int32,
                ctas: cutlass.Constexpr, fence: cutlass.Constexpr, fault: cutlass.Constexpr = "trap"):
    trap_kernel(rec, max_events, pos, slots, fence, fault).launch(grid=(ctas, 1, 1), block=(THREADS, 1, 1))


def main(argv=None) -> int:
    """Child process: run one kernel under the flight recorder, print one JSON line."""
    import torch

    from cute_prof.flight import allocate_flight_recorder, run_catching, save_dump, watch

    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=("hang", "ok", "trap", "illegal", "session-hang", "session-illegal"))
    ap.add_argument("--ctas", type=int, default=64)
    ap.add_argument("--k-tiles", type=int, default=64)
    ap.add_argument("--stop-k", type=int, default=37)
    ap.add_argument("--timeout", type=float, default=2.0)
    ap.add_argument("--fence", action="store_true")
    ap.add_argument("--dump")
    ap.add_argument("--trace")
    args = ap.parse_args(argv)
    if args.mode.startswith("session-"):
        return session_main(args)
    rec = allocate_flight_recorder(1 << 16, warps=args.ctas * WARPS_PER_CTA)
    r, p = _ptr(rec.records_address()), _ptr(rec.positions_address())
    if args.mode in ("trap", "illegal"):
        fn = cute.compile(launch_trap, r, Int32(rec.records.max_events), p, Int32(rec.slots), args.ctas, args.fence,
                          args.mode)
        launch = lambda: fn(r, Int32(rec.records.max_events), p, Int32(rec.slots))  # noqa: E731
        reports = []
        try:
            run_catching(launch, rec, tag_table=TAGS, on_report=reports.append)
            error = None
        except Exception as exc:  # the CUDA error, re-raised after the report
            error = f"{type(exc).__name__}: {exc}".splitlines()[0]
        report = reports[0] if reports else None
    else:
        stop = args.stop_k if args.mode == "hang" else args.k_tiles
        fn = cute.compile(launch_pipeline, r, Int32(rec.records.max_events), p, Int32(rec.slots),
                          Int32(args.k_tiles), Int32(stop), args.ctas, args.fence)
        launch = lambda: fn(r, Int32(rec.records.max_events), p, Int32(rec.slots), Int32(args.k_tiles), Int32(stop))  # noqa: E731
        t0 = time.monotonic()
        report = watch(launch, rec, timeout=args.timeout, tag_table=TAGS)
        error = None
    out = {"mode": args.mode, "error": error, "hung": report.hung if report else None,
           # from the watchdog's start (the launch has returned) to the report
           "elapsed_s": (rec.reported_at - rec.watch_started_at) if args.mode not in ("trap", "illegal") else None,
           # where the time went: waiting for the deadline, then building the report
           "waited_s": (rec.watch_ended_at - rec.watch_started_at) if rec.watch_ended_at else None,
           "report_s": (rec.reported_at - rec.watch_ended_at) if rec.watch_ended_at else None,
           "total_s": (time.monotonic() - t0) if args.mode not in ("trap", "illegal") else None,
           "groups": report.groups if report else [], "report": report.format() if report else "",
           "records": int(len(report.trace.events)) if report else 0,
           "incomplete": int(report.trace.incomplete) if report else 0,
           "attempted": int(report.trace.attempted) if report else 0,
           "record_tags": sorted(set(int(x) for x in report.trace.events["tag"])) if report else []}
    if args.dump:
        save_dump(args.dump, rec, tag_names=TAGS, status="hung" if report.hung else ("faulted" if error else "finished"))
    print("FLIGHT " + json.dumps(out), flush=True)
    if report is not None and report.hung:
        os._exit(0)  # the stuck context cannot be torn down cleanly; the parent kills us anyway
    return 0


def session_main(args) -> int:
    """The same kernels under ``profile_session(watchdog=..., flight_warps=...)``."""
    from cute_prof.errors import KernelHangError
    from cute_prof.session import profile_session

    warps = args.ctas * WARPS_PER_CTA
    t0 = time.monotonic()
    out = {"mode": args.mode, "error": None, "hung": False}
    try:
        with profile_session(1 << 16, TAGS, args.trace, watchdog=args.timeout, flight_warps=warps) as rec:
            r, p = _ptr(rec.records_address()), _ptr(rec.positions_address())
            n, slots = Int32(rec.records.max_events), Int32(rec.slots)
            if args.mode == "session-hang":
                fn = cute.compile(launch_pipeline, r, n, p, slots, Int32(args.k_tiles), Int32(args.stop_k),
                                  args.ctas, False)
                t0 = time.monotonic()
                fn(r, n, p, slots, Int32(args.k_tiles), Int32(args.stop_k))
            else:
                fn = cute.compile(launch_trap, r, n, p, slots, args.ctas, False, "illegal")
                t0 = time.monotonic()
                fn(r, n, p, slots)
        report = rec.report
    except KernelHangError as exc:
        out["hung"], report = True, exc.report
        out["message"] = str(exc)
    except Exception as exc:  # the CUDA error of the faulting kernel, with the report as a note
        out["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0]
        out["notes"] = list(getattr(exc, "__notes__", []))
        report = rec.report
    reported = rec.reported_at or time.monotonic()
    started = rec.watch_started_at or t0
    out.update({"elapsed_s": reported - started, "total_s": time.monotonic() - t0, "groups": report.groups, "report": report.format(),
                "records": int(len(report.trace.events)), "incomplete": int(report.trace.incomplete),
                "trace_written": bool(args.trace) and os.path.exists(args.trace)})
    print("FLIGHT " + json.dumps(out), flush=True)
    if out["hung"]:
        os._exit(0)  # the stuck context cannot be torn down; the parent kills us anyway
    return 0


if __name__ == "__main__":
    sys.exit(main())
