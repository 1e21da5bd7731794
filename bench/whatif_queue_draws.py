"""Diagnosis, never the model: how fast a shallower ring's loads are on the GPU against what
each queue rule (``critical_path.queued_under_load``) makes of the base's sampled loads.

Per run, for one zero-edit kernel of ``whatif_check.py``:

- the base's sampled loads (the probed launches the first traced launch reads), p5 / p25 /
  median / mean;
- each depth variant's loads as its consumers saw them: the median end - issue of the waits
  that blocked, over the middle half of the loop (``whatif_diagnose.loads``), and the
  measured change;
- with ``--draws``: the first traced launch's replayed latencies (every item's draw, the
  loop's congestion plus the load's own deviation) in the base and in each variant under
  each rule, p5 / p25 / median / p75 / p95 and mean, against the variant's own probed loads
  where the GPU half traced the variant with the base's probes
  (``quack_whatif_gpu.py --probe-variants``).

    python bench/whatif_queue_draws.py GPU_OUT... [--kernel quack] [--draws]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from cute_prof.analysis import critical_path as cp  # noqa: E402
from cute_prof.analysis.model import arrival_latencies  # noqa: E402
from cute_prof.analysis.pipelines import load_arrival_sample, probed_launches_like  # noqa: E402
from cute_prof.calibration import paired_change  # noqa: E402

import whatif_check  # noqa: E402
from tools.columns import launch_paths  # noqa: E402
from whatif_diagnose import loads  # noqa: E402

QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)


def spread(values) -> str:
    """p5 / p25 / median / p75 / p95 and the mean of ``values`` (ns)."""
    v = np.asarray(values, dtype=np.float64).ravel()
    return "/".join(f"{x:.0f}" for x in np.quantile(v, QUANTILES)) + f" mean {v.mean():.0f}"


def replayed_draws(run: dict, change: dict, rule: str) -> tuple[np.ndarray, np.ndarray]:
    """The base's and the change's replayed load latencies (every item's draw) of one
    traced launch's model under ``rule`` (``what_if(schedules=True)``)."""
    got = cp.what_if(run["data"], **whatif_check.measured_inputs(run["inputs"]),
                     record_ns=run["record_ns"], recorder_cost=run["inputs"]["recorder_cost"],
                     queue_rule=rule, schedules=True, **change)
    if not got["base_latency_draws"]:
        raise SystemExit("this kernel's latency is not drawn from sampled arrivals: no draws")
    return tuple(np.concatenate([np.ravel(x) for x in got[key].values()])
                 for key in ("base_latency_draws", "changed_latency_draws"))


def report(root: Path, entry, *, draws: bool) -> list[str]:
    folder = whatif_check.folder_of(root, entry)
    if folder is None:
        return [f"{root.name}: no {entry.folder}/{entry.trace}"]
    timings = entry.load_timings(folder)
    raw = entry.load(launch_paths(folder / entry.trace)[0])
    probed = [entry.load(p) for p in whatif_check.probed_launch_paths(entry, folder)]
    if not probed:
        return [f"{root.name}: no probed base launch"]
    sample = np.concatenate([arrival_latencies(next(iter(load_arrival_sample(probed[i]).values())))
                             for i in probed_launches_like(raw, probed)])
    lines = [f"{root.name}: base's sampled loads (p5/p25/median/p75/p95) {spread(sample)}"]
    depth_changes = {name: change for name, change in entry.variants.items()
                     if isinstance(change, dict) and set(change) == {"depth"}}
    for name in depth_changes:
        path = folder / entry.variant_trace.format(variant=name)
        if not path.exists():
            continue
        got = loads(entry.load(path))
        seen = got["blocked_latency"] if got["blocked_latency"] is not None else float("nan")
        lines.append(f"  {name:14s} blocked loads' median {seen:4.0f} ns "
                     f"({got['blocked_share']:.0%} of waits blocked), measured "
                     f"{paired_change(timings, name, entry.base):+.2%}")
    if draws:
        chain_ns, _ = whatif_check.record_chain(root)
        models = whatif_check.traced_launch_models(
            entry, folder, record_chain_ns=chain_ns,
            recorder_cost=whatif_check.base_recorder_cost(timings, entry.base))
        run = models[0][0]
        for name, change in depth_changes.items():
            for rule in cp.QUEUE_RULES:
                base, changed = replayed_draws(run, change, rule)
                if rule == cp.QUEUE_RULES[0]:
                    lines.append(f"  {name:14s} replayed draws, base            {spread(base)}")
                lines.append(f"  {name:14s} replayed draws, {rule:6s} rule     {spread(changed)}")
            own = folder / entry.variant_trace.format(variant=f"{name}_arrivals")
            if own.exists():
                got = next(iter(load_arrival_sample(entry.load(own)).values()))
                lines.append(f"  {name:14s} the variant's own probed loads  "
                             f"{spread(arrival_latencies(got))}")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("gpu_out", type=Path, nargs="+")
    ap.add_argument("--kernel", default="quack", help="the entry's folder (default quack)")
    ap.add_argument("--draws", action="store_true",
                    help="also the replayed draws under each rule (slower)")
    args = ap.parse_args(argv)
    entry = whatif_check.zero_edit_entry(args.kernel, ap)
    for root in args.gpu_out:
        print("\n".join(report(root, entry, draws=args.draws)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
