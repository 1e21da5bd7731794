"""What light and full zero-edit recording cost FA4 (forward and backward), quack's GEMM and
ws_gemm beside the plain kernel (GPU). Every ``cute.compile`` here builds plain, light and full
(``RecordingConfig(mode=...)``) and hands back a switch: CUPTI times, variants shuffled every
round, the median of the per-round ratios to plain. ``python bench/kernel_cost.py light``
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

MODES = ("plain", "light", "full")


class Switch:
    """The three builds of one compiled function; calls go to ``Switch.mode``'s."""

    mode = "plain"
    made: list = []  # every switch, in compile order

    def __init__(self, builds: dict, recordings: dict):
        self.builds, self.recordings = builds, recordings
        Switch.made.append(self)

    def __call__(self, *args, **kwargs):
        return self.builds[Switch.mode](*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.builds["plain"], name)


def install_switch(per_warp: int = 2048, max_warps: int = 1 << 16):
    """Every later ``cute.compile`` returns a :class:`Switch` over its three builds."""
    import torch
    from cutlass.base_dsl.compiler import CompileCallable

    from cute_prof.decode_slices import allocate_slices_buffer
    from cute_prof.device.autoprof import recording
    from cute_prof.device.autoprof_state import RecordingConfig

    original = CompileCallable._compile

    def allocate(n_slices, records):
        return allocate_slices_buffer(n_slices, records, device=torch.device("cuda"))

    def compile_three(this, func, *args, **kwargs):
        builds, recordings = {"plain": original(this, func, *args, **kwargs)}, {}
        for mode in ("light", "full"):
            config = RecordingConfig(per_warp=per_warp, max_warps=max_warps, allocate=allocate,
                                     mode=mode)
            with recording(config) as found:
                builds[mode] = original(this, func, *args, **kwargs)
            recordings[mode] = found
        return Switch(builds, recordings)

    CompileCallable._compile = compile_three


def fa4_case(batch, seqlen, causal, backward):
    import torch
    from flash_attn.cute.interface import flash_attn_func

    q, k, v = (torch.randn(batch, seqlen, 16, 128, device="cuda", dtype=torch.bfloat16,
                           requires_grad=backward) for _ in range(3))
    if not backward:
        return lambda: flash_attn_func(q, k, v, causal=causal)
    out = flash_attn_func(q, k, v, causal=causal)
    out = out[0] if isinstance(out, tuple) else out
    grad = torch.randn_like(out)
    return lambda: torch.autograd.grad(out, (q, k, v), grad, retain_graph=True)


def gemm_case(which, m, n, k):
    """quack's GEMM (a fixed pingpong config, as examples/train_step.py runs it) or ws_gemm."""
    import torch

    from examples.train_step import quack_gemm
    from examples.ws_gemm import CompiledWsGemm

    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    if which == "quack":
        b, out = (torch.randn(k, n, device="cuda", dtype=torch.bfloat16),
                  torch.empty(m, n, device="cuda", dtype=torch.bfloat16))
        return lambda: quack_gemm(a, b, out)
    b, gemm = torch.randn(n, k, device="cuda", dtype=torch.bfloat16), CompiledWsGemm()
    return lambda: gemm(a, b)


CASES = {
    "FA4 fwd b4 s4096 full": lambda: fa4_case(4, 4096, False, False),
    "FA4 fwd b4 s4096 causal": lambda: fa4_case(4, 4096, True, False),
    "FA4 fwd b1 s1024 full": lambda: fa4_case(1, 1024, False, False),
    "FA4 fwd b1 s1024 causal": lambda: fa4_case(1, 1024, True, False),
    "FA4 bwd b4 s4096 causal": lambda: fa4_case(4, 4096, True, True),
    "quack GEMM 8192^3": lambda: gemm_case("quack", 8192, 8192, 8192),
    "ws_gemm 8192^3": lambda: gemm_case("ws", 8192, 8192, 8192),
}


def records_of(launch, first: int) -> dict:
    """Each mode's recording of the case's kernels, one launch decoded: records and losses."""
    import torch

    from cute_prof.analysis.light import light_verdicts
    from cute_prof.analysis.zero_edit import finish_zero_edit_trace
    from cute_prof.analysis.zero_edit_work import ring_waits
    from cute_prof.decode_slices import decode_slices, reset_slices

    out = {}
    for mode in ("light", "full"):
        found = [r for s in Switch.made[first:] for r in s.recordings[mode]]
        for rec in found:
            reset_slices(rec.buffer)
        Switch.mode = mode
        launch()
        torch.cuda.synchronize()
        Switch.mode = "plain"
        traces = [finish_zero_edit_trace(decode_slices(
            rec.buffer, rec.tags, metadata={"autoprof": rec.metadata(), "kernel": rec.name}))
            for rec in found]
        out[mode] = {"records": sum(len(t) for t in traces),
                     "lost": sum(t.overflow + t.incomplete for t in traces),
                     "unclosed": sum(t.metadata["slices_unclosed_warps"] for t in traces),
                     # per kernel and ring: the light verdict (from the producer's waits)
                     "bound": {f"{t.metadata['kernel'][:40]}/{r['ring']}":
                               [r["bound_by"], round(r["producer_wait"], 3), r["interval_ns"]]
                               for t in traces for r in light_verdicts(t)["rings"]}}
        if mode == "full":  # the full verdict of the same rings, from both sides' waits
            out["full_verdict"] = {f"{t.metadata['kernel'][:40]}/{r['ring']}": r["bound_by"]
                                   for t in traces for r in ring_waits(t)}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated case names")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    import torch

    install_switch()
    results = {"device": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d"),
               "command": "python bench/kernel_cost.py light " + " ".join(argv or sys.argv[1:]),
               "rounds": args.rounds, "cases": {}}
    lines = [f"{'case':<26} {'plain us':>9} {'light x':>8} {'full x':>8}"]
    for name in args.cases.split(","):
        first = len(Switch.made)
        launch = CASES[name]()
        launch()  # compiles the three builds of every kernel it launches
        torch.cuda.synchronize()

        def in_mode(mode):
            def run():
                Switch.mode = mode
                launch()
            return run

        times = time_shuffled({m: in_mode(m) for m in MODES}, rounds=args.rounds, warmup=5)
        Switch.mode = "plain"
        row = {"plain_us": 1e3 * statistics.median(times["plain"])}
        for mode in ("light", "full"):
            per_round = sorted(t / p for t, p in zip(times[mode], times["plain"]))
            row[f"{mode}_x"] = statistics.median(per_round)
            row[f"{mode}_p10_p90"] = [per_round[len(per_round) // 10], per_round[9 * len(per_round) // 10]]
        results["cases"][name] = {**row, "records": records_of(launch, first)}
        lines.append(f"{name:<26} {row['plain_us']:9.1f} {row['light_x']:8.4f} {row['full_x']:8.4f}")
        print(lines[-1], json.dumps(results["cases"][name]["records"]), flush=True)
    results["table"] = "\n".join(lines)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    print(results["table"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
