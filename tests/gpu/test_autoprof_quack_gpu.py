"""Zero-edit profiling of a second foreign kernel: quack's Hopper GEMM (its own pipeline
subclasses, a persistent tile scheduler), run as ``examples/quack_gemm.py`` in a fresh
process so that quack compiles the kernel inside the recording block."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_required import require_gpu  # noqa: E402

torch = require_gpu("cutlass", "quack", hopper=True)

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("mnk,schedule", [("4096,4096,4096", "cooperative"),
                                          ("2048,8192,1024", "cooperative"),
                                          ("4096,4096,4096", "pingpong")])
def test_quack_gemm_zero_edit(tmp_path, mnk, schedule):
    out = tmp_path / "quack.json"
    env = {**os.environ, "QUACK_CACHE_ENABLED": "0", "PYTHONUNBUFFERED": "1"}
    run = subprocess.run([sys.executable, str(ROOT / "examples" / "quack_gemm.py"), "--mnk", mnk,
                          "--schedule", schedule, "--json", str(out)], env=env,
                         capture_output=True, text=True, timeout=400)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["error"] < 0.05, result["error"]
    assert len(result["kernels"]) >= 1
    assert result["overflow"] == 0 and result["unclosed"] == 0 and result["diverged"] == 0
    # quack's own pipeline subclasses were recognised, with their depth
    assert any(p["stages"] >= 2 for p in result["pipelines"])
    roles = " ".join(result["roles"])
    assert "producer" in roles and "consumer" in roles
    # every wait has its release and the warps of a warpgroup agree, on every ring; the A/B
    # ring's producer is in the CTA (the tile scheduler's serves the cluster: not compared)
    for row in result["balance"]:
        if row["waits"]:
            assert row["warps_wait_release_differ"] == 0, row
            assert row["warpgroups_disagree"] == 0, row
    ab = next(row for row in result["balance"] if row["pipeline"] == "pipeline_cls")
    assert ab["warpgroups_beyond_producer"] == 0 and ab["waits"] > 0
    if schedule == "pingpong":  # warpgroups take tiles in turn: refused, with the reason
        assert "ping-pong" in result["derived_error"]
        return
    # the model derived from the kernel's own pipelines analysed every CTA
    assert "derived" in result, result.get("derived_error")
    derived = result["derived"]
    assert derived["rings"] and derived["roles"]["producer"] and derived["roles"]["consumer"]
    # CTAs that ran fewer tiles than the most have fewer iterations: dropped, and counted
    analysis = result["analysis"]
    ctas = ab["ctas"]
    assert analysis["units"] + analysis["units_dropped"] == ctas
    assert analysis["units"] >= ctas // 2
