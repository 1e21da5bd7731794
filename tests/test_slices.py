"""The per-warp slices format (layout format 2): hand-built buffers, hand-computed traces."""
import warnings

import numpy as np
import pytest

from cute_prof import layout as L
from cute_prof.decode import decode_buffer
from cute_prof.errors import ProfileBufferError, ProfileWarning


def record(t_lo, tag, kind=L.SLICE_KIND_SPAN, payload=0):
    return L.as_int64((L.slice_record_high(tag, kind=kind, payload=payload) << 32) | (t_lo & 0xFFFFFFFF))


def make(n_slices, per_warp):
    words = np.zeros(L.slices_buffer_words(n_slices, per_warp), dtype=np.int64)
    words[:4] = L.slices_header(n_slices, per_warp)
    return words


def slice_at(words, s, per_warp):
    first = L.SLICES_HEADER_WORDS + s * (L.SLICE_HEADER_WORDS + per_warp)
    return words[first : first + L.SLICE_HEADER_WORDS + per_warp]


def open_slice(words, s, per_warp, *, base, tid, sm, warp, count=None, recs=()):
    sl = slice_at(words, s, per_warp)
    sl[0] = base
    sl[1] = tid | (sm << L.SM_SHIFT) | (warp << L.WARP_SHIFT) | (L.SLICE_OPEN_MAGIC << L.SLICE_MAGIC_SHIFT)
    if count is not None:
        sl[2] = count | (L.SLICE_CLOSED_MAGIC << L.SLICE_MAGIC_SHIFT)
    for i, r in enumerate(recs):
        sl[L.SLICE_HEADER_WORDS + i] = r


def test_magic_can_never_be_a_flat_counter():
    assert L.SLICES_MAGIC < 0  # flat counters (and their epoch bits 40..62) are never negative


def test_spans_share_boundaries_and_unwrap_the_32_bit_timer():
    words = make(2, 4)
    base = (7 << 32) + 0xFFFFFF00  # the low word wraps after the second record
    open_slice(words, 0, 4, base=base, tid=5, sm=3, warp=1, count=3,
               recs=[record(0xFFFFFF80, 10), record(0x40, 11, payload=9),
                     record(0x50, 12, kind=L.SLICE_KIND_INSTANT)])
    open_slice(words, 1, 4, base=1000, tid=6, sm=4, warp=2, count=6,  # 2 past capacity
               recs=[record(1000, 0, kind=L.SLICE_KIND_MARK), record(1100, 1), record(1300, 2),
                     record(1400, 3)])
    trace = decode_buffer(words)
    ev = trace.events
    assert trace.attempted == 9 and trace.overflow == 2 and trace.capacity == 8
    assert trace.incomplete == 0 and trace.metadata["slices_marks"] == 1
    # warp 1: mark at 1000, spans 1000-1100, 1100-1300, 1300-1400
    w1 = ev[ev["tid"] == 6]
    assert w1["start_ns"].tolist() == [1000, 1100, 1300]
    assert w1["dur_ns"].tolist() == [100, 200, 100]
    assert w1["tag"].tolist() == [1, 2, 3] and set(w1["sm"]) == {4} and set(w1["warp"]) == {2}
    w0 = ev[ev["tid"] == 5]
    assert w0["start_ns"].tolist() == [base, base + 0x80, base + 0x150]
    assert w0["dur_ns"].tolist() == [0x80, 0xC0, 0]
    assert w0["payload"].tolist() == [0, 9, 0]
    assert w0["kind"].tolist() == [L.KIND_SPAN, L.KIND_SPAN, L.KIND_INSTANT]
    assert (np.diff(ev["start_ns"]) >= 0).all()


def test_unclosed_warp_keeps_its_records_and_warns():
    words = make(1, 4)
    open_slice(words, 0, 4, base=100, tid=1, sm=0, warp=0, recs=[record(150, 1), record(170, 2)])
    with pytest.warns(ProfileWarning, match="never called close"):
        trace = decode_buffer(words)
    assert len(trace.events) == 2 and trace.metadata["slices_unclosed_warps"] == 1
    assert trace.metadata["slices_unclosed_full"] == 0


