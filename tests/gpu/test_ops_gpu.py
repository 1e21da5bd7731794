"""Device ops on a real GPU: exact counts, timing against known spins, nesting, overflow,
bit-identical outputs. Skipped where there is no CUDA GPU or no CuTe DSL."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from gpu_required import require_gpu  # noqa: E402

torch = require_gpu("cutlass")

import cutlass.cute as cute  # noqa: E402
from cutlass import Int32, Int64  # noqa: E402
from cutlass.cute.runtime import from_dlpack  # noqa: E402

from cute_prof.buffer import allocate_profile_buffer  # noqa: E402
from cute_prof.device import buffer_arg as cp_buffer_arg  # noqa: E402
from cute_prof.decode import decode_buffer, decode_events  # noqa: E402
from cute_prof import layout  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import kernels as K  # noqa: E402

CTAS = 264  # two waves' worth on H100/H200 (132 SMs)


def figure(text: str) -> None:
    """Append a measured figure to the run's log (bench/gpu_runs/run_gpu.sh collects them)."""
    path = os.environ.get("CUTE_PROF_FIGURES")
    if path:
        with open(path, "a") as fh:
            fh.write(text + "\n")
TIMER_STEP_NS = 32  # %globaltimer resolution measured on H100/H200
_compiled: dict = {}


def _probe(variant, ctas=CTAS):
    key = ("probe", variant, ctas)
    if key not in _compiled:
        buf = allocate_profile_buffer(16, device="cuda")
        data = torch.zeros(ctas * K.THREADS_PER_CTA, device="cuda")
        _compiled[key] = cute.compile(
            K.launch_probe, cp_buffer_arg(buf.tensor), from_dlpack(data), Int32(16), Int64(0),
            Int32(1), Int32(-1), variant, ctas,
        )
    return _compiled[key]


def run_probe(variant, max_events, *, ctas=CTAS, sample_every=1, warp_mask=-1, data=None):
    prof = allocate_profile_buffer(max_events, device="cuda")
    if data is None:
        data = torch.randn(ctas * K.THREADS_PER_CTA, device="cuda")
    _probe(variant, ctas)(
        cp_buffer_arg(prof.tensor), from_dlpack(data), Int32(max_events), Int64(0),
        Int32(sample_every), Int32(warp_mask),
    )
    torch.cuda.synchronize()
    return decode_buffer(prof), data


