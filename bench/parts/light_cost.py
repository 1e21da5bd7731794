"""What light and full zero-edit recording cost FA4 (forward and backward), quack's GEMM,
NVIDIA's example GEMM and ws_gemm beside the plain kernel, and NVIDIA IKET at light's sites
(GPU). Every ``cute.compile`` here builds each variant (``RecordingConfig(mode=...)``; IKET's
ranges around the same pipeline calls) and hands back a switch: the median of the per-round
ratios to plain, variants shuffled every round. CUPTI times light and full; IKET runs only
under ``run-iket``, which holds CUPTI, so ``--iket`` times plain and IKET with CUDA events
around batches of launches:

    python bench/kernel_cost.py light --rounds 20 --json light.json
    run-iket profile --postprocess none -- \
        python bench/kernel_cost.py light --iket --rounds 5 --batch 3 --json iket.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from tools.cupti import time_batches, time_shuffled  # noqa: E402

MODES = ("plain", "light", "full")
IKET_MODES = ("plain", "iket")
# IKET's ranges go around what light records: the producer's acquires and its tail
IKET_OPS = ("producer_acquire", "producer_acquire_w_index_phase", "producer_tail")


@contextlib.contextmanager
def iket_sites(sites: list):
    """While compiling: an IKET range around every pipeline's IKET_OPS call and every wait on
    a pipeline's empty barriers made directly (as light records them; a call made inside
    another records nothing), each traced site appended to ``sites``."""
    from cutlass.cute.experimental import iket
    from cutlass.pipeline import MbarrierArray

    from cute_prof.device.autoprof import pipeline_classes

    depth, saved, empties = [0], [], set()

    def patch(owner, name, replacement):
        saved.append((owner, name, owner.__dict__[name]))
        setattr(owner, name, replacement)

    def ranged(original, op, *, only_empty=False):
        def wrapper(self, *args, **kwargs):
            if depth[0] or (only_empty and id(self) not in empties):
                return original(self, *args, **kwargs)
            depth[0] += 1
            try:
                token = iket.range_start(op)
                result = original(self, *args, **kwargs)
                iket.range_end(token)
            finally:
                depth[0] -= 1
            sites.append(f"{type(self).__name__}.{op}")
            return result
        return wrapper

    def noting_empties(create):
        def wrapper(*args, **kwargs):
            made = create(*args, **kwargs)
            empties.add(id(getattr(made, "sync_object_empty", None)))
            return made
        return staticmethod(wrapper)

    owners = {base for cls in pipeline_classes() for base in cls.__mro__}  # mixins too
    for cls in owners:
        for op in IKET_OPS:
            if op in cls.__dict__:
                patch(cls, op, ranged(cls.__dict__[op], op))
        if isinstance(cls.__dict__.get("create"), staticmethod):
            patch(cls, "create", noting_empties(cls.__dict__["create"].__func__))
    patch(MbarrierArray, "wait", ranged(MbarrierArray.__dict__["wait"], "producer_acquire",
                                        only_empty=True))
    try:
        yield
    finally:
        for owner, name, original in reversed(saved):
            setattr(owner, name, original)


def iket_pass() -> str | None:
    """Which of run-iket's passes runs this process: "tracker" (its dry run, which makes every
    launch the profiling pass makes), "iket", or None (not under run-iket)."""
    config = os.environ.get("IKET_INJECTION_CONFIG")
    if config is None:
        return None
    return json.loads(Path(config).read_text()).get("toolName", "iket")


class Switch:
    """The three builds of one compiled function; calls go to ``Switch.mode``'s."""

    mode = "plain"
    made: list = []  # every switch, in compile order

    def __init__(self, builds: dict, recordings: dict, iket_sites: list):
        self.builds, self.recordings, self.iket_sites = builds, recordings, iket_sites
        Switch.made.append(self)

    def __call__(self, *args, **kwargs):
        return self.builds[Switch.mode](*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.builds["plain"], name)


