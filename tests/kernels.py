"""Probe kernels shared by the PTX checks (CPU, compile only) and the GPU suite.

One kernel, specialised at compile time by ``variant``: each variant exercises one device
op so that the PTX checks and the GPU record counts talk about the same code."""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Int32, Int64

import cute_prof.device as cp

WARPS_PER_CTA = 8
THREADS_PER_CTA = 32 * WARPS_PER_CTA
TARGET_WARP = 3
PHASES_PER_ITER = 2
TAG = 5
STAGED_ITERS = 40  # one full 32-record chunk and a partial one per warp

# variant -> (records per CTA, %globaltimer reads in PTX, profile atomics in PTX)
VARIANTS = {
    "none": None,
    "disabled": None,
    "profile": (THREADS_PER_CTA, 2, 1),
    "cta": (1, 2, 1),
    "warp": (1, 2, 1),
    "elected": (WARPS_PER_CTA, 2, 1),
    "lane0": (WARPS_PER_CTA, 2, 1),
    "region": (1, 2, 1),
    "instant": (1, 1, 1),
    "sampled": None,  # depends on the runtime sampling arguments
    "staged": (WARPS_PER_CTA * STAGED_ITERS, 2, 2),  # stage + flush both hold a claim
    "staged_off": None,  # the staged loop with the recorder compiled out
}


@cute.kernel
def probe_kernel(
    buf: cute.Tensor,
    data: cute.Tensor,
    max_events: Int32,
    spin_ns: Int64,
    sample_every: Int32,
    warp_mask: Int32,
    variant: cutlass.Constexpr,
):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    gidx = bidx * THREADS_PER_CTA + tidx
    # read before any op, written inside regions, read after: regions must not hide them
    value = data[gidx]
    if cutlass.const_expr(variant == "profile"):
        t = cp.profile_start(buf, max_events)
        value = value * 1.5 + 0.25
        cp.profile_stop(buf, t, TAG, gidx, max_events)
    elif cutlass.const_expr(variant == "cta"):
        t = cp.lane0_warp0_start(buf, max_events)
        value = value * 1.5 + 0.25
        cp.lane0_warp0_stop(buf, t, Int32(TAG), bidx, max_events)
    elif cutlass.const_expr(variant == "warp"):
        t = cp.warp_start(buf, max_events, target_warp=Int32(TARGET_WARP))
        value = value * 1.5 + 0.25
        cp.warp_stop(buf, t, TAG, bidx, max_events, target_warp=Int32(TARGET_WARP))
    elif cutlass.const_expr(variant == "elected"):
        t = cp.elected_start(buf, max_events)
        value = value * 1.5 + 0.25
        cp.elected_stop(buf, t, TAG, bidx, max_events, payload=cute.arch.warp_idx())
    elif cutlass.const_expr(variant == "lane0"):
        t = cp.profile_start(buf, max_events)
        value = value * 1.5 + 0.25
        cp.profile_stop(buf, t, TAG, bidx, max_events, guard="lane0")
    elif cutlass.const_expr(variant == "region"):
        with cp.profile_region(buf, max_events, Int32(TAG), bidx):
            value = value * 1.5 + 0.25
    elif cutlass.const_expr(variant == "instant"):
        value = value * 1.5 + 0.25
        cp.instant(buf, max_events, TAG, bidx)
    elif cutlass.const_expr(variant == "disabled"):
        t = cp.lane0_warp0_start(buf, max_events, enabled=False)
        with cp.profile_region(buf, max_events, TAG, bidx, enabled=False):
            value = value * 1.5 + 0.25
        cp.lane0_warp0_stop(buf, t, TAG, bidx, max_events, enabled=False)
        cp.instant(buf, max_events, TAG, bidx, enabled=False)
    elif cutlass.const_expr(variant == "sampled"):
        prof = cp.Profiler(buf, max_events, guard="lane0", sample_every_cta=sample_every,
                           warp_mask=warp_mask)
        with prof.region(TAG, bidx, payload=cute.arch.warp_idx()):
            value = value * 1.5 + 0.25
    elif cutlass.const_expr(variant == "staged" or variant == "staged_off"):
        rec = cp.WarpRecorder(buf, max_events, bidx, enabled=variant == "staged")
        for i in cutlass.range(STAGED_ITERS):
            t = rec.start()
            value = value * 1.5 + 0.25
            rec.stop(t, TAG, payload=i)
        rec.flush()
    else:
        value = value * 1.5 + 0.25
    data[gidx] = value


