"""Diagnosis, never a model input (stop 45): for GPU output folders of the what-if check,
the dispatch against the measured span, the base's sampled loads by their gap behind their
launch-order group's first load (``pipelines.leader_gaps``), and, where the folder has a
1-deep variant (FA4's ``trace_stages1.npz``), its fast and slow CTAs, measured and replayed.

    python bench/whatif_fa4_lockstep.py FOLDER [FOLDER ...]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from tools.columns import load_columns  # noqa: E402
from tools.pipeline_data import matched  # noqa: E402

from cute_prof.analysis import critical_path as cp  # noqa: E402
from cute_prof.analysis.pipelines import (  # noqa: E402
    load_arrival_pairs, load_arrival_sample)

ONE_DEEP = {"depth": {"pipeline_k": 1, "pipeline_v": 1}}
SLOW_PERIOD_NS = 1900  # per iteration: FA4's fast 1-deep CTAs ran 1,792-1,856 ns, the slow 2,112
STEADY = 3  # iterations (and a CTA's loads) past its start burst
SLOW_LOAD_NS = 500  # a CTA whose loads average more waited on memory, not the L2


def columns(data):
    tags = [r.tag for r in data.spec.regions]
    return {name: tags.index(f"pipeline_{name[0]}.{name[2:]}") for name in
            ("k_consumer_wait", "v_consumer_wait", "k_producer_commit", "v_producer_commit")}


def regimes(label: str, data, start, end, rank):
    """Per-iteration period, commit -> wait end (K, V) and the waits' own time, of the fast
    and the slow CTAs, the share of slow CTAs in each wave, and the first wave's spread of K
    commits at iterations 10 and 20 (a wave: one CTA per SM the trace holds)."""
    c = columns(data)
    wave = np.unique(data.unit_sm).size
    period = np.nanmedian(np.diff(end[:, :, c["k_consumer_wait"]], axis=1)[:, STEADY:], axis=1)
    for name, sel in (("fast", period < SLOW_PERIOD_NS), ("slow", period >= SLOW_PERIOD_NS)):
        if not sel.any():
            continue
        s, e = start[sel][:, STEADY:], end[sel][:, STEADY:]
        lat_k = np.nanmedian(e[..., c["k_consumer_wait"]] - s[..., c["k_producer_commit"]])
        lat_v = np.nanmedian(e[..., c["v_consumer_wait"]] - s[..., c["v_producer_commit"]])
        wait_k = np.nanmedian((e - s)[..., c["k_consumer_wait"]])
        wait_v = np.nanmedian((e - s)[..., c["v_consumer_wait"]])
        first = np.count_nonzero(sel & (rank < wave))
        print(f"  {label:<18} {name}: {sel.sum():>5} CTAs ({first} of the first wave), "
              f"{np.median(period[sel]):>6.0f} ns per iteration, commit -> wait end K "
              f"{lat_k:.0f} V {lat_v:.0f} ns, waits K {wait_k:.0f} V {wait_v:.0f} ns")
    per_wave = [np.mean(period[rank // wave == w] >= SLOW_PERIOD_NS) * 100
                for w in range(int(rank.max()) // wave + 1)]
    print(f"  {label:<18} slow CTAs per wave of {wave}, %: "
          + " ".join(f"{x:.0f}" for x in per_wave))
    wave0 = rank < wave
    # iterations 10 and 20, or a third and two thirds in through a shorter loop
    at = (10, 20) if start.shape[1] > 20 else (start.shape[1] // 3, 2 * start.shape[1] // 3)
    spread = [np.ptp(start[wave0, k, c["k_producer_commit"]]) for k in at]
    groups = [np.ptp(start[(rank // 32 == g) & wave0, k, c["k_producer_commit"]])
              for g in range(max(wave // 32, 1)) for k in at]
    print(f"  {label:<18} first wave's K commits {at[0]} / {at[1]} within {spread[0]:.0f} / "
          f"{spread[1]:.0f} ns; per 32 CTAs {min(groups):.0f}-{max(groups):.0f} ns")


def between_ctas(pairs: dict):
    """How much of the sampled latencies' spread (both rings, past each CTA's start burst)
    lies between CTAs (their producer warps' means), and the share of CTAs per wave whose
    loads average over ``SLOW_LOAD_NS``."""
    steady = pairs["position"] >= STEADY
    lat = (pairs["arrived"] - pairs["commit"]).astype(np.float64)[steady]
    warps, which, count = np.unique(pairs["tid"][steady], return_inverse=True,
                                    return_counts=True)
    means = np.bincount(which, lat) / count
    first = np.full(warps.size, np.inf)
    np.minimum.at(first, which, pairs["commit"][steady].astype(np.float64))
    wave = np.argsort(np.argsort(first, kind="stable"), kind="stable") // 132
    slow = [np.mean(means[wave == w] > SLOW_LOAD_NS) for w in np.unique(wave)]
    print(f"  CTAs' means hold {np.var(means[which]) / np.var(lat):.0%} of the sampled "
          f"latencies' spread; CTAs averaging over {SLOW_LOAD_NS} ns per wave of 132: "
          f"{min(slow):.0%}-{max(slow):.0%} (first wave {slow[0]:.0%})")


def sampled_loads(ring: str, x: np.ndarray):
    """The latency of a ring's loads at each of a warp's first commits (its start burst),
    and by gap behind the launch-order group's first load of the place,
    with the first loads' median over the hits' (``critical_path.MISS_OVER_HIT``)."""
    first_places = range(min(int(x["position"].max()) + 1, 6))
    print(f"  {ring}: latency (median) of the loads sampled at each of a warp's first commits: "
          + ", ".join(f"{np.median(x['latency_ns'][x['position'] == p]):.0f}"
                      for p in first_places) + " ns")
    steady = x["position"] >= STEADY
    print(f"  {ring}: {x.size} loads sampled; launch-order groups of {x['group_ctas'][0]} "
          "CTAs; latency (median) by gap behind the group's first load of the place:")
    for low, high in ((0, 1), (1, 200), (200, 600), (600, np.inf)):
        sel = steady & (x["leader_gap_ns"] >= low) & (x["leader_gap_ns"] < high)
        if sel.any():
            print(f"      {low:>4}-{high:<4} ns: {sel.sum():>5} loads, "
                  f"{np.median(x['latency_ns'][sel]):.0f} ns")
    typical = np.median(x["latency_ns"])
    miss = x["leader_gap_ns"] < cp.MISS_WITHIN * typical
    hit = x["leader_gap_ns"] >= cp.HIT_AFTER * typical
    if miss.any() and hit.any():
        ratio = np.median(x["latency_ns"][miss]) / np.median(x["latency_ns"][hit])
        print(f"      first loads over hits: {ratio:.2f}x; coupled: "
              f"{cp.miss_and_hit(x) is not None}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="+", type=Path)
    for folder in ap.parse_args(argv).folders:
        print(f"== {folder}")
        derived, base = matched(load_columns(next(folder.glob("trace*_base.npz"))))
        _, first, last, _, _ = cp.cta_dispatch(base)
        print(f"  dispatch: {base.shape[0]} CTAs, measured span "
              f"{(last.max() - first.min()) / 1e3:.1f} us, dispatched "
              f"{cp.unchanged_span(base) / 1e3:.1f} us")
        probed = load_columns(next(folder.glob("trace*base_arrivals.npz")))
        for ring, x in load_arrival_sample(probed).items():
            sampled_loads(ring, x)
        between_ctas(load_arrival_pairs(probed))
        if not (folder / "trace_stages1.npz").is_file():
            continue
        _, variant = matched(load_columns(folder / "trace_stages1.npz"))
        rank = cp.cta_ranks(base)
        regimes("base, measured", base, base.start, base.end, rank)
        regimes("1-deep, measured", variant, variant.start, variant.end, cp.cta_ranks(variant))
        terms = derived.what_if_terms(arrivals_from=probed)
        replayed = cp.what_if(base, loaded_latency=True, first_load=terms["first_load"],
                              arrivals=terms["arrivals"], schedules=True, **ONE_DEEP)
        s = replayed["changed_schedule"]
        regimes("1-deep, replayed", base, s.start, s.end, rank)
        print(f"  recorded kernel's change, replayed: {replayed['predicted_change']:+.2%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
