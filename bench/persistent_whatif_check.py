"""Host half of the persistent what-if check (issue #17): from the level-2 trace of the
persistent ws_gemm recorded by ``bench/persistent_gpu.py``, predict the kernel-time change
of each variant with the pipeline model (``examples/ws_gemm_persistent_pipeline.json``:
one unit per output tile, payload = tile * 2^16 + k) and compare with the CUPTI medians
of the same GPU run.

    python bench/persistent_whatif_check.py bench/results/persistent_h100 \\
        > bench/results/persistent_h100/whatif_table.md

"predicted" uses the load latency the model infers from the base trace; "calibrated"
takes it from the 2-stage variant's own trace (where the consumers do wait for loads),
which is not an independent prediction for that variant itself.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cute_prof.analysis.critical_path import analyze_pipeline, match_records, what_if  # noqa: E402
from cute_prof.analysis.model import load_pipeline  # noqa: E402
from cute_prof.storage import load_trace  # noqa: E402

SPEC = ROOT / "examples" / "ws_gemm_persistent_pipeline.json"
# variant (GemmConfig overrides in persistent_gpu.py) -> the model change that stands for it
CHANGES = {
    "p_stages3": {"depth": {"smem_ab": 3}},
    "p_stages2": {"depth": {"smem_ab": 2}},
    "p_cluster1x1": {"shared_by": {"smem_ab": 1}},
}
WAIT_FULL = "ws.wait_full"


def wait_full_latency(report: dict) -> float:
    return next(b["latency_ns_median"] for b in report["blockers"] if b["region"] == WAIT_FULL)


def main(argv=None) -> int:
    folder = Path((argv if argv is not None else sys.argv[1:])[0])
    spec = load_pipeline(SPEC)
    trace = load_trace(folder / "trace_persistent_l2.npz")
    timings = json.loads((folder / "timings.json").read_text())["whatif"]
    t0 = time.perf_counter()
    report = analyze_pipeline(trace, spec, what_ifs=list(CHANGES.values()))
    elapsed = time.perf_counter() - t0
    data = match_records(trace, spec)
    calibrated_lat = None
    cal_path = folder / "trace_p_stages2_l2.npz"
    if cal_path.exists():
        cal = analyze_pipeline(load_trace(cal_path), spec.with_changes(depth={"smem_ab": 2}))
        calibrated_lat = wait_full_latency(cal)
    base = statistics.median(timings["p_base"])
    meta = trace.metadata or {}
    print(f"# What-if check, persistent ws_gemm {'x'.join(map(str, meta.get('mnk', [])))}: "
          f"model from the base level-2 trace ({len(trace.events)} records, "
          f"{report['units']} tiles of {len(set(data.unit_group.tolist()))} CTAs, analysis "
          f"{elapsed:.2f} s)\n")
    print(f"device: {meta.get('device')}; timings: CUPTI kernel durations (torch.profiler), "
          f"level 0, {len(timings['p_base'])} launches per variant, shuffled rounds; medians.\n")
    print(f"load latency (consumer wait_full): inferred from the base trace "
          f"{wait_full_latency(report):.0f} ns" + (
              f"; calibrated from the 2-stage trace {calibrated_lat:.0f} ns" if calibrated_lat
              is not None else "") + "\n")
    print("| variant | model change | predicted | calibrated | measured | error (pp) | "
          "error calibrated (pp) |")
    print("|---|---|---:|---:|---:|---:|---:|")
    rows = []
    for (name, change), pred in zip(CHANGES.items(), report["what_if"]):
        if name not in timings or not timings[name]:
            continue
        measured = (statistics.median(timings[name]) - base) / base
        p = pred["predicted_change"]
        calp = None
        if calibrated_lat is not None:
            calp = what_if(data, latency={WAIT_FULL: calibrated_lat}, **change)["predicted_change"]
        rows.append({"variant": name, "change": change, "predicted": p, "calibrated": calp,
                     "measured": measured, "error_pp": (p - measured) * 100,
                     "error_calibrated_pp": None if calp is None else (calp - measured) * 100})
        cal_txt = "-" if calp is None else f"{calp * 100:+.2f}%"
        cal_err = "-" if calp is None else f"{(calp - measured) * 100:+.2f}"
        print(f"| {name} | {json.dumps(change)} | {p * 100:+.2f}% | {cal_txt} | "
              f"{measured * 100:+.2f}% | {(p - measured) * 100:+.2f} | {cal_err} |")
    w0 = report["what_if"][0]
    print(f"\nbase: measured {base / 1e3:.2f} us (CUPTI, level 0); traced kernel span "
          f"{w0['kernel_ns'] / 1e3:.2f} us (level 2); replay error (median per tile) "
          f"{w0['replay_error_median'] * 100:+.2f}%")
    for name in ("non_persistent", "p_base_level2"):
        if timings.get(name):
            v = statistics.median(timings[name])
            print(f"- {name}: {v / 1e3:.2f} us ({(v - base) / base * 100:+.2f}% vs p_base)")
    (folder / "whatif_table.json").write_text(json.dumps(
        {"rows": rows, "calibrated_latency_ns": calibrated_lat,
         "report": {k: v for k, v in report.items()}}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
