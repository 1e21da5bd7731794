"""GPU half of the what-if check for quack's Hopper GEMM (the second foreign kernel): its A/B
ring built with one and two stages fewer than quack chooses, a zero-edit trace of the
base, and every variant timed with CUPTI in shuffled rounds. quack is not edited: its stage
count comes from ``GemmSm90._compute_stages``, which this script wraps while a variant
compiles.

    python bench/whatif.py quack --mnk 4096,4096,4096 --rounds 20

Writes to $OUT (or ./quack_whatif_out): ``trace_<variant>.npz`` (zero-edit, compressed
columns, metadata with the launch's cluster), ``timings.json`` (``{"times": {variant: [ns per
launch]}}``) and ``stdout`` lines. quack keeps one compiled kernel per argument tuple in an
in-memory cache and one launch plan (holding that kernel) per tensor signature, and the stage
count is in neither key: each variant's plan is kept aside and put back before its launches
(a dict update on the host, not timed); CuTe
DSL's own JIT cache is off (``CUTE_DSL_NO_CACHE=1``) for the same reason.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
from pathlib import Path

os.environ.setdefault("QUACK_CACHE_ENABLED", "0")  # compile in this process, not from disk
# and let CuTe DSL trace every compile: its own JIT cache would serve a variant the kernel it
# compiled before (the stage count is not in its key)
os.environ.setdefault("CUTE_DSL_NO_CACHE", "1")

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from cute_prof.calibration import paired_change  # noqa: E402
from cute_prof.experimental import autoprofile_probed  # noqa: E402
from tools.columns import launch_path, save_columns  # noqa: E402
from tools.cupti import add_traced_base_options, time_shuffled, traced_launches  # noqa: E402

QUACK_VERSION = "0.6.5"
# quack takes as many A/B stages as shared memory holds (one more fails to launch, and a
# failed launch spoils the CUDA context): the variants take one and two fewer
VARIANTS = {"base": 0, "stages_minus1": -1, "stages_minus2": -2}


def compile_cache(compile_fn) -> dict:
    """The in-memory dict of quack's ``jit_cache`` around ``compile_fn`` (its closure's
    ``cache``)."""
    names = compile_fn.__code__.co_freevars
    for name, cell in zip(names, compile_fn.__closure__ or ()):
        if name == "cache" and isinstance(cell.cell_contents, dict):
            return cell.cell_contents
    raise RuntimeError(f"no in-memory cache found around {compile_fn!r} (quack changed?)")


@contextlib.contextmanager
def ab_stages(offset: int, chosen: dict | None = None):
    """While active, quack's Hopper GEMM builds its A/B ring with ``offset`` stages more than
    ``GemmSm90._compute_stages`` chooses (``chosen["base"]``: what it chose)."""
    from quack.gemm_sm90 import GemmSm90

    original = GemmSm90.__dict__["_compute_stages"].__func__

    def compute(cls, *args, **kw):
        ab, *rest = original(cls, *args, **kw)
        if chosen is not None:
            chosen.setdefault("base", ab)
        return (ab + offset, *rest)

    GemmSm90._compute_stages = classmethod(compute)
    try:
        yield
    finally:
        GemmSm90._compute_stages = classmethod(original)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mnk", default="4096,4096,4096")
    ap.add_argument("--rounds", type=int, default=20)
    add_traced_base_options(ap, "trace_base")
    ap.add_argument("--probed", type=int, default=None, metavar="K",
                    help="launches of the probed base (default: --traces; "
                         "bench/gpu.sh takes 9). The check reads those that ran "
                         "like each traced launch in span (pipelines.probed_launches_like), "
                         "each one draw of the memory's state: with three, one alone on three "
                         "runs of eleven, its 4 -> 2 row at -6.71 .. +7.33; with nine, seven "
                         "to nine (stop 58: bench/results/whatif/README.md)")
    args = ap.parse_args(argv)
    probed_launches = args.traces if args.probed is None else args.probed
    if args.traces < 1 or probed_launches < 1:
        ap.error("--traces and --probed take one launch or more")
    import torch
    import quack
    import quack.gemm as quack_gemm
    from quack.gemm_config import GemmConfig
    from quack.gemm_interface import gemm_tuned

    if quack.__version__ != QUACK_VERSION:
        print(f"warning: quack-kernels {quack.__version__}, this script was written for "
              f"{QUACK_VERSION}")
    out_dir = Path(os.environ.get("OUT", "quack_whatif_out"))
    out_dir.mkdir(parents=True, exist_ok=True)
    m, n, k = (int(x) for x in args.mnk.split(","))
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    cluster = (2, 1)
    config = GemmConfig(tile_m=256, tile_n=128, pingpong=False, cluster_m=cluster[0],
                        cluster_n=cluster[1], is_dynamic_persistent=False, device_capacity=9)
    compiled = compile_cache(quack_gemm._compile_gemm)
    plans = quack_gemm._gemm_plan_cache  # launch plans, each holding its compiled kernel
    chosen = {}

    def launch():
        gemm_tuned.fn(a, b, out, config=config)

    def build(offset):
        """Compile the variant (quack's stage count + offset) and return its cache entries."""
        with ab_stages(offset, chosen):
            compiled.clear()
            plans.clear()
            launch()
            torch.cuda.synchronize()
        return dict(plans)

    variants = dict(VARIANTS)  # those that build
    kept, lines = {}, []
    recorded, recordings = {}, []  # recording kernels' launch plans, timed beside the plain ones
    traced = dict(variants)
    if args.load_arrivals:
        traced["base_arrivals"] = 0  # the base again, its producer probing sampled loads
    for name, offset in list(traced.items()):
        probes = args.load_arrivals if name.endswith("_arrivals") else 0
        try:
            with autoprofile_probed(per_warp=4096, load_arrivals=probes) as prof:
                build(offset)
            # the base (with and without probes): several launches, the model predicts from each
            count = (probed_launches if name == "base_arrivals"
                     else args.traces if name == "base" else 1)
            traces = list(traced_launches(prof, launch, count))
        except Exception as err:  # e.g. one stage more than shared memory holds
            if name == "base":
                raise
            lines.append(f"{name}: does not build ({type(err).__name__}: {str(err)[:200]})")
            print(lines[-1], flush=True)
            variants.pop(name, None)
            continue
        for index, trace in enumerate(traces):
            trace.metadata["cluster"] = list(cluster)
            trace.metadata["quack_ab_stages"] = chosen["base"] + offset
            save_columns(launch_path(out_dir / f"trace_{name}.npz", index), trace)
        error = float((out.float() - a.float() @ b.float()).abs().max() / k ** 0.5)
        lines.append(f"{name}: {chosen['base'] + offset} A/B stages, max |out - torch| / sqrt(k) "
                     f"{error:.2e}, {len(trace.events):,} zero-edit records, overflow "
                     f"{trace.overflow}")
        print(lines[-1], flush=True)
        if name.endswith("_arrivals"):
            continue
        recorded[name] = dict(plans)  # the recording kernel (each launch rewrites its slices)
        recordings.append(prof)
        kept[name] = build(offset)  # the unrecorded kernel, for the timing rounds

    def put_back(plan):
        return lambda: (plans.clear(), plans.update(plan))

    timed = {**kept, **{f"{name}:recorded": plan for name, plan in recorded.items()}}
    times = time_shuffled({name: launch for name in timed}, rounds=args.rounds,
                          resets={name: put_back(plan) for name, plan in timed.items()})
    medians = {name: statistics.median(v) for name, v in times.items()}
    changes = {name: paired_change(times, name, "base") for name in times}
    lines.append("variant        stages  median us    change")
    for name, offset in variants.items():
        lines.append(f"{name:14s} {chosen['base'] + offset:6d} {medians[name] * 1e3:10.2f} "
                     f"{changes[name] * 100:+8.2f}%")
        if f"{name}:recorded" in medians:
            lines.append(f"{name + ':recorded':14s} {'':6s} "
                         f"{medians[name + ':recorded'] * 1e3:10.2f} "
                         f"{changes[name + ':recorded'] * 100:+8.2f}%")
    print("\n".join(lines[-1 - 2 * len(variants):]))
    device = f"{torch.cuda.get_device_name()}, torch {torch.__version__}"
    (out_dir / "timings.json").write_text(json.dumps(
        {"unit": "ns", "device": device, "mnk": [m, n, k], "rounds": args.rounds,
         "quack": quack.__version__, "ab_stages": {n_: chosen["base"] + o for n_, o in variants.items()},
         "times": {name: [t * 1e6 for t in v] for name, v in times.items()}}, indent=1))
    (out_dir / "stdout.log").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