def test_records_of_warps_without_a_slice_are_counted_as_overflow():
    words = make(1, 2)
    words[2] = 7
    open_slice(words, 0, 2, base=0, tid=0, sm=0, warp=0, count=1, recs=[record(5, 1)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trace = decode_buffer(words)
    assert trace.attempted == 8 and trace.overflow == 7 and len(trace.events) == 1


def test_claimed_but_unwritten_record_is_incomplete():
    words = make(1, 3)
    open_slice(words, 0, 3, base=0, tid=0, sm=0, warp=0, count=2, recs=[record(5, 1)])
    trace = decode_buffer(words)
    assert trace.incomplete == 1 and len(trace.events) == 1


def test_header_that_disagrees_with_the_size_is_an_error():
    words = make(2, 4)[:-1]
    with pytest.raises(ProfileBufferError, match="header says"):
        decode_buffer(words)


def start_record(t_lo, payload=0):
    return L.as_int64((L.slice_start_high(payload) << 32) | (t_lo & 0xFFFFFFFF))


def test_explicit_start_pairs_overlap_and_carry_32_bit_payloads():
    # a consumer warp as a warp-specialised GEMM writes it: wait k nests in mma k-1, both end
    # at the same read; mma k-1 started a k-tile period earlier than the record before it
    words = make(1, 10)
    base = (3 << 32) + 0xFFFFFF00  # the low word wraps inside the pairs
    t = [base + d for d in (0x10, 0x40, 0x90, 0x100, 0x180)]
    epi_payload = 70000 * 65536 + 12  # over 31 bits: the int32 payload of the flat format
    recs = [
        start_record(t[0], 0), record(t[1], 3, payload=0),  # wait 0: t0..t1
        start_record(t[2], 1), record(t[3], 3, payload=1),  # wait 1: t2..t3
        start_record(t[1], 0), record(t[3], 4, payload=0),  # mma 0: t1..t3, starts before wait 1
        start_record(t[0], epi_payload), record(t[4], 9, payload=epi_payload & L.MAX_SLICE_PAYLOAD),
    ]
    open_slice(words, 0, 10, base=base, tid=2, sm=1, warp=4, count=len(recs), recs=recs)
    trace = decode_buffer(words)
    assert trace.attempted == 8 and trace.overflow == 0 and trace.incomplete == 0
    assert trace.metadata["slices_region_starts"] == 4 and len(trace.events) == 4
    by_tag = {(int(e["tag"]), int(e["payload"])): (int(e["start_ns"]), int(e["dur_ns"]))
              for e in trace.events}
    assert by_tag[(3, 0)] == (t[0], t[1] - t[0])
    assert by_tag[(3, 1)] == (t[2], t[3] - t[2])
    assert by_tag[(4, 0)] == (t[1], t[3] - t[1])
    signed = np.array([epi_payload], dtype=np.int64).astype(np.uint32).view(np.int32)[0]
    assert by_tag[(9, int(signed))] == (t[0], t[4] - t[0])


def test_a_start_whose_span_overflowed_is_a_boundary_not_an_event():
    words = make(1, 3)
    recs = [record(110, 1), start_record(105, 1 << 20), record(130, 2, payload=1)]
    open_slice(words, 0, 3, base=100, tid=0, sm=0, warp=0, count=3, recs=recs)
    assert [(int(e["start_ns"]), int(e["dur_ns"]), int(e["payload"])) for e in decode_buffer(words).events] == [
        (100, 10, 0), (105, 25, (1 << 20) | 1)]
    # the last pair did not fit: its START took the last slot, its SPAN is counted lost
    recs = [record(110, 1), record(120, 2), start_record(90, 1 << 20)]
    open_slice(words, 0, 3, base=100, tid=0, sm=0, warp=0, count=4, recs=recs)
    trace = decode_buffer(words)
    assert trace.attempted == 4 and trace.overflow == 1 and trace.incomplete == 0
    assert [(int(e["start_ns"]), int(e["dur_ns"])) for e in trace.events] == [(100, 10), (110, 10)]


def test_a_warp_that_recorded_from_divergent_code_is_flagged_and_warned_about():
    words = make(2, 4)
    open_slice(words, 0, 4, base=100, tid=1, sm=0, warp=0, count=2, recs=[record(150, 1), record(170, 2)])
    open_slice(words, 1, 4, base=100, tid=2, sm=0, warp=1, count=1, recs=[record(150, 1)])
    slice_at(words, 1, 4)[2] |= np.int64(1) << L.SLICE_DIVERGED_BIT
    with pytest.warns(ProfileWarning, match="divergent code"):
        trace = decode_buffer(words)
    assert trace.metadata["slices_diverged_warps"] == 1 and len(trace.events) == 3
    assert trace.attempted == 3 and trace.overflow == 0  # the flag leaves the count alone


def fit_word(records):
    """Slice word 3 as the device's open writes it."""
    return records | (L.SLICE_OPEN_MAGIC << L.SLICE_MAGIC_SHIFT)


def test_a_slice_cut_short_by_an_address_boundary_counts_the_rest_as_overflow():
    words = make(2, 6)
    open_slice(words, 0, 6, base=10, tid=0, sm=0, warp=0, count=5,
               recs=[record(20 + i, 1) for i in range(5)])
    open_slice(words, 1, 6, base=10, tid=1, sm=0, warp=1, count=5,
               recs=[record(20 + i, 1) for i in range(2)])
    slice_at(words, 0, 6)[3] = fit_word(6)
    slice_at(words, 1, 6)[3] = fit_word(2)  # only two record slots below the boundary
    with pytest.warns(ProfileWarning, match="4 GiB boundary"):
        trace = decode_buffer(words)
    assert np.bincount(trace.events["tid"]).tolist() == [5, 2]
    assert trace.attempted == 10 and trace.overflow == 3 and trace.capacity == 8
    assert trace.metadata["slices_cut_warps"] == 1 and trace.metadata["slices_cut_records"] == 4
    assert trace.incomplete == 0


def test_buffers_without_the_fit_word_decode_as_before():
    words = make(1, 3)
    open_slice(words, 0, 3, base=0, tid=0, sm=0, warp=0, count=4, recs=[record(i, 1) for i in range(3)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trace = decode_buffer(words)
    assert len(trace.events) == 3 and trace.overflow == 1 and trace.capacity == 3
    assert trace.metadata["slices_cut_warps"] == 0


def test_a_long_open_full_slice_warns_that_its_overflow_is_modulo_the_count_width():
    words = make(2, 3)
    long_bit = 1 << L.SLICE_LONG_OPEN_BIT
    # warp 0: full, long open, its count wrapped to 1 (below the 3 records it stored)
    open_slice(words, 0, 3, base=0, tid=0, sm=0, warp=0, count=1, recs=[record(i, 1) for i in range(3)])
    slice_at(words, 0, 3)[2] |= long_bit
    # warp 1: long open but room to spare: its count is exact
    open_slice(words, 1, 3, base=0, tid=1, sm=0, warp=1, count=2, recs=[record(i, 1) for i in range(2)])
    slice_at(words, 1, 3)[2] |= long_bit
    with pytest.warns(ProfileWarning, match="modulo"):
        trace = decode_buffer(words)
    assert np.bincount(trace.events["tid"]).tolist() == [3, 2]
    wrap = 1 << L.SLICE_COUNT_BITS
    assert trace.overflow == wrap + 1 - 3  # the smallest count consistent with what was stored
    assert trace.metadata["slices_long_open_warps"] == 2
    assert trace.metadata["slices_count_modulo_warps"] == 1


def test_placement_model_cuts_only_the_slice_that_reaches_a_4_gib_boundary():
    per_warp, n = 10, 5
    slice_bytes = 8 * (L.SLICE_HEADER_WORDS + per_warp)
    # records of slice 2 start 3 slots below the boundary: 2 fit (the last slot is never used)
    records_2 = (9 << 32) - 3 * 8
    buffer = records_2 - 8 * (L.SLICES_HEADER_WORDS + L.SLICE_HEADER_WORDS) - 2 * slice_bytes
    assert L.slice_records_that_fit(buffer, n, per_warp).tolist() == [10, 10, 2, 10, 10]
    assert (L.slice_records_that_fit(1 << 20, n, per_warp) == per_warp).all()
    # a slice ending exactly at the boundary loses its last slot
    records_0 = (3 << 32) - 8 * per_warp
    at = records_0 - 8 * (L.SLICES_HEADER_WORDS + L.SLICE_HEADER_WORDS)
    assert L.slice_records_that_fit(at, 1, per_warp).tolist() == [per_warp - 1]


def test_allocator_places_slices_clear_of_address_boundaries(monkeypatch):
    torch = pytest.importorskip("torch")
    from cute_prof import decode_slices

    made = []
    real_zeros = torch.zeros


    def zeros(*args, **kwargs):
        t = real_zeros(*args, **kwargs)
        made.append(t)
        return t

    addresses = iter([(5 << 32) - 200, 1 << 20])  # first: slice 1 would cross 5 << 32
    monkeypatch.setattr(torch, "zeros", zeros)
    monkeypatch.setattr(torch.Tensor, "data_ptr", lambda self: next(addresses), raising=False)
    words = decode_slices.allocate_slices_buffer(4, 8, device="cpu")
    assert len(made) == 2 and words is made[1]


def test_a_decoded_slices_trace_saves_and_loads_whole(tmp_path):
    """A slices trace's slots are the slices buffer's word indices, not flat record slots:
    saving re-packs them (before, records landed above the counter and were lost)."""
    import cute_prof

    words = make(80, 64)  # half the slices never opened: capacity above every record's slot
    for s in range(40):
        open_slice(words, s, 64, base=10**9 + 1000 * s, tid=s, sm=s % 4, warp=0, count=4,
                   recs=[record(10**9 + 1000 * s + 100 * i, i + 1) for i in range(4)])
    trace = decode_buffer(words)
    assert trace.events["slot"].max() < trace.capacity
    loaded = cute_prof.load_trace(cute_prof.save_trace(tmp_path / "t.npz", trace))
    assert len(loaded) == len(trace) == 160 and loaded.incomplete == 0
    assert np.array_equal(np.sort(loaded.events["start_ns"]), np.sort(trace.events["start_ns"]))
