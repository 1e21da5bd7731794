"""Cost of the flight recorder against the normal write path, on a region-per-iteration
probe: every warp of 264 CTAs x 8 warps runs ITERS iterations of a short FMA chain, each
wrapped in one region. Kernel times from many back-to-back launches (median of rounds,
variant order shuffled per round); cost per region = (variant - none) / ITERS.

    python bench/parts/flight_cost.py [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics

import cutlass
import cutlass.cute as cute
import torch
from cutlass import Float32, Int32
from cutlass.cute.runtime import make_ptr

import cute_prof.device as cp
from cute_prof.buffer import allocate_profile_buffer
from cute_prof.device.flight import flight_enter, flight_leave
from cute_prof.flight import allocate_flight_recorder

CTAS, WARPS, ITERS, CHAIN = 264, 8, 64, 32
VARIANTS = ("none", "record", "record_mapped", "flight", "flight_fence", "flight_and_record")


@cute.kernel
def cost_kernel(rec: cute.Pointer, max_events: Int32, pos: cute.Pointer, slots: Int32,
                out: cute.Tensor, variant: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    x = Float32(tidx) * Float32(0.001)
    for k in cutlass.range(ITERS, unroll=1):
        if cutlass.const_expr(variant in ("flight", "flight_fence", "flight_and_record")):
            flight_enter(pos, slots, 1, payload=k, depth=0, fence=variant == "flight_fence")
        t = cp.profile_start(rec, max_events, enabled=variant in ("record", "record_mapped", "flight_and_record"))
        for _ in cutlass.range_constexpr(CHAIN):
            x = x * Float32(1.0001) + Float32(0.5)
        cp.profile_stop(rec, t, 1, bidx * WARPS + warp, max_events, guard="lane0", payload=k,
                        enabled=variant in ("record", "record_mapped", "flight_and_record"))
        if cutlass.const_expr(variant in ("flight", "flight_fence", "flight_and_record")):
            flight_leave(pos, slots, depth=0, fence=variant == "flight_fence")
    out[bidx * WARPS * 32 + tidx] = x


@cute.jit
def launch(rec: cute.Pointer, max_events: Int32, pos: cute.Pointer, slots: Int32, out: cute.Tensor,
           variant: cutlass.Constexpr):
    cost_kernel(rec, max_events, pos, slots, out, variant).launch(grid=(CTAS, 1, 1), block=(WARPS * 32, 1, 1))


def ptr(address, align=8):
    return make_ptr(cutlass.Int64, address, cute.AddressSpace.gmem, assumed_align=align)


def main() -> None:
    from cutlass.cute.runtime import from_dlpack

    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--launches", type=int, default=10)
    ap.add_argument("--json")
    args = ap.parse_args()
    # room for every launch of one timed batch: the counter is reset once per batch, so
    # every region of every launch stores its record (no overflow path)
    records_needed = CTAS * WARPS * ITERS * args.launches
    dev_buf = allocate_profile_buffer(records_needed, device="cuda")
    flight = allocate_flight_recorder(records_needed, warps=CTAS * WARPS)
    out = torch.zeros(CTAS * WARPS * 32, device="cuda")
    pos = ptr(flight.positions_address())
    recs = {"record": ptr(dev_buf.tensor.data_ptr()), "record_mapped": ptr(flight.records_address())}
    fns = {}
    for v in VARIANTS:
        r = recs.get(v, recs["record_mapped"] if v == "flight_and_record" else recs["record"])
        fn = cute.compile(launch, r, Int32(records_needed), pos, Int32(flight.slots), from_dlpack(out), v)
        fns[v] = (fn, r)
    o = from_dlpack(out)

    def run(v, n):
        fn, r = fns[v]
        torch.cuda.synchronize()
        dev_buf.tensor[0] = 0
        flight.records.tensor[0] = 0  # host write to the mapped buffer; the GPU is idle
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(n):
            fn(r, Int32(records_needed), pos, Int32(flight.slots), o)
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1e6 / n

    print("compiled", flush=True)
    for v in VARIANTS:
        run(v, 2)
    torch.cuda.synchronize()
    samples = {v: [] for v in VARIANTS}
    for _ in range(args.rounds):
        order = list(VARIANTS)
        random.shuffle(order)
        for v in order:
            samples[v].append(run(v, args.launches))  # ns per launch, back to back
        print("round", {v: round(samples[v][-1] / 1e3, 1) for v in VARIANTS}, flush=True)
    base = statistics.median(samples["none"])
    rows = []
    for v in VARIANTS:
        med = statistics.median(samples[v])
        rows.append({"variant": v, "ns_per_launch": med, "added_ns_per_region": (med - base) / ITERS})
    print(f"device: {torch.cuda.get_device_name(0)}; {CTAS} CTAs x {WARPS} warps x {ITERS} regions; "
          f"{args.rounds} rounds x {args.launches} launches back to back")
    print(f"{'variant':<20}{'us/launch':>12}{'added ns/region/warp':>24}")
    for row in rows:
        print(f"{row['variant']:<20}{row['ns_per_launch'] / 1e3:>12.1f}{row['added_ns_per_region']:>24.1f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"device": torch.cuda.get_device_name(0), "rows": rows, "samples": samples}, fh, indent=1)


if __name__ == "__main__":
    main()
