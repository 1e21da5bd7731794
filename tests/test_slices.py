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
