"""One kernel, instrumented twice around the same regions: once with NVIDIA IKET ranges
(``cutlass.cute.experimental.iket``), once with cute_prof's ``WarpRecorder``. Each warp runs
``ITERS`` iterations of two spins ("short", "long") and a marker, so both tools must see the
same number of regions per warp and (nearly) the same durations.

  python tests/gpu/iket_compare.py --mode ours --save ours.npz      # cute_prof buffer
  run-iket profile --postprocess json -- python tests/gpu/iket_compare.py --mode iket
  python tests/gpu/iket_compare.py --compare CAPTURE.trace.json ours.npz

``--mode iket`` also replays the kernel once from a CUDA graph (a graph launch in the
capture). ``--compile-only`` builds both variants without a GPU (CI)."""

from __future__ import annotations

import argparse
import json
import sys

import cutlass
import cutlass.cute as cute
from cutlass import Int32, Int64
from cutlass.cute.experimental import iket

import cute_prof.device as cp

CTAS = 8
WARPS_PER_CTA = 4
ITERS = 16
SPIN_SHORT_NS = 1000
SPIN_LONG_NS = 4000
TAGS = ("short", "long", "iter_done")  # cute_prof tag ids 0, 1, 2 = IKET names
LAUNCHES = 2  # plain launches per run; --mode iket adds one graph replay


@cute.kernel
def compare_kernel(buf: cute.Tensor, max_events: Int32, iters: Int32, mode: cutlass.Constexpr):
    bidx, _, _ = cute.arch.block_idx()
    warp = cute.arch.warp_idx()
    track = bidx * WARPS_PER_CTA + warp
    if cutlass.const_expr(mode == "iket_plain"):  # no payloads (older IKET dump methods)
        for i in cutlass.range(iters):
            token = iket.range_start("short")
            cp.spin_ns(Int64(SPIN_SHORT_NS))
            iket.range_end(token)
            token = iket.range_start("long")
            cp.spin_ns(Int64(SPIN_LONG_NS))
            iket.range_end(token)
            iket.mark("iter_done")
    elif cutlass.const_expr(mode == "iket"):
        for i in cutlass.range(iters):
            token = iket.range_start("short", Int32(i))
            cp.spin_ns(Int64(SPIN_SHORT_NS))
            iket.range_end(token, Int32(i))
            token = iket.range_start("long")
            cp.spin_ns(Int64(SPIN_LONG_NS))
            iket.range_end(token)
            iket.mark("iter_done", Int32(i))
    else:
        rec = cp.WarpRecorder(buf, max_events, track)
        for i in cutlass.range(iters):
            t = rec.start()
            cp.spin_ns(Int64(SPIN_SHORT_NS))
            rec.stop(t, 0, payload=i)
            t = rec.start()
            cp.spin_ns(Int64(SPIN_LONG_NS))
            rec.stop(t, 1)
            rec.instant(2, payload=i)
        rec.flush()


@cute.jit
def launch_compare(buf: cute.Tensor, max_events: Int32, iters: Int32, mode: cutlass.Constexpr,
                   stream):
    compare_kernel(buf, max_events, iters, mode).launch(
        grid=(CTAS, 1, 1), block=(32 * WARPS_PER_CTA, 1, 1), stream=stream)


def records_per_launch() -> int:
    return CTAS * WARPS_PER_CTA * ITERS * len(TAGS)


def run(mode: str, save: str | None, compile_only: bool) -> None:
    import torch
    import cuda.bindings.driver as cuda
    from cutlass.cute.runtime import from_dlpack

    from cute_prof.buffer import allocate_profile_buffer

    device = "cpu" if compile_only else "cuda"
    capacity = records_per_launch() * LAUNCHES
    prof = allocate_profile_buffer(capacity, device=device)
    arg = cp.buffer_arg(prof.tensor)
    stream = cuda.CUstream(0 if compile_only else torch.cuda.current_stream().cuda_stream)
    compiled = cute.compile(launch_compare, arg, Int32(capacity), Int32(ITERS), mode, stream)
    if compile_only:
        print(f"compiled {mode}")
        return
    for _ in range(LAUNCHES):
        compiled(arg, Int32(capacity), Int32(ITERS), stream)
    torch.cuda.synchronize()
    if mode.startswith("iket"):
        try:  # one graph launch of the same kernel, so the capture holds a graphLaunch
            side = torch.cuda.Stream()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=side):
                compiled(arg, Int32(capacity), Int32(ITERS),
                         cuda.CUstream(torch.cuda.current_stream().cuda_stream))
            graph.replay()
            torch.cuda.synchronize()
            print("graph replay done")
        except Exception as err:  # the plain launches are still a capture
            print(f"graph replay failed: {type(err).__name__}: {err}")
    if save:
        from cute_prof.storage import save_buffer

        save_buffer(save, prof, list(TAGS), metadata={"kernel": "compare_kernel",
                                                      "launches": LAUNCHES})
        print(f"saved {save}")


def compare(capture: str, ours: str) -> int:
    """Per warp region counts and per-tag medians of the IKET capture against ours."""
    import numpy as np

    import cute_prof

    theirs = cute_prof.load_trace(capture)
    mine = cute_prof.load_trace(ours)
    plain = [i for i, launch in enumerate(theirs.launches) if launch.get("graph_launch") is None]
    ok = True
    rows = []
    for name in ("short", "long"):
        t_tag = theirs.tag_names.index(name)
        m_tag = mine.tag_names.index(name)
        t_ev = theirs.events[(theirs.events["tag"] == t_tag) & (theirs.events["kind"] == 0)
                             & np.isin(theirs.events["launch"], plain)]
        m_ev = mine.events[(mine.events["tag"] == m_tag) & (mine.events["kind"] == 0)]
        # regions per (CTA, warp): IKET's track key is (sm, cta, warp); ours tid = cta*W + warp
        t_counts = np.unique(t_ev["tid"], return_counts=True)[1]
        m_counts = np.unique(m_ev["tid"], return_counts=True)[1]
        t_med = float(np.median(t_ev["dur_ns"]))
        m_med = float(np.median(m_ev["dur_ns"]))
        same_counts = (len(t_counts) == len(m_counts) == CTAS * WARPS_PER_CTA
                       and set(t_counts.tolist()) == set(m_counts.tolist()) == {ITERS * LAUNCHES})
        close = abs(t_med - m_med) <= 64
        ok = ok and same_counts and close
        rows.append(dict(tag=name, iket_regions=len(t_ev), ours_regions=len(m_ev),
                         iket_per_warp=sorted(set(t_counts.tolist())),
                         ours_per_warp=sorted(set(m_counts.tolist())),
                         iket_median_ns=t_med, ours_median_ns=m_med,
                         diff_ns=t_med - m_med, same_counts=same_counts, within_64ns=close))
    print(json.dumps(rows, indent=1))
    print("IKET vs cute_prof:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("iket", "iket_plain", "ours"))
    parser.add_argument("--save", help="cute_prof buffer file to write (--mode ours)")
    parser.add_argument("--compile-only", action="store_true")
    parser.add_argument("--compare", nargs=2, metavar=("CAPTURE", "OURS"))
    args = parser.parse_args(argv)
    if args.compare:
        return compare(*args.compare)
    modes = [args.mode] if args.mode else ["iket", "ours"]
    for mode in modes:
        run(mode, args.save, args.compile_only)
    return 0


if __name__ == "__main__":
    sys.exit(main())
