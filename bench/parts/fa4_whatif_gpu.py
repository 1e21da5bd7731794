"""GPU half of the FA4 what-if check: trace FA4's Hopper forward in zero-edit mode and time it
next to variants built another way (FA4 itself unmodified; a variant only changes what FA4's
interface passes to its kernel class).

    python bench/whatif.py fa4 --rounds 20            # writes to $OUT (or ./fa4_whatif_out)

Variants: ``base`` (FA4's own choice: 2 K/V stages, intra-warpgroup overlap, PV from
registers), ``stages1`` (one K/V stage), ``stages3`` (three, where shared memory allows),
``overlap_off`` (``intra_wg_overlap=False``), ``pv_ss`` (``mma_pv_is_rs=False``). Every
variant compiles into its own compile cache; timing: CUPTI kernel durations, every variant
once per round in a fresh random order, after a warm-up; medians. Traces: every variant's
zero-edit trace as ``trace_<variant>.npz`` (``bench/tools/columns.py``): the base whole, the
others cut to the CTAs of ``--sms`` SMs; the host half predicts each variant from ``trace_base.npz`` alone.
Every variant's recording kernel is timed too, in the same rounds (``<variant>:recorded``): the
recorder's cost in each variant, from CUPTI medians rather than one traced launch.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from tools.columns import launch_path, save_columns  # noqa: E402
from tools.cupti import add_traced_base_options, time_shuffled, traced_launches  # noqa: E402

from cute_prof.calibration import paired_change  # noqa: E402
from cute_prof.experimental import autoprofile_probed  # noqa: E402

# variant -> (keyword arguments of _flash_attn_fwd, keyword overrides of the kernel class)
VARIANTS = {
    "base": ({}, {}),
    "stages1": ({}, {"num_stages": 1}),
    "overlap_off": ({"intra_wg_overlap": False}, {}),
    "pv_ss": ({"mma_pv_is_rs": False}, {}),
    "stages3": ({}, {"num_stages": 3}),  # last: it may not fit in shared memory
}


@contextlib.contextmanager
def kernel_class_overrides(overrides: dict):
    """While active, FA4's interface builds its Sm90 forward kernel with ``overrides``."""
    from flash_attn.cute import interface as fa

    original = fa.FlashAttentionForwardSm90
    if not overrides:
        yield
        return

    class Variant(original):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **{**kwargs, **overrides})

    Variant.__name__ = original.__name__
    fa.FlashAttentionForwardSm90 = Variant
    try:
        yield
    finally:
        fa.FlashAttentionForwardSm90 = original


