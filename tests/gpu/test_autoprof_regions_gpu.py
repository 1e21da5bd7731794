"""Opt-in zero-edit regions on the GPU: every warp's region and mark decode, with the
payload the kernel passed, and the kernel still computes its result."""

from __future__ import annotations

import numpy as np

from gpu_required import require_gpu  # noqa: E402

torch = require_gpu("cutlass")

import cute_prof  # noqa: E402


def test_regions_and_marks_of_every_warp():
    import cutlass.cute as cute
    from cutlass import Int32
    from cutlass.cute.runtime import from_dlpack

    from tests.zero_edit_region_kernel import launch

    out = torch.zeros(64, dtype=torch.int32, device="cuda")
    with cute_prof.autoprofile(per_warp=16, max_warps=8) as prof:
        cute.compile(launch, from_dlpack(out), Int32(5))(from_dlpack(out), Int32(5))
    trace = prof.trace()
    assert out.cpu().tolist() == [10 * t for t in range(64)]  # sum(i * t for i < 5)
    names = np.array(trace.tag_names, dtype=object)[trace.events["tag"]]
    body, done = trace.events[names == "body"], trace.events[names == "done"]
    body, done = body[np.argsort(body["tid"])], done[np.argsort(done["tid"])]
    assert body["tid"].tolist() == done["tid"].tolist()
    assert len(body) == len(done) == 4  # 2 CTAs x 2 warps, one region and one mark each
    assert set(body["payload"].tolist()) == {5} and (body["dur_ns"] >= 0).all()
    assert (done["start_ns"] >= body["start_ns"] + body["dur_ns"] - 64).all()
    assert trace.overflow == 0 and trace.metadata["slices_unclosed_warps"] == 0
