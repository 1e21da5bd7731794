"""The decoder's validity rules (``decode.INVALID_REASONS``): a buffer with exactly one bad
record of each kind gives that record counted invalid with its reason, every other record
decoded exactly, and the reason named in the loss warning."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from cute_prof import ProfileWarning, decode_buffer, layout
from cute_prof.decode import INVALID_REASONS, warn_about_losses

INT64_MAX = 2**63 - 1
CLOCK_HZ = 1.0e9  # 1 cycle = 1 ns: conversions are easy to compute by hand
COUNT = 7
BAD_SLOT = 3
TAGS = ["a", "b", "c"]


def good_buffer() -> np.ndarray:
    """Seven valid spans on slots 0..6: start 1000*(i+1), dur 10*(i+1), tag i % 3, tid i."""
    buf = np.zeros(layout.buffer_words(COUNT), dtype=np.int64)
    slots = np.arange(COUNT)
    layout.write_records(buf, 1000 * (slots + 1), 10 * (slots + 1), slots % 3, slots,
                         sm=slots, warp=slots)
    return buf


def set_word(buf: np.ndarray, word: int, value: int) -> None:
    buf[layout.record_word_index(BAD_SLOT, word)] = layout.as_int64(value)


def or_bits(buf: np.ndarray, word: int, bits: int) -> None:
    index = layout.record_word_index(BAD_SLOT, word)
    buf[index] = layout.as_int64((int(buf[index]) & (2**64 - 1)) | bits)


def set_kind(buf: np.ndarray, kind: int) -> None:
    index = layout.record_word_index(BAD_SLOT, layout.WORD_TAG)
    buf[index] = layout.encode_tag_words(BAD_SLOT % 3, kind=kind)


def reserved_tag_bit(buf):
    or_bits(buf, layout.WORD_TAG, 1 << layout.TAG_RESERVED_SHIFT)


def tag_sign_bit(buf):
    or_bits(buf, layout.WORD_TAG, 1 << 63)


def reserved_tid_bit(buf):
    or_bits(buf, layout.WORD_TID, 1 << layout.TID_RESERVED_SHIFT)


def tid_sign_bit(buf):
    or_bits(buf, layout.WORD_TID, 1 << 63)


def unknown_kind(buf):
    set_kind(buf, 9)


def start_months_away(buf):
    set_word(buf, layout.WORD_START, 1000 * (BAD_SLOT + 1) + (1 << 55))  # a flipped high bit


def negative_start(buf):
    set_word(buf, layout.WORD_START, -1000)


def negative_duration(buf):
    set_word(buf, layout.WORD_DUR, -5)


def negative_instant_duration(buf):
    set_kind(buf, layout.KIND_INSTANT)
    set_word(buf, layout.WORD_DUR, -1)


def end_beyond_int64(buf):
    set_word(buf, layout.WORD_START, INT64_MAX - 5)
    set_word(buf, layout.WORD_DUR, 6)


def duration_int64_max(buf):  # the fuzz finding of issue 16: the end wrapped around
    set_word(buf, layout.WORD_DUR, INT64_MAX)


def clock_span_ending_before_its_duration(buf):
    set_kind(buf, layout.KIND_CLOCK_SPAN)
    set_word(buf, layout.WORD_START, 100)  # ends at 100 ns
    set_word(buf, layout.WORD_DUR, 101)  # lasted 101 ns: it would start at -1


def clock_span_cycles_beyond_int64_ns(buf):
    set_kind(buf, layout.KIND_CLOCK_SPAN)
    set_word(buf, layout.WORD_START, INT64_MAX)
    set_word(buf, layout.WORD_DUR, INT64_MAX)  # 9.2e18 ns: past the conversion's limit


def clock_span_negative_cycles(buf):
    set_kind(buf, layout.KIND_CLOCK_SPAN)
    set_word(buf, layout.WORD_DUR, -3)


def clock_sync_negative_timer(buf):
    set_kind(buf, layout.KIND_CLOCK_SYNC)
    set_word(buf, layout.WORD_START, -7)


CASES = [
    (reserved_tag_bit, "reserved_bits"),
    (tag_sign_bit, "reserved_bits"),
    (reserved_tid_bit, "reserved_bits"),
    (tid_sign_bit, "reserved_bits"),
    (unknown_kind, "unknown_kind"),
    (negative_start, "negative_start"),
    (negative_duration, "negative_duration"),
    (negative_instant_duration, "negative_duration"),
    (end_beyond_int64, "end_overflow"),
    (duration_int64_max, "end_overflow"),
    (clock_span_ending_before_its_duration, "clock_overflow"),
    (clock_span_cycles_beyond_int64_ns, "clock_overflow"),
    (clock_span_negative_cycles, "negative_duration"),
    (clock_sync_negative_timer, "negative_start"),
    (start_months_away, "outside_launch"),
]


@pytest.mark.parametrize("corrupt, reason", CASES, ids=[c.__name__ for c, _ in CASES])
def test_one_bad_record_is_invalid_with_its_reason_and_the_rest_decode(corrupt, reason):
    buf = good_buffer()
    corrupt(buf)
    trace = decode_buffer(buf, TAGS, clock_hz=CLOCK_HZ)
    assert trace.invalid == 1
    assert trace.invalid_reasons == {reason: 1}
    assert trace.incomplete == 0 and trace.clock_syncs.shape[0] == 0
    others = [i for i in range(COUNT) if i != BAD_SLOT]
    events = trace.events
    np.testing.assert_array_equal(events["slot"], others)
    np.testing.assert_array_equal(events["start_ns"], [1000 * (i + 1) for i in others])
    np.testing.assert_array_equal(events["dur_ns"], [10 * (i + 1) for i in others])
    np.testing.assert_array_equal(events["tag"], [i % 3 for i in others])
    np.testing.assert_array_equal(events["tid"], others)
    np.testing.assert_array_equal(events["sm"], others)
    with pytest.warns(ProfileWarning, match=f"1 of 7 records are invalid \\(1 {reason.replace('_', ' ')}\\)"):
        warn_about_losses(trace)


def test_every_reason_is_exercised():
    assert {reason for _, reason in CASES} == set(INVALID_REASONS)


def test_first_rule_that_applies_names_the_record():
    buf = good_buffer()
    set_word(buf, layout.WORD_START, -1)
    set_word(buf, layout.WORD_DUR, -1)
    or_bits(buf, layout.WORD_TID, layout.TID_RESERVED_MASK)
    trace = decode_buffer(buf, TAGS)
    assert trace.invalid_reasons == {"reserved_bits": 1}


def test_missing_magic_is_incomplete_even_with_other_faults():
    buf = good_buffer()
    set_word(buf, layout.WORD_TAG, 0)
    set_word(buf, layout.WORD_START, -1)
    trace = decode_buffer(buf, TAGS)
    assert trace.incomplete == 1 and trace.invalid == 0 and trace.invalid_reasons == {}


@pytest.mark.parametrize("start, dur, kind, ends", [
    ([0, 0], [INT64_MAX, 0], [0, 1], [0, INT64_MAX]),  # starts at 0, an end at 2**63 - 1
    ([INT64_MAX - 6, INT64_MAX], [6, 0], [0, 1], [INT64_MAX, INT64_MAX]),  # starts near 2**63
])
def test_limits_that_are_still_valid_decode_exactly(start, dur, kind, ends):
    # one buffer each: records near 0 and near 2**63 in one trace are outside_launch
    buf = np.zeros(layout.buffer_words(2), dtype=np.int64)
    layout.write_records(buf, start, dur, 0, 0, kind=kind)
    trace = decode_buffer(buf, TAGS)
    assert trace.invalid == 0
    got = trace.events["start_ns"].astype(object) + trace.events["dur_ns"].astype(object)
    assert sorted(got) == ends


def test_clock_span_exactly_at_zero_start_is_valid():
    buf = np.zeros(layout.buffer_words(1), dtype=np.int64)
    layout.write_records(buf, [2000], [2000], 0, 0, kind=layout.KIND_CLOCK_SPAN)
    trace = decode_buffer(buf, TAGS, clock_hz=CLOCK_HZ)
    assert trace.invalid == 0
    assert trace.events[["start_ns", "dur_ns", "dur_cycles"]].tolist() == [(0, 2000, 2000)]


def test_invalid_clock_spans_alone_need_no_clock_rate():
    """A clock span rejected by a rate-free rule must not demand a clock rate."""
    buf = good_buffer()
    clock_span_negative_cycles(buf)
    trace = decode_buffer(buf, TAGS)
    assert trace.invalid_reasons == {"negative_duration": 1}


def test_counts_per_reason_add_up_over_many_bad_records():
    rng = np.random.default_rng(3)
    count = 5000
    buf = np.zeros(layout.buffer_words(count), dtype=np.int64)
    layout.write_records(buf, rng.integers(0, 10**12, count), rng.integers(0, 10**6, count),
                         0, rng.integers(0, 100, count))
    records = buf[1:].reshape(count, 4)
    bad_start = rng.choice(count, 300, replace=False)
    records[bad_start, 0] = -rng.integers(1, 10**9, 300)
    rest = np.setdiff1d(np.arange(count), bad_start)
    bad_dur = rng.choice(rest, 200, replace=False)
    records[bad_dur, 1] = -1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trace = decode_buffer(buf, TAGS)
    assert trace.invalid_reasons == {"negative_start": 300, "negative_duration": 200}
    assert trace.invalid == 500 and len(trace) == count - 500
    assert (trace.events["start_ns"] >= 0).all() and (trace.events["dur_ns"] >= 0).all()
