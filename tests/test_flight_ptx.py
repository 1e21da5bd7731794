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
