"""PTX of the flight ops (compiled for sm_90a without a GPU): system-scope volatile
stores of the position slots, a fence only when asked for, the right slot stride."""

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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_ptx import compile_ptx  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpu"))
import flight_kernels as F  # noqa: E402

from cute_prof import layout  # noqa: E402


def trap_ptx(fence: bool) -> str:
    p = make_ptr(cutlass.Int64, 4096, cute.AddressSpace.gmem, assumed_align=16)
    return compile_ptx(F.launch_trap, p, Int32(64), p, Int32(64), 1, fence)


@pytest.mark.parametrize("fence", [False, True])
def test_flight_ops_store_volatile_and_fence_on_request(fence):
    ptx = trap_ptx(fence)
    records = F.TRAP_RECORDS_PER_WARP
    # per enter: two 16-byte volatile stores; per leave: one 8-byte volatile store
    assert ptx.count("st.volatile.global.v2.u64") == 2 * (records + 1)
    assert ptx.count("st.volatile.global.u64") == records
    assert ptx.count("fence.sc.sys") == (2 * records + 1 if fence else 0)
    assert f"mad.lo.u32 slot, slot, {layout.FLIGHT_DEPTH}, 0;" in ptx
    assert "trap;" in ptx


@cute.kernel
def _role_kernel(rec: cute.Pointer, max_events: Int32, pos: cute.Pointer, slots: Int32,
                 k_tiles: Int32, with_flight: cutlass.Constexpr):
    from cute_prof.device import RoleRecorder

    warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    probe = RoleRecorder(rec, max_events, warp, write_path="direct",
                         flight=(pos, slots) if with_flight else None)
    for k in cutlass.range(k_tiles, unroll=1):
        probe.enter(1, payload=k, depth=1)
        t = probe.start()
        probe.stop(t, 1, payload=k)
        probe.leave(depth=1)


@cute.jit
def _launch_role(rec: cute.Pointer, max_events: Int32, pos: cute.Pointer, slots: Int32, k_tiles: Int32,
                 with_flight: cutlass.Constexpr):
    _role_kernel(rec, max_events, pos, slots, k_tiles, with_flight).launch(grid=(1, 1, 1), block=(64, 1, 1))


@pytest.mark.parametrize("with_flight", [False, True])
def test_role_recorder_marks_positions_only_with_flight(with_flight):
    p = make_ptr(cutlass.Int64, 4096, cute.AddressSpace.gmem, assumed_align=16)
    ptx = compile_ptx(_launch_role, p, Int32(64), p, Int32(64), Int32(8), with_flight)
    assert ptx.count("st.volatile.global.v2.u64") == (2 if with_flight else 0)
    assert ptx.count("st.volatile.global.u64") == (1 if with_flight else 0)
    assert "atom.global.add" in ptx  # the record itself is there either way
    if with_flight:  # depth 1: the slot below the warp's depth-0 slot
        assert f"mad.lo.u32 slot, slot, {layout.FLIGHT_DEPTH}, 1;" in ptx


def test_role_recorder_rejects_a_bad_flight_argument():
    from cute_prof.device import RoleRecorder
    from cute_prof.errors import ProfileBufferError

    with pytest.raises(ProfileBufferError, match="positions, slots"):
        RoleRecorder(None, 0, 0, write_path="direct", enabled=False, flight="positions")
