"""What one zero-edit record adds to a dependency chain (GPU): the time the what-if model
removes per record from a starved ring's round trip (the trace's own estimate, an instant's
stamp to the warp's next, 42-54 ns on six kernels, also holds the kernel's work between two
pipeline calls). In each CTA two warps hand one item back and forth through a 1-stage
``PipelineAsync``, ``--iters`` times, plain and inside ``cute_prof.autoprofile()``; two
records lie on the chain per round trip. ``--consumer-warps N``: N warps consume each item
together, as the GEMMs' and FA4's two consumer warpgroups do.

    python bench/record_cost.py chain --rounds 20 --out bench/results/record_cost/chain.md

Timing: CUPTI, both kernels once per round in shuffled order after a warm-up; medians.
ns per record = (recorded - plain) / (iters x 2).
"""


import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def block_threads(consumer_warps: int) -> int:
    """The ping-pong's block: one producer warp and the consumer warps."""
    return 32 * (1 + consumer_warps)


def build(iters: int, consumer_warps: int = 1, *, cluster_size: int = 1, smem_bytes: int = 64):
    """The ping-pong kernel's host launcher: ``launch(out, n, stream)``. ``cluster_size``:
    launched in clusters of that many CTAs along x, with a multicast kernel's prologue (a
    cluster barrier after the barriers' init; 1: the plain launch, without it);
    ``smem_bytes``: the dynamic shared memory each CTA asks for (enough of it keeps one CTA
    per SM: ``bench/cluster_launch_gap.py``)."""
    import cutlass
    import cutlass.cute as cute
    from cutlass import pipeline
    try:
        from cutlass.utils import SmemAllocator
    except ImportError:
        from cutlass.memory import SmemAllocator

    @cute.kernel
    def pingpong(out: cute.Tensor, n: cutlass.Int32):
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        smem = SmemAllocator()
        barriers = smem.allocate_array(cutlass.Int64, 2)
        ring = pipeline.PipelineAsync.create(
            num_stages=1, barrier_storage=barriers,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 32),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread,
                                                     32 * consumer_warps))
        if cutlass.const_expr(cluster_size > 1):
            # no CTA of the cluster goes on before every CTA's barriers are initialised
            cute.arch.cluster_arrive_relaxed()
            cute.arch.cluster_wait()
        if warp == 0:
            state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, 1)
            for _ in cutlass.range(n, unroll=1):
                ring.producer_acquire(state)
                ring.producer_commit(state)
                state.advance()
        if warp >= 1:
            state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, 1)
            for _ in cutlass.range(n, unroll=1):
                ring.consumer_wait(state)
                ring.consumer_release(state)
                state.advance()
            tidx, _, _ = cute.arch.thread_idx()
            bidx, _, _ = cute.arch.block_idx()
            if tidx == 32:
                out[bidx] = n

    @cute.jit
    def launch(out: cute.Tensor, n: cutlass.Int32, stream):
        pingpong(out, n).launch(grid=(out.shape[0], 1, 1),
                                block=(block_threads(consumer_warps), 1, 1),
                                cluster=(cluster_size, 1, 1) if cluster_size > 1 else None,
                                smem=smem_bytes, stream=stream)

    return launch


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=20000, help="round trips per CTA")
    ap.add_argument("--ctas", type=int, default=132, help="one per SM")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--consumer-warps", type=int, default=1,
                    help="warps that consume each item together (warp 0 produces)")
    ap.add_argument("--out", type=Path, default=None, help="the Markdown result")
    args = ap.parse_args(argv)
    import cuda.bindings.driver as cuda
    import cutlass
    import cutlass.cute as cute
    import torch
    from cutlass.cute.runtime import from_dlpack

    import cute_prof
    from cute_prof.analysis.zero_edit import record_cost_ns
    from tools.cupti import time_shuffled

    out = torch.zeros(args.ctas, dtype=torch.int32, device="cuda")
    view = from_dlpack(out)
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    n = cutlass.Int32(args.iters)
    if args.consumer_warps < 1:
        ap.error("--consumer-warps must be >= 1")
    threads = block_threads(args.consumer_warps)
    launcher = build(args.iters, args.consumer_warps)
    plain = cute.compile(launcher, view, n, stream)
    # records per warp: a wait is two words, a signal one: 3 per round trip, and the slack
    per_warp = 3 * args.iters + 64
    with cute_prof.autoprofile(per_warp=per_warp, max_warps=args.ctas * threads // 32) as prof:
        recorded = cute.compile(launcher, view, n, stream)
    calls = {"plain": lambda: plain(view, n, stream), "recorded": lambda: recorded(view, n, stream)}
    for call in calls.values():
        call()
    torch.cuda.synchronize()
    assert int(out.min()) == args.iters, "the ping-pong did not finish"
    trace = prof.trace()
    times = time_shuffled(calls, rounds=args.rounds, warmup=3)
    med = {name: statistics.median(v) * 1e6 for name, v in times.items()}  # ns
    per_trip = {name: t / args.iters for name, t in med.items()}
    per_record = (med["recorded"] - med["plain"]) / (args.iters * 2)
    device = f"{torch.cuda.get_device_name()}, CUDA {torch.version.cuda}"
    record_ns = record_cost_ns(trace)
    lines = [
        "# One zero-edit record on a dependency chain (`bench/parts/record_chain.py`)", "",
        f"- device: {device}; date {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        f"- command: `python bench/record_cost.py chain {' '.join(argv or sys.argv[1:])}`",
        f"- {args.ctas} CTAs x {args.iters} round trips, {args.consumer_warps} consumer "
        f"warp{'s' if args.consumer_warps > 1 else ''}; CUPTI medians of {args.rounds} shuffled "
        f"rounds; the recorded launch: {len(trace.events):,} records, overflow {trace.overflow}",
        "",
        "| kernel | median us | ns per round trip |",
        "|---|---:|---:|",
        *(f"| {name} | {med[name] / 1e3:.1f} | {per_trip[name]:.1f} |" for name in calls),
        "",
        f"One record on the chain: **{per_record:.1f} ns** ((recorded - plain) / (round trips x "
        f"2 records)). The trace's own estimate of one record (`record_cost_ns`, the instant -> "
        f"next stamp gap) on this launch: {record_ns:.1f} ns.",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    target = Path(os.environ.get("OUT", "."))
    name = ("record_chain.json" if args.consumer_warps == 1
            else f"record_chain_w{args.consumer_warps}.json")
    (target / name).write_text(json.dumps(
        {"device": device, "iters": args.iters, "ctas": args.ctas,
         "consumer_warps": args.consumer_warps, "times_ms": times,
         "per_record_ns": per_record, "record_cost_ns": record_ns}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
