"""What zero-edit profiling costs: FA4's forward and this repo's ws_gemm, recording vs not.

Kernel times from CUPTI (torch.profiler), every variant once per round in a fresh random
order, medians over rounds; the ratio is taken per round against the same round's plain
kernel. FA4's plain and recording kernels live in two compile caches of one process and
are swapped in before each call. ws_gemm: its level 0 (no hand-placed records) compiled
plain and in zero-edit mode, beside its hand-placed level 2 on the slices path.

    python bench/kernel_cost.py zero-edit --json bench/results/zero_edit_h100/cost.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from tools.cupti import time_shuffled  # noqa: E402

import cute_prof  # noqa: E402


def record_counts(trace) -> dict:
    """What a recording launch wrote and lost (every count the cost table reports)."""
    meta = trace.metadata
    return {"events": len(trace), "attempted": trace.attempted, "overflow": trace.overflow,
            "warps": meta["slices_opened"], "diverged": meta["slices_diverged_warps"],
            "unclosed": meta["slices_unclosed_warps"]}


def fa4_variants(shape, causal):
    import torch
    from flash_attn.cute import interface as fa

    from examples.flash_attention import inputs

    q, k, v = inputs(*shape)
    plain_cache = fa._flash_attn_fwd.compile_cache
    fa._flash_attn_fwd(q, k, v, causal=causal)  # compile plain
    with cute_prof.autoprofile(per_warp=4096, caches=[(fa._flash_attn_fwd, "compile_cache")]) as prof:
        fa._flash_attn_fwd(q, k, v, causal=causal)
    torch.cuda.synchronize()
    trace = prof.trace()
    recording_cache = prof.caches[0]

    def call(cache):
        def run():
            fa._flash_attn_fwd.compile_cache = cache
            fa._flash_attn_fwd(q, k, v, causal=causal)
        return run

    info = record_counts(trace)
    return {"plain": call(plain_cache), "zero_edit": call(recording_cache)}, info


def gemm_variants(m, n, k):
    import torch

    from examples import ws_gemm as W

    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    plain = W.CompiledWsGemm(W.GemmConfig(recorder="slices"))
    dummy = W.alloc_prof(1)  # level 0 records nothing by hand
    run_plain = plain.prepare(a, b, c, dummy, 0, 0)
    zero = W.CompiledWsGemm(W.GemmConfig(recorder="slices"))
    warps = plain.gemm.num_ctas(m, n) * (plain.gemm.threads_per_cta // 32)
    with cute_prof.autoprofile(per_warp=2048, max_warps=warps) as prof:
        run_zero = zero.prepare(a, b, c, dummy, 0, 0)
        run_zero()
    torch.cuda.synchronize()
    trace = prof.trace()
    hand = W.CompiledWsGemm(W.GemmConfig(recorder="slices"))
    buf, max_events = W.alloc_prof_for(hand.gemm, m, n, k, 2)
    run_hand = hand.prepare(a, b, c, buf, max_events, 2)
    info = record_counts(trace)
    return {"level0": run_plain, "level0_zero_edit": run_zero, "level2_hand": run_hand}, info


def ratios(times, base):
    out = {}
    for name, values in times.items():
        per_round = [v / b for v, b in zip(values, times[base])]
        out[name] = {"median_ms": statistics.median(values),
                     "ratio_median": statistics.median(per_round),
                     "ratio_p10": sorted(per_round)[len(per_round) // 10],
                     "ratio_p90": sorted(per_round)[(9 * len(per_round)) // 10]}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--json", default=None)
    ap.add_argument("--skip-gemm", action="store_true")
    args = ap.parse_args(argv)
    import torch

    results = {"device": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d"),
               "command": "python bench/zero_edit_cost.py " + " ".join(argv or sys.argv[1:]),
               "rounds": args.rounds, "cases": {}}
    cases = [("fa4 b4 s4096 h16 d128 full", (4, 4096, 16, 128), False),
             ("fa4 b4 s4096 h16 d128 causal", (4, 4096, 16, 128), True),
             ("fa4 b1 s1024 h16 d128 full", (1, 1024, 16, 128), False),
             ("fa4 b1 s1024 h16 d128 causal", (1, 1024, 16, 128), True)]
    for name, shape, causal in cases:
        variants, info = fa4_variants(shape, causal)
        times = time_shuffled(variants, rounds=args.rounds, warmup=5)
        results["cases"][name] = {"records": info, **ratios(times, "plain")}
    if not args.skip_gemm:
        variants, info = gemm_variants(8192, 8192, 8192)
        times = time_shuffled(variants, rounds=args.rounds, warmup=5)
        results["cases"]["ws_gemm 8192^3"] = {"records": info, **ratios(times, "level0")}
    lines = [f"{'case':<32} {'variant':<18} {'median us':>10} {'x plain':>8} {'p10-p90':>15} {'records':>10}"]
    for case, row in results["cases"].items():
        for variant, value in row.items():
            if variant == "records":
                continue
            lines.append(f"{case:<32} {variant:<18} {1e3 * value['median_ms']:>10.1f} "
                         f"{value['ratio_median']:>8.4f} {value['ratio_p10']:>7.4f}-{value['ratio_p90']:<7.4f} "
                         f"{row['records']['attempted']:>10,}")
    table = "\n".join(lines)
    results["table"] = table
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=1))
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
