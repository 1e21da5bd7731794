"""A record that starts far outside its launch's time window (a flipped high bit, a kernel
writing over the buffer) is invalid, reason ``outside_launch``: one corrupt word cannot drag a
trace's time origin back (or forward) by months, where the JSON's microsecond doubles no
longer keep whole nanoseconds and the slices of a track stop nesting."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from cute_prof import ProfileWarning, decode_buffer, layout
from cute_prof import decode as decoder
from cute_prof.export import export_trace
from cute_prof.storage import load_trace
from tests.trace_checks import json_nesting_violations

TAGS = ["outer", "inner"]
T0 = 1_790_000_000_000_000_000  # a %globaltimer reading: ns since 1970, about 2**60.6
N = 40  # 20 outer regions, each holding one inner region


def nested_buffer(grid=0, t0=T0, buf=None):
    """N records on one track: outer [t, t + 1000), inner [t + 3, t + 997), t = t0 + 2000 k."""
    buf = np.zeros(layout.buffer_words(2 * N), dtype=np.int64) if buf is None else buf
    k = np.arange(N // 2)
    start = np.stack([t0 + 2000 * k, t0 + 2000 * k + 3], axis=1).ravel()
    dur = np.tile([1000, 994], N // 2)
    layout.write_records(buf, start, dur, np.tile([0, 1], N // 2), 0, grid=grid)
    return buf


def decode(buf):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ProfileWarning)
        return decode_buffer(buf, TAGS)


def flip_start_bit(buf, slot, bit):
    word = layout.record_word_index(slot, layout.WORD_START)
    buf[word] = layout.as_int64(int(buf[word]) ^ (1 << bit))


def test_the_reason_is_documented_in_the_decoder():
    assert decoder.INVALID_REASONS[-1] == "outside_launch"
    assert layout.LAUNCH_GAP_LIMIT_NS == 1 << 42


@pytest.mark.parametrize("bit", [43, 50, 55, 59, 60, 62])
def test_one_flipped_high_bit_of_a_start_makes_that_record_invalid(bit):
    buf = nested_buffer()
    flip_start_bit(buf, 7, bit)  # an inner region; bits 59/60 of T0 are set, so it moves back
    trace = decode(buf)
    assert trace.invalid_reasons == {"outside_launch": 1} and trace.invalid == 1
    assert len(trace) == N - 1 and 7 not in trace.events["slot"]
    assert int(trace.events["start_ns"].min()) == T0  # the time origin stays with the launch
    assert trace.launches[0]["records"] == N - 1
    assert trace.launches[0]["first_ns"] == T0


def test_json_of_a_corrupt_buffer_still_nests_as_doubles(tmp_path):
    buf = nested_buffer()
    flip_start_bit(buf, 7, 61)  # months before the launch: the old time origin
    path = export_trace(decode(buf), tmp_path / "t.json")
    doc = json.loads(path.read_text())  # as a viewer reads it: microseconds as doubles
    assert json_nesting_violations(doc) == []
    assert json_nesting_violations(path) == []
    ts = [e["ts"] for e in doc["traceEvents"] if e.get("ph") == "X"]
    assert min(ts) == 0 and max(ts) < 1e3 * N


def test_a_flipped_low_bit_stays_a_record():
    buf = nested_buffer()
    flip_start_bit(buf, 7, 20)  # ~1 ms later: odd, but inside the launch's window
    trace = decode(buf)
    assert trace.invalid == 0 and len(trace) == N


def test_launches_hours_apart_are_each_their_own_window():
    buf = nested_buffer(grid=1)
    hours = 3 * 3600 * 10**9  # longer than the limit (2**42 ns)
    assert hours > 1 << 42
    # a second launch (another grid id) into the same buffer, three hours later
    big = np.zeros(layout.buffer_words(2 * N + N), dtype=np.int64)
    nested_buffer(grid=1, buf=big)
    k = np.arange(N // 2)
    layout.write_records(big, T0 + hours + 2000 * k, 1000, 0, 5, grid=2)
    trace = decode(big)
    assert trace.invalid == 0 and len(trace) == N + N // 2
    assert len(trace.launches) == 2
    del buf


def test_the_largest_group_wins_and_the_earliest_on_a_tie():
    limit, outside_launch = layout.LAUNCH_GAP_LIMIT_NS, decoder.outside_launch
    start = np.array([0, 5, 10, limit * 3, limit * 3 + 1], dtype=np.int64)
    launch = np.zeros(5, dtype=np.int32)
    assert outside_launch(start, launch).tolist() == [False, False, False, True, True]
    two = np.array([100, 100 + 2 * limit], dtype=np.int64)
    assert outside_launch(two, np.zeros(2, np.int32)).tolist() == [False, True]
    # per launch: launch 1's lone record far from launch 0 is its own launch's whole window
    assert outside_launch(two, np.array([0, 1], np.int32)) is None
    assert outside_launch(np.array([7], np.int64), np.zeros(1, np.int32)) is None


def test_json_trace_read_back_follows_the_same_rule(tmp_path):
    path = export_trace(decode(nested_buffer()), tmp_path / "t.json")
    doc = json.loads(path.read_text())
    records = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    records[3]["args"]["start_ns"] = records[3]["args"]["start_ns"] + (1 << 55)
    path.write_text(json.dumps(doc))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ProfileWarning)
        trace = load_trace(path)
    assert trace.invalid_reasons == {"outside_launch": 1} and len(trace) == N - 1


def corrupt_record(buf, slot, start_bit):
    """A start bit and a launch (grid id) bit of one record flipped: that record is then a
    launch of its own, far from every other record (fuzz case 15368's pattern)."""
    flip_start_bit(buf, slot, start_bit)
    word = layout.record_word_index(slot, layout.WORD_TID)
    buf[word] = layout.as_int64(int(buf[word]) ^ (1 << layout.GRID_SHIFT))


@pytest.mark.parametrize("bit", [54, 55, 59, 60])  # bits set in T0: months to years earlier
def test_a_record_with_corrupt_launch_bits_cannot_move_the_time_origin(tmp_path, bit):
    # 256 outer regions [t, t + 1000) each holding an inner one [t + 1, t + 1000), 2001 ns
    # apart, so their starts fall at every phase of the doubles a far time origin leaves
    pairs = 256
    buf = np.zeros(layout.buffer_words(2 * pairs), dtype=np.int64)
    t = T0 + 2001 * np.arange(pairs)
    layout.write_records(buf, np.stack([t, t + 1], axis=1).ravel(), np.tile([1000, 999], pairs),
                         np.tile([0, 1], pairs), 0)
    corrupt_record(buf, 7, bit)
    trace = decode(buf)
    assert len(trace) + trace.invalid == 2 * pairs
    path = export_trace(trace, tmp_path / "t.json")
    assert json_nesting_violations(path) == []
    # as a viewer reads it: microseconds as doubles
    assert json_nesting_violations(json.loads(path.read_text())) == []
    starts = trace.events["start_ns"]
    assert int(starts.max()) - int(starts.min()) <= layout.TRACE_WINDOW_NS


def test_launches_days_apart_stay_and_the_largest_window_wins():
    day = 86_400 * 10**9
    start = np.array([0, 5, 3 * day, 3 * day + 5, 60 * day], dtype=np.int64)  # five launches
    launch = np.arange(5, dtype=np.int32)
    assert decoder.outside_launch(start, launch).tolist() == [False] * 4 + [True]
    # a tie between two windows: the earliest one wins, whatever the launches
    tie = np.array([10, 11, 60 * day, 60 * day + 1], dtype=np.int64)
    assert decoder.outside_launch(tie, np.array([0, 1, 0, 1], np.int32)).tolist() == [
        False, False, True, True]


def test_a_launch_all_outside_the_trace_window_keeps_no_records():
    buf = np.zeros(layout.buffer_words(N + 1), dtype=np.int64)
    nested_buffer(buf=buf)
    layout.write_records(buf, T0 - (1 << 55), 1000, 0, 0, grid=1)  # a launch of its own
    trace = decode(buf)
    assert trace.invalid_reasons == {"outside_launch": 1} and len(trace) == N
    assert sorted(launch["records"] for launch in trace.launches) == [0, N]
