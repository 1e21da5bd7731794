"""Host half of the what-if check (issue #27): for every kernel entry, build the pipeline
model from the base trace alone, predict each variant's kernel-time change with an interval
from the base's own spread, and compare with the changes CUPTI measured in the same GPU run
(paired by round).
One table for every kernel, with the rank correlation of predicted vs measured.

    python bench/whatif_check.py GPU_OUT [--out bench/results/whatif]

GPU_OUT is the folder ``bench/whatif_all_gpu.sh`` filled (one sub-folder per part: gemm_ze/,
persistent_ze/ (``bench/whatif_gpu.py [--persistent] --zero-edit``), fa4/
(``bench/fa4_whatif_gpu.py``), fa4_causal/ (the same with ``--causal``), quack/
(``bench/quack_whatif_gpu.py``), fa4_small/ (``bench/fa4_whatif_gpu.py --shape 1,1024,16,128
--variants base,stages1,stages3``), and the level-2 gemm/, persistent/); a part's own folder works
too. Writes ``whatif_table.md`` and
``whatif_table.json`` into ``--out`` and prints the table.

A new kernel is one more :class:`Entry` in ``ENTRIES``: its trace file and loader, a spec
(a function, so a spec derived from the trace itself, e.g. FA4's zero-edit one, fits), its
timings and the model change that stands for each variant (``None``: not modelled, with
the reason). The variants' own traces are never read.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cute_prof import storage  # noqa: E402
from cute_prof.calibration import paired_change, resolved_pair_order, round_spread  # noqa: E402
from cute_prof.analysis.critical_path import (  # noqa: E402
    QUEUE_RULES, latency_sample, latency_sensitivity, match_records, pool_predictions,
    predict_what_if, timer_step, what_if)
from cute_prof.analysis.model import PipelineSpec, arrival_latencies, load_pipeline  # noqa: E402
from cute_prof.analysis.pipelines import (  # noqa: E402
    PROBED_SPAN_TIE, cluster_ctas, derive_pipeline, probed_launches_like, rank_correlation,
    recorded_span_ns)
from cute_prof.trace import Trace  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
from tools.columns import launch_paths, load_columns  # noqa: E402

COMMAND = "python bench/whatif_check.py GPU_OUT"
# the table's words for each rule of critical_path.queued_under_load
QUEUE_RULE_TEXT = {
    "little": "Little's law at a fixed occupancy (queued / r, r the change's time over the base's)",
    "open": "one open queue's (latency W0 / (1 - rho), rho falling with the throughput; not the "
            "model's rule: --queue-rule open)",
    "none": "nothing (the base's queueing kept; not the model's rule: --queue-rule none)"}


def spec_file(name: str) -> Callable[[Trace], PipelineSpec]:
    """A spec from ``examples/NAME`` (the trace is not needed)."""
    return lambda trace: load_pipeline(ROOT / "examples" / name)


@dataclass(frozen=True)
class Entry:
    kernel: str  # the table's label
    folder: str  # sub-folder of GPU_OUT written by its GPU part
    trace: str  # the base trace, in that folder
    load: Callable[[Path], Trace]
    spec: Callable[[Trace], PipelineSpec]  # spec of the base, possibly derived from its trace
    base: str  # timings key of the base
    # variant (timings key) -> the model change standing for it, or a str: why not modelled
    variants: dict[str, dict | str] = field(default_factory=dict)
    timings: str = "timings.json"
    timings_key: str | None = None  # sub-dict of the timings file holding the per-variant lists
    wait: str | None = "ws.wait_full"  # the consumes wait whose latency the header reports
    # True: a zero-edit base; the spec comes from the kernel's own pipeline objects
    # (derive_pipeline) and the latency sample from each CTA's first load
    derived: bool = False
    timings_ns: float = 1.0  # ns per unit of the timings file
    base_trace: str = ""  # what the base trace is, for the table
    # the variants' own traces (``{variant}`` is the timings key), read only for the
    # diagnostic "traced" column: the change of the recorded kernel, one launch each
    variant_trace: str | None = None
    # a second base trace whose producer probed sampled loads (autoprofile(load_arrivals=N)):
    # the model's load latencies, when the GPU half recorded it
    arrivals_trace: str | None = None
    # the base kernel's probed launches at a lighter memory load (--lighter-load of the GPU
    # half): a slower change's loads queue as the curve through the base's and theirs says
    lighter_trace: str | None = None

    def load_timings(self, folder: Path) -> dict[str, list[float]]:
        """Per variant (timings key, the base's included): its launches' times, in the
        timings file's unit (``timings_ns`` ns each)."""
        timings = json.loads((folder / self.timings).read_text())
        return timings[self.timings_key] if self.timings_key else timings


def derived_spec(trace: Trace) -> PipelineSpec:
    return derive_pipeline(trace).spec


# "cluster": the variant's CTAs per cluster, which the check turns into the launch gap's
# change (``model_change``) where the run measured the cluster launch's own cost
GEMM_CHANGES = {"stages3": {"depth": {"ab_pipe": 3}}, "stages2": {"depth": {"ab_pipe": 2}},
                "cluster1x1": {"shared_by": {"ab_pipe": 1}, "cluster": 1}}
NOT_A_RING = "it changes the consumer's program (order / instruction mix), not a ring"


def fa4_entry(kernel: str, folder: str, *, program_variants: bool = False) -> Entry:
    """An FA4 forward shape traced by bench/fa4_whatif_gpu.py: its K/V rings one stage
    shallower and deeper, and where the GPU half built them (``program_variants``) the two
    variants that change the consumer's program, which no ring depth models."""
    variants = {"stages1": {"depth": {"pipeline_k": 1, "pipeline_v": 1}},
                "stages3": {"depth": {"pipeline_k": 3, "pipeline_v": 3}}}
    if program_variants:
        variants |= {"overlap_off": NOT_A_RING, "pv_ss": NOT_A_RING}
    return Entry(kernel, folder, "trace_base.npz", load_columns, derived_spec, "base", variants,
                 timings="fa4_timings.json", timings_key="times_ms", wait=None, derived=True,
                 timings_ns=1e6, base_trace="zero-edit", variant_trace="trace_{variant}.npz",
                 arrivals_trace="trace_base_arrivals.npz")


ENTRIES = [
    # zero-edit bases (only the pipeline calls recorded; the spec is derived from them)
    Entry("ws_gemm 4096^3 (2x1 cluster, 4 stages)", "gemm_ze", "trace_ze_base.npz", load_columns,
          derived_spec, "base", GEMM_CHANGES, timings_key="times", wait=None, derived=True,
          base_trace="zero-edit", variant_trace="trace_ze_{variant}.npz",
          arrivals_trace="trace_ze_base_arrivals.npz",
          lighter_trace="trace_ze_base_lighter_arrivals.npz"),
    Entry("persistent ws_gemm 4096x4096x1024", "persistent_ze", "trace_ze_base.npz", load_columns,
          derived_spec, "base", GEMM_CHANGES, timings_key="times", wait=None, derived=True,
          base_trace="zero-edit", variant_trace="trace_ze_{variant}.npz",
          arrivals_trace="trace_ze_base_arrivals.npz",
          lighter_trace="trace_ze_base_lighter_arrivals.npz"),
    fa4_entry("FA4 fwd b4 s4096 h16 d128 bf16", "fa4", program_variants=True),
    # causal: CTAs run 1 to 32 K/V blocks (a CTA that ran fewer stays in the model)
    fa4_entry("FA4 fwd causal b4 s4096 h16 d128 bf16", "fa4_causal", program_variants=True),
    # quack's cooperative Hopper GEMM (bench/quack_whatif_gpu.py): the second foreign kernel
    Entry("quack GEMM 4096^3 (cooperative, 2x1 cluster, 4 stages)", "quack", "trace_base.npz",
          load_columns, derived_spec, "base",
          {"stages_minus1": {"depth": {"pipeline_cls": 3}},
           "stages_minus2": {"depth": {"pipeline_cls": 2}}},
          timings_key="times", wait=None, derived=True, base_trace="zero-edit",
          variant_trace="trace_{variant}.npz", arrivals_trace="trace_base_arrivals.npz",
          lighter_trace="trace_base_lighter_arrivals.npz"),
    # one partial wave (128 CTAs on 132 SMs): no CTA starts under load
    fa4_entry("FA4 fwd b1 s1024 h16 d128 bf16", "fa4_small"),
    # four waves (512 CTAs): K and V (32 MB) fit the 50 MB L2, where b4's (128 MB) do not
    fa4_entry("FA4 fwd b1 s4096 h16 d128 bf16", "fa4_b1s4096"),
    # history: level-2 (hand-placed probes) bases with hand-written specs; their probes sit
    # on a shallow ring's recurrence (README), so they predict the traced kernel
    Entry("ws_gemm 4096^3 (2x1 cluster, 4 stages)", "gemm", "trace_base.npz", load_columns,
          spec_file("ws_gemm_pipeline.json"), "base",
          {"stages3": {"depth": {"smem_ab": 3}}, "stages2": {"depth": {"smem_ab": 2}},
           "cluster1x1": {"shared_by": {"smem_ab": 1}}}, timings_key="times",
          base_trace="level 2"),
    Entry("persistent ws_gemm 4096x4096x1024", "persistent", "trace_persistent_l2.npz",
          storage.load_trace, spec_file("ws_gemm_persistent_pipeline.json"), "p_base",
          {"p_stages3": {"depth": {"smem_ab": 3}}, "p_stages2": {"depth": {"smem_ab": 2}},
           "p_cluster1x1": {"shared_by": {"smem_ab": 1}}}, timings_key="whatif",
          base_trace="level 2"),
]


def zero_edit_entry(folder: str, parser: argparse.ArgumentParser | None = None) -> Entry:
    """The zero-edit entry whose part of a GPU run lives in ``folder`` (gemm_ze, quack, ...).
    Any other folder is an error naming the others: ``parser.error`` (a tool's command
    line), else ValueError."""
    entry = next((e for e in ENTRIES if e.folder == folder and e.derived), None)
    if entry is None:
        message = (f"no zero-edit entry with folder {folder!r}: "
                   f"{sorted(e.folder for e in ENTRIES if e.derived)}")
        if parser is not None:
            parser.error(message)
        raise ValueError(message)
    return entry


def traced_change(folder: Path, entry: Entry, variant: str, base: Trace) -> float | str:
    """The change of the recorded kernel: the variant's own trace span against the base
    trace's (one launch each). Diagnosis only (how much of an error is the recorder's own
    cost on the changed recurrence); no prediction reads it. A variant trace that lost
    records (its buffer overflowed) spans less than its kernel: not used."""
    if entry.variant_trace is None:
        return "-"
    path = folder / entry.variant_trace.format(variant=variant)
    if not path.exists():
        return "-"
    trace = entry.load(path)
    if trace.overflow:
        return "records lost"
    # a variant trace cut to some SMs' CTAs (fa4_whatif_gpu.py --sms) against the base's
    # CTAs on the same SMs: each SM runs CTAs from the launch's start to its end
    sms = np.unique(trace.events["sm"])
    base_events = base.events[np.isin(base.events["sm"], sms)]
    if base_events.shape[0] == 0:
        return "no common SM"
    return recorded_span_ns(trace) / recorded_span_ns(replace(base, events=base_events)) - 1


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


# one record's cost on a dependency chain, as the GPU half measured it (bench/whatif_all_gpu.sh's
# chain part: bench/record_cost.py chain), else the committed measurement of the same GPU model
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
# GPU half measured it (bench/cluster_launch_gap.py, whatif_all_gpu.sh's cluster_gap part)
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


def model_variants(entry: Entry, base_cluster: int,
                   gaps: dict[int, float] | None) -> dict[str, dict | str]:
    """``entry.variants`` as the model takes them (``model_change``) for a base launch of
    ``base_cluster`` CTAs per cluster (``cluster_ctas``: the trace's metadata) and the run's
    launch gaps (``gaps``: ``cluster_gaps``)."""
    return {name: model_change(change, base_cluster, gaps) if isinstance(change, dict)
            else change for name, change in entry.variants.items()}


def run_variants(entry: Entry, raw: Trace, folder: Path) -> dict[str, dict | str]:
    """``model_variants`` for the base launch ``raw`` with the launch gaps of the run
    ``folder`` belongs to (``cluster_gaps``): what the diagnosis tools replay."""
    return model_variants(entry, cluster_ctas(raw), cluster_gaps(folder)[0])


def launch_model(entry: Entry, raw: Trace, probed: Trace | None, *,
                 record_chain_ns: float | None = None,
                 recorder_cost: float | None = None, derived=None, data=None,
                 lighter: Sequence[Trace] = ()) -> dict:
    """The model's inputs from one traced base launch (and, for a zero-edit base, one probed
    launch): the matched records, the latency sample the header reports and the terms
    ``predict_what_if`` takes; ``record_chain_ns``: one record's cost on a dependency chain
    (``record_chain``), the time the model removes per record; ``recorder_cost``: the
    recording base kernel's time over the plain one's, less 1 (``base_recorder_cost``);
    ``derived``, ``data``: ``raw``'s derived pipeline and matched records where the caller
    has them (the probed launches of one traced launch share them); ``lighter``: the
    base kernel's probed launches at a lighter memory load (``Entry.lighter_trace``)."""
    trace, first_load, record_ns, arrivals, probe_cost = raw, None, 0.0, {}, None
    release_sample, lighter_load = {}, {}
    first_source = ""
    if entry.derived:
        derived = derived if derived is not None else derive_pipeline(raw)
        trace, spec = derived.trace, derived.spec
        first_source = derived.first_load_latency()[1]
        if probed is not None:  # what the probes cost: the probed launch's span against the base's
            probe_cost = recorded_span_ns(probed) / recorded_span_ns(raw) - 1
        # the model's inputs as the library hands them over (cute-prof analyze --arrivals)
        terms = derived.what_if_terms(arrivals_from=probed, record_chain_ns=record_chain_ns,
                                      recorder_cost=recorder_cost)
        first_load, record_ns, arrivals = terms["first_load"], terms["record_ns"], terms["arrivals"]
        release_sample = terms["release_sample"]
        recorder_cost = terms["recorder_cost"]
        if lighter and probed is not None:
            lighter_load = derived.lighter_load_terms(lighter, arrivals)
    else:
        spec = entry.spec(raw)  # level-2 bases: their probes are the kernel the model sees
        recorder_cost = 0.0
    data = data if data is not None else match_records(trace, spec)
    wait = entry.wait or next(r.tag for r in spec.regions if "consumes" in r.relations)
    ring = next(r.relations["consumes"].resource for r in spec.regions if r.tag == wait)
    if len(arrivals.get(ring, ())) >= 8:
        sample = arrival_latencies(arrivals[ring])
        source = (f"{len(sample):,} loads sampled as they arrived, in a second base launch "
                  f"whose producer probed them (it ran {probe_cost:+.1%} against the base "
                  "trace's span)")
    elif first_load is not None and len(first_load) >= 8:
        sample, source = first_load, first_source
    else:
        sample, source = latency_sample(data, region=wait)
        first_load = None
    return {"trace": trace, "data": data, "wait": wait, "sample": np.asarray(sample),
            "source": source, "probe_cost": probe_cost, "record_ns": record_ns,
            "record_gap_ns": derived.record_ns if entry.derived else 0.0,
            "inputs": {"first_load": first_load, "arrivals": arrivals,
                       "recorder_cost": recorder_cost, "release_sample": release_sample,
                       "lighter_load": lighter_load}}


def pooled_prediction(preds: list[dict]) -> dict:
    """The row's prediction from those of each traced base launch
    (``pool_predictions(widen=True)``: their median, the interval reaching each one's own)."""
    pooled = pool_predictions(preds, widen=True)
    return {"predicted": pooled["predicted_change"], "interval": list(pooled["interval"]),
            "latency_ns": pooled["detail"]["latency_ns"],
            "lighter_load_point": pooled["detail"].get("lighter_load_point") or None,
            "launch_predictions": pooled.get("changes", [pooled["predicted_change"]])}


def probed_launch_paths(entry: Entry, folder: Path) -> list[Path]:
    """The probed base launches the GPU half traced for ``entry`` (none for a level-2 base)."""
    return launch_paths(folder / entry.arrivals_trace) if entry.arrivals_trace else []


def lighter_launches(entry: Entry, folder: Path) -> list[Trace]:
    """The base kernel's probed launches at a lighter memory load (``--lighter-load`` of the
    GPU half; none where it ran none or the entry has no such trace)."""
    return ([entry.load(path) for path in launch_paths(folder / entry.lighter_trace)]
            if entry.lighter_trace else [])


def nearest_probed_launch(entry: Entry, folder: Path, raw):
    """The probed launch the check reads first for the traced launch ``raw`` (the nearest in
    span, ``pipelines.probed_launches_like``), None where the GPU half probed none: what the
    diagnosis tools replay one traced launch with."""
    probed = [entry.load(path) for path in probed_launch_paths(entry, folder)]
    return probed[probed_launches_like(raw, probed)[0]] if probed else None


def traced_launch_models(entry: Entry, folder: Path, *, record_chain_ns: float | None = None,
                         recorder_cost: float | None = None,
                         lighter: bool = False) -> list[list[dict]]:
    """Per traced launch of the base, its model (``launch_model``) with each probed launch
    that ran like it (``pipelines.probed_launches_like``, nearest first; one run where the
    GPU half probed none), the runs of a traced launch sharing its derived pipeline and
    matched records; each run also names its ``raw`` trace and its ``probed_index``."""
    probed = [entry.load(path) for path in probed_launch_paths(entry, folder)]
    light = lighter_launches(entry, folder) if lighter else []
    models = []
    for path in launch_paths(folder / entry.trace):
        raw = entry.load(path)
        derived = derive_pipeline(raw) if entry.derived else None
        runs = []
        for index in probed_launches_like(raw, probed) if probed else [None]:
            run = launch_model(entry, raw, None if index is None else probed[index],
                               record_chain_ns=record_chain_ns, recorder_cost=recorder_cost,
                               derived=derived, data=runs[0]["data"] if runs else None,
                               lighter=light)
            runs.append({"raw": raw, "probed_index": index, **run})
        models.append(runs)
    return models


def check_entry(root: Path, entry: Entry, *, queue_rule: str = "little", lighter: bool = False
                ) -> tuple[list[dict], dict]:
    """Every what-if of ``entry`` predicted from the base and set against the GPU's
    change, with the kernel's header info; ``queue_rule``: how the loads' queueing scales
    with a change's throughput (``critical_path.queued_under_load``)."""
    folder = folder_of(root, entry)
    if folder is None:
        return [], {"kernel": entry.kernel, "skipped": f"no {entry.folder}/{entry.trace}"}
    timings = entry.load_timings(folder)
    t0 = time.perf_counter()
    chain_ns, chain_source = record_chain(root)
    recorder_cost = base_recorder_cost(timings, entry.base)
    # every traced launch of the base, each with the probed launches that ran like it
    models = traced_launch_models(entry, folder, record_chain_ns=chain_ns,
                                  recorder_cost=recorder_cost, lighter=lighter)
    launches = [run for runs in models for run in runs]
    first = launches[0]
    base = statistics.median(timings[entry.base])
    gaps, gap_source = cluster_gaps(root)
    base_cluster = cluster_ctas(first["raw"])
    rows, first_preds = [], []
    for name, change in model_variants(entry, base_cluster, gaps).items():
        measured = paired_change(timings, name, entry.base) if timings.get(name) else None
        # how far a measured change can sit from the model's for noise alone: half the
        # interquartile range of its rounds' own changes
        noise = round_spread(timings, name, entry.base) if timings.get(name) else 0.0
        row = {"kernel": entry.kernel, "base_trace": entry.base_trace, "what_if": name,
               "change": change, "measured": measured,
               **recorded_changes(timings, entry.base, name)}
        if "measured_recorded" not in row:  # no timed recording kernel: one traced launch
            row["traced"] = traced_change(folder, entry, name, first["raw"])
        if isinstance(change, dict):  # each traced launch's, pooled over its probed launches
            preds = [pool_predictions([predict_what_if(run["data"], change,
                                                       record_ns=run["record_ns"],
                                                       queue_rule=queue_rule, **run["inputs"])
                                       for run in runs]) for runs in models]
        else:
            preds = [{"modelled": False, "reason": change}]
        pred = preds[0]
        first_preds.append(pred)
        row["modelled"] = pred["modelled"]
        if pred["modelled"]:
            row.update(pooled_prediction(preds))
            lo, hi = row["interval"]
            if measured is not None:
                row["error_pp"] = (row["predicted"] - measured) * 100
                row["inside"] = bool(lo - 1e-12 <= measured <= hi + 1e-12)
                row["inside_with_noise"] = bool(lo - noise - 1e-12 <= measured
                                                <= hi + noise + 1e-12)
            row["launch_noise"] = noise
        else:
            row["reason"] = pred["reason"]
            if "bounds" in pred and measured is not None:  # the base bounds it, no more
                lo, hi = pred["bounds"]
                row["bounds"] = [lo, hi]
                row["reason"] += (" (measured inside)" if lo - 1e-12 <= measured <= hi + 1e-12
                                  else " (measured outside)")
        rows.append(row)
    meta = first["trace"].metadata or {}
    first_slowdown = next((r["detail"]["recorder_slowdown"] for r in first_preds
                           if r.get("modelled")), 1.0)
    sample = np.concatenate([run["sample"] for run in launches])
    info = {"kernel": entry.kernel, "base_trace": entry.base_trace, "folder": str(folder),
            "records": len(first["trace"].events), "wait": first["wait"],
            "units": first["data"].shape[0], "iterations": first["data"].shape[1],
            "device": meta.get("device"), "base_us": base * entry.timings_ns / 1e3,
            "launches": len(timings[entry.base]), "traced_launches": len(models),
            "probed_launches": len(probed_launch_paths(entry, folder)),
            "analysis_s": time.perf_counter() - t0,
            # which probed launches each traced launch read, and how much longer they ran
            "probed_read": [[run["probed_index"] for run in runs] for runs in models],
            "probed_read_cost": [[run["probe_cost"] for run in runs] for runs in models],
            # the traced launches' own CUPTI times against the recording kernel's in the
            # timing rounds: were they taken in the state the rounds ran in
            "traced_cupti_us": [runs[0]["raw"].metadata["launch_cupti_ns"] / 1e3
                                for runs in models
                                if "launch_cupti_ns" in (runs[0]["raw"].metadata or {})],
            "recorded_us": (statistics.median(timings[f"{entry.base}:recorded"])
                            * entry.timings_ns / 1e3
                            if timings.get(f"{entry.base}:recorded") else None),
            "latency_source": first["source"],
            "latency_ns": {q: float(np.quantile(sample, q)) for q in (0.05, 0.25, 0.5, 0.75)},
            "timer_step_ns": timer_step(first["data"]), "record_ns": first["record_ns"],
            "record_gap_ns": first["record_gap_ns"], "record_source": chain_source,
            # the launch gap per cluster size, where a row changes the cluster
            **({"cluster_gap_ns": {str(k): v for k, v in gaps.items()} if gaps else None,
                "cluster_gap_source": gap_source, "base_cluster": base_cluster}
               if any(isinstance(c, dict) and "cluster" in c for c in entry.variants.values())
               else {}),
            "probe_cost": first["probe_cost"], "recorder_cost": recorder_cost,
            "recorder_slowdown": first_slowdown,
            # the base recorded without its named barriers (autoprofile(barriers=False)):
            # what recording them too cost, where the GPU half timed that kernel
            "barriers_recorded": (first["raw"].metadata or {}).get("autoprof", {}).get(
                "barriers_recorded", True),
            "recorder_cost_with_barriers": base_recorder_cost(timings, entry.base,
                                                              recording="recorded_barriers"),
            "arrival_latency_ns": {name: {q: float(np.quantile(arrival_latencies(x), q))
                                          for q in (0.05, 0.5)}
                                   for name, x in first["inputs"]["arrivals"].items()}}
    if first["record_ns"]:
        # the model of the recorded kernel (no record's time removed), to set against the
        # traced change: which half of a row's error is the recorder's cost (diagnosis)
        for row in rows:
            if row["modelled"] and not isinstance(
                    row.get("measured_recorded", row.get("traced")), str):
                row["predicted_recorded"] = statistics.median(
                    point_prediction(run["data"], run["inputs"], row["change"], record_ns=0.0,
                                     queue_rule=queue_rule)
                    for run in launches)
    # how far each prediction stands on the loads' latency: its move per timer tick on every
    # sampled load (the first traced launch's model)
    options = measured_inputs(first["inputs"])
    arrivals = options.pop("arrivals")
    for row in rows:
        if row["modelled"] and arrivals:
            row["latency_per_tick"] = latency_sensitivity(
                first["data"], row["change"], arrivals=arrivals, shift_ns=info["timer_step_ns"],
                record_ns=first["record_ns"],
                recorder_cost=first["inputs"].get("recorder_cost") or 0.0,
                queue_rule=queue_rule, **options)
    return rows, info


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
    of its rounds' own changes (``paired_change``). One traced
    launch's span read the recorded change 2-19 pp off these medians (FA4 b1 s1024 2->1:
    +30.47% traced, +11.3% over 30 launches)."""
    names = (base, variant, f"{base}:recorded", f"{variant}:recorded")
    if not all(timings.get(n) for n in names):
        return {}
    return {"measured_recorded": paired_change(timings, names[3], names[2]),
            "recorder_cost_base": base_recorder_cost(timings, base),
            "recorder_cost_variant": base_recorder_cost(timings, variant)}


def measured_inputs(inputs: dict) -> dict:
    """``what_if``'s keywords for a launch model's measured inputs (``launch_model``'s
    ``inputs``, from ``DerivedPipeline.what_if_terms``): its loads' latencies as its probed
    launch sampled them and that launch's clean releases."""
    return {"loaded_latency": True, "first_load": inputs["first_load"],
            "arrivals": inputs["arrivals"], "release_sample": inputs["release_sample"],
            "lighter_load": inputs.get("lighter_load")}


