"""WarpRecorder called from divergent code, on the GPU: a record staged where some lanes
are inactive is written directly by the lowest active lane (a correct record, never
garbage), and a flush() from divergent code stores the active lanes' records and leaves
the others' claimed slots empty, so the decoder reports exactly those as lost."""

from __future__ import annotations

import numpy as np

from gpu_required import require_gpu  # noqa: E402

torch = require_gpu("cutlass")

import cutlass  # noqa: E402
import cutlass.cute as cute  # noqa: E402
from cutlass import Int32  # noqa: E402

import cute_prof.device as cp  # noqa: E402
from cute_prof.buffer import allocate_profile_buffer  # noqa: E402
from cute_prof.decode import decode_buffer  # noqa: E402

CTAS, WARPS = 4, 2
BEFORE, DIVERGENT, AFTER, ACTIVE = 5, 3, 2, 16


@cute.kernel
def divergent_kernel(buf: cute.Tensor, n: Int32, case: cutlass.Constexpr):
    bidx, _, _ = cute.arch.block_idx()
    warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    lane = cute.arch.lane_idx()
    rec = cp.WarpRecorder(buf, n, bidx * WARPS + warp)
    for i in cutlass.range_constexpr(BEFORE):
        t = rec.start()
        rec.stop(t, 0, payload=i)
    if cutlass.const_expr(case == "records"):
        for j in cutlass.range_constexpr(DIVERGENT):
            if lane < ACTIVE:
                t = rec.start()
                rec.stop(t, 1, payload=j)
        for i in cutlass.range_constexpr(AFTER):
            t = rec.start()
            rec.stop(t, 0, payload=BEFORE + i)
        rec.flush()
    else:  # a flush from divergent code: lanes 0 and 1 only
        if lane < 2:
            rec.flush()


@cute.jit
def launch_divergent(buf: cute.Tensor, n: Int32, case: cutlass.Constexpr):
    divergent_kernel(buf, n, case).launch(grid=(CTAS, 1, 1), block=(32 * WARPS, 1, 1))


def run(case):
    prof = allocate_profile_buffer(1024, device="cuda")
    arg = cp.buffer_arg(prof.tensor)
    cute.compile(launch_divergent, arg, Int32(1024), case)(arg, Int32(1024))
    torch.cuda.synchronize()
    return decode_buffer(prof)


def test_divergent_records_are_written_directly_and_exactly():
    tr = run("records")
    ev = tr.events
    assert tr.incomplete == 0 and tr.overflow == 0
    for track in range(CTAS * WARPS):
        mine = ev[ev["tid"] == track]
        assert sorted(mine["payload"][mine["tag"] == 0].tolist()) == list(range(BEFORE + AFTER))
        assert sorted(mine["payload"][mine["tag"] == 1].tolist()) == list(range(DIVERGENT))
    assert (ev["dur_ns"] >= 0).all()
    # the divergent records sit between the converged ones in time
    for track in range(CTAS * WARPS):
        mine = ev[ev["tid"] == track]
        div = mine["start_ns"][mine["tag"] == 1]
        last_before = mine["start_ns"][(mine["tag"] == 0) & (mine["payload"] == BEFORE - 1)][0]
        first_after = mine["start_ns"][(mine["tag"] == 0) & (mine["payload"] == BEFORE)][0]
        assert last_before <= div.min() and div.max() <= first_after


def test_flush_from_divergent_code_reports_the_rest_lost_exactly():
    tr = run("flush")
    kept = CTAS * WARPS * 2
    assert len(tr.events) == kept
    assert sorted(np.unique(tr.events["payload"]).tolist()) == [0, 1]
    assert tr.incomplete == CTAS * WARPS * (BEFORE - 2)  # claimed, never written: lost
    assert tr.attempted == CTAS * WARPS * BEFORE
