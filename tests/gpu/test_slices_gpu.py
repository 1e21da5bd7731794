"""The per-warp slices write path on a real GPU: every record kept, exact per-warp overflow,
records of warps without a slice counted, a warp that forgets close() still decoded (and
warned about), spans that tile each warp's timeline exactly."""

from __future__ import annotations

import warnings

import numpy as np

from gpu_required import require_gpu  # noqa: E402

torch = require_gpu("cutlass")

import cutlass  # noqa: E402
import cutlass.cute as cute  # noqa: E402
from cutlass.cute.runtime import from_dlpack  # noqa: E402

from cute_prof.decode import decode_buffer  # noqa: E402
from cute_prof.decode_slices import allocate_slices_buffer  # noqa: E402
from cute_prof.device import buffer_arg  # noqa: E402
from cute_prof.device.slices import SliceRecorder  # noqa: E402
from cute_prof.errors import ProfileWarning  # noqa: E402

CTAS, THREADS, ITERS = 264, 128, 40
WARPS = THREADS // 32
N_WARPS = CTAS * WARPS


@cute.kernel
def _kernel(buf: cute.Tensor, data: cute.Tensor, close: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    warp = cute.arch.warp_idx()
    x = data[bidx * THREADS + tidx]
    rec = SliceRecorder(buf, bidx * WARPS + warp)
    rec.begin()
    for i in cutlass.range(ITERS, unroll=1):
        for _ in cutlass.range_constexpr(8):
            x = x * 0.999 + 0.001
        rec.end(3, payload=i)
    rec.instant(4, payload=7)
    if cutlass.const_expr(close):
        rec.close()
    data[bidx * THREADS + tidx] = x


@cute.jit
def _launch(buf: cute.Tensor, data: cute.Tensor, close: cutlass.Constexpr):
    _kernel(buf, data, close).launch(grid=(CTAS, 1, 1), block=(THREADS, 1, 1))


def _run(n_slices, per_warp, close=True):
    buf = allocate_slices_buffer(n_slices, per_warp)
    data = torch.rand(CTAS * THREADS, device="cuda")
    cute.compile(_launch, buffer_arg(buf), from_dlpack(data), close)(buffer_arg(buf), from_dlpack(data))
    torch.cuda.synchronize()
    return buf


PER_WARP_RECORDS = ITERS + 2  # begin mark, ITERS spans, one instant


def test_every_record_kept_and_spans_tile_each_warp():
    trace = decode_buffer(_run(N_WARPS, PER_WARP_RECORDS))
    ev = trace.events
    assert trace.attempted == N_WARPS * PER_WARP_RECORDS and trace.overflow == 0
    assert trace.incomplete == 0 and trace.metadata["slices_marks"] == N_WARPS
    assert len(ev) == N_WARPS * (ITERS + 1)
    spans = ev[ev["tag"] == 3]
    assert np.array_equal(np.bincount(spans["payload"]), np.full(ITERS, N_WARPS))
    assert np.array_equal(np.bincount(spans["tid"]), np.full(N_WARPS, ITERS))
    assert (spans["dur_ns"] >= 0).all() and np.median(spans["dur_ns"]) < 100_000
    # back-to-back: per warp, each span starts where the previous one ended
    order = np.lexsort((spans["payload"], spans["tid"]))
    s = spans[order].reshape(N_WARPS, ITERS)
    assert (s["start_ns"][:, 1:] == (s["start_ns"] + s["dur_ns"])[:, :-1]).all()
    assert set(np.unique(ev["warp"])) == set(range(WARPS))


def test_overflow_is_exact_per_warp_and_for_warps_without_a_slice():
    per_warp, n_slices = 25, N_WARPS - 10
    trace = decode_buffer(_run(n_slices, per_warp))
    attempted = N_WARPS * PER_WARP_RECORDS
    assert trace.attempted == attempted
    assert trace.overflow == attempted - n_slices * per_warp
    assert trace.metadata["slices_no_slice_records"] == 10 * PER_WARP_RECORDS
    assert len(trace.events) == n_slices * (per_warp - 1)  # each slice keeps its one mark


def test_a_warp_that_forgets_close_keeps_its_records_and_is_reported():
    buf = _run(N_WARPS, PER_WARP_RECORDS, close=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trace = decode_buffer(buf)
    assert len(trace.events) == N_WARPS * (ITERS + 1)
    assert trace.metadata["slices_unclosed_warps"] == N_WARPS
    assert trace.metadata["slices_unclosed_full"] == N_WARPS  # slice full: overflow unknown
    assert any(issubclass(w.category, ProfileWarning) and "never called close" in str(w.message)
               for w in caught)


# ---- regions with explicit starts (SliceRecorder.span): overlapping, 32-bit payloads


@cute.kernel
def _span_kernel(buf: cute.Tensor, data: cute.Tensor):
    """A consumer warp's pattern: "wait" k nests inside "mma" k-1; both end at one read."""
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    warp = cute.arch.warp_idx()
    x = data[bidx * THREADS + tidx]
    rec = SliceRecorder(buf, bidx * WARPS + warp)
    t_main = rec.now()
    t_issue = t_main
    for k in cutlass.range(ITERS, unroll=1):
        t_w = rec.now()
        for _ in cutlass.range_constexpr(8):
            x = x * 0.999 + 0.001
        t_m = rec.now()
        rec.span(t_w, 5, payload=k, end=t_m)
        if k > 0:
            rec.span(t_issue, 6, payload=k - 1, end=t_m)
        t_issue = t_m
    rec.span(t_main, 7, payload=(bidx + 1) * 65536 + warp)  # wider than 13 bits
    rec.close()
    data[bidx * THREADS + tidx] = x


@cute.jit
def _span_launch(buf: cute.Tensor, data: cute.Tensor):
    _span_kernel(buf, data).launch(grid=(CTAS, 1, 1), block=(THREADS, 1, 1))


SPAN_REGIONS = ITERS + (ITERS - 1) + 1  # waits, mmas, the whole loop
SPAN_WORDS = 2 * SPAN_REGIONS


def _run_spans(n_slices, per_warp):
    buf = allocate_slices_buffer(n_slices, per_warp)
    data = torch.rand(CTAS * THREADS, device="cuda")
    cute.compile(_span_launch, buffer_arg(buf), from_dlpack(data))(buffer_arg(buf), from_dlpack(data))
    torch.cuda.synchronize()
    return buf


def test_span_regions_overlap_exactly_and_keep_32_bit_payloads():
    trace = decode_buffer(_run_spans(N_WARPS, SPAN_WORDS))
    ev = trace.events
    assert trace.attempted == N_WARPS * SPAN_WORDS and trace.overflow == 0 and trace.incomplete == 0
    assert len(ev) == N_WARPS * SPAN_REGIONS and trace.metadata["slices_region_starts"] == len(ev)
    waits, mmas, loops = (ev[ev["tag"] == t] for t in (5, 6, 7))
    assert np.array_equal(np.bincount(waits["payload"]), np.full(ITERS, N_WARPS))
    assert np.array_equal(np.bincount(mmas["payload"]), np.full(ITERS - 1, N_WARPS))
    want = {(b + 1) * 65536 + w for b in range(CTAS) for w in range(WARPS)}
    assert set((loops["payload"].astype(np.int64)).tolist()) == want
    w = waits[np.lexsort((waits["payload"], waits["tid"]))].reshape(N_WARPS, ITERS)
    m = mmas[np.lexsort((mmas["payload"], mmas["tid"]))].reshape(N_WARPS, ITERS - 1)
    w_end = w["start_ns"] + w["dur_ns"]
    # mma k-1 runs from wait k-1's end to wait k's end: wait k nests inside it
    assert (m["start_ns"] == w_end[:, :-1]).all() and (m["start_ns"] + m["dur_ns"] == w_end[:, 1:]).all()
    assert (w["start_ns"][:, 1:] >= m["start_ns"]).all() and (w["dur_ns"] >= 0).all()
    lp = loops[np.argsort(loops["tid"])]
    assert (lp["start_ns"] <= w["start_ns"][:, 0]).all()
    assert (lp["start_ns"] + lp["dur_ns"] >= w_end[:, -1]).all()


def test_span_overflow_is_exact_and_keeps_whole_regions_first():
    per_warp, n_slices = 31, N_WARPS - 6  # odd: the last region of each slice loses its SPAN
    trace = decode_buffer(_run_spans(n_slices, per_warp))
    assert trace.attempted == N_WARPS * SPAN_WORDS
    assert trace.overflow == N_WARPS * SPAN_WORDS - n_slices * per_warp
    assert trace.metadata["slices_no_slice_records"] == 6 * SPAN_WORDS
    assert trace.incomplete == 0 and len(trace.events) == n_slices * (per_warp // 2)
    assert trace.metadata["slices_region_starts"] == n_slices * (per_warp // 2 + 1)


# ---- a SliceRecorder called from divergent code: not silent


@cute.kernel
def _divergent_kernel(buf: cute.Tensor, data: cute.Tensor):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    warp = cute.arch.warp_idx()
    x = data[bidx * THREADS + tidx]
    rec = SliceRecorder(buf, bidx * WARPS + warp)
    for i in cutlass.range(ITERS, unroll=1):
        x = x * 0.999 + 0.001
        rec.end(3, payload=i)
        if tidx % 32 >= 16:  # lane 0 sits this one out: its record is lost
            rec.instant(4, payload=i)
    rec.close()
    data[bidx * THREADS + tidx] = x


@cute.jit
def _divergent_launch(buf: cute.Tensor, data: cute.Tensor):
    _divergent_kernel(buf, data).launch(grid=(CTAS, 1, 1), block=(THREADS, 1, 1))


def test_records_from_divergent_code_are_flagged_not_silently_lost():
    buf = allocate_slices_buffer(N_WARPS, 2 * ITERS)
    data = torch.rand(CTAS * THREADS, device="cuda")
    cute.compile(_divergent_launch, buffer_arg(buf), from_dlpack(data))(buffer_arg(buf), from_dlpack(data))
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trace = decode_buffer(buf)
    assert trace.metadata["slices_diverged_warps"] == N_WARPS
    assert any(issubclass(w.category, ProfileWarning) and "divergent code" in str(w.message) for w in caught)
    ev = trace.events
    assert np.count_nonzero(ev["tag"] == 3) == N_WARPS * ITERS and np.count_nonzero(ev["tag"] == 4) == 0