def point_prediction(data, inputs: dict, change: dict, *, record_ns: float,
                     recorder_cost: float = 0.0, queue_rule: str = "little") -> float:
    """The model's change (the middle of ``predict_what_if``'s interval) with ``record_ns``
    of each work region's recording removed and ``recorder_cost`` taken off the work as a
    slowdown (0: the recorded kernel's own model); ``inputs``: the ``first_load``,
    ``arrivals`` and ``release_sample`` of ``DerivedPipeline.what_if_terms``."""
    return what_if(data, **measured_inputs(inputs), record_ns=record_ns,
                   recorder_cost=recorder_cost, queue_rule=queue_rule,
                   **change)["predicted_change"]


def per_tick(row: dict) -> str:
    """A row's move per timer tick on every sampled load's latency, in points."""
    return "-" if "latency_per_tick" not in row else f"{row['latency_per_tick'] * 100:.2f} pp"


def pct(v):
    return "-" if v is None else f"{v * 100:+.2f}%"


def traced_txt(row: dict) -> str:
    value = row.get("measured_recorded", row.get("traced", "-"))
    if isinstance(value, str):
        return value
    recorded = row.get("predicted_recorded")
    return pct(value) + ("" if recorded is None else f" ({pct(recorded)})")


def recorder_txt(row: dict) -> str:
    if "recorder_cost_variant" not in row:
        return "-"
    return f"{pct(row['recorder_cost_base'])} / {pct(row['recorder_cost_variant'])}"


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


