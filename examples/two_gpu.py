"""Two GPUs, one timeline: each rank runs an instrumented kernel ("kernel1"), an NCCL
all-reduce, and the kernel again ("kernel2"); rank 0 gathers both ranks' records, aligns
the GPUs' %globaltimer clocks and checks causality: every kernel2 record on every rank must
start after every kernel1 record on every rank has ended (the all-reduce between them cannot
start before all ranks arrive).

  NCCL_NVLS_ENABLE=0 python -m torch.distributed.run --nproc-per-node 2 examples/two_gpu.py -o two_gpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import cutlass
import cutlass.cute as cute
from cutlass import Int32, Int64

import cute_prof.device as cp

CTAS, WARPS, ITERS, SPIN_NS = 8, 4, 4, 5000
TAGS = ("kernel1", "kernel2")


@cute.kernel
def work_kernel(buf: cute.Tensor, max_events: Int32, tag: Int32):
    bidx, _, _ = cute.arch.block_idx()
    rec = cp.WarpRecorder(buf, max_events, bidx * WARPS + cute.arch.warp_idx())
    for i in cutlass.range(ITERS):
        t = rec.start()
        cp.spin_ns(Int64(SPIN_NS))
        rec.stop(t, tag, payload=i)
    rec.flush()


@cute.jit
def launch_work(buf: cute.Tensor, max_events: Int32, tag: Int32, stream):
    work_kernel(buf, max_events, tag).launch(grid=(CTAS, 1, 1), block=(32 * WARPS, 1, 1),
                                             stream=stream)


def causality(trace) -> dict:
    """Per rank: last kernel1 end and first kernel2 start (aligned ns); the slack between the
    latest kernel1 end on any rank and the earliest kernel2 start on any rank."""

    ev = trace.events
    ranks = trace.metadata["distributed"]["ranks"]
    stride = trace.metadata["distributed"]["tid_stride"]
    k1, k2 = trace.tag_names.index("kernel1"), trace.tag_names.index("kernel2")
    rows = []
    for r in ranks:
        mine = ev[ev["tid"] // stride == r["rank"]]
        one, two = mine[mine["tag"] == k1], mine[mine["tag"] == k2]
        rows.append({"rank": r["rank"], "kernel1_records": len(one), "kernel2_records": len(two),
                     "kernel1_end_ns": int((one["start_ns"] + one["dur_ns"]).max()),
                     "kernel2_start_ns": int(two["start_ns"].min()), "shift_ns": r["shift_ns"]})
    last_end = max(r["kernel1_end_ns"] for r in rows)
    first_start = min(r["kernel2_start_ns"] for r in rows)
    raw_slack = min(r["kernel2_start_ns"] + r["shift_ns"] for r in rows) - max(
        r["kernel1_end_ns"] + r["shift_ns"] for r in rows)
    return {"ranks": rows, "slack_ns": first_start - last_end, "unaligned_slack_ns": raw_slack,
            "holds": bool(first_start > last_end)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", default="two_gpu.json")
    args = parser.parse_args(argv)

    import torch
    import torch.distributed as dist
    import cuda.bindings.driver as cuda

    from cute_prof.buffer import allocate_profile_buffer
    from cute_prof.distributed import gather_trace, measure_clock
    from cute_prof.export import export_trace

    local = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    rank = dist.get_rank()
    capacity = 2 * CTAS * WARPS * ITERS
    prof = allocate_profile_buffer(capacity, device="cuda")
    arg = cp.buffer_arg(prof.tensor)
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    kernel = cute.compile(launch_work, arg, Int32(capacity), Int32(0), stream)
    data = torch.ones(1 << 20, device="cuda")
    dist.all_reduce(data)  # NCCL warm-up
    torch.cuda.synchronize()
    clock = measure_clock(samples=64)
    dist.barrier()
    kernel(arg, Int32(capacity), Int32(0), stream)
    dist.all_reduce(data)
    kernel(arg, Int32(capacity), Int32(1), stream)
    torch.cuda.synchronize()
    clock_after = measure_clock(samples=64)
    trace = gather_trace(prof, list(TAGS), clock=clock,
                         metadata={"clock_after": clock_after})
    if rank == 0:
        export_trace(trace, args.output, group_by="rank")  # one process per rank
        result = causality(trace)
        clocks = [{"rank": r["rank"], "offset_ns": r["clock"]["offset_ns"],
                   "residual_ns": r["clock"]["residual_ns"],
                   "uncertainty_ns": r["clock"]["uncertainty_ns"],
                   "drift_ppm": r["clock"]["drift_ppm"],
                   "offset_after_ns": r["metadata"]["clock_after"]["offset_ns"],
                   "shift_ns": r["shift_ns"], "gpu": r["gpu"], "host": r["host"],
                   "status": r["status"], "records": r["records"]}
                  for r in trace.metadata["distributed"]["ranks"]]
        print(json.dumps({"clocks": clocks, "causality": result}, indent=1))
        print("causality after alignment:", "HOLDS" if result["holds"] else "VIOLATED")
        status = 0 if result["holds"] else 1
    else:
        status = 0
    dist.destroy_process_group()
    return status


if __name__ == "__main__":
    sys.exit(main())