def cut_to_sms(trace, sms: int):
    keep = trace.events["sm"] < sms
    events = trace.events[keep]
    tids = np.unique(events["tid"]).tolist()
    return dataclasses.replace(
        trace, events=events, track_names={t: trace.track_name(t) for t in tids},
        metadata={**trace.metadata, "subset": f"CTAs on SMs 0..{sms - 1} (whole launch: "
                  f"{len(trace)} events)"})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="4,4096,16,128", help="batch,seqlen,heads,dim")
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--sms", type=int, default=16, help="keep the CTAs of SMs 0..N-1 in each trace")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    add_traced_base_options(ap, "trace_base")
    ap.add_argument("--block-rounds", type=int, default=0, metavar="R",
                    help="also time every variant in R rounds of back-to-back blocks "
                         "(tools.cupti.time_shuffled's per_block; times_blocks_ms in "
                         "fa4_timings.json)")
    ap.add_argument("--no-barriers", action="store_true",
                    help="record the pipelines only (autoprofile(barriers=False)), traces and "
                         "timed recording kernels alike; the base's recording with its named "
                         "barriers is timed too (base:recorded_barriers), for what they cost")
    ap.add_argument("--block-size", type=int, default=8,
                    help="launches per block; each block keeps the median of its second half")
    args = ap.parse_args(argv)
    import torch
    from flash_attn.cute import interface as fa

    from examples.flash_attention import inputs, reference

    out_dir = Path(os.environ.get("OUT", "fa4_whatif_out"))
    out_dir.mkdir(parents=True, exist_ok=True)
    shape = tuple(int(x) for x in args.shape.split(","))
    q, k, v = inputs(*shape)
    ref = reference(q, k, v, args.causal).float()
    calls, info, recordings = {}, {}, []
    names = args.variants.split(",")

    def launch_from(cache, kwargs):
        """A call that launches the kernel ``cache`` holds (the plain one or a recording one)."""
        def run():
            fa._flash_attn_fwd.compile_cache = cache
            fa._flash_attn_fwd(q, k, v, causal=args.causal, **kwargs)
        return run
    if args.load_arrivals and "base" in names:  # traced, not timed
        names.append("base_arrivals")
    if args.no_barriers and "base" in names:  # timed, not traced
        names.append("base_barriers")
    for name in names:
        call_kwargs, overrides = VARIANTS[name.removesuffix("_arrivals").removesuffix("_barriers")]
        probes = args.load_arrivals if name.endswith("_arrivals") else 0
        barriers = not args.no_barriers or name.endswith("_barriers")
        cache = {}
        fa._flash_attn_fwd.compile_cache = cache
        try:
            with kernel_class_overrides(overrides):
                out = fa._flash_attn_fwd(q, k, v, causal=args.causal, **call_kwargs)[0]
                torch.cuda.synchronize()
                with autoprofile_probed(per_warp=4096, load_arrivals=probes,
                                           barriers=barriers,
                                           caches=[(fa._flash_attn_fwd, "compile_cache")]) as prof:
                    fa._flash_attn_fwd(q, k, v, causal=args.causal, **call_kwargs)
                fa._flash_attn_fwd.compile_cache = prof.caches[0]
                # the base (with and without probes): several launches, predicted from each
                # (base_barriers is timed, not traced)
                count = {"base": args.traces, "base_arrivals": args.traces,
                         "base_barriers": 0}.get(name, 1)
                traces = list(traced_launches(
                    prof, lambda: fa._flash_attn_fwd(q, k, v, causal=args.causal, **call_kwargs),
                    count))
        except Exception as err:  # a variant FA4 cannot build (shared memory) is reported
            info[name] = {"error": f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"}
            print(f"{name}: cannot build: {info[name]['error']}", flush=True)
            continue
        error = float((out.float() - ref).abs().max())
        if name == "base_barriers":  # its recording kernel, timed beside the others
            calls["base:recorded_barriers"] = launch_from(prof.caches[0], call_kwargs)
            recordings.append(prof)
            continue
        # the base launches whole (the host half predicts from them alone), the variants cut
        for index, trace in enumerate(traces):
            save_columns(launch_path(out_dir / f"trace_{name}.npz", index),
                         trace if name.startswith("base") else cut_to_sms(trace, args.sms))
        meta = trace.metadata
        info[name] = {"max_error": error, "events": len(trace), "overflow": trace.overflow,
                      "unclosed": meta["slices_unclosed_warps"],
                      "pipelines": meta["autoprof"]["pipelines"]}
        print(f"{name}: max |out - SDPA| {error:.2e}, {len(trace):,} events, overflow "
              f"{trace.overflow}", flush=True)
        if name.endswith("_arrivals"):
            continue

        calls[name] = launch_from(cache, call_kwargs)
        # the recording kernel, from the block's own cache: each launch rewrites its slices
        calls[f"{name}:recorded"] = launch_from(prof.caches[0], call_kwargs)
        recordings.append(prof)  # keeps its buffers alive while the recording kernel runs
    times = time_shuffled(calls, rounds=args.rounds, warmup=5)
    blocks = (time_shuffled(calls, rounds=args.block_rounds, warmup=0, per_block=args.block_size)
              if args.block_rounds else {})
    result = {"device": torch.cuda.get_device_name(), "driver": torch.version.cuda,
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "command": "python bench/whatif.py fa4 " + " ".join(argv or sys.argv[1:]),
              "shape": shape, "causal": args.causal, "rounds": args.rounds,
              "barriers_recorded": not args.no_barriers,
              "times_ms": times, "times_blocks_ms": blocks, "block_size": args.block_size,
              "variants": info}
    (out_dir / "fa4_timings.json").write_text(json.dumps(result, indent=1, default=str))
    print(f"{'variant':<20} {'median us':>10} {'change':>9}" + (
        f" {'blocks us':>10} {'change':>9}" if blocks else ""))
    for name, values in times.items():
        line = (f"{name:<20} {1e3 * statistics.median(values):>10.1f} "
                f"{100 * paired_change(times, name, 'base'):>+8.2f}%")
        if blocks:
            line += (f" {1e3 * statistics.median(blocks[name]):>10.1f} "
                     f"{100 * paired_change(blocks, name, 'base'):>+8.2f}%")
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
