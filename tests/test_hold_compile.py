"""The kernels that hold SMs while another kernel runs (cute_prof.device.hold), compiled for
sm_90a on a machine without a GPU: each holder arrives once and waits on the release flag
with acquire loads and sleeps; the launch waits for every arrival; the release is a release
store. The GPU half (tests/gpu/test_hold_gpu.py) checks where the held launch ran."""

from __future__ import annotations

import re

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("cutlass")

import cuda.bindings.driver as cuda  # noqa: E402
from cutlass import Int64  # noqa: E402
from cutlass.cute.runtime import from_dlpack  # noqa: E402

from cute_prof.device import hold  # noqa: E402
from test_ptx import asm_blocks, compile_ptx  # noqa: E402


def state():
    return from_dlpack(torch.zeros(2, dtype=torch.int64))


def test_the_holder_arrives_once_then_sleeps_until_released():
    ptx = compile_ptx(hold.launch_hold, state(), Int64(1), 66, 200 * 1024, cuda.CUstream(0))
    block = next(b for b in asm_blocks(ptx) if "HOLD_WAIT" in b)
    assert block.count("red.release.gpu.global.add.u64") == 1
    assert "ld.acquire.gpu.global.u64" in block and "nanosleep.u32" in block
    # it reads the flag word, after the counter word it adds to
    assert re.search(r"ld\.acquire\.gpu\.global\.u64 v, \[%rd\d+\+8\]", block)


def test_the_launch_waits_for_every_arrival_and_the_release_is_a_release_store():
    arrived = compile_ptx(hold.launch_one_thread, state(), Int64(66), "arrived", cuda.CUstream(0))
    block = next(b for b in asm_blocks(arrived) if "ARRIVED_WAIT" in b)
    assert re.search(r"ld\.acquire\.gpu\.global\.u64 v, \[%rd\d+\+0\]", block)
    assert "nanosleep" not in block  # the launch it gates starts as soon as they are there
    release = compile_ptx(hold.launch_one_thread, state(), Int64(1), "release", cuda.CUstream(0))
    assert any("st.release.gpu.global.u64 [" in b and "+8]" in b for b in asm_blocks(release))


def test_held_sms_takes_a_count_that_leaves_sms_free():
    if not torch.cuda.is_available():
        pytest.skip("HeldSMs reads the GPU's SM count")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for bad in (0, sms - 1, True, 2.0):
        with pytest.raises(ValueError, match="held must be"):
            hold.HeldSMs(bad)


def test_holders_launch_in_pairs_as_a_cluster_of_two():
    """(Compiles: the holder's code is the same in pairs.)"""
    ptx = compile_ptx(hold.launch_hold, state(), Int64(1), 66, 200 * 1024, cuda.CUstream(0), 2)
    # the cluster is the launch's (the GPU test checks where the pairs went)
    assert [b.count("red.release.gpu.global.add.u64") for b in asm_blocks(ptx)
            if "HOLD_WAIT" in b] == [1]