def install_switch(per_warp: int = 4096, max_warps: int = 1 << 15, modes=MODES):
    """Every later ``cute.compile`` returns a :class:`Switch` over its builds, one per mode."""
    import torch
    from cutlass.base_dsl.compiler import CompileCallable

    from cute_prof.decode_slices import allocate_slices_buffer
    from cute_prof.device.autoprof import recording
    from cute_prof.device.autoprof_state import RecordingConfig

    original = CompileCallable._compile

    def allocate(n_slices, records):
        return allocate_slices_buffer(n_slices, records, device=torch.device("cuda"))

    def compile_each(this, func, *args, **kwargs):
        builds, recordings, sites = {"plain": original(this, func, *args, **kwargs)}, {}, []
        for mode in modes[1:]:
            if mode == "iket":
                with iket_sites(sites):
                    builds[mode] = original(this, func, *args, **kwargs)
                continue
            config = RecordingConfig(per_warp=per_warp, max_warps=max_warps, allocate=allocate,
                                     mode=mode)
            with recording(config) as found:
                builds[mode] = original(this, func, *args, **kwargs)
            recordings[mode] = found
        return Switch(builds, recordings, sites)

    CompileCallable._compile = compile_each


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
    "NVIDIA example GEMM 8192^3": lambda: cutlass_example_gemm(8192, 8192, 8192),
}


def cutlass_example_gemm(m, n, k):
    from tools.cutlass_example import cutlass_example_gemm as example

    return example(m, n, k)


def records_of(launch, first: int) -> dict:
    """Each mode's recording of the case's kernels, one launch decoded: records and losses."""
    import torch

    from cute_prof.analysis.light import light_verdicts
    from cute_prof.analysis.zero_edit import finish_zero_edit_trace, is_zero_edit
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
                                   for t in traces if is_zero_edit(t)
                                   for r in ring_waits(t)}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated case names")
    ap.add_argument("--iket", action="store_true",
                    help="plain and IKET only, CUDA events (run it under run-iket)")
    ap.add_argument("--batch", type=int, default=3, help="--iket: launches per timed batch")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    import torch

    modes, under = (IKET_MODES, iket_pass()) if args.iket else (MODES, None)
    if args.iket and under is None:
        ap.error("--iket times IKET's ranges, which record only under run-iket")
    install_switch(modes=modes)
    results = {"device": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d"),
               "command": "python bench/kernel_cost.py light " + " ".join(argv or sys.argv[1:]),
               "rounds": args.rounds, "timing": f"CUDA events, batches of {args.batch}" if args.iket
               else "CUPTI", "cases": {}}
    lines = [f"{'case':<26} {'plain us':>9}" + "".join(f" {m + ' x':>8}" for m in modes[1:])]
    for name in args.cases.split(","):
        print(f"# {name}", flush=True)
        first = len(Switch.made)
        launch = CASES[name]()
        launch()  # compiles every build of each kernel it launches
        torch.cuda.synchronize()

        def in_mode(mode):
            def run():
                Switch.mode = mode
                launch()
            return run

        variants = {m: in_mode(m) for m in modes}
        # run-iket's dry run (its tracker) runs every launch too: IKET keeps each launch's
        # traces on the GPU and sizes their buffer from the launches its tracker counted
        times = (time_batches(variants, rounds=args.rounds, batch=args.batch, warmup=1)
                 if args.iket
                 else time_shuffled(variants, rounds=args.rounds, warmup=5))
        Switch.mode = "plain"
        row = {"plain_us": 1e3 * statistics.median(times["plain"])}
        for mode in modes[1:]:
            per_round = sorted(t / p for t, p in zip(times[mode], times["plain"]))
            row[f"{mode}_x"] = statistics.median(per_round)
            row[f"{mode}_p10_p90"] = [per_round[len(per_round) // 10], per_round[9 * len(per_round) // 10]]
        if args.iket:
            row["iket_sites"] = sorted({site for s in Switch.made[first:] for site in s.iket_sites})
        else:
            row["records"] = records_of(launch, first)
        results["cases"][name] = row
        lines.append(f"{name:<26} {row['plain_us']:9.1f}"
                     + "".join(f" {row[m + '_x']:8.4f}" for m in modes[1:]))
        print(lines[-1], json.dumps(row.get("records", row.get("iket_sites"))), flush=True)
    results["table"] = "\n".join(lines)
    if args.json and under != "tracker":
        Path(args.json).write_text(json.dumps(results, indent=1))
    print(results["table"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