@cute.jit
def launch_probe(
    buf: cute.Tensor,
    data: cute.Tensor,
    max_events: Int32,
    spin_ns: Int64,
    sample_every: Int32,
    warp_mask: Int32,
    variant: cutlass.Constexpr,
    ctas: cutlass.Constexpr,
):
    probe_kernel(buf, data, max_events, spin_ns, sample_every, warp_mask, variant).launch(
        grid=(ctas, 1, 1), block=(THREADS_PER_CTA, 1, 1)
    )


SPIN_TAG_OUTER = 1
SPIN_TAG_INNER = 2
SPIN_TAG_CLOCK = 3
SPIN_TAG_PHASE_A = 4
SPIN_TAG_PHASE_B = 6


@cute.kernel
def timing_kernel(buf: cute.Tensor, max_events: Int32, spin_ns: Int64, inner: Int32):
    """Thread 0's view: an outer region holding ``inner`` spins of ``spin_ns`` each, timed
    by globaltimer regions and by clock64 regions, then a two-phase sequence per spin."""
    bidx, _, _ = cute.arch.block_idx()
    cp.clock_sync(buf, max_events, tid=bidx)
    with cp.profile_region(buf, max_events, SPIN_TAG_OUTER, bidx):
        for i in cutlass.range(inner):
            with cp.profile_region(buf, max_events, SPIN_TAG_INNER, bidx, payload=i):
                cp.spin_ns(spin_ns)
    for i in cutlass.range(inner):
        with cp.profile_region(buf, max_events, SPIN_TAG_CLOCK, bidx, payload=i, clock=True):
            cp.spin_ns(spin_ns)
    seq = cp.PhaseSequence(buf, max_events, bidx)
    for i in cutlass.range(inner):
        seq.next(SPIN_TAG_PHASE_A, payload=i)
        cp.spin_ns(spin_ns)
        seq.next(SPIN_TAG_PHASE_B, payload=i)
        cp.spin_ns(spin_ns)
    seq.end()
    cp.clock_sync(buf, max_events, tid=bidx)


@cute.jit
def launch_timing(buf: cute.Tensor, max_events: Int32, spin_ns: Int64, inner: Int32,
                  ctas: cutlass.Constexpr):
    timing_kernel(buf, max_events, spin_ns, inner).launch(grid=(ctas, 1, 1), block=(64, 1, 1))


TAG_BEFORE_BARRIER = 7
TAG_AFTER_BARRIER = 8
BARRIER_WARPS = 4


@cute.kernel
def barrier_kernel(buf: cute.Tensor, max_events: Int32, step_ns: Int64, fence: cutlass.Constexpr):
    """Warp w spins (w + 1) * step_ns, stamps an instant, meets the others at a CTA barrier
    and stamps another: every stamp after the barrier must be later than every stamp before.
    ``fence``: "none" (the op alone must order itself), "membar" (a fence first, for
    reference) or "staged" (the stamp after the barrier comes from a WarpRecorder)."""
    bidx, _, _ = cute.arch.block_idx()
    warp = cute.arch.warp_idx()
    cp.spin_ns(step_ns * Int64(warp + 1))
    cp.instant(buf, max_events, TAG_BEFORE_BARRIER, bidx, guard="lane0", payload=warp)
    cute.arch.sync_threads()
    if cutlass.const_expr(fence == "membar"):
        cute.arch.fence_acq_rel_cta()
    if cutlass.const_expr(fence == "staged"):
        rec = cp.WarpRecorder(buf, max_events, bidx)
        rec.instant(TAG_AFTER_BARRIER, payload=warp)
        rec.flush()
    else:
        cp.instant(buf, max_events, TAG_AFTER_BARRIER, bidx, guard="lane0", payload=warp)


@cute.jit
def launch_barrier(buf: cute.Tensor, max_events: Int32, step_ns: Int64, fence: cutlass.Constexpr,
                   ctas: cutlass.Constexpr):
    barrier_kernel(buf, max_events, step_ns, fence).launch(
        grid=(ctas, 1, 1), block=(32 * BARRIER_WARPS, 1, 1))


@cute.kernel
def spin_kernel(spin: Int64):
    cp.spin_ns(spin)


@cute.jit
def launch_spin(spin: Int64):
    spin_kernel(spin).launch(grid=(1, 1, 1), block=(32, 1, 1))