LIGHTER_TEXT = (" (where the GPU half probed the base at half its memory load, --lighter: a "
                "slower change's queued part by the curve from 1 at the base's throughput to "
                "the lighter launches' queued part over the base's at theirs, and to none at "
                "no throughput; not the model's rule)")


def table(rows: list[dict], infos: list[dict], root: Path, *, queue_rule: str = "little",
          lighter: bool = False) -> str:
    done = checked(rows)
    rho = rank_correlation([r["predicted"] for r in done], [r["measured"] for r in done])
    devices = sorted({str(i.get("device")) for i in infos if "device" in i})
    device_txt = (root / "device.txt").read_text().strip() if (root / "device.txt").exists() \
        else ", ".join(devices)
    lines = ["# What-if check: pipeline predictions from the base trace vs the GPU", "",
             f"- device: {device_txt}",
             f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} (check); GPU data "
             f"from `{root}`",
             f"- command: `{COMMAND}` (GPU half: `bench/whatif_all_gpu.sh`, which runs this "
             "check after it: the whole check in one command)",
             "- measured: CUPTI kernel durations at level 0 (no probes); change vs the base: the "
             "median of the rounds' own changes (each variant and the base timed once per "
             "round, shuffled; the clock moves between rounds). predicted: replay of the base "
             "trace's own durations under the changed spec, "
             "load latency from the base, its queued part scaled to the change's throughput by "
             f"{QUEUE_RULE_TEXT[queue_rule]}{LIGHTER_TEXT if lighter else ''}; "
             "where the GPU half traced several base launches (each after ten of its own, "
             "and as many probed launches), the median of the predictions from each (`each "
             "traced launch`, each the median of its predictions with the probed launches "
             "that ran like it: the nearest in span and those within the probes' own cost "
             f"spread of it, {PROBED_SPAN_TIE:.1%}; one that ran much longer met a slower memory "
             "system), its interval widened to all of them. "
             "Zero-edit bases: spec derived from the kernel's pipeline objects (derive_pipeline; "
             "ring sharing from the launch's cluster in the trace metadata); latency: where the "
             "GPU half traced a second base launch whose producer probed one load in 7 "
             "(autoprofile(load_arrivals=7)), every replayed item draws its own latency from "
             "those sampled arrivals (commit -> full barrier complete) as the loop's typical "
             "congestion (congestion: the median latency of the 64 loads issued nearest in "
             "time; the loop's: those medians at each place of the loop, averaged over its "
             "places; its part above the least congested times' 5th percentile scaled that "
             "way) plus a load's own deviation from its "
             "congestion, drawn from the loads sampled at its place (a load's place: the "
             "loop iteration that consumes it; the place's own loads where 16 or more were "
             "sampled there, else the 64 nearest) (one draw per item "
             "for the CTAs of a cluster: a multicast load; where the sample's latencies rank "
             "by how long after its launch-order group's first load of the same place each "
             "load was issued (CTAs reading the same tiles), a miss and an L2 hit drawn, and "
             "a load landing no sooner than its group's first load of the place, a miss, "
             "brings the line), else each CTA's "
             "first load (CTAs started under load), capped by the steady state's bound (waits "
             "that did not block ended after their data); level-2 bases: hand-written spec, "
             "first item of units started under load, else blocked waits. interval: the same "
             "with the latency's 25th/75th percentile (sampled arrivals: each item's queued part "
             "moved by that quantile less the sample's median), each moved by one timer tick, "
             "with half a tick more and less of one record's time removed, and the "
             "change predicted from each half of the SMs alone (per-CTA variation); where the "
             "recorder's cost slowed the replayed work (below), also the prediction with only "
             "its records' own time removed; a consumes wait "
             "that never blocked in the base (latency not observed) also the prediction at the "
             "unblocked waits' bound. The issue times on a ring's recurrence (a commit's stamp "
             "after its acquire, a release that did not wait for its async job) keep their "
             "least loaded part (the base's 5th percentile) and scale the rest by each CTA's "
             "busy share (how much of its non-producing roles' time stays work, not blocked, "
             "in the change's replay against the base's; a fixed point), as do each CTA's "
             "own work's departure from the iteration's median over the CTAs (kept only in "
             "the iterations whose waits block as in the base's replay: elsewhere the "
             "iteration's median work) and the recorder's slowdown below. A wait that "
             "blocks runs the async job its role's leading "
             "warpgroup issued before it (FA4's QK GEMM): that group's release, the trailing "
             "group's after it and the region's end come that much sooner (at most the base's "
             "leading release after the wait, less the role's least time from one wait's end "
             "to the next one's start, its 5th percentile); the trailing group's release "
             "follows the leading one's by at most the lag's lower state (its 25th "
             "percentile: the two groups' phase, which FA4 causal's bases hold at 480-512 ns "
             "or at 736-800, is not work). The CTAs past the first wave "
             "start where the replay frees an SM, in launch order after the trace's launch "
             "gap (replayed to a fixed point; where that dispatch puts the base's CTAs where "
             "they started); a change of the cluster moves that gap by what the probe of the "
             "cluster launch alone measured between the two sizes on the run's GPU "
             "(bench/cluster_launch_gap.py: a kernel of its own, not the variant; one timer "
             "tick each way in the interval). A persistent CTA's tile-end "
             "drain (a release recorded before the next tile's first wait) ends the job before "
             "it; the epilogue after it stays the role's own work. "
             "Zero-edit bases predict the kernel without recording: each "
             "replayed work region loses two records' time, where one record is what it adds "
             "to a dependency chain on the GPU (bench/record_cost.py chain; where no run on "
             "that GPU measured it, the mean of a warp's instant -> next-record gaps at the "
             "lowest timer tick and the one above, which a 32 ns timer reads a 40-54 ns "
             "record as); a ring whose commit arms its barrier "
             "before the copies (ws_gemm) issues them one record (the gap) after the commit's "
             "stamp, which its loads' latencies lose. Where the GPU half timed the base's "
             "recording kernel, what recording cost the base beyond those records' time is "
             "the compiler's schedule around the records: the base's replay runs the "
             "non-producing roles' own work faster by the one factor that takes that cost "
             "off it, the change's by that factor's excess times each CTA's busy share "
             "(their async jobs' engine time kept; none where slowing the work cannot: a "
             "GEMM whose tensor core sets its time). "
             "launch noise: half the IQR of the row's per-round changes. "
             "recorded (diagnosis, not a model input): the change of the recording kernels, "
             "CUPTI, paired by round the same way, where the GPU half timed them (else the "
             "variant's own zero-edit trace span against the base trace's, one launch each), "
             "whose recurrences carry the recorder's cost; in brackets the model's prediction "
             "of that recorded kernel (no record's time removed): the difference is the "
             "model's error on the recorded kernel, the rest of the row's error the "
             "recorder's cost it took off (bench/whatif_diagnose.py). recorder's cost: the "
             "recording kernel against the plain one, base / variant (CUPTI). per tick of "
             "load latency: how far the prediction moves per timer tick added to every "
             "sampled load's latency (critical_path.latency_sensitivity, the first traced "
             "launch's model): how closely the row needs the loads' latency under the change, "
             "which the base shows only where the change leaves the ring's loads as they "
             "were.", ""]
    for i in infos:
        if "skipped" in i:
            lines.append(f"- {i['kernel']} ({i.get('base_trace', '')} base): skipped "
                         f"({i['skipped']})")
            continue
        lat = i["latency_ns"]
        lines.append(f"- {i['kernel']} ({i['base_trace']} base, `{i['folder']}`): "
                     f"{i['traced_launches']} traced launch"
                     f"{'es' if i['traced_launches'] > 1 else ''} (the first: "
                     f"{i['records']:,} records, {i['units']} units x "
                     f"{i['iterations']} iterations), base {i['base_us']:.2f} us "
                     f"({i['launches']} timed launches)"
                     + (f", traced launches {' / '.join(f'{t:.2f}' for t in i['traced_cupti_us'])}"
                        f" us by CUPTI (the recording kernel in the rounds: "
                        f"{i['recorded_us']:.2f} us)"
                        if i.get("traced_cupti_us") and i.get("recorded_us") else "")
                     + ", analysis "
                     f"{i['analysis_s'] / i['traced_launches']:.2f} s per traced launch; "
                     f"{i['wait']} latency ({i['latency_source']}"
                     + ("; quantiles pooled over the traced launches"
                        if i["traced_launches"] > 1 else "")
                     + (f"; the traced launches read probed launches "
                        f"{' / '.join('+'.join(str(k + 1) for k in ks) for ks in i['probed_read'])}"
                        f" of {i['probed_launches']} (those within "
                        f"{PROBED_SPAN_TIE:.1%} of the nearest in span), which ran "
                        + " / ".join(", ".join(f"{c:+.1%}" for c in cs)
                                     for cs in i["probed_read_cost"])
                        + " against them"
                        if i.get("probed_launches", 0) > 1 and i.get("probed_read") else "")
                     + f"): p5 {lat[0.05]:.0f}, p25 {lat[0.25]:.0f}, median "
                     f"{lat[0.5]:.0f}, p75 {lat[0.75]:.0f} ns, timer step "
                     f"{i['timer_step_ns']:.0f} ns"
                     + (f", one record {i['record_ns']:.1f} ns removed from the replayed "
                        f"work ({i['record_source']}; the trace's gap estimate "
                        f"{i['record_gap_ns']:.0f} ns)" if i.get("record_ns") else "")
                     + (f"; its {i['base_cluster']}-CTA cluster's launch gap against other "
                        "cluster sizes: "
                        + (", ".join(f"{k} CTA{'s' if k != '1' else ''} {v:.0f} ns"
                                     for k, v in sorted(i["cluster_gap_ns"].items()))
                           if i["cluster_gap_ns"] else "-")
                        + f" ({i['cluster_gap_source']})"
                        if "cluster_gap_source" in i else "")
                     + (f"; recording cost the base {i['recorder_cost']:+.2%}, the work "
                        f"replayed x{i['recorder_slowdown']:.3f} (the first traced launch)"
                        if i.get("recorder_cost") is not None else "")
                     + ("; its named barriers not recorded (autoprofile(barriers=False))"
                        + (f": recording them too cost {i['recorder_cost_with_barriers']:+.2%}"
                           if i.get("recorder_cost_with_barriers") is not None else "")
                        if not i.get("barriers_recorded", True) else ""))
    lines += ["", "| kernel | base trace | what-if | predicted | interval | measured | "
              "error (pp) | inside interval | inside +- launch noise | recorded (recorded-kernel "
              "model) | recorder's cost | each traced launch | per tick of load latency |",
              "|---|---|---|---:|---|---:|---:|---|---|---:|---:|---|---:|"]
    for r in rows:
        if r["modelled"]:
            lo, hi = r["interval"]
            err = "-" if "error_pp" not in r else f"{r['error_pp']:+.2f}"
            inside = "-" if "inside" not in r else ("yes" if r["inside"] else "no")
            noisy = "-" if "inside" not in r else (
                f"{'yes' if r['inside_with_noise'] else 'no'} (+-{r['launch_noise'] * 100:.2f})")
            lines.append(f"| {r['kernel']} | {r['base_trace']} | {r['what_if']} "
                         f"{json.dumps(r['change'])} | "
                         f"{pct(r['predicted'])} | [{pct(lo)}, {pct(hi)}] | {pct(r['measured'])} "
                         f"| {err} | {inside} | {noisy} | {traced_txt(r)} | {recorder_txt(r)} "
                         f"| {' / '.join(pct(v) for v in r['launch_predictions'])} "
                         f"| {per_tick(r)} |")
        else:
            label = "not predicted" if "bounds" in r else "not modelled"
            lines.append(f"| {r['kernel']} | {r['base_trace']} | {r['what_if']} | {label}: "
                         f"{r['reason']} | - | "
                         f"{pct(r['measured'])} | - | - | - | {traced_txt(r)} | {recorder_txt(r)} "
                         "| - | - |")
    within = sum(abs(r["error_pp"]) <= 3 for r in done)
    inside = sum(r.get("inside", False) for r in done)
    noisy = sum(r.get("inside_with_noise", False) for r in done)
    lines += ["", f"Spearman rank correlation of predicted vs measured over the {len(done)} "
              f"modelled rows: {rho:+.3f}. Within 3 pp: {within} of {len(done)}; measured "
              f"inside the interval: {inside} of {len(done)} ({noisy} with the interval widened "
              "by the measured change's round-to-round spread, half its IQR)."]
    pairs = pair_order(done)
    wrong = "; ".join(f"{a} / {b}" for a, b in pairs["misordered"]) or "none"
    lines.append(f"Pairs of rows whose measured changes differ by more than their launch "
                 f"noise: {pairs['apart']}, ordered right by the predictions: "
                 f"{pairs['apart'] - len(pairs['misordered'])} (misordered or tied: {wrong}).")
    for kind in sorted({r["base_trace"] for r in done}):
        sub = [r for r in done if r["base_trace"] == kind]
        rho_k = rank_correlation([r["predicted"] for r in sub], [r["measured"] for r in sub])
        lines.append(f"- {kind} bases: {len(sub)} rows, Spearman {rho_k:+.3f}, within 3 pp "
                     f"{sum(abs(r['error_pp']) <= 3 for r in sub)}, mean absolute error "
                     f"{statistics.mean(abs(r['error_pp']) for r in sub):.2f} pp, inside the "
                     "interval "
                     f"{sum(r.get('inside', False) for r in sub)} "
                     f"({sum(r.get('inside_with_noise', False) for r in sub)} +- launch noise).")
    return "\n".join(lines) + "\n", rho


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("gpu_out", type=Path, help="the GPU half's output folder")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "whatif",
                        help="where whatif_table.md/.json go (default bench/results/whatif)")
    parser.add_argument("--only", nargs="*", help="folders of the entries to check (default all)")
    parser.add_argument("--queue-rule", choices=QUEUE_RULES, default="little",
                        help="how the loads' queueing scales with a change's throughput "
                             "(default little: the model's; open, none: for comparison)")
    parser.add_argument("--lighter", action="store_true",
                        help="read the base's probed launches at half the memory load (the GPU "
                             "half's --lighter-load): a slower change's loads queue as the "
                             "curve through the base's point and theirs says, not by the queue "
                             "rule (a trial, not the model's: it read the probed 2-stage "
                             "variants' loads 1-39 ns off where Little's law read them 11-122 "
                             "ns off, yet put fewer GEMM rows within 3 pp; stops 62-63)")
    args = parser.parse_args(argv)
    rows, infos = [], []
    for entry in ENTRIES:
        if args.only and entry.folder not in args.only:
            continue
        r, info = check_entry(args.gpu_out, entry, queue_rule=args.queue_rule,
                              lighter=args.lighter)
        rows += r
        infos.append(info)
    text, rho = table(rows, infos, args.gpu_out, queue_rule=args.queue_rule,
                      lighter=args.lighter)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "whatif_table.md").write_text(text)
    (args.out / "whatif_table.json").write_text(json.dumps(significant(
        {"command": COMMAND, "gpu_out": str(args.gpu_out), "queue_rule": args.queue_rule,
         "lighter": args.lighter,
         "spearman": rho, "resolved_pairs": pair_order(checked(rows)), "rows": rows,
         "kernels": [{**i, "latency_ns": {str(k): v for k, v in i.get("latency_ns", {}).items()}}
                     for i in infos]}), separators=(",", ":")) + "\n")
    return 0


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


if __name__ == "__main__":
    sys.exit(main())
