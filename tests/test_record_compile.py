"""``cute-prof record`` on a CPU box, for sm_90a: a program's ``cute.compile`` of
examples/ws_gemm.py comes back as the recorder's function; its recording build claims its
slices from the pool (an atomic and an epoch load at the open), its plain build is the
unrecorded kernel byte for byte; an unmatched filter is said; light mode keeps the
producers' waits alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("cutlass")
pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]

PROGRAM = r"""
import json, sys, torch
sys.path.insert(0, sys.argv[2])
import cutlass.cute as cute
from cutlass import Int32
import examples.ws_gemm as W

def compile_gemm():
    gemm = W.WsGemm(W.GemmConfig(recorder="slices"))
    a = torch.zeros(1000, 520, dtype=torch.bfloat16); b = torch.zeros(1032, 520, dtype=torch.bfloat16)
    c = torch.zeros(1000, 1032, dtype=torch.bfloat16); buf = torch.zeros(1 + 4 * 64, dtype=torch.int64)
    return cute.compile(gemm, W._cute_tensor(a), W._cute_tensor(b), W._cute_tensor(c),
                        W._cute_prof_buffer(buf), Int32(64), W.default_stream(), 0)

fn = compile_gemm()
entry = getattr(fn, "_entry", None)
out = {"type": type(fn).__name__}
if entry is not None:
    out["recording_ptx"] = entry.recording_fn.artifacts.PTX
    out["plain_ptx"] = entry.plain_fn.artifacts.PTX if entry.plain_fn is not None else None
else:
    out["plain_ptx"] = fn.artifacts.PTX
json.dump(out, open(sys.argv[1], "w"))
"""


def _run(tmp_path: Path, name: str, *record_args: str) -> tuple[dict, subprocess.CompletedProcess]:
    folder = tmp_path / name
    folder.mkdir()
    env = {**os.environ, "CUTE_DSL_ARCH": "sm_90a", "CUTE_DSL_KEEP": "ptx",
           "CUTE_DSL_DUMP_DIR": str(folder), "PYTHONPATH": str(ROOT)}
    result = folder / "result.json"
    (folder / "program.py").write_text(PROGRAM)
    command = [sys.executable, "program.py", str(result), str(ROOT)]
    if record_args:
        command = [sys.executable, "-m", "cute_prof", "record", "-o", "run", *record_args,
                   "--", *command[1:]]
    proc = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(result.read_text()), proc


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("record_compile")
    plain, _ = _run(tmp, "plain")
    recorded, proc = _run(tmp, "recorded", "--mode", "full", "--launch-skip", "1", "-k", "WsGemm")
    unmatched, unmatched_proc = _run(tmp, "unmatched", "-k", "no_such_kernel")
    light, _ = _run(tmp, "light", "-k", "WsGemm")  # no --mode: light, the default
    return (plain, (recorded, proc, tmp / "recorded" / "run"), (unmatched, unmatched_proc),
            (light, tmp / "light" / "run"))


def test_the_plain_build_is_the_unrecorded_kernel(builds):
    plain, (recorded, _, _), _, _ = builds
    assert plain["type"] != "SelectingFunction"
    assert recorded["type"] == "SelectingFunction"
    # a launch range: the plain build is compiled with the recording one
    assert recorded["plain_ptx"] and recorded["plain_ptx"] == plain["plain_ptx"]


def test_the_recording_build_claims_its_slice_from_the_pool(builds):
    plain, (recorded, _, folder), _, _ = builds
    ptx = recorded["recording_ptx"]
    assert ptx.count("atom.global.add.u64") == plain["plain_ptx"].count("atom.global.add.u64") + 1
    assert ptx.count("ld.global.cg.u64") >= 1  # the kernel's launch epoch
    assert ptx.count("shfl.sync.idx.b32") == plain["plain_ptx"].count("shfl.sync.idx.b32") + 3
    info = json.loads((folder / "run.json").read_text())
    (kernel,) = info["kernels"]
    assert "WsGemm" in kernel["name"] and kernel["metadata"]["pool_kernel"] == 0
    ops = {s["op"] for s in kernel["metadata"]["sites"]}
    assert {"producer_acquire", "consumer_wait", "producer_commit", "consumer_release"} <= ops
    assert info["launches"] == [] and info["pool"]["device"] == "cpu"


def test_a_filter_that_matches_nothing_is_reported(builds):
    _, _, (unmatched, proc), _ = builds
    assert unmatched["type"] != "SelectingFunction"
    assert "--kernel no_such_kernel matched no kernel" in proc.stderr
    assert "WsGemm" in proc.stderr  # the kernels it saw


def test_light_mode_records_the_producers_waits_alone(builds):
    """--mode light: only producer_acquire / producer_tail sites; a warp claims its slice where
    it first records: one guarded open before each loop nest (and block) holding a record,
    of which a warp runs the first it reaches; fewer timer reads than full."""
    _, (recorded, _, _), _, (light, folder) = builds
    (kernel,) = json.loads((folder / "run.json").read_text())["kernels"]
    assert kernel["metadata"]["mode"] == "light"
    assert kernel["metadata"]["opens_at_entry"] is False  # its producer is a whole warp
    assert {s["op"] for s in kernel["metadata"]["sites"]} == {"producer_acquire", "producer_tail"}
    ptx = light["recording_ptx"]
    assert ptx.count("atom.global.add.u64") > recorded["recording_ptx"].count("atom.global.add.u64")
    assert 0 < ptx.count("%globaltimer_lo") < recorded["recording_ptx"].count("%globaltimer_lo")
