"""Property tests: whatever bytes the decoder is handed, it either decodes them with its
accounting intact or raises ProfileBufferError -- never any other exception, and never a
numpy RuntimeWarning (overflowing casts would mean silently wrong numbers)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from cute_prof import ProfileBufferError, ProfileWarning, decode_buffer, decode_events, layout

TAGS = ["a", "b", "c"]
INT64 = st.integers(-(2**63), 2**63 - 1)


def decode_or_reject(buf, **options):
    """Decode with numpy warnings as errors; return (trace, events) or None if rejected."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        warnings.simplefilter("ignore", ProfileWarning)
        try:
            trace = decode_buffer(buf, TAGS, **options)
        except ProfileBufferError:
            with pytest.raises(ProfileBufferError):
                decode_events(buf, TAGS, **options)
            return None
        events, overflow = decode_events(buf, TAGS, **options)
    assert overflow == trace.overflow
    assert len(events) == len(trace)
    return trace, events


def check_accounting(buf: np.ndarray, trace) -> None:
    counter = int(buf[0]) & layout.COUNTER_MASK  # the bits above are the launch epoch
    capacity = (buf.shape[0] - 1) // 4
    claimed = min(counter, capacity)
    assert trace.capacity == capacity and trace.attempted == counter
    assert trace.overflow == max(0, counter - capacity)
    assert len(trace) + trace.clock_syncs.shape[0] + trace.incomplete + trace.invalid == claimed
    slots = np.concatenate([trace.events["slot"], trace.clock_syncs["slot"]])
    assert np.unique(slots).shape[0] == slots.shape[0], "a slot was decoded twice"
    assert (slots < claimed).all() and (slots >= 0).all()
    starts = trace.events["start_ns"]
    assert (starts[1:] >= starts[:-1]).all(), "events must be sorted by start"
    durations = trace.events["dur_ns"]
    assert (starts >= 0).all() and (durations >= 0).all(), "the validity rules were bypassed"
    assert (starts <= np.iinfo(np.int64).max - durations).all(), "an end beyond int64"
    assert sum(trace.invalid_reasons.values()) == trace.invalid


@st.composite
def device_like_buffers(draw, kinds=(layout.KIND_SPAN, layout.KIND_INSTANT)):
    """Buffers written as the device writes them: capacity, attempted count, records."""
    capacity = draw(st.integers(1, 40))
    attempted = draw(st.integers(0, 60))
    n = attempted
    ints = lambda lo, hi: hnp.arrays(np.int64, n, elements=st.integers(lo, hi))  # noqa: E731
    buf = np.zeros(layout.buffer_words(capacity), dtype=np.int64)
    layout.write_records(
        buf,
        # one launch's starts lie together (layout.LAUNCH_GAP_LIMIT_NS), anywhere in int64
        draw(st.integers(0, 2**62)) + draw(ints(0, 2**40)),
        draw(ints(0, 2**40)),
        draw(ints(0, layout.MAX_TAG_ID)),
        draw(ints(-(2**31), 2**31 - 1)),
        payload=draw(ints(-(2**31), 2**31 - 1)),
        kind=draw(hnp.arrays(np.int64, n, elements=st.sampled_from(kinds))),
        sm=draw(ints(0, layout.MAX_SM_ID)),
        warp=draw(ints(0, layout.MAX_WARP_ID)),
    )
    return buf


@given(device_like_buffers())
def test_clean_buffers_decode_every_claimed_slot(buf):
    result = decode_or_reject(buf)
    assert result is not None, "a well-formed buffer must decode"
    trace, events = result
    check_accounting(buf, trace)
    counter, capacity = int(buf[0]), (buf.shape[0] - 1) // 4
    assert len(events) + trace.incomplete == min(counter, capacity)
    assert trace.incomplete == 0 and trace.invalid == 0


@given(device_like_buffers(), st.data())
def test_unwritten_slots_are_incomplete_and_the_rest_are_exact(buf, data):
    claimed = min(int(buf[0]), (buf.shape[0] - 1) // 4)
    assume(claimed > 0)
    wiped = data.draw(st.sets(st.integers(0, claimed - 1)))
    original = decode_buffer(buf.copy(), TAGS).events
    for slot in wiped:  # claimed but never written: the device trapped before its store
        buf[layout.record_word_index(slot) : layout.record_word_index(slot) + 4] = 0
    trace, events = decode_or_reject(buf)
    check_accounting(buf, trace)
    assert trace.incomplete == len(wiped)
    assert len(events) + trace.incomplete == claimed
    kept = original[~np.isin(original["slot"], list(wiped))]
    np.testing.assert_array_equal(np.sort(trace.events, order="slot"), np.sort(kept, order="slot"))


@given(
    device_like_buffers(kinds=(0, 1, 2, 3)),
    st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 63)), max_size=20),
    st.one_of(st.none(), st.floats(1e7, 1e11)),
)
def test_bit_flips_never_break_the_decoder(buf, flips, clock_hz):
    for position, bit in flips:
        index = position % buf.shape[0]
        word = buf[index : index + 1].view(np.uint64)  # a view: flips the bit in buf
        word ^= np.uint64(1 << bit)
    result = decode_or_reject(buf, clock_hz=clock_hz)
    if result is not None:
        check_accounting(buf, result[0])


@given(hnp.arrays(np.int64, st.integers(0, 64), elements=INT64))
def test_random_words_decode_or_raise(buf):
    result = decode_or_reject(buf)
    if result is not None:
        check_accounting(buf, result[0])


@given(
    hnp.arrays(np.int64, st.integers(0, 30).map(lambda k: 1 + 4 * k), elements=INT64),
    st.integers(0, layout.MAX_PLAUSIBLE_COUNTER),
)
def test_random_records_with_plausible_counters(buf, counter):
    assume(buf.shape[0] >= 5)
    buf[0] = counter
    result = decode_or_reject(buf, clock_hz=1.5e9)
    assert result is not None, "valid shape and counter must decode with a clock rate given"
    check_accounting(buf, result[0])


@given(device_like_buffers(), st.integers(1, 200))
def test_truncated_buffers_are_rejected_or_consistent(buf, cut):
    truncated = buf[: max(0, buf.shape[0] - cut)]
    result = decode_or_reject(truncated)
    if (truncated.shape[0] - 1) % 4 or truncated.shape[0] < 5:
        assert result is None
    else:
        check_accounting(truncated, result[0])


@given(
    st.sampled_from(
        [np.int8, np.int16, np.int32, np.uint32, np.uint64, np.float32, np.float64, np.bool_,
         np.complex128]
    ),
    st.integers(0, 41),
)
def test_wrong_dtypes_are_rejected(dtype, length):
    with pytest.raises(ProfileBufferError):
        decode_buffer(np.zeros(length, dtype=dtype), TAGS)


# bits 40..62 of the counter word are the launch epoch, so only a negative word is absurd
@given(st.integers(-(2**63), -1))
def test_absurd_counters_are_rejected(counter):
    buf = np.zeros(layout.buffer_words(3), dtype=np.int64)
    buf[0] = counter
    with pytest.raises(ProfileBufferError, match="counter"):
        decode_buffer(buf, TAGS)