@pytest.mark.parametrize("variant", ["profile", "cta", "warp", "elected", "lane0", "region", "instant", "staged"])
def test_exact_counts_tags_tids(variant):
    per_cta = K.VARIANTS[variant][0]
    expected = CTAS * per_cta
    trace, _ = run_probe(variant, expected + 100)
    ev = trace.events
    assert trace.attempted == expected and len(ev) == expected
    assert trace.overflow == 0 and trace.incomplete == 0
    assert np.all(ev["tag"] == K.TAG)
    sm_count = torch.cuda.get_device_properties(0).multi_processor_count
    assert ev["sm"].min() >= 0 and ev["sm"].max() < sm_count
    assert np.all(ev["start_ns"] > 0) and np.all(ev["dur_ns"] >= 0)
    if variant == "profile":
        assert np.array_equal(np.sort(ev["tid"]), np.arange(expected))
        assert np.array_equal(ev["warp"], (ev["tid"] % K.THREADS_PER_CTA) // 32)
    else:
        # one record per (CTA, recording warp): tids are the CTA indices
        counts = np.bincount(ev["tid"], minlength=CTAS)
        assert np.all(counts == per_cta)
    if variant in ("cta", "region", "instant"):
        assert np.all(ev["warp"] == 0)
    if variant == "warp":
        assert np.all(ev["warp"] == K.TARGET_WARP)
    if variant == "staged":
        keys = (ev["tid"].astype(np.int64) * K.WARPS_PER_CTA + ev["warp"]) * K.STAGED_ITERS + ev["payload"]
        assert np.array_equal(np.sort(keys), np.arange(expected))
    if variant in ("elected", "lane0"):
        pairs = ev["tid"].astype(np.int64) * K.WARPS_PER_CTA + ev["warp"]
        assert np.array_equal(np.sort(pairs), np.arange(expected))
    if variant == "elected":
        assert np.array_equal(ev["payload"], ev["warp"])
    if variant == "instant":
        assert np.all(ev["kind"] == layout.KIND_INSTANT) and np.all(ev["dur_ns"] == 0)


@pytest.mark.parametrize("every,mask", [(4, -1), (1, 0b10000001), (3, 0b100)])
def test_runtime_sampling(every, mask):
    trace, _ = run_probe("sampled", CTAS * K.WARPS_PER_CTA, sample_every=every, warp_mask=mask)
    warps = [w for w in range(K.WARPS_PER_CTA) if (mask >> w) & 1]
    ctas = [c for c in range(CTAS) if c % every == 0]
    assert trace.attempted == len(warps) * len(ctas)
    got = sorted(zip(trace.events["tid"].tolist(), trace.events["warp"].tolist()))
    assert got == sorted((c, w) for c in ctas for w in warps)
    assert np.array_equal(trace.events["payload"], trace.events["warp"])


@pytest.mark.parametrize("variant", ["elected", "staged"])
@pytest.mark.parametrize("capacity", [1, 100, 1000, 50_000])
def test_overflow_exact(variant, capacity):
    attempted = CTAS * K.VARIANTS[variant][0]
    prof = allocate_profile_buffer(capacity, device="cuda")
    data = torch.randn(CTAS * K.THREADS_PER_CTA, device="cuda")
    _probe(variant)(cp_buffer_arg(prof.tensor), from_dlpack(data), Int32(capacity), Int64(0), Int32(1), Int32(-1))
    torch.cuda.synchronize()
    trace = decode_buffer(prof)
    kept = min(capacity, attempted)
    assert trace.attempted == attempted
    assert len(trace.events) == kept and trace.incomplete == 0
    assert trace.overflow == max(0, attempted - capacity)
    events, overflow = decode_events(prof, None)
    assert overflow == max(0, attempted - capacity) and len(events) == kept


def test_max_events_larger_than_buffer_is_clamped():
    """A caller passing a max_events beyond the tensor must not write past it."""
    capacity = 50
    backing = torch.full((layout.buffer_words(capacity) + 64,), -7, dtype=torch.int64, device="cuda")
    buf = backing[: layout.buffer_words(capacity)]
    buf.zero_()
    data = torch.randn(CTAS * K.THREADS_PER_CTA, device="cuda")
    _probe("elected")(cp_buffer_arg(buf), from_dlpack(data), Int32(10**6), Int64(0), Int32(1), Int32(-1))
    torch.cuda.synchronize()
    assert torch.all(backing[layout.buffer_words(capacity):] == -7)
    trace = decode_buffer(buf)
    assert len(trace.events) == capacity and trace.attempted == CTAS * K.WARPS_PER_CTA


def test_unaligned_buffer_uses_scalar_stores():
    """A plain torch.zeros buffer (records 8 mod 16) must decode the same as an aligned one."""
    n = CTAS * K.WARPS_PER_CTA
    buf = torch.zeros(layout.buffer_words(n), dtype=torch.int64, device="cuda")
    if buf.data_ptr() % 16 == 8:
        buf = torch.zeros(layout.buffer_words(n) + 1, dtype=torch.int64, device="cuda")[1:]
    assert buf.data_ptr() % 16 == 0
    data = torch.randn(CTAS * K.THREADS_PER_CTA, device="cuda")
    _probe("elected")(cp_buffer_arg(buf), from_dlpack(data), Int32(n), Int64(0), Int32(1), Int32(-1))
    torch.cuda.synchronize()
    trace = decode_buffer(buf)
    assert len(trace.events) == n and trace.incomplete == 0
    assert np.all(trace.events["tag"] == K.TAG)


@pytest.mark.parametrize("variant", ["profile", "cta", "elected", "region", "sampled", "staged"])
def test_profiled_output_bit_identical(variant):
    x = torch.randn(CTAS * K.THREADS_PER_CTA, device="cuda")
    _, plain = run_probe("staged_off" if variant == "staged" else "none", 16, data=x.clone())
    _, profiled = run_probe(variant, CTAS * K.THREADS_PER_CTA, data=x.clone(), sample_every=2)
    assert torch.equal(plain, profiled)
    assert not torch.equal(plain, x)  # the kernel did write


_timing = {}


def run_timing(spin_ns, inner, ctas=4):
    key = ctas
    per_cta = 2 + 1 + 2 * inner + 2 * inner
    prof = allocate_profile_buffer(ctas * per_cta, device="cuda")
    if key not in _timing:
        _timing[key] = cute.compile(K.launch_timing, cp_buffer_arg(prof.tensor), Int32(1), Int64(1), Int32(1), ctas)
    _timing[key](cp_buffer_arg(prof.tensor), Int32(ctas * per_cta), Int64(spin_ns), Int32(inner))
    torch.cuda.synchronize()
    return decode_buffer(prof), per_cta


@pytest.mark.parametrize("spin_ns", [1_000, 10_000, 100_000])
def test_spin_regions_time_within_resolution(spin_ns):
    inner = 3
    trace, per_cta = run_timing(spin_ns, inner)
    ev = trace.events
    assert trace.attempted == 4 * per_cta and trace.incomplete == 0
    inner_ev = ev[ev["tag"] == K.SPIN_TAG_INNER]
    assert len(inner_ev) == 4 * inner
    # a spin exits on the first timer read >= spin_ns; the region adds at most a few reads
    assert np.all(inner_ev["dur_ns"] >= spin_ns)
    assert np.all(inner_ev["dur_ns"] <= spin_ns + 4 * TIMER_STEP_NS), inner_ev["dur_ns"]
    excess = inner_ev["dur_ns"] - spin_ns
    figure(f"spin {spin_ns} ns: recorded excess over the spin min {excess.min()} / median "
           f"{int(np.median(excess))} / max {excess.max()} ns over {len(inner_ev)} regions")
    assert np.array_equal(np.sort(inner_ev["payload"]), np.repeat(np.arange(inner), 4))
    # nesting: the outer region holds its CTA's inner ones
    outer = ev[ev["tag"] == K.SPIN_TAG_OUTER]
    assert len(outer) == 4
    for o in outer:
        mine = inner_ev[inner_ev["tid"] == o["tid"]]
        assert o["dur_ns"] >= mine["dur_ns"].sum()
        assert mine["start_ns"].min() >= o["start_ns"]
        assert (mine["start_ns"] + mine["dur_ns"]).max() <= o["start_ns"] + o["dur_ns"]
    # phases: back to back, each at least one spin long
    phases = ev[np.isin(ev["tag"], [K.SPIN_TAG_PHASE_A, K.SPIN_TAG_PHASE_B])]
    assert len(phases) == 4 * 2 * inner
    for cta in range(4):
        mine = np.sort(phases[phases["tid"] == cta], order="start_ns")
        assert np.array_equal(mine["start_ns"][1:], (mine["start_ns"] + mine["dur_ns"])[:-1])
        assert np.all(mine["dur_ns"] >= spin_ns)
        assert list(mine["tag"]) == [K.SPIN_TAG_PHASE_A, K.SPIN_TAG_PHASE_B] * inner


def test_clock_mode_matches_globaltimer_on_long_regions():
    spin_ns = 100_000
    trace, _ = run_timing(spin_ns, 3)
    clock_ev = trace.events[trace.events["tag"] == K.SPIN_TAG_CLOCK]
    assert len(clock_ev) == 12 and np.all(clock_ev["kind"] == layout.KIND_CLOCK_SPAN)
    assert np.all(clock_ev["dur_cycles"] > 0)
    rel = np.abs(clock_ev["dur_ns"] - spin_ns) / spin_ns
    assert rel.max() <= 0.02, rel
    hz = trace.metadata["clock_hz"]
    figure(f"clock64 mode on {spin_ns} ns spins: SM clock {hz / 1e9:.4f} GHz fitted from clock_sync pairs; "
           f"|error| vs the spin length max {rel.max() * 100:.3f}% median {np.median(rel) * 100:.3f}%")
    assert 0.5e9 < hz < 3.5e9


@pytest.mark.parametrize("fence", ["none", "membar", "staged"])
def test_stamps_after_a_barrier_follow_every_stamp_before_it(fence):
    ctas, step = 132, 2_000
    n = ctas * K.BARRIER_WARPS * 2
    prof = allocate_profile_buffer(n, device="cuda")
    fn = cute.compile(K.launch_barrier, cp_buffer_arg(prof.tensor), Int32(n), Int64(step), fence, ctas)
    fn(cp_buffer_arg(prof.tensor), Int32(n), Int64(step))
    torch.cuda.synchronize()
    ev = decode_buffer(prof).events
    assert len(ev) == n
    before = ev[ev["tag"] == K.TAG_BEFORE_BARRIER]
    after = ev[ev["tag"] == K.TAG_AFTER_BARRIER]
    last_before = np.full(ctas, np.iinfo(np.int64).min)
    np.maximum.at(last_before, before["tid"], before["start_ns"])
    first_after = np.full(ctas, np.iinfo(np.int64).max)
    np.minimum.at(first_after, after["tid"], after["start_ns"])
    early = first_after - last_before
    figure(f"barrier ({fence}): first stamp after minus last stamp before, per CTA: "
           f"min {early.min()} / median {int(np.median(early))} ns")
    assert early.min() >= 0, early
