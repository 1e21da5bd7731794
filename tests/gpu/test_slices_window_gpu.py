"""The slices cursor is the low half of a record's address: what that means on a real GPU.

A slice that crosses a 4 GiB boundary of the address space holds only the records below it
(the decoder counts the rest as overflow and warns), and nothing is ever stored past it; a
warp whose cursor wraps all the way round (2**29 records) stores nothing after its slice
filled. Both are checked against sentinel memory around the buffer."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from gpu_required import require_gpu  # noqa: E402

torch = require_gpu("cutlass")

import cutlass  # noqa: E402
import cutlass.cute as cute  # noqa: E402
from cutlass import Int32  # noqa: E402

from cute_prof import layout  # noqa: E402
from cute_prof.decode import decode_buffer  # noqa: E402
from cute_prof.device import buffer_arg  # noqa: E402
from cute_prof.device.slices import SliceRecorder  # noqa: E402
from cute_prof.errors import ProfileWarning  # noqa: E402

SENTINEL = 0x5A5A_5A5A_5A5A_5A5A
WINDOW = 1 << 32


@cute.kernel
def _records(buf: cute.Tensor, n: Int32):
    rec = SliceRecorder(buf, cute.arch.warp_idx())
    for _ in cutlass.range(n, unroll=1):
        for _ in cutlass.range_constexpr(8):
            rec.end(1)
    rec.close()


@cute.jit
def _launch(buf: cute.Tensor, n: Int32, warps: cutlass.Constexpr):
    _records(buf, n).launch(grid=(1, 1, 1), block=(32 * warps, 1, 1))


@cute.kernel
def _pairs(buf: cute.Tensor, n: Int32):
    rec = SliceRecorder(buf, cute.arch.warp_idx())
    for i in cutlass.range(n, unroll=1):
        rec.span(rec.now(), 2, payload=i)
    rec.close()


@cute.jit
def _launch_pairs(buf: cute.Tensor, n: Int32, warps: cutlass.Constexpr):
    _pairs(buf, n).launch(grid=(1, 1, 1), block=(32 * warps, 1, 1))


def _straddling(warps, per_warp, cut_slice, before):
    """A slices buffer inside an 8 GiB sentinel allocation whose slice ``cut_slice`` has
    ``before`` record slots below a 4 GiB boundary; (big, view, base, first window start)."""
    big = torch.full(((2 * WINDOW + (16 << 20)) // 8,), SENTINEL, dtype=torch.int64, device="cuda")
    base = big.data_ptr()
    first = (base + WINDOW - 1) // WINDOW * WINDOW  # two boundaries inside: first, first + 4 GiB
    records_at = first + WINDOW - 8 * before
    start = records_at - 8 * (layout.SLICES_HEADER_WORDS + cut_slice * (layout.SLICE_HEADER_WORDS + per_warp)
                              + layout.SLICE_HEADER_WORDS)
    return big, _slices_view(big, (start - base) // 8, warps, per_warp), base, first


def _untouched_outside(big, view, base, first):
    """Sentinels intact around the view, and around the start of the window below the
    boundary (where a record addressed from a wrapped low half would land)."""
    start = (view.data_ptr() - base) // 8
    assert (big[:start] == SENTINEL).all()
    assert (big[start + view.numel():start + view.numel() + (1 << 17)] == SENTINEL).all()
    at = (first - base) // 8
    assert (big[max(at - (1 << 17), 0):at + (1 << 17)] == SENTINEL).all()


def _slices_view(big, start_word, n_slices, per_warp):
    """A slices buffer written into ``big`` at ``start_word`` (the rest keeps its sentinel)."""
    view = big[start_word:start_word + layout.slices_buffer_words(n_slices, per_warp)]
    view.zero_()
    view[:layout.SLICES_HEADER_WORDS] = torch.as_tensor(layout.slices_header(n_slices, per_warp))
    return view


def test_a_slice_across_a_4_gib_boundary_keeps_what_fits_and_stores_nothing_past_it():
    warps, per_warp, cut_slice, before = 8, 64, 3, 20  # slice 3: 20 record slots below the boundary
    big, view, base, first = _straddling(warps, per_warp, cut_slice, before)
    fits = layout.slice_records_that_fit(view.data_ptr(), warps, per_warp)
    assert fits.tolist() == [per_warp] * cut_slice + [before - 1] + [per_warp] * (warps - cut_slice - 1)

    _launch(buffer_arg(view), Int32(50 // 8 + 1), warps)  # 56 records a warp
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trace = decode_buffer(view)
    assert any("4 GiB boundary" in str(w.message) for w in caught if issubclass(w.category, ProfileWarning))
    per = np.bincount(trace.events["tid"], minlength=warps)
    assert per.tolist() == [56] * cut_slice + [before - 1] + [56] * (warps - cut_slice - 1)
    assert trace.attempted == 56 * warps and trace.overflow == 56 - (before - 1)
    assert trace.metadata["slices_cut_warps"] == 1
    assert trace.metadata["slices_cut_records"] == per_warp - (before - 1)
    slice_words = view[layout.SLICES_HEADER_WORDS:].view(warps, -1)[cut_slice, layout.SLICE_HEADER_WORDS:]
    assert (slice_words[before - 1:] == 0).all()  # nothing stored at or past the boundary's last slot
    _untouched_outside(big, view, base, first)


def test_span_pairs_up_to_a_4_gib_boundary_store_nothing_past_it():
    # 19 usable slots: nine whole regions, then a START in the window's last usable slot
    # whose SPAN does not fit (the region becomes a boundary, counted as overflow)
    warps, per_warp, cut_slice, before, regions = 4, 64, 2, 20, 24
    big, view, base, first = _straddling(warps, per_warp, cut_slice, before)
    _launch_pairs(buffer_arg(view), Int32(regions), warps)
    torch.cuda.synchronize()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ProfileWarning)
        trace = decode_buffer(view)
    per = np.bincount(trace.events["tid"], minlength=warps)
    assert per.tolist() == [regions] * cut_slice + [9] + [regions] * (warps - cut_slice - 1)
    assert trace.overflow == 2 * regions - 19 and trace.metadata["slices_region_starts"] == 3 * regions + 10
    mine = trace.events[trace.events["tid"] == cut_slice]
    assert sorted(mine["payload"].tolist()) == list(range(9))
    slice_words = view[layout.SLICES_HEADER_WORDS:].view(warps, -1)[cut_slice, layout.SLICE_HEADER_WORDS:]
    assert (slice_words[:before - 1] != 0).all() and (slice_words[before - 1:] == 0).all()
    _untouched_outside(big, view, base, first)


def test_a_cursor_that_wraps_after_the_slice_filled_stores_nothing():
    per_warp, pad = 4, 1 << 20
    big = torch.full((2 * pad + layout.slices_buffer_words(1, per_warp),), SENTINEL, dtype=torch.int64,
                     device="cuda")
    view = _slices_view(big, pad, 1, per_warp)
    n = (1 << 26) + 13  # 8 records an iteration: 2**29 + 104 records, so the cursor wraps once
    begin, done = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    _launch(buffer_arg(view), Int32(n), 1)
    done.record()
    torch.cuda.synchronize()
    seconds = begin.elapsed_time(done) / 1e3
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trace = decode_buffer(view)
    assert (big[:pad] == SENTINEL).all() and (big[pad + view.numel():] == SENTINEL).all()
    ev = trace.events
    assert len(ev) == per_warp and (np.diff(ev["start_ns"]) >= 0).all()
    assert ev["start_ns"][-1] - ev["start_ns"][0] < 100_000  # the first four, not later ones
    attempted = 8 * n
    assert (trace.overflow - (attempted - per_warp)) % (1 << layout.SLICE_COUNT_BITS) == 0
    if seconds >= 2 ** (layout.SLICE_LONG_OPEN_SHIFT + 1) / 1e9:
        assert trace.metadata["slices_long_open_warps"] == 1
        assert trace.metadata["slices_count_modulo_warps"] == 1
        assert any("modulo" in str(w.message) for w in caught)
    print(f"wrap test: {attempted} records in {seconds:.2f} s, decoded overflow {trace.overflow}")
