"""Every conclusion the analysis draws from the committed traces, as one JSON-ready dict.

The golden file ``tests/data/golden/analysis.json.gz`` holds this dict as it was before the
pipeline model was split into modules; ``tests/test_golden_analysis.py`` recomputes it and
wants it bit for bit (floats round-trip exactly through ``repr``). A change that moves a
figure on purpose rewrites the file with ``python tests/golden_analysis.py --write`` and
says so in its commit.

Inputs: the committed GPU traces (``examples/traces``, ``tests/data``: FA4's zero-edit
forward, ws_gemm with roles, the level-2 GEMM fixtures under their pipeline specs) and two
small zero-edit traces in ``tests/data/golden`` (a software-pipelined base and a launch of it
whose producer probed its loads), which reach the paths the GPU traces do not: sampled
loads, pooled probed launches and the latency sensitivity.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "data" / "golden" / "analysis.json.gz"
SYNTHETIC = ROOT / "tests" / "data" / "golden"

FA4 = "examples/traces/fa4_fwd_causal_h100.json.gz"
WS_GEMM = "examples/traces/ws_gemm_256x1024x4096_h200.json.gz"
WS_ROLES = "examples/ws_gemm_roles.json"
WS_SPEC = "examples/ws_gemm_pipeline.json"
PERSISTENT_SPEC = "examples/ws_gemm_persistent_pipeline.json"
GEMM = "tests/data/gemm_traces/"
# (trace, spec, ring depth the trace ran with)
GEMM_FIXTURES = [
    (GEMM + "whatif_base.npz", WS_SPEC, {}),
    (GEMM + "whatif_stages2.npz", WS_SPEC, {"smem_ab": 2}),
    (GEMM + "persistent_l2.npz", PERSISTENT_SPEC, {}),
    (GEMM + "p_stages3_l2.npz", PERSISTENT_SPEC, {"smem_ab": 3}),
    (GEMM + "p_stages2_l2.npz", PERSISTENT_SPEC, {"smem_ab": 2}),
]
# every trace the summary and the role analysis read
SUMMARY_TRACES = [FA4, WS_GEMM, "examples/traces/two_gpu_trace.json.gz",
                  "tests/data/iket_compare.trace.json.gz", "tests/data/iket_warp_trace.trace.json.gz",
                  "tests/data/ours_compare.npz", "tests/data/torch_loop_h200_recording.npz",
                  *(path for path, _, _ in GEMM_FIXTURES)]
GEMM_WHAT_IFS = [{"depth": {"smem_ab": 2}}, {"depth": {"smem_ab": 6}},
                 {"scale": {"ws.mma_ktile": 0.8}}, {"scale": {"ws.tma_issue": 0.5}}]
FA4_WHAT_IF_OPTIONS = ["--depth", "pipeline_k=1", "--depth", "pipeline_v=1",
                       "--depth", "pipeline_k=3,pipeline_v=3",
                       "--faster", "pipeline_k.consumer_release=20"]


def cli(*args: str) -> str:
    """What ``cute-prof ARGS`` prints, run in this process from the repository root."""
    from cute_prof.cli import main

    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = main(["-q", *args])
    except SystemExit as exit_:
        status = exit_.code
    if status != 0:
        raise RuntimeError(f"cute-prof {' '.join(args)} exited {status}: {err.getvalue()}")
    return out.getvalue()


def cli_json(*args: str):
    return json.loads(cli(*args, "--json"))


def digest(*arrays) -> dict:
    """Shape, dtype and a hash of arrays too large to keep whole in the golden file."""
    h = hashlib.sha256()
    shapes = []
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(str(a.dtype).encode() + str(a.shape).encode())
        h.update(a.tobytes())
        shapes.append(list(a.shape))
    return {"shapes": shapes, "sha256": h.hexdigest()}


def json_digest(value) -> dict:
    """A hash of a JSON value's exact text (floats by ``repr``): the statistics tables are
    large, and their text form beside them says what changed."""
    text = json.dumps(jsonable(value), sort_keys=True, separators=(",", ":"))
    return {"sha256": hashlib.sha256(text.encode()).hexdigest(), "chars": len(text)}


def jsonable(value):
    """The value as json.dumps writes it (numpy scalars and arrays included)."""
    return json.loads(json.dumps(value, default=lambda v: v.tolist()))


def perfetto_digest(trace, spec) -> dict:
    from cute_prof.analysis.pipeline_report import perfetto_outputs

    flows, counters, rows = perfetto_outputs(trace, spec)
    return {"flows": digest(*[np.asarray(flows[k]) for k in sorted(flows)])
            if isinstance(flows, dict) else jsonable(flows),
            "counters": digest(np.frombuffer(json.dumps(jsonable(counters)).encode(), np.uint8)),
            "critical_rows": digest(np.asarray(rows))}


def outputs() -> dict:
    """Every figure and every what-if, keyed by what produced it."""
    from cute_prof.analysis.pipeline_report import analyze_pipeline, format_pipeline_report
    from cute_prof.analysis.model import load_pipeline
    from cute_prof.analysis.derived_pipeline import derive_pipeline
    from cute_prof.analysis.zero_edit import call_balance, wait_breakdown
    from cute_prof.storage import load_trace

    out: dict = {}
    for path in SUMMARY_TRACES:
        out[f"summary {path}"] = json_digest(cli_json("summary", path))
        out[f"summary text {path}"] = cli("summary", path)
    out[f"analyze roles {WS_GEMM}"] = cli_json("analyze", WS_GEMM, "--roles", WS_ROLES)
    out[f"analyze roles text {WS_GEMM}"] = cli("analyze", WS_GEMM, "--roles", WS_ROLES)
    out[f"analyze {GEMM}whatif_base.npz"] = cli_json("analyze", GEMM + "whatif_base.npz")

    # hand-written pipeline models on the level-2 GEMM traces
    for path, spec_path, depth in GEMM_FIXTURES:
        spec = load_pipeline(ROOT / spec_path).with_changes(depth=depth)
        trace = load_trace(ROOT / path)
        report = analyze_pipeline(trace, spec, what_ifs=GEMM_WHAT_IFS)
        out[f"pipeline {path}"] = jsonable(report)
        out[f"pipeline text {path}"] = format_pipeline_report(report)
        out[f"perfetto {path}"] = perfetto_digest(trace, spec)
    # the check's cluster what-ifs: a multicast ring no longer shared, a cluster's launch gap
    spec = load_pipeline(ROOT / WS_SPEC).with_changes(shared_by={"smem_ab": 2})
    out["pipeline unrecorded clusters"] = jsonable(analyze_pipeline(
        load_trace(ROOT / GEMM / "whatif_base.npz"), spec, record_ns=12.1, recorder_cost=0.05,
        what_ifs=[{"shared_by": {"smem_ab": 1}, "gap_change_ns": -64.0},
                  {"depth": {"smem_ab": 2}}, {"scale": {"ws.mma_ktile": 0.9}}]))
    out["pipeline cli whatif_base"] = cli_json(
        "analyze", GEMM + "whatif_base.npz", "--pipeline", WS_SPEC,
        "--depth", "smem_ab=3", "--faster", "ws.mma_ktile=10")

    # FA4's zero-edit trace: the derived model, its what-ifs, plain and as the check predicts
    out["fa4 analyze"] = cli_json("analyze", FA4, *FA4_WHAT_IF_OPTIONS)
    out["fa4 analyze text"] = cli("analyze", FA4, *FA4_WHAT_IF_OPTIONS)
    out["fa4 analyze unrecorded"] = cli_json("analyze", FA4, *FA4_WHAT_IF_OPTIONS,
                                             "--record-chain-ns", "12.1", "--recorder-cost", "15")
    out["fa4 analyze unrecorded text"] = cli("analyze", FA4, *FA4_WHAT_IF_OPTIONS,
                                             "--record-chain-ns", "12.1", "--recorder-cost", "15")
    out["fa4 analyze default chain"] = cli_json("analyze", FA4, "--depth", "pipeline_k=1",
                                                "--recorder-cost", "12")
    fa4 = load_trace(ROOT / FA4)
    derived = derive_pipeline(fa4)
    out["fa4 derived"] = jsonable(derived.describe())
    out["fa4 derived text"] = derived.format_text()
    out["fa4 derived terms"] = {
        key: digest(value) if isinstance(value, np.ndarray) else
        {k: digest(v) for k, v in value.items()} if isinstance(value, dict) else jsonable(value)
        for key, value in derived.what_if_terms(record_chain_ns=12.1, recorder_cost=0.15).items()}
    out["fa4 wait breakdown"] = jsonable(wait_breakdown(derived.trace))
    out["fa4 call balance"] = jsonable(call_balance(derived.trace))
    out["fa4 perfetto"] = perfetto_digest(derived.trace, derived.spec)

    # sampled loads: one probed launch, two alike, and the sensitivity per timer tick
    base, probed = str(SYNTHETIC / "base.npz"), str(SYNTHETIC / "probed.npz")
    slower = str(SYNTHETIC / "probed_slower.npz")
    what = ["--depth", "pk=1,pv=1", "--depth", "pk=3"]
    out["arrivals none"] = cli_json("analyze", base, *what)
    out["arrivals one"] = cli_json("analyze", base, *what, "--arrivals", probed, "--sensitivity")
    out["arrivals one text"] = cli("analyze", base, *what, "--arrivals", probed, "--sensitivity")
    out["arrivals pooled"] = cli_json("analyze", base, *what, "--arrivals", probed, slower,
                                      "--record-chain-ns", "8", "--recorder-cost", "5")
    return out


def write_synthetic() -> None:
    """The two small zero-edit traces (kept as files: the golden must not follow a test's
    helper if that helper changes)."""
    sys.path.insert(0, str(ROOT / "tests"))
    import cute_prof
    from test_derived_pipeline import software_pipelined
    from test_load_arrivals import pk_pv_probed

    SYNTHETIC.mkdir(parents=True, exist_ok=True)
    cute_prof.save_trace(SYNTHETIC / "base.npz", software_pipelined(), compress=True)
    cute_prof.save_trace(SYNTHETIC / "probed.npz", pk_pv_probed(), compress=True)
    cute_prof.save_trace(SYNTHETIC / "probed_slower.npz", pk_pv_probed(pk_ns=964, pv_ns=332),
                         compress=True)


def first_difference(old, new, where: str = "") -> str | None:
    """Where two JSON values first differ (a path and both values), or None."""
    if type(old) is not type(new):
        return f"{where}: {old!r} != {new!r}"
    if isinstance(old, dict):
        for key in sorted(set(old) | set(new), key=str):
            if key not in old or key not in new:
                return f"{where}/{key}: only in {'new' if key not in old else 'golden'}"
            found = first_difference(old[key], new[key], f"{where}/{key}")
            if found:
                return found
        return None
    if isinstance(old, list):
        if len(old) != len(new):
            return f"{where}: {len(old)} items != {len(new)}"
        for k, (a, b) in enumerate(zip(old, new)):
            found = first_difference(a, b, f"{where}[{k}]")
            if found:
                return found
        return None
    if isinstance(old, float) and np.isnan(old) and np.isnan(new):
        return None
    if old != new:
        if isinstance(old, str) and "\n" in old:
            for n, (a, b) in enumerate(zip(old.splitlines(), new.splitlines())):
                if a != b:
                    return f"{where} line {n + 1}:\n  golden: {a}\n  now:    {b}"
        return f"{where}: golden {old!r}, now {new!r}"
    return None


def load_golden() -> dict:
    with gzip.open(GOLDEN, "rt") as f:
        return json.load(f)


if __name__ == "__main__":
    import os

    os.chdir(ROOT)
    if "--write" not in sys.argv:
        sys.exit("python tests/golden_analysis.py --write: rewrite the golden file on purpose")
    if "--synthetic" in sys.argv:
        write_synthetic()
    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(GOLDEN, "wt") as f:
        json.dump(jsonable(outputs()), f, sort_keys=True, separators=(",", ":"))
    print(f"wrote {GOLDEN} ({GOLDEN.stat().st_size:,} bytes)")
