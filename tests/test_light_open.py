"""Light mode in a run's pool (``cute-prof record``'s default), compiled for sm_90a on a CPU
box: a warp opens its slice where it first records only where the whole warp gets there
together (the pool's open shares one lane's claim with a full-warp shuffle); a producer
whose calls sit under a branch on its lane opens at the kernel's entry instead, as in full
mode. ws_gemm's producer (under ``warp_idx == ...``) opens where it records."""

from __future__ import annotations

import pytest
from sm90_child import compile_in_child

pytest.importorskip("cutlass")
pytest.importorskip("torch")

KERNEL = r"""
import cutlass
import cutlass.cute as cute
from cutlass import pipeline
from cutlass.utils import SmemAllocator


def build(producer_by_lane):
    @cute.kernel
    def pingpong(out: cute.Tensor, n: cutlass.Int32):
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        tidx, _, _ = cute.arch.thread_idx()
        smem = SmemAllocator()
        barriers = smem.allocate_array(cutlass.Int64, 2)
        ring = pipeline.PipelineAsync.create(
            num_stages=1, barrier_storage=barriers,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 1),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 32))
        producer = tidx == 0 if cutlass.const_expr(producer_by_lane) else warp == 0
        if producer:
            state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, 1)
            for _ in cutlass.range(n, unroll=1):
                ring.producer_acquire(state)
                ring.producer_commit(state)
                state.advance()
        if warp == 1:
            state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, 1)
            for _ in cutlass.range(n, unroll=1):
                ring.consumer_wait(state)
                ring.consumer_release(state)
                state.advance()
            if tidx == 32:
                out[0] = n

    @cute.jit
    def launch(out: cute.Tensor, n: cutlass.Int32):
        pingpong(out, n).launch(grid=(1, 1, 1), block=(64, 1, 1))

    return launch
"""

CHILD = r"""
import json, os, sys, torch
import cutlass
import cutlass.cute as cute
from cutlass.cute.runtime import from_dlpack
from cute_prof.decode_slices import allocate_pool
from cute_prof.device.launch_select import LaunchSelector, RunPool, Selection

sys.path.insert(0, os.path.dirname(sys.argv[1]))
import pingpong_kernel

out = {}
for by_lane in (False, True):
    selector = LaunchSelector(lambda: RunPool(allocate_pool(16, 32, device="cpu"), per_warp=32),
                              Selection(), mode="light")
    selector.install()
    try:
        fn = cute.compile(pingpong_kernel.build(by_lane),
                          from_dlpack(torch.zeros(1, dtype=torch.int32)), cutlass.Int32(4))
    finally:
        selector.uninstall()
    (rec,) = selector.recordings
    ptx = fn.__ptx__
    out[str(by_lane)] = {"meta": rec.metadata(),
                         "ptx": open(ptx).read() if os.path.exists(ptx[:512]) else ptx}
json.dump(out, open(sys.argv[1], "w"))
"""


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    folder = tmp_path_factory.mktemp("light_open")
    (folder / "pingpong_kernel.py").write_text(KERNEL)  # the DSL reads a kernel's source
    return compile_in_child(folder, CHILD, timeout=600)


@pytest.mark.parametrize("by_lane", ["False", "True"])
def test_a_pooled_light_open_runs_with_the_whole_warp(compiled, by_lane):
    meta, ptx = compiled[by_lane]["meta"], compiled[by_lane]["ptx"]
    assert meta["mode"] == "light" and meta["pool_kernel"] == 0
    assert {s["op"] for s in meta["sites"]} == {"producer_acquire"}
    claim = ptx.index("atom.global.add.u64")  # the pool's open: one lane claims, a shuffle shares
    assert ptx.count("atom.global.add.u64") == 1
    if by_lane == "True":  # the producer is one thread: every warp opens at the entry
        assert meta["opens_at_entry"] and claim < ptx.index("mbarrier.init")
    else:  # the producer is a whole warp: it opens where it records, after the set-up
        assert not meta["opens_at_entry"] and claim > ptx.index("mbarrier.init")
