"""``cute-prof record`` and a ``@cute.jit`` function called directly (no ``cute.compile``), on
a CPU box for sm_90a: each call traces with recording on or off by the launch range, its
kernel keeps its id from call to call, so the DSL's own cache serves both builds (no compile
after the first of each), and every launch is counted under its kernel's name. The launches
are noted, not made: there is no GPU."""

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
import json, sys, types, torch
sys.path.insert(0, sys.argv[2])
from cutlass import Int32
from cutlass.base_dsl.dsl import BaseDSL
from cutlass.base_dsl.jit_executor import JitCompiledFunction, JitExecutor
import examples.ws_gemm as W
from cute_prof.decode_slices import allocate_pool
from cute_prof.device.launch_select import LaunchSelector, RunPool, Selection

launched, compiles = [], []
def run_stub(this, exe_args):  # no GPU: the launch is noted, not made
    launched.append([m.sym for m in this.jit_module.cuda_modules])
JitExecutor.run_compiled_program = run_stub
def executor(self, exe_args):  # what to(None) builds on a GPU, without loading the cubin
    module = types.SimpleNamespace(cuda_modules=[types.SimpleNamespace(sym=s) for s in self.kernel_info])
    return JitExecutor.run_compiled_program(types.SimpleNamespace(jit_module=module), exe_args)
JitCompiledFunction.run_compiled_program = executor
original_cache = BaseDSL.compile_and_cache
def counting(self, *a, **k):
    compiles.append(1)
    return original_cache(self, *a, **k)
BaseDSL.compile_and_cache = counting

skip = int(sys.argv[3])
selector = LaunchSelector(lambda: RunPool(allocate_pool(64, 32, device="cpu"), per_warp=32),
                          Selection(skip=skip, count=2))
selector.install()
gemm = W.WsGemm(W.GemmConfig(recorder="slices"))
a = torch.zeros(1000, 520, dtype=torch.bfloat16); b = torch.zeros(1032, 520, dtype=torch.bfloat16)
c = torch.zeros(1000, 1032, dtype=torch.bfloat16); buf = torch.zeros(1 + 4 * 64, dtype=torch.int64)
args = (W._cute_tensor(a), W._cute_tensor(b), W._cute_tensor(c), W._cute_prof_buffer(buf), Int32(64), W.default_stream(), 0)
per_call = []
for _ in range(4):
    before = len(compiles)
    gemm(*args)
    per_call.append(len(compiles) - before)
selector.uninstall()
json.dump({"launched": launched, "compiles": per_call, "launches": selector.launches,
           "counts": selector.counts, "kernels": selector.pool.kernels,
           "recordings": [r.pool_kernel for r in selector.recordings], "unknown": selector.unknown},
          open(sys.argv[1], "w"))
"""


def _calls(tmp_path: Path, skip: int) -> dict:
    (tmp_path / "program.py").write_text(PROGRAM)
    result = tmp_path / f"skip{skip}.json"
    proc = subprocess.run([sys.executable, "program.py", str(result), str(ROOT), str(skip)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "CUTE_DSL_ARCH": "sm_90a", "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(result.read_text())


@pytest.mark.parametrize("skip", [0, 1])
def test_direct_calls_record_their_range_and_reuse_the_dsl_cache(tmp_path, skip):
    out = _calls(tmp_path, skip)
    (name,) = out["kernels"]  # one kernel id, however many calls traced it
    assert "WsGemm" in name and out["recordings"] == [0]
    assert out["launched"] == [[name]] * 4 and not out["unknown"]
    recorded = list(range(skip, skip + 2))  # --launch-skip skip --launch-count 2
    assert [(e["launch"], e["epoch"], e["kernel_id"]) for e in out["launches"]] == [
        (index, epoch, 0) for epoch, index in enumerate(recorded, 1)]
    assert out["counts"][name] == {"launched": 4, "recorded": 2, "plain_range": 2,
                                   "plain_memory": 0}
    # each build is compiled at its first call and found in the DSL's cache after
    builds = ["recording" if i in recorded else "plain" for i in range(4)]
    assert out["compiles"] == [int(b not in builds[:i]) for i, b in enumerate(builds)]
