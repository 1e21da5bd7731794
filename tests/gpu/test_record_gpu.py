"""``cute-prof record`` on a real program (examples/train_step.py: FA4 forward and backward,
quack's GEMM and the user's own GEMM): every selected launch recorded with nothing lost, the
program's output as without the recorder, every verb reads the folder, and launches outside
the range run at the plain kernel's speed (tests/gpu/record_speed.py)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_required import require_gpu

torch = require_gpu("flash_attn", "quack", hopper=True)

ROOT = Path(__file__).resolve().parents[2]
STEPS, SKIP, COUNT = 6, 2, 2
LINE = re.compile(r"step (\d+): loss (\S+) grad_w_qkv \|sum\| (\S+)")


def _run(command, out_dir: Path, name: str) -> subprocess.CompletedProcess:
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900)
    log = Path(os.environ.get("OUT", out_dir)) / f"{name}.log"
    log.write_text(f"$ {' '.join(command)}\n{proc.stdout}\n--- stderr\n{proc.stderr}")
    return proc


def _steps(stdout: str) -> list[tuple[float, float]]:
    return [(float(m.group(2)), float(m.group(3))) for m in LINE.finditer(stdout)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("record")
    program = ["examples/train_step.py", "--steps", str(STEPS)]
    plain = _run([sys.executable, *program], tmp, "train_step_plain")
    assert plain.returncode == 0, plain.stderr[-3000:]
    folder = tmp / "run"
    recorded = _run([sys.executable, "-m", "cute_prof", "record", "-o", str(folder),
                     "--mode", "full", "-k", "flash", "-k", "gemm", "--launch-skip", str(SKIP),
                     "--launch-count", str(COUNT), "--", *program], tmp, "train_step_recorded")
    return plain, recorded, folder


def test_program_runs_unchanged(runs):
    plain, recorded, _ = runs
    assert recorded.returncode == 0, recorded.stderr[-3000:]
    a, b = _steps(plain.stdout), _steps(recorded.stdout)
    assert len(a) == len(b) == STEPS
    for (loss_a, sum_a), (loss_b, sum_b) in zip(a, b):
        assert loss_b == loss_a  # the forward is deterministic
        # FA4's backward accumulates dQ with atomics: the gradients' own run-to-run spread
        assert sum_b == pytest.approx(sum_a, rel=2e-3)
    assert "cute-prof run" in recorded.stderr  # the one-screen summary at the end
    assert "not built in this run" not in recorded.stderr  # every launch accounted for


def test_every_selected_launch_recorded_nothing_lost(runs):
    from cute_prof.analysis.zero_edit import call_balance
    from cute_prof.recorded_run import RecordedRun

    _, _, folder = runs
    run = RecordedRun(folder)
    counts = run.info["counts"]
    names = " ".join(counts)
    assert "flash_fwd" in names.lower() or "forward" in names.lower(), names
    assert "bwd" in names.lower() or "backward" in names.lower(), names
    assert "quack" in names.lower() and "WsGemm" in names, names
    rows = run.launches
    for name, c in counts.items():
        expected = max(0, min(COUNT, c["launched"] - SKIP))
        assert c["recorded"] == expected, (name, c)
        assert c["plain_range"] == c["launched"] - expected and c["plain_memory"] == 0
        mine = sorted(r.launch for r in rows if r.kernel == name)
        assert mine == list(range(SKIP, SKIP + expected)), (name, mine)
    assert rows and all(r.lost == 0 and r.slices > 0 and not r.replay for r in rows)
    for row in rows:
        trace = run.trace(row)
        assert trace.overflow == 0 and trace.incomplete == 0 and trace.attempted == row.attempted
        assert len(trace) > 0
        for balance in call_balance(trace):
            assert balance["warps_wait_release_differ"] == 0, (row.label(), balance)
            assert balance["warpgroups_disagree"] == 0, (row.label(), balance)


def test_verbs_read_the_folder(runs, tmp_path):
    _, _, folder = runs
    cli = [sys.executable, "-m", "cute_prof"]
    summary = subprocess.run([*cli, "summary", str(folder), "--json"], capture_output=True,
                             text=True, cwd=ROOT)
    assert summary.returncode == 0, summary.stderr
    data = json.loads(summary.stdout)
    assert sum(k["launches"] for k in data["kernels"]) == len(data["launches"]) > 0
    report = subprocess.run([*cli, "report", str(folder), "-o", str(tmp_path / "r.html")],
                            capture_output=True, text=True, cwd=ROOT)
    assert report.returncode == 0, report.stderr
    assert (tmp_path / "r.html").read_text().count("Per-tag statistics") == len(data["kernels"])
    # Chrome JSON: the GPU machine has no perfetto package (the CPU tests write .pftrace)
    export = subprocess.run([*cli, "export", str(folder), "--kernel", "WsGemm", "--launch", "2:4",
                             "-o", str(tmp_path / "w.json")], capture_output=True, text=True,
                            cwd=ROOT)
    assert export.returncode == 0, export.stderr
    written = json.loads((tmp_path / "w.json").read_text())
    names = {e["args"]["name"] for e in written["traceEvents"] if e.get("name") == "process_name"}
    assert any("WsGemm launch 2" in n for n in names) and any("WsGemm launch 3" in n for n in names), names


def test_launches_outside_the_range_run_at_plain_speed(tmp_path):
    # a fresh interpreter: the DSL reads CUTE_DSL_KEEP (each build's PTX, compared) at import
    env = {**os.environ, "CUTE_DSL_KEEP": "ptx", "CUTE_DSL_DUMP_DIR": str(tmp_path)}
    proc = subprocess.run([sys.executable, "tests/gpu/record_speed.py", "--rounds", "30",
                           "--per-block", "8", "--json", str(tmp_path / "speed.json")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((tmp_path / "speed.json").read_text())
    out = os.environ.get("OUT")
    if out:
        Path(out, "record_speed.json").write_text(json.dumps(result, indent=1))
    assert result["recorded_launches"] == 0
    for row in result["rows"]:
        assert row["same_ptx"], row  # the plain build is the unhooked kernel
        assert abs(row["ratio"] - 1) <= 0.01, row
