"""``cute-prof record`` when the program does not end well, on the GPU: it raises after a
recorded launch, or a kernel hangs and the user presses Ctrl-C. Either way the folder holds
what was recorded, and it decodes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path


from gpu_required import require_gpu

torch = require_gpu(hopper=True)

ROOT = Path(__file__).resolve().parents[2]

PROGRAM = r"""
import pathlib, sys, torch
sys.path.insert(0, sys.argv[1]); sys.path.insert(0, sys.argv[1] + "/tests")
from examples.ws_gemm import CompiledWsGemm
a = torch.randn(2048, 1024, device="cuda", dtype=torch.bfloat16)
b = torch.randn(2048, 1024, device="cuda", dtype=torch.bfloat16)
CompiledWsGemm()(a, b)  # one recorded launch
torch.cuda.synchronize()
if sys.argv[2] == "raise":
    raise RuntimeError("the program failed after its first launch")
from cutlass import Int64
from kernels import launch_spin
launch_spin(Int64(120 * 10**9))  # a kernel that does not finish for two minutes
pathlib.Path("ready").write_text("1")
torch.cuda.synchronize()  # the program is stuck here: Ctrl-C cannot reach Python
"""


def _record(tmp_path: Path, mode: str) -> subprocess.Popen:
    (tmp_path / "program.py").write_text(PROGRAM)
    return subprocess.Popen([sys.executable, "-m", "cute_prof", "record", "-o", "run",
                             "--grace", "3", "--", "program.py", str(ROOT), mode],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                [str(ROOT), os.environ.get("PYTHONPATH", "")])})


def _gemm_launch(folder: Path):
    from cute_prof.recorded_run import RecordedRun

    run = RecordedRun(folder)
    (row,) = run.launches
    trace = run.trace(row)
    assert "WsGemm" in row.kernel and row.lost == 0 and len(trace) > 0
    return run


def test_a_program_that_raises_keeps_its_records(tmp_path):
    proc = _record(tmp_path, "raise")
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 1 and "the program failed" in err
    run = _gemm_launch(tmp_path / "run")
    assert run.info["exit_reason"] == "uncaught RuntimeError"


def test_a_hung_kernel_is_saved_without_it_after_ctrl_c(tmp_path):
    proc = _record(tmp_path, "hang")
    deadline = time.monotonic() + 600
    while not (tmp_path / "ready").exists() and time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        time.sleep(0.2)
    time.sleep(1)
    os.killpg(proc.pid, signal.SIGINT)  # the terminal's Ctrl-C: the whole foreground group
    _, err = proc.communicate(timeout=300)
    out = os.environ.get("OUT")
    if out:
        Path(out, "record_hang.log").write_text(err)
    assert proc.returncode == 130, err[-3000:]
    assert "saving what was recorded without waiting for the GPU" in err
    run = _gemm_launch(tmp_path / "run")
    assert run.info["exit_reason"] == "interrupted while the program was stuck"
    assert any("still running" in note for note in run.info["notes"]), run.info["notes"]
    assert json.loads((tmp_path / "run" / "run.json").read_text())["counts"]
