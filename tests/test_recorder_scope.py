"""Trace-time guards of the staged recorders (cute_prof.device.scope), compiled for sm_90a
on the CPU: a forgotten flush() fails the compile with the recorder's line, and a recorder
that a helper changed inside a dynamic loop fails with our message instead of the DSL's
"operand does not dominate"."""

from __future__ import annotations

import os
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("cutlass")

import cutlass  # noqa: E402
import cutlass.cute as cute  # noqa: E402
from cutlass import Int32  # noqa: E402
from cutlass.cute.runtime import make_ptr  # noqa: E402

import cute_prof.device as cp  # noqa: E402
from cute_prof.device import scope  # noqa: E402
from cute_prof.errors import ProfileBufferError  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_ptx import compile_ptx  # noqa: E402


def record(rec, k):
    """A helper as kernel authors write them: records through its argument."""
    t = rec.start()
    rec.stop(t, 1, payload=k)


def record_and_return(rec, k):
    t = rec.start()
    rec.stop(t, 1, payload=k)
    return rec


@cute.kernel
def scoped_kernel(buf: cute.Pointer, n: Int32, iters: Int32, case: cutlass.Constexpr):
    warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    if cutlass.const_expr(case in ("flushed", "forgot", "flush_in_loop_only", "flush_in_branch")):
        rec = cp.WarpRecorder(buf, n, warp)  # line of the recorder, named by the error
        for k in cutlass.range(iters, unroll=1):
            t = rec.start()
            rec.stop(t, 1, payload=k)
            if cutlass.const_expr(case == "flush_in_loop_only"):
                if k % 4 == 3:
                    rec.flush()
        if cutlass.const_expr(case == "flushed"):
            rec.flush()
        if cutlass.const_expr(case == "flush_in_branch"):
            if warp == 0:
                rec.flush()
    if cutlass.const_expr(case in ("helper_returns", "role_forgot")):
        if warp == 0:
            if cutlass.const_expr(case == "role_forgot"):
                probe = cp.RoleRecorder(buf, n, warp)
                for k in cutlass.range(iters, unroll=1):
                    t = probe.start()
                    probe.stop(t, 1, payload=k)
            else:
                hrec = cp.WarpRecorder(buf, n, warp)
                for k in range(iters):
                    hrec = record_and_return(hrec, k)
                hrec.flush()


@cute.kernel
def helper_kernel(buf: cute.Pointer, n: Int32, iters: Int32):
    """The issue's shape: the recorder lives in a branch, a helper records through its
    argument inside a plain `range` loop (its own kernel, so that no other code in the loop
    body rebinds the recorder)."""
    warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    if warp == 0:
        hrec = cp.WarpRecorder(buf, n, warp)
        for k in range(iters):
            record(hrec, k)
        hrec.flush()


@cute.jit
def launch_scoped(buf: cute.Pointer, n: Int32, iters: Int32, case: cutlass.Constexpr):
    if cutlass.const_expr(case == "helper"):
        helper_kernel(buf, n, iters).launch(grid=(1, 1, 1), block=(64, 1, 1))
    else:
        scoped_kernel(buf, n, iters, case).launch(grid=(1, 1, 1), block=(64, 1, 1))


def compile_case(case):
    p = make_ptr(cutlass.Int64, 4096, cute.AddressSpace.gmem, assumed_align=16)
    try:
        return compile_ptx(launch_scoped, p, Int32(64), Int32(8), case)
    finally:
        scope.forget_open_ledgers()


def test_the_dsl_hook_is_installed():
    assert scope.HOOKED  # the pinned nvidia-cutlass-dsl offers generate_func_ret_op


@pytest.mark.parametrize("case", ["flushed", "flush_in_branch", "helper_returns"])
def test_correct_kernels_compile(case):
    assert "atom.global.add" in compile_case(case)


@pytest.mark.parametrize("case", ["forgot", "flush_in_loop_only", "role_forgot"])
def test_forgotten_flush_fails_with_the_recorders_line(case):
    with pytest.raises(ProfileBufferError, match=r"test_recorder_scope\.py:\d+: records are staged after the last flush") as e:
        compile_case(case)
    assert "Call rec.flush() once after the recording loop" in str(e.value)


def test_helper_changing_the_recorder_in_a_loop_gets_our_message():
    with pytest.raises(ProfileBufferError, match=r"rec = helper\(rec, \.\.\.\)") as e:
        compile_case("helper")
    assert "test_recorder_scope.py" in str(e.value)


def test_a_failed_trace_does_not_blame_the_next_kernel():
    with pytest.raises(ProfileBufferError):
        compile_case("helper")  # fails mid-trace, its recorder's ledger left pending
    assert "atom.global.add" in compile_case("flushed")
