"""``cute-prof record`` keeps launch identity across streams and CUDA-graph replays, on the
GPU: ws_gemm launched on two streams, then captured in a graph and replayed three times.
The direct launches keep their index and stream; each replay is a launch of its own (its own
epoch, marked ``replay``), with the same records as a direct launch and nothing lost. And a
``@cute.jit`` function called directly, without ``cute.compile``, records its launch range."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from gpu_required import require_gpu

torch = require_gpu(hopper=True)

ROOT = Path(__file__).resolve().parents[2]
REPLAYS = 3

PROGRAM = r"""
import json, sys, torch
import cuda.bindings.driver as cuda
sys.path.insert(0, sys.argv[1])
from examples.ws_gemm import CompiledWsGemm, alloc_prof
a = torch.randn(2048, 1024, device="cuda", dtype=torch.bfloat16)
b = torch.randn(2048, 1024, device="cuda", dtype=torch.bfloat16)
c = torch.zeros(2048, 2048, device="cuda", dtype=torch.bfloat16)
gemm, prof = CompiledWsGemm(), alloc_prof(1)
first, second = torch.cuda.Stream(), torch.cuda.Stream()
on_first = gemm.prepare(a, b, c, prof, 0, 0, stream=cuda.CUstream(first.cuda_stream))
on_second = gemm.prepare(a, b, c, prof, 0, 0, stream=cuda.CUstream(second.cuda_stream))
with torch.cuda.stream(first):
    on_first()                        # launch 0, on the first stream
first.synchronize()
with torch.cuda.stream(second):
    on_second()                       # launch 1, on the second stream
second.synchronize()
graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph, stream=first):
    on_first()                        # launch 2, captured: it runs only when replayed
c.zero_()
for _ in range(int(sys.argv[2])):
    graph.replay()
torch.cuda.synchronize()
error = (c.float() - a.float() @ b.float().T).abs().max().item()
json.dump({"first": first.cuda_stream, "second": second.cuda_stream, "error": error},
          open("streams.json", "w"))
"""


DIRECT = r"""
import sys, torch
import cuda.bindings.driver as cuda
from cutlass import Int32
sys.path.insert(0, sys.argv[1])
import examples.ws_gemm as W
a = torch.randn(2048, 1024, device="cuda", dtype=torch.bfloat16)
b = torch.randn(2048, 1024, device="cuda", dtype=torch.bfloat16)
c = torch.zeros(2048, 2048, device="cuda", dtype=torch.bfloat16)
gemm = W.WsGemm(W.GemmConfig())
args = (W._cute_tensor(a), W._cute_tensor(b), W._cute_tensor(c),
        W._cute_prof_buffer(W.alloc_prof(1)), Int32(0),
        cuda.CUstream(torch.cuda.current_stream().cuda_stream), 0)
for _ in range(4):
    c.zero_()
    gemm(*args)  # the @cute.jit function itself: traced at every call, no cute.compile
    torch.cuda.synchronize()
    assert (c.float() - a.float() @ b.float().T).abs().max().item() < 1.0
"""


def _record(tmp_path: Path, program: str, *args: str, name: str) -> None:
    (tmp_path / "program.py").write_text(program)
    proc = subprocess.run([sys.executable, "-m", "cute_prof", "record", "-o", "run", *args],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(
                              [str(ROOT), os.environ.get("PYTHONPATH", "")])})
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], f"{name}.log").write_text(proc.stdout + proc.stderr)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_direct_calls_record_their_launch_range(tmp_path):
    _record(tmp_path, DIRECT, "--launch-skip", "1", "--launch-count", "2", "--",
            "program.py", str(ROOT), name="record_direct")
    from cute_prof.recorded_run import RecordedRun

    run = RecordedRun(tmp_path / "run")
    assert [(r.launch, r.replay, r.lost) for r in run.launches] == [(1, False, 0), (2, False, 0)]
    assert run.launches[0].records == run.launches[1].records > 0
    (count,) = run.info["counts"].values()
    assert count == {"launched": 4, "recorded": 2, "plain_range": 2, "plain_memory": 0}
    assert not run.info["unknown_launches"]


@pytest.mark.parametrize("mode", ["light", "full"])
def test_streams_and_graph_replays_keep_launch_identity(tmp_path, mode):
    _record(tmp_path, PROGRAM, "--mode", mode, "--", "program.py", str(ROOT), str(REPLAYS),
            name=f"record_graphs_{mode}")
    facts = json.loads((tmp_path / "streams.json").read_text())
    assert facts["error"] < 1.0  # the replays computed the product (bf16 out, K = 1024)

    from cute_prof.recorded_run import RecordedRun

    run = RecordedRun(tmp_path / "run")
    rows = run.launches
    assert [r.epoch for r in rows] == list(range(1, 3 + REPLAYS))  # in start order
    direct, replays = rows[:2], rows[2:]
    assert [(r.launch, r.stream, r.replay) for r in direct] == [
        (0, facts["first"], False), (1, facts["second"], False)]
    assert all(r.replay and r.launch is None for r in replays)
    records = {r.records for r in rows}
    assert len(records) == 1 and records.pop() > 0  # a replay records what a launch does
    assert all(r.lost == 0 and r.ctas == rows[0].ctas for r in rows)
    assert all(a.end_ns <= b.start_ns for a, b in zip(rows, rows[1:]))  # one after another
    from cute_prof.analysis.light import light_verdicts
    from cute_prof.analysis.zero_edit import call_balance

    for row in rows:  # each launch decodes on its own: every wait released, or (light) the
        trace = run.trace(row)  # producer's waits alone, its ring's verdict read from them
        assert trace.overflow == 0 and trace.incomplete == 0 and len(trace) > 0
        if mode == "full":
            for balance in call_balance(trace):
                assert balance["warps_wait_release_differ"] == 0, (row.label(), balance)
        else:
            ops = {s["op"] for s in trace.metadata["autoprof"]["sites"]}
            assert ops == {"producer_acquire", "producer_tail"}
            assert "ab_pipe" in {r["ring"] for r in light_verdicts(trace)["rings"]}
    summary = subprocess.run([sys.executable, "-m", "cute_prof", "summary", "run"],
                             cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert summary.returncode == 0 and summary.stdout.count("replay") >= REPLAYS, summary.stdout
