"""Host half of the what-if check (issue #27): for every kernel entry, build the pipeline
model from the zero-edit base trace alone, predict each variant's kernel-time change with an
interval from the base's own spread, and compare with the changes CUPTI measured in the same
GPU run (paired by round). One table for every kernel, with the rank correlation of
predicted vs measured.

    python bench/whatif.py check GPU_OUT [--out bench/results/whatif]

GPU_OUT is the folder ``bench/gpu.sh`` fills, one sub-folder per part (a part's own folder
works too). Writes ``whatif_table.md`` and ``.json`` into ``--out``. A new kernel is one more
:class:`Entry` in ``ENTRIES``; the variants' own traces are never read.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from cute_prof.analysis.loads import latency_sample
from cute_prof.analysis.pipeline_data import match_records, timer_step
from cute_prof.analysis.what_if import latency_sensitivity, pool_predictions, predict_what_if
from cute_prof.analysis.model import arrival_latencies  # noqa: E402
from cute_prof.analysis.derived_pipeline import derive_pipeline
from cute_prof.analysis.load_arrivals import (
    PROBED_SPAN_TIE, probed_launches_like, rank_correlation)
from cute_prof.analysis.zero_edit import cluster_ctas, recorded_span_ns
from cute_prof.calibration import paired_change, resolved_pair_order, round_spread  # noqa: E402
from cute_prof.trace import Trace  # noqa: E402
from tools.columns import launch_paths, load_columns  # noqa: E402

COMMAND = "python bench/whatif.py check GPU_OUT"
METHOD = "../../../docs/analysis.md#how-the-what-if-model-predicts-a-change"


@dataclass(frozen=True)
class Entry:
    kernel: str  # the table's label
    folder: str  # sub-folder of GPU_OUT written by its GPU part
    trace: str  # the base's traced launches (``launch_paths``), in that folder
    base: str  # timings key of the base
    # variant (timings key) -> the model change standing for it, or a str: why not modelled
    variants: dict[str, dict | str] = field(default_factory=dict)
    timings: str = "timings.json"
    timings_key: str = "times"  # sub-dict of the timings file holding the per-variant lists
    timings_ns: float = 1.0  # ns per unit of the timings file
    # the base's launches whose producer probed sampled loads (autoprofile_probed(load_arrivals=N)):
    # the model's load latencies, where the GPU half recorded them
    arrivals_trace: str | None = None

    def load_timings(self, folder: Path) -> dict[str, list[float]]:
        """Per variant (timings key, the base's included): its launches' times, in the
        timings file's unit (``timings_ns`` ns each)."""
        return json.loads((folder / self.timings).read_text())[self.timings_key]


# "cluster": the variant's CTAs per cluster, which the check turns into the launch gap's
# change (``model_change``) where the run measured the cluster launch's own cost
GEMM_CHANGES = {"stages3": {"depth": {"ab_pipe": 3}}, "stages2": {"depth": {"ab_pipe": 2}},
                "cluster1x1": {"shared_by": {"ab_pipe": 1}, "cluster": 1}}
NOT_A_RING = "it changes the consumer's program (order / instruction mix), not a ring"


def fa4_entry(kernel: str, folder: str, *, program_variants: bool = False) -> Entry:
    """An FA4 forward shape traced by ``bench/whatif.py fa4``: its K/V rings one stage
    shallower and deeper, and where the GPU half built them (``program_variants``) the two
    variants that change the consumer's program, which no ring depth models."""
    variants = {"stages1": {"depth": {"pipeline_k": 1, "pipeline_v": 1}},
                "stages3": {"depth": {"pipeline_k": 3, "pipeline_v": 3}}}
    if program_variants:
        variants |= {"overlap_off": NOT_A_RING, "pv_ss": NOT_A_RING}
    return Entry(kernel, folder, "trace_base.npz", "base", variants, timings="fa4_timings.json",
                 timings_key="times_ms", timings_ns=1e6,
                 arrivals_trace="trace_base_arrivals.npz")


ENTRIES = [
    Entry("ws_gemm 4096^3 (2x1 cluster, 4 stages)", "gemm_ze", "trace_ze_base.npz", "base",
          GEMM_CHANGES, arrivals_trace="trace_ze_base_arrivals.npz"),
    Entry("persistent ws_gemm 4096x4096x1024", "persistent_ze", "trace_ze_base.npz", "base",
          GEMM_CHANGES, arrivals_trace="trace_ze_base_arrivals.npz"),
    fa4_entry("FA4 fwd b4 s4096 h16 d128 bf16", "fa4", program_variants=True),
    # causal: CTAs run 1 to 32 K/V blocks (a CTA that ran fewer stays in the model)
    fa4_entry("FA4 fwd causal b4 s4096 h16 d128 bf16", "fa4_causal", program_variants=True),
    # quack's cooperative Hopper GEMM (bench/whatif.py quack): the second foreign kernel
    Entry("quack GEMM 4096^3 (cooperative, 2x1 cluster, 4 stages)", "quack", "trace_base.npz",
          "base", {"stages_minus1": {"depth": {"pipeline_cls": 3}},
                   "stages_minus2": {"depth": {"pipeline_cls": 2}}},
          arrivals_trace="trace_base_arrivals.npz"),
    # one partial wave (128 CTAs on 132 SMs): no CTA starts under load
    fa4_entry("FA4 fwd b1 s1024 h16 d128 bf16", "fa4_small"),
    # four waves (512 CTAs): K and V (32 MB) fit the 50 MB L2, where b4's (128 MB) do not
    fa4_entry("FA4 fwd b1 s4096 h16 d128 bf16", "fa4_b1s4096"),
]


def folder_of(root: Path, entry: Entry) -> Path | None:
    for candidate in (root / entry.folder, root):
        if (candidate / entry.trace).exists():
            return candidate
    return None


def gpu_measurement(root: Path, run_file: str, committed: Path) -> tuple[dict | None, str]:
    """(a measurement's JSON, where from) for the run at ``root`` (its folder or a part's):
    the run's own ``run_file``, else ``committed`` where that was measured on the same GPU
    model (``device.txt`` against its ``device``); (None, "") where neither was."""
    for folder in (root, root.parent):
        if (folder / run_file).is_file():
            return json.loads((folder / run_file).read_text()), f"measured in this run ({run_file})"
    device_txt = next((f / "device.txt" for f in (root, root.parent)
                       if (f / "device.txt").is_file()), None)
    device = device_txt.read_text().split(",")[0].strip() if device_txt else ""
    saved = json.loads(committed.read_text()) if committed.is_file() else {}
    if device and saved.get("device", "").split(",")[0].strip() == device:
        return saved, (f"not measured in this run: {committed.relative_to(ROOT)} (the same GPU "
                       f"model, {device})")
    return None, ""


# one record's cost on a dependency chain, as the GPU half measured it (bench/gpu.sh's chain
# part: bench/record_cost.py chain), else the committed measurement of the same GPU model
CHAIN_FILE = "chain/record_chain.json"
COMMITTED_CHAIN = ROOT / "bench" / "results" / "record_cost" / "chain.json"


def record_chain(root: Path) -> tuple[float | None, str]:
    """(ns, where from): what one zero-edit record adds to a dependency chain on the run's
    GPU, the time the model removes per record (``DerivedPipeline.what_if_terms``). None:
    neither this run nor a committed run on the same GPU model measured it (the model then
    removes the trace's own gap estimate)."""
    chain, source = gpu_measurement(root, CHAIN_FILE, COMMITTED_CHAIN)
    if chain is None:
        return None, "no chain measured on this GPU: the trace's own gap estimate"
    return float(chain["per_record_ns"]), f"on a dependency chain, {source}"


# what a cluster launch adds between one CTA and the next on an SM, per cluster size, as the
# GPU half measured it (bench/whatif.py cluster-gap, bench/gpu.sh's cluster_gap part)
CLUSTER_GAP_FILE = "cluster_gap/cluster_gap.json"
COMMITTED_CLUSTER_GAP = ROOT / "bench" / "results" / "whatif" / "cluster_gap.json"


def cluster_gaps(root: Path) -> tuple[dict[int, float] | None, str]:
    """(CTAs per cluster -> launch gap median ns, where from): the run's own probe, else a
    committed one from the same GPU model; None where neither measured it (a change of the
    cluster then keeps the base's gap)."""
    probe, source = gpu_measurement(root, CLUSTER_GAP_FILE, COMMITTED_CLUSTER_GAP)
    if probe is None:
        return None, "not measured on this GPU: the base's gap kept"
    return {int(k): float(v) for k, v in probe["gap_ns"].items()}, source


def model_change(change: dict, base_cluster: int, gaps: dict[int, float] | None) -> dict:
    """The what-if as the model takes it: a ``cluster`` (the variant's CTAs per cluster)
    becomes ``gap_change_ns``, the probe's gap at that size less at the base's (``gaps``:
    ``cluster_gaps``), or is dropped where the probe did not measure both sizes."""
    if "cluster" not in change:
        return change
    rest = {k: v for k, v in change.items() if k != "cluster"}
    if gaps and change["cluster"] in gaps and base_cluster in gaps \
            and change["cluster"] != base_cluster:
        rest["gap_change_ns"] = gaps[change["cluster"]] - gaps[base_cluster]
    return rest


def launch_model(raw: Trace, probed: Trace | None, derived, data=None, *,
                 record_chain_ns: float | None, recorder_cost: float | None) -> dict:
    """The model's inputs from one traced base launch and one probed launch: the matched
    records, the latency sample the header reports and the terms ``predict_what_if`` takes
    (``DerivedPipeline.what_if_terms``, as ``cute-prof analyze --arrivals`` hands them over);
    ``data``: ``raw``'s matched records where the caller has them."""
    probe_cost = None if probed is None else recorded_span_ns(probed) / recorded_span_ns(raw) - 1
    terms = derived.what_if_terms(arrivals_from=probed, record_chain_ns=record_chain_ns,
                                  recorder_cost=recorder_cost)
    data = data if data is not None else match_records(derived.trace, derived.spec)
    wait = next(r.tag for r in derived.spec.regions if "consumes" in r.relations)
    ring = next(r.relations["consumes"].resource for r in derived.spec.regions if r.tag == wait)
    first_load = terms["first_load"]
    if len(terms["arrivals"].get(ring, ())) >= 8:
        sample = arrival_latencies(terms["arrivals"][ring])
        source = (f"{len(sample):,} loads sampled as they arrived, in a second base launch "
                  f"whose producer probed them (it ran {probe_cost:+.1%} against the base "
                  "trace's span)")
    elif first_load is not None and len(first_load) >= 8:
        sample, source = first_load, derived.first_load_latency()[1]
    else:
        sample, source = latency_sample(data, region=wait)
        first_load = None
    return {"raw": raw, "data": data, "wait": wait, "sample": np.asarray(sample),
            "source": source, "probe_cost": probe_cost, "record_ns": terms["record_ns"],
            "record_gap_ns": derived.record_ns,
            "inputs": {"first_load": first_load, "arrivals": terms["arrivals"],
                       "recorder_cost": terms["recorder_cost"],
                       "release_sample": terms["release_sample"]}}


def traced_launch_models(entry: Entry, folder: Path, **costs) -> list[list[dict]]:
    """Per traced launch of the base, its model (``launch_model``) with each probed launch
    that ran like it (``pipelines.probed_launches_like``, nearest first; one model where the
    GPU half probed none), the models of one traced launch sharing its matched records."""
    probed = ([load_columns(p) for p in launch_paths(folder / entry.arrivals_trace)]
              if entry.arrivals_trace else [])
    models = []
    for path in launch_paths(folder / entry.trace):
        raw = load_columns(path)
        derived = derive_pipeline(raw)
        runs = []
        for index in probed_launches_like(raw, probed) if probed else [None]:
            runs.append({"probed_index": index, **launch_model(
                raw, None if index is None else probed[index], derived,
                runs[0]["data"] if runs else None, **costs)})
        models.append(runs)
    return models


def pooled_prediction(preds: list[dict]) -> dict:
    """The row's prediction from those of each traced base launch
    (``pool_predictions(widen=True)``: their median, the interval reaching each one's own)."""
    pooled = pool_predictions(preds, widen=True)
    return {"predicted": pooled["predicted_change"], "interval": list(pooled["interval"]),
            "latency_ns": pooled["detail"]["latency_ns"],
            "launch_predictions": pooled.get("changes", [pooled["predicted_change"]])}


def base_recorder_cost(timings: dict, base: str, *, recording: str = "recorded") -> float | None:
    """What recording cost a kernel (the model takes the base's): its recording kernel's
    (``<base>:<recording>``) CUPTI median over the plain one's, less 1, from the same
    shuffled rounds (None where the GPU half did not time that recording kernel)."""
    if not (timings.get(base) and timings.get(f"{base}:{recording}")):
        return None
    return paired_change(timings, f"{base}:{recording}", base)


def recorded_changes(timings: dict, base: str, variant: str) -> dict:
    """Where the GPU half timed the recording kernels too (``<name>:recorded``, CUPTI, the
    same shuffled rounds): the recorded kernel's change (``measured_recorded``) and the
    recorder's cost in the base and in the variant (recorded / plain - 1), each the median
    of its rounds' own changes (``paired_change``)."""
    names = (base, variant, f"{base}:recorded", f"{variant}:recorded")
    if not all(timings.get(n) for n in names):
        return {}
    return {"measured_recorded": paired_change(timings, names[3], names[2]),
            "recorder_cost_base": base_recorder_cost(timings, base),
            "recorder_cost_variant": base_recorder_cost(timings, variant)}


def check_entry(root: Path, entry: Entry) -> tuple[list[dict], dict]:
    """Every what-if of ``entry`` predicted from the base and set against the GPU's
    change, with the kernel's header info."""
    folder = folder_of(root, entry)
    if folder is None:
        return [], {"kernel": entry.kernel, "skipped": f"no {entry.folder}/{entry.trace}"}
    timings = entry.load_timings(folder)
    t0 = time.perf_counter()
    chain_ns, chain_source = record_chain(root)
    recorder_cost = base_recorder_cost(timings, entry.base)
    models = traced_launch_models(entry, folder, record_chain_ns=chain_ns,
                                  recorder_cost=recorder_cost)
    first = models[0][0]
    gaps, gap_source = cluster_gaps(root)
    base_cluster = cluster_ctas(first["raw"])
    rows = []
    for name, change in entry.variants.items():
        if isinstance(change, dict):
            change = model_change(change, base_cluster, gaps)
        measured = paired_change(timings, name, entry.base) if timings.get(name) else None
        row = {"kernel": entry.kernel, "what_if": name, "change": change, "measured": measured,
               "modelled": isinstance(change, dict),
               **recorded_changes(timings, entry.base, name)}
        if not row["modelled"]:
            row["reason"] = change
            rows.append(row)
            continue
        # each traced launch's prediction, pooled over the probed launches that ran like it
        preds = [pool_predictions([predict_what_if(run["data"], change,
                                                   record_ns=run["record_ns"], **run["inputs"])
                                   for run in runs]) for runs in models]
        if not preds[0]["modelled"]:  # the model cannot make it; the base may bound it
            row.update(modelled=False, reason=preds[0]["reason"])
            if "bounds" in preds[0] and measured is not None:
                lo, hi = row["bounds"] = list(preds[0]["bounds"])
                row["reason"] += (" (measured inside)" if lo - 1e-12 <= measured <= hi + 1e-12
                                  else " (measured outside)")
            rows.append(row)
            continue
        row.update(pooled_prediction(preds))
        # how far a measured change can sit from the model's for noise alone: half the
        # interquartile range of its rounds' own changes
        noise = round_spread(timings, name, entry.base) if measured is not None else 0.0
        lo, hi = row["interval"]
        if measured is not None:
            row["error_pp"] = (row["predicted"] - measured) * 100
            row["inside"] = bool(lo - 1e-12 <= measured <= hi + 1e-12)
            row["inside_with_noise"] = bool(lo - noise - 1e-12 <= measured <= hi + noise + 1e-12)
        row["launch_noise"] = noise
        # how far the prediction stands on the loads' latency: its move per timer tick on
        # every sampled load (the first traced launch's model)
        inputs = dict(first["inputs"])
        arrivals = inputs.pop("arrivals")
        if arrivals:
            row["latency_per_tick"] = latency_sensitivity(
                first["data"], change, arrivals=arrivals, shift_ns=timer_step(first["data"]),
                record_ns=first["record_ns"], loaded_latency=True,
                **{**inputs, "recorder_cost": inputs["recorder_cost"] or 0.0})
        rows.append(row)
    sample = np.concatenate([run["sample"] for runs in models for run in runs])
    info = {"kernel": entry.kernel, "folder": str(folder), "records": len(first["raw"].events),
            "wait": first["wait"], "units": first["data"].shape[0],
            "iterations": first["data"].shape[1],
            "base_us": statistics.median(timings[entry.base]) * entry.timings_ns / 1e3,
            "launches": len(timings[entry.base]), "traced_launches": len(models),
            "analysis_s": time.perf_counter() - t0,
            # which probed launches each traced launch read
            "probed_read": [[run["probed_index"] for run in runs] for runs in models],
            "latency_source": first["source"],
            "latency_ns": {q: float(np.quantile(sample, q)) for q in (0.05, 0.25, 0.5, 0.75)},
            "timer_step_ns": timer_step(first["data"]), "record_ns": first["record_ns"],
            "record_gap_ns": first["record_gap_ns"], "record_source": chain_source,
            "cluster_gap_ns": {str(k): v for k, v in gaps.items()} if gaps else None,
            "cluster_gap_source": gap_source, "base_cluster": base_cluster,
            "recorder_cost": recorder_cost}
    return rows, info


def pct(v):
    return "-" if v is None else f"{v * 100:+.2f}%"


def recorded_txt(row: dict) -> str:
    if "measured_recorded" not in row:
        return "-"
    return (f"{pct(row['measured_recorded'])} ({pct(row['recorder_cost_base'])} / "
            f"{pct(row['recorder_cost_variant'])})")


def checked(rows: list[dict]) -> list[dict]:
    """The rows with a prediction and a measured change."""
    return [r for r in rows if r.get("modelled") and r.get("measured") is not None]


def pair_order(done: list[dict]) -> dict:
    """The pairs of checked rows the GPU tells apart (``resolved_pair_order``: measured
    changes further apart than their launch noise) and those the predictions misorder."""
    apart, wrong = resolved_pair_order([r["predicted"] for r in done],
                                       [r["measured"] for r in done],
                                       [r.get("launch_noise", 0.0) for r in done])
    label = lambda r: f"{r['kernel']} {r['what_if']}"  # noqa: E731
    return {"apart": apart, "misordered": [[label(done[i]), label(done[j])] for i, j in wrong]}


def header_line(i: dict) -> str:
    """One kernel's inputs: its traces, base time, load latency and the record time removed."""
    if "skipped" in i:
        return f"- {i['kernel']}: skipped ({i['skipped']})"
    lat = i["latency_ns"]
    gap = ("" if not i["cluster_gap_ns"] else
           f"; cluster launch gap {', '.join(f'{k} CTA {v:.0f} ns' for k, v in sorted(i['cluster_gap_ns'].items()))}"
           f" ({i['cluster_gap_source']})")
    return (f"- {i['kernel']} (`{i['folder']}`): {i['traced_launches']} traced launches (the "
            f"first: {i['records']:,} records, {i['units']} units x {i['iterations']} "
            f"iterations), base {i['base_us']:.2f} us over {i['launches']} timed launches, "
            f"analysis {i['analysis_s'] / i['traced_launches']:.2f} s per traced launch; "
            f"{i['wait']} latency ({i['latency_source']}): p5 {lat[0.05]:.0f}, p25 "
            f"{lat[0.25]:.0f}, median {lat[0.5]:.0f}, p75 {lat[0.75]:.0f} ns, timer step "
            f"{i['timer_step_ns']:.0f} ns; one record {i['record_ns']:.1f} ns removed "
            f"({i['record_source']}; the trace's gap estimate {i['record_gap_ns']:.0f} ns)"
            + ("" if i["recorder_cost"] is None else
               f"; recording cost the base {i['recorder_cost']:+.2%}") + gap)


def table(rows: list[dict], infos: list[dict], root: Path) -> tuple[str, float]:
    done = checked(rows)
    rho = rank_correlation([r["predicted"] for r in done], [r["measured"] for r in done])
    device = (root / "device.txt").read_text().strip() if (root / "device.txt").exists() else "-"
    lines = ["# What-if check: pipeline predictions from the base trace vs the GPU", "",
             f"- device: {device}",
             f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} (check); GPU data "
             f"from `{root}`",
             f"- command: `{COMMAND}` (GPU half: `bash bench/gpu.sh`, which runs this check "
             "after it)", "",
             "Method: each variant and its base are timed with CUPTI at level 0, once per "
             "round in shuffled order; measured is the median of the rounds' own changes. "
             "predicted replays the zero-edit base trace (its spec derived from the kernel's "
             "pipeline objects, its loads' latencies sampled by a probed base launch) under the "
             "changed spec, with one record's time removed per record; the interval spans the "
             "latency's quartiles, a timer tick and each half of the SMs, widened to every "
             "traced launch's prediction. launch noise is half the IQR of the row's per-round "
             f"changes, {PROBED_SPAN_TIE:.1%} the span tie for a probed launch. "
             f"[How the what-if model predicts a change]({METHOD}).", ""]
    lines += [header_line(i) for i in infos]
    lines += ["", "| kernel | what-if | predicted | interval | measured | error (pp) | "
              "inside interval | inside +- launch noise | recorded (recorder's cost base / "
              "variant) | each traced launch | per tick of load latency |",
              "|---|---|---:|---|---:|---:|---|---|---:|---|---:|"]
    for r in rows:
        if not r["modelled"]:
            lines.append(f"| {r['kernel']} | {r['what_if']} | not modelled: {r['reason']} | - "
                         f"| {pct(r['measured'])} | - | - | - | {recorded_txt(r)} | - | - |")
            continue
        lo, hi = r["interval"]
        err = "-" if "error_pp" not in r else f"{r['error_pp']:+.2f}"
        inside = "-" if "inside" not in r else ("yes" if r["inside"] else "no")
        noisy = "-" if "inside" not in r else (
            f"{'yes' if r['inside_with_noise'] else 'no'} (+-{r['launch_noise'] * 100:.2f})")
        tick = "-" if "latency_per_tick" not in r else f"{r['latency_per_tick'] * 100:.2f} pp"
        lines.append(f"| {r['kernel']} | {r['what_if']} {json.dumps(r['change'])} | "
                     f"{pct(r['predicted'])} | [{pct(lo)}, {pct(hi)}] | {pct(r['measured'])} | "
                     f"{err} | {inside} | {noisy} | {recorded_txt(r)} | "
                     f"{' / '.join(pct(v) for v in r['launch_predictions'])} | {tick} |")
    within = sum(abs(r["error_pp"]) <= 3 for r in done)
    mean_error = statistics.mean(abs(r["error_pp"]) for r in done) if done else float("nan")
    pairs = pair_order(done)
    wrong = "; ".join(f"{a} / {b}" for a, b in pairs["misordered"]) or "none"
    lines += ["", f"Spearman rank correlation of predicted vs measured over the {len(done)} "
              f"modelled rows: {rho:+.3f}. Within 3 pp: {within} of {len(done)}, mean absolute "
              f"error {mean_error:.2f} pp; measured inside the interval: "
              f"{sum(r.get('inside', False) for r in done)} of {len(done)} "
              f"({sum(r.get('inside_with_noise', False) for r in done)} with the interval "
              "widened by the launch noise).",
              f"Pairs of rows whose measured changes differ by more than their launch noise: "
              f"{pairs['apart']}, ordered right by the predictions: "
              f"{pairs['apart'] - len(pairs['misordered'])} (misordered or tied: {wrong})."]
    return "\n".join(lines) + "\n", rho


