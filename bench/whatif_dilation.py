"""Diagnosis, not the model: the what-if check with the recorder's cost taken as a slowdown of
every non-producer work region (``what_if(work_scale=)``), instead of one record's chain time
per record (the stop-41 model).

Per zero-edit base, the factor f is fitted so that the base's replay shortens by what the base
run measured the recorder to cost (its recording and plain kernels' CUPTI medians, the same
shuffled rounds: 1 - plain / recorded, applied to the traced launch's CUPTI time); the
prediction of each variant then replays base and change with f and no record's time removed.
FA4's recorder's cost is the compiler's schedule of its consumer (bench/results/zero_edit_h100),
which slows the consumer's work rather than adding a record's time; the GEMMs' records sit on
their starved rings' recurrences. Prints, per row, the measured change, the stop-41 model's
prediction (the first traced launch only) and this one's, with their errors.

    python bench/whatif_dilation.py GPU_OUT [GPU_OUT ...]
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import whatif_check as check  # noqa: E402
from tools.columns import load_columns  # noqa: E402

from cute_prof.analysis.critical_path import what_if  # noqa: E402

FITTED = ("fa4", "fa4_causal", "fa4_small", "gemm_ze", "persistent_ze", "quack")


def fitted_factor(data, inputs, tags, target: float, *, lowest: float = 0.3) -> float:
    """Bisection for the factor on ``tags`` whose replay of the base changes the kernel by
    ``target``; ``lowest`` where even it cannot (a base whose time its async jobs set:
    quack)."""
    def change(f):
        return what_if(data, loaded_latency=True, first_load=inputs["first_load"],
                       arrivals=inputs["arrivals"], scale={t: f for t in tags})["predicted_change"]
    lo, hi = lowest, 1.0
    for _ in range(14):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if change(mid) > target else (mid, hi)
    return (lo + hi) / 2


def main(argv=None) -> int:
    roots = [Path(a) for a in (argv if argv is not None else sys.argv[1:])]
    if not roots:
        raise SystemExit(__doc__)
    print(f"{'run':<6} {'base':<14} {'what-if':<14} {'cost':>6} {'f':>6} {'measured':>9} "
          f"{'stop 41':>9} {'error':>6} {'dilated':>9} {'error':>6}")
    for root in roots:
        chain, _ = check.record_chain(root)
        for entry in check.ENTRIES:
            folder = root / entry.folder
            if not entry.derived or entry.folder not in FITTED or not (folder / entry.trace).is_file():
                continue
            times = {k: statistics.median(v) for k, v in entry.load_timings(folder).items()
                     if isinstance(v, list) and v}
            if "base:recorded" not in times:
                continue
            raw = load_columns(folder / entry.trace)
            model = check.launch_model(entry, raw, load_columns(folder / entry.arrivals_trace),
                                       record_chain_ns=chain)
            data, inputs = model["data"], model["inputs"]
            cost = 1 - times["base"] / times["base:recorded"]
            span = check.trace_span(raw)
            target = -cost * raw.metadata.get("launch_cupti_ns", span) / span
            producer = data.spec.regions[0].role
            tags = [r.tag for r in data.spec.regions if r.kind == "work" and r.role != producer]
            f = fitted_factor(data, inputs, tags, target)
            for variant, change in entry.variants.items():
                if not isinstance(change, dict) or variant not in times:
                    continue
                measured = times[variant] / times["base"] - 1
                common = dict(loaded_latency=True, first_load=inputs["first_load"],
                              arrivals=inputs["arrivals"], **change)
                stop41 = what_if(data, record_ns=model["record_ns"], **common)["predicted_change"]
                dilated = what_if(data, work_scale={t: f for t in tags}, **common)["predicted_change"]
                print(f"{root.name:<6} {entry.folder:<14} {variant:<14} {cost:>+6.1%} {f:>6.3f} "
                      f"{measured:>+9.2%} {stop41:>+9.2%} {100 * (stop41 - measured):>+6.2f} "
                      f"{dilated:>+9.2%} {100 * (dilated - measured):>+6.2f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
