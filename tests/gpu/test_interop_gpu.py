"""On a GPU: the IKET comparison (same regions per warp, per-tag medians within 64 ns) and,
with 2 GPUs, the gathered 2-rank trace whose aligned clocks keep causality across the
all-reduce. Both run their scripts as subprocesses, as a user would
(bench/gpu_runs/run_iket_gpu.sh and run_two_gpu.sh are the logged runs)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_required import require_gpu  # noqa: E402

torch = require_gpu("iket")

ROOT = Path(__file__).resolve().parents[2]
RUN_IKET = ("import sys; from iket.cli.main import entrypoint; "
            "sys.argv = ['run-iket'] + sys.argv[1:]; entrypoint()")


def _run(args, **kw):
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{os.environ.get('PYTHONPATH', '')}",
           "NCCL_NVLS_ENABLE": "0"}
    return subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300, **kw)


def test_iket_and_cute_prof_agree(tmp_path):
    script = "tests/gpu/iket_compare.py"
    out = _run([sys.executable, "-c", RUN_IKET, "-o", str(tmp_path / "cap"), "--clobber",
                "profile", "--postprocess", "json", "--", sys.executable, script,
                "--mode", "iket"])
    assert out.returncode == 0, out.stdout + out.stderr
    capture = next((tmp_path / "cap").glob("*.trace.json"))
    ours = tmp_path / "ours.npz"
    out = _run([sys.executable, script, "--mode", "ours", "--save", str(ours)])
    assert out.returncode == 0, out.stdout + out.stderr
    out = _run([sys.executable, script, "--compare", str(capture), str(ours)])
    assert out.returncode == 0 and "PASS" in out.stdout, out.stdout + out.stderr


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_two_ranks_one_timeline(tmp_path):
    out = _run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                "examples/two_gpu.py", "-o", str(tmp_path / "two.json")])
    assert out.returncode == 0 and "HOLDS" in out.stdout, out.stdout + out.stderr