def significant(value, digits: int = 9):
    """``value`` with every float at ``digits`` significant digits: the committed JSON keeps
    a CUPTI nanosecond and a millionth of a change, not float noise (and no indentation: the
    Markdown table beside it is the one to read)."""
    if isinstance(value, float):
        return float(f"{value:.{digits}g}")
    if isinstance(value, dict):
        return {k: significant(v, digits) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [significant(v, digits) for v in value]
    return value


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("gpu_out", type=Path, help="the GPU half's output folder")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "whatif",
                        help="where whatif_table.md/.json go (default bench/results/whatif)")
    parser.add_argument("--only", nargs="*", help="folders of the entries to check (default all)")
    args = parser.parse_args(argv)
    rows, infos = [], []
    for entry in ENTRIES:
        if args.only and entry.folder not in args.only:
            continue
        entry_rows, info = check_entry(args.gpu_out, entry)
        rows += entry_rows
        infos.append(info)
    text, rho = table(rows, infos, args.gpu_out)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "whatif_table.md").write_text(text)
    (args.out / "whatif_table.json").write_text(json.dumps(significant(
        {"command": COMMAND, "gpu_out": str(args.gpu_out), "spearman": rho,
         "resolved_pairs": pair_order(checked(rows)), "rows": rows,
         "kernels": [{**i, "latency_ns": {str(k): v for k, v in i.get("latency_ns", {}).items()}}
                     for i in infos]}), separators=(",", ":")) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
