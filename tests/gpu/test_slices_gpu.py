"""The per-warp slices write path on a real GPU: every record kept, exact per-warp overflow,
records of warps without a slice counted, a warp that forgets close() still decoded (and
warned about), spans that tile each warp's timeline exactly."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU", allow_module_level=True)
pytest.importorskip("cutlass")

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
