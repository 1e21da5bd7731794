"""Held SMs on the GPU (cute_prof.device.hold): a kernel launched while half the SMs are held
runs on the other half only, computes the same answer, and takes about twice as long; the
held CTAs let go once it is done, launch after launch."""

from __future__ import annotations

import numpy as np
import pytest

from gpu_required import require_gpu  # noqa: E402

torch = require_gpu("cutlass", hopper=True)

import cute_prof  # noqa: E402
from cute_prof.device.hold import HeldSMs  # noqa: E402
from examples import ws_gemm as W  # noqa: E402


@pytest.mark.parametrize("cluster", [1, 2])
def test_a_launch_with_half_the_sms_held_runs_on_the_other_half(cluster):
    m, n, k = 2048, 4096, 1024  # 256 CTAs: two waves on 132 SMs
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    gemm = W.CompiledWsGemm(W.GemmConfig(recorder="slices"))
    warps = gemm.gemm.num_ctas(m, n) * (gemm.gemm.threads_per_cta // 32)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    with cute_prof.autoprofile(per_warp=512, max_warps=warps) as prof:
        launch = gemm.prepare(a, b, c, W.alloc_prof(1), 0, 0)
        launch()
    free = prof.trace_warm(launch, warm=3)
    held = HeldSMs(sms // 2, cluster=cluster)
    c.zero_()
    light = prof.trace_warm(held.wrap(launch), warm=3)  # four held launches in a row
    torch.cuda.synchronize()
    torch.testing.assert_close(c.float(), (a.float() @ b.float().T), rtol=2e-2, atol=2e-1)
    on_free = np.unique(free.events["sm"]).size
    on_light = np.unique(light.events["sm"]).size
    assert on_free > sms - sms // 2 and on_light <= sms - sms // 2
    # where the holders went: single ones take one SM of each pair (2i, 2i + 1), pairs both
    used = set(np.unique(light.events["sm"]).tolist())
    whole_pairs = sum(1 for sm in used if sm % 2 == 0 and sm + 1 in used)
    print(f"cluster {cluster}: ran on {on_light} SMs, {whole_pairs} whole SM pairs, "
          f"span {np.ptp(light.events['start_ns']) / 1e3:.1f} us alone "
          f"{np.ptp(free.events['start_ns']) / 1e3:.1f} us")
    span = {name: np.ptp(t.events["start_ns"]) for name, t in (("free", free), ("light", light))}
    assert 1.5 < span["light"] / span["free"] < 2.6
    # every held CTA arrived each time and was released after its launch
    held.check()
    assert held.state.tolist() == [4 * (sms // 2), 4] and held.launches == 4
    held.close()
    held.close()  # a second close does nothing
    with pytest.raises(RuntimeError, match="after close"):
        held.run(launch)
