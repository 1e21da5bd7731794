"""Decoding buffers built exactly as the device writes them (via layout.write_records)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from cute_prof import (
    ClockRateError,
    Event,
    ProfileBufferError,
    ProfileWarning,
    TagTable,
    Trace,
    allocate_profile_buffer,
    decode_buffer,
    decode_events,
    default_tag_table,
    layout,
)
from cute_prof.decode import fit_clock_rate


def empty(capacity: int) -> np.ndarray:
    return np.zeros(layout.buffer_words(capacity), dtype=np.int64)


def random_records(rng, count: int) -> dict:
    return {
        "start_ns": rng.integers(1_700_000_000_000_000_000, 1_700_000_000_100_000_000, count),
        "dur_ns": rng.integers(0, 1_000_000, count),
        "tag": rng.integers(0, 5, count),
        "tid": rng.integers(-(2**31), 2**31, count),
        "payload": rng.integers(-(2**31), 2**31, count),
        "sm": rng.integers(0, layout.MAX_SM_ID + 1, count),
        "warp": rng.integers(0, layout.MAX_WARP_ID + 1, count),
        "kind": rng.choice([layout.KIND_SPAN, layout.KIND_INSTANT], count),
    }


def write(buf, rec: dict) -> None:
    layout.write_records(
        buf, rec["start_ns"], rec["dur_ns"], rec["tag"], rec["tid"],
        payload=rec["payload"], kind=rec["kind"], sm=rec["sm"], warp=rec["warp"],
    )


TAGS = TagTable(["load", "mma", "store", "epilogue", "sync"])


def test_every_field_round_trips():
    rng = np.random.default_rng(0)
    count = 500
    rec = random_records(rng, count)
    buf = empty(count)
    write(buf, rec)
    trace = decode_buffer(buf, TAGS)
    assert len(trace) == count
    by_slot = trace.events[np.argsort(trace.events["slot"])]
    np.testing.assert_array_equal(by_slot["slot"], np.arange(count))
    for field in ("start_ns", "dur_ns", "tag", "tid", "payload", "sm", "warp", "kind"):
        np.testing.assert_array_equal(by_slot[field], rec[field], err_msg=field)
    assert (by_slot["dur_cycles"] == -1).all()
    assert trace.overflow == 0 and trace.incomplete == 0 and trace.invalid == 0
    assert trace.capacity == count and trace.attempted == count
    assert trace.tag_names == TAGS.names


def test_negative_and_extreme_tid_and_payload_survive_exactly():
    buf = empty(4)
    tids = [-1, -(2**31), 2**31 - 1, 0]
    payloads = [2**31 - 1, -1, 0, -(2**31)]
    layout.write_records(buf, [1, 2, 3, 4], 0, tag=0, tid=tids, payload=payloads)
    events, overflow = decode_events(buf, ["x"])
    assert [e.tid for e in events] == tids
    assert [e.payload for e in events] == payloads
    assert overflow == 0


def test_decode_events_matches_columnar_trace_and_builds_real_events():
    rng = np.random.default_rng(1)
    rec = random_records(rng, 50)
    buf = empty(50)
    write(buf, rec)
    trace = decode_buffer(buf, TAGS)
    events, overflow = decode_events(buf, TAGS)
    assert overflow == 0
    assert len(events) == len(trace)
    for event, row in zip(events, trace.events):
        expected = Event(
            name=TAGS.name(int(row["tag"])),
            tag_id=int(row["tag"]),
            tid=int(row["tid"]),
            start_ns=int(row["start_ns"]),
            dur_ns=int(row["dur_ns"]),
            sm=int(row["sm"]),
            warp=int(row["warp"]),
            payload=int(row["payload"]),
            kind=layout.KIND_NAMES[int(row["kind"])],
        )
        assert event == expected and hash(event) == hash(expected)
        assert event.end_ns == expected.start_ns + expected.dur_ns
        assert type(event.start_ns) is int


@pytest.mark.parametrize("capacity,attempted", [(1, 1), (5, 3), (5, 5), (5, 6), (8, 1000)])
def test_overflow_arithmetic(capacity, attempted):
    buf = empty(capacity)
    layout.write_records(buf, np.arange(attempted), 1, tag=0, tid=0)
    trace = decode_buffer(buf, ["a"])
    assert len(trace) == min(capacity, attempted)
    assert trace.overflow == max(0, attempted - capacity)
    assert trace.attempted == attempted
    events, overflow = decode_events(buf, ["a"])
    assert len(events) == min(capacity, attempted) and overflow == trace.overflow


def test_incomplete_slots_are_counted_not_decoded_and_warned():
    capacity = 6
    buf = empty(capacity)
    # the device claimed 5 slots but slots 1 and 3 were never written (e.g. kernel trapped)
    layout.write_records(buf, [100], 7, tag=1, tid=1, first_slot=0)
    layout.write_records(buf, [300], 7, tag=1, tid=1, first_slot=2)
    layout.write_records(buf, [500], 7, tag=1, tid=1, first_slot=4)
    buf[0] = 5
    trace = decode_buffer(buf, ["a", "b"])
    assert trace.incomplete == 2
    assert sorted(trace.events["slot"].tolist()) == [0, 2, 4]
    assert (trace.events["tag"] == 1).all(), "incomplete slots must not appear as tag 0"
    with pytest.warns(ProfileWarning, match=r"2 of 5 claimed slots"):
        events, _ = decode_events(buf, ["a", "b"])
    assert len(events) == 3


def test_no_warning_when_nothing_is_lost():
    buf = empty(2)
    layout.write_records(buf, [1, 2], 1, tag=0, tid=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        decode_events(buf, ["a"])


def test_slots_at_or_above_counter_are_ignored_even_if_written():
    buf = empty(4)
    layout.write_records(buf, [1, 2, 3, 4], 1, tag=0, tid=0)
    buf[0] = 2  # e.g. a stale buffer that was not reset: only 2 records belong to this run
    trace = decode_buffer(buf, ["a"])
    assert trace.events["slot"].tolist() == [0, 1]
    assert trace.incomplete == 0


def test_zero_counter_gives_empty_trace():
    trace = decode_buffer(empty(3), ["a"])
    assert len(trace) == 0 and trace.overflow == 0 and trace.incomplete == 0
    assert decode_events(empty(3), ["a"]) == ([], 0)


def test_unknown_tag_ids_get_placeholder_names():
    buf = empty(2)
    layout.write_records(buf, [1, 2], 1, tag=[0, 17], tid=0)
    events, _ = decode_events(buf, ["known"])
    assert [e.name for e in events] == ["known", "<unknown tag 17>"]
    assert [e.tag_id for e in events] == [0, 17]


def test_events_are_sorted_by_start_and_stable_for_ties():
    buf = empty(6)
    starts = [50, 10, 30, 10, 50, 10]
    layout.write_records(buf, starts, 1, tag=0, tid=list(range(6)))
    trace = decode_buffer(buf, ["a"])
    assert trace.events["start_ns"].tolist() == sorted(starts)
    # ties keep buffer (slot) order
    assert trace.events["slot"].tolist() == [1, 3, 5, 2, 0, 4]
    events, _ = decode_events(buf, ["a"])
    assert [e.tid for e in events] == [1, 3, 5, 2, 0, 4]


def test_complete_records_of_unknown_kind_are_counted_invalid():
    buf = empty(3)
    layout.write_records(buf, [1, 2, 3], 1, tag=0, tid=0, kind=[0, 9, 1])
    trace = decode_buffer(buf, ["a"])
    assert trace.invalid == 1 and len(trace) == 2
    with pytest.warns(ProfileWarning, match=r"1 of 3 records are invalid \(1 unknown kind\)"):
        decode_events(buf, ["a"])


def test_default_tag_table_is_used_when_none_given():
    tag = default_tag_table().id("test_decode::region")
    buf = empty(1)
    layout.write_records(buf, [5], 1, tag=tag, tid=0)
    events, _ = decode_events(buf)
    assert events[0].name == "test_decode::region"
    assert decode_buffer(buf).tag_name(tag) == "test_decode::region"


# --------------------------------------------------------------------- clock mode
CLOCK_HZ = 1_755_000_000.0


def write_sync_pairs(buf, sm: int, ns_points, hz=CLOCK_HZ, cycle0=10**12):
    ns_points = np.asarray(ns_points, dtype=np.int64)
    cycles = cycle0 + np.rint((ns_points - ns_points[0]) * hz / 1e9).astype(np.int64)
    layout.write_records(buf, ns_points, cycles, tag=0, tid=sm, sm=sm, kind=layout.KIND_CLOCK_SYNC)


def test_clock_spans_convert_with_rate_fitted_from_sync_pairs():
    buf = empty(16)
    base = 1_700_000_000_000_000_000
    for sm in (0, 5, 9):
        write_sync_pairs(buf, sm, [base, base + 40_000, base + 80_000])
    cycles = np.array([1755, 17_550, 3, 1_000_000])
    end_ns = base + np.array([10_000, 20_000, 30_000, 70_000])
    layout.write_records(buf, end_ns, cycles, tag=1, tid=[4, 5, 6, 7], kind=layout.KIND_CLOCK_SPAN)
    trace = decode_buffer(buf, ["sync", "work"])
    assert trace.clock_syncs.shape[0] == 9
    assert set(trace.clock_syncs["sm"].tolist()) == {0, 5, 9}
    assert len(trace) == 4, "sync pairs are calibration data, not events"
    rate = trace.metadata["clock_hz"]
    assert rate == pytest.approx(CLOCK_HZ, rel=1e-6)
    assert trace.metadata["clock_fit_sms"] == 3
    assert trace.metadata["clock_hz_rel_spread"] < 1e-6
    assert trace.metadata["clock_hz_source"] == "clock_sync"
    by_tid = trace.events[np.argsort(trace.events["tid"])]
    expected_dur = [round(int(c) * 1e9 / rate) for c in cycles]
    assert by_tid["dur_ns"].tolist() == expected_dur
    assert by_tid["start_ns"].tolist() == (end_ns - np.array(expected_dur)).tolist()
    assert by_tid["dur_cycles"].tolist() == cycles.tolist()
    assert (by_tid["kind"] == layout.KIND_CLOCK_SPAN).all()


def test_explicit_clock_hz_wins_and_needs_no_sync_records():
    buf = empty(2)
    layout.write_records(buf, [1_000_000, 2_000_000], [2000, 500], tag=0, tid=0,
                         kind=layout.KIND_CLOCK_SPAN)
    trace = decode_buffer(buf, ["a"], clock_hz=1e9)
    assert sorted(trace.events["dur_ns"].tolist()) == [500, 2000]
    assert trace.metadata["clock_hz"] == 1e9
    assert trace.metadata["clock_hz_source"] == "argument"


def test_clock_spans_without_rate_raise_with_instructions():
    buf = empty(2)
    layout.write_records(buf, [1, 2], [10, 20], tag=0, tid=0, kind=layout.KIND_CLOCK_SPAN)
    with pytest.raises(ClockRateError, match="clock_sync") as info:
        decode_buffer(buf, ["a"])
    assert "clock_hz" in str(info.value)
    assert isinstance(info.value, ProfileBufferError)


def test_one_pair_per_sm_is_not_enough():
    buf = empty(4)
    layout.write_records(buf, [1000, 5000], [10**9, 2 * 10**9], tag=0, tid=0, sm=[1, 2],
                         kind=layout.KIND_CLOCK_SYNC)
    layout.write_records(buf, [9000], [10], tag=0, tid=0, kind=layout.KIND_CLOCK_SPAN)
    with pytest.raises(ClockRateError, match="no usable fit"):
        decode_buffer(buf, ["a"])


def test_sync_pairs_too_close_in_time_are_not_used():
    buf = empty(4)
    write_sync_pairs(buf, 0, [1_000_000, 1_000_100])  # 100 ns apart
    layout.write_records(buf, [2_000_000], [10], tag=0, tid=0, kind=layout.KIND_CLOCK_SPAN)
    with pytest.raises(ClockRateError):
        decode_buffer(buf, ["a"])
    trace = decode_buffer(buf, ["a"], min_sync_span_ns=50)
    assert trace.metadata["clock_hz"] == pytest.approx(CLOCK_HZ, rel=1e-2)


def test_fit_takes_median_over_sms_and_reports_spread():
    buf = empty(12)
    rates = [1.5e9, 1.6e9, 1.7e9]
    for sm, hz in enumerate(rates):
        write_sync_pairs(buf, sm, [0, 1_000_000, 2_000_000, 3_000_000], hz=hz)
    trace = decode_buffer(buf, ["a"])
    fit = fit_clock_rate(trace.clock_syncs)
    assert fit["clock_hz"] == pytest.approx(1.6e9, rel=1e-6)
    assert fit["clock_hz_min"] == pytest.approx(1.5e9, rel=1e-6)
    assert fit["clock_hz_max"] == pytest.approx(1.7e9, rel=1e-6)
    assert fit["clock_hz_rel_spread"] == pytest.approx(0.2 / 1.6, rel=1e-4)
    assert fit["clock_fit_max_residual_ns"] < 1.0


def test_bad_clock_hz_argument_is_rejected():
    buf = empty(1)
    for bad in (0, -5, float("nan"), "fast", 1e15):
        with pytest.raises(ProfileBufferError):
            decode_buffer(buf, ["a"], clock_hz=bad)


# -------------------------------------------------------------------- inputs
def test_accepts_profile_buffer_torch_tensor_and_numpy():
    prof = allocate_profile_buffer(3, device="cpu")
    layout.write_records(prof.tensor.numpy(), [3, 1, 2], 1, tag=0, tid=0)
    from_buffer = decode_buffer(prof, ["a"])
    from_tensor = decode_buffer(prof.tensor, ["a"])
    from_numpy = decode_buffer(prof.numpy(), ["a"])
    for trace in (from_tensor, from_numpy):
        np.testing.assert_array_equal(trace.events, from_buffer.events)
    assert from_buffer.metadata["device"] == "cpu"
    assert from_buffer.metadata["capacity"] == 3


def test_big_endian_int64_is_accepted():
    buf = empty(2)
    layout.write_records(buf, [1, 2], 1, tag=0, tid=-3)
    swapped = buf.astype(">i8")
    np.testing.assert_array_equal(decode_buffer(swapped, ["a"]).events, decode_buffer(buf, ["a"]).events)


def test_user_metadata_is_merged():
    trace = decode_buffer(empty(1), ["a"], metadata={"kernel": "gemm", "device": "H100"})
    assert trace.metadata["kernel"] == "gemm" and trace.metadata["device"] == "H100"


@pytest.mark.parametrize(
    "bad",
    [
        np.zeros(9, dtype=np.int32),
        np.zeros(9, dtype=np.float64),
        np.zeros(9, dtype=np.uint64),
        np.zeros((3, 3), dtype=np.int64),
        np.zeros(1, dtype=np.int64),
        np.zeros(4, dtype=np.int64),
        np.zeros(8, dtype=np.int64),
        np.zeros(0, dtype=np.int64),
        np.array([-1, 0, 0, 0, 0], dtype=np.int64),
        np.array([np.iinfo(np.int64).min, 0, 0, 0, 0], dtype=np.int64),
        torch.zeros(9, dtype=torch.int32),
        torch.zeros(9, dtype=torch.float64),
        [0, 0, 0, 0, 0],
        None,
        "buffer",
    ],
)
def test_bad_inputs_raise_profile_buffer_error(bad):
    with pytest.raises(ProfileBufferError):
        decode_buffer(bad, ["a"])
    with pytest.raises(ProfileBufferError):
        decode_events(bad, ["a"])


def test_trace_from_events_round_trips_columns_and_names():
    buf = empty(4)
    layout.write_records(buf, [4, 3, 2, 1], [1, 2, 3, 4], tag=[0, 1, 7, 0], tid=[1, -2, 3, 4],
                         payload=[9, 8, 7, 6], sm=[1, 2, 3, 4], warp=[5, 6, 7, 8],
                         kind=[0, 1, 0, 0])
    events, _ = decode_events(buf, ["a", "b"])
    rebuilt = Trace.from_events(events)
    original = decode_buffer(buf, ["a", "b"])
    for field in ("start_ns", "dur_ns", "tag", "tid", "payload", "sm", "warp", "kind"):
        np.testing.assert_array_equal(rebuilt.events[field], original.events[field])
    assert rebuilt.to_events() == events


def test_trace_from_events_renumbers_when_ids_clash():
    events = [Event("x", 0, 0, 10, 1), Event("y", 0, 0, 5, 1)]
    trace = Trace.from_events(events)
    assert [trace.tag_name(t) for t in trace.events["tag"]] == ["y", "x"]


def reference_decode(buf, clock_hz):
    """Slot-by-slot Python decode by the README's rules: the oracle for the fast paths."""
    counter, capacity = int(buf[0]), (buf.shape[0] - 1) // 4
    rows, invalid = [], 0
    for slot in range(min(counter, capacity)):
        start, dur, tag, tid = (int(w) for w in buf[1 + 4 * slot : 5 + 4 * slot])
        kind = (tag >> 48) & 0xF
        if (tag >> 56) & 0x7F != layout.COMPLETE_MAGIC:
            continue
        if tag & layout.TAG_RESERVED_MASK or tid & layout.TID_RESERVED_MASK or kind > 3 \
                or start < 0 or dur < 0 or (kind < 2 and start + dur > 2**63 - 1):
            invalid += 1
            continue
        if kind == layout.KIND_CLOCK_SYNC:
            continue
        if kind == layout.KIND_CLOCK_SPAN:
            ns = round(dur * 1e9 / clock_hz)
            if ns > start:
                invalid += 1
                continue
            start, dur = start - ns, ns
        rows.append((start, slot, dur))
    return sorted(rows), invalid


@pytest.mark.parametrize("spread", [10**6, 2**62], ids=["packed_sort", "wide_range_argsort"])
def test_blocked_threaded_decode_matches_a_slot_by_slot_reference(monkeypatch, spread):
    """Small blocks and a low threshold send 3,000 records through every threaded,
    multi-block path (and, with a 2**62 spread of starts, the plain argsort fallback)."""
    import cute_prof.decode as decode_module

    monkeypatch.setattr(decode_module, "_BLOCK", 64)
    monkeypatch.setattr(decode_module, "_PARALLEL_ABOVE", 100)
    # random starts over 2**62 ns are far apart: keep them all in one launch's window and
    # in the trace's here (the outside_launch rule has its own tests)
    monkeypatch.setattr(layout, "LAUNCH_GAP_LIMIT_NS", 2**63)
    monkeypatch.setattr(layout, "TRACE_WINDOW_NS", 2**63)
    rng = np.random.default_rng(5)
    count = 3000
    buf = empty(count + 10)
    start = rng.integers(0, spread, count)
    start[::7] = start[3]  # many ties: order must fall back to the slot
    kind = rng.choice([0, 1, 2, 3], count, p=[0.6, 0.1, 0.25, 0.05])
    layout.write_records(buf, start, rng.integers(0, 10**5, count), rng.integers(0, 5, count),
                         rng.integers(-50, 50, count), kind=kind, payload=rng.integers(-9, 9, count))
    records = buf[1 : 1 + 4 * count].reshape(count, 4)
    bad = rng.choice(count, 300, replace=False)
    records[bad[:100], 1] = -1
    records[bad[100:200], 2] = 0  # incomplete
    records[bad[200:], 3] |= 1 << 55
    buf[0] = count + 4  # four claimed slots never written
    clock_hz = 1.25e9
    trace = decode_buffer(buf, TAGS, clock_hz=clock_hz)
    expected, invalid = reference_decode(buf, clock_hz)
    got = list(zip(trace.events["start_ns"].tolist(), trace.events["slot"].tolist(),
                   trace.events["dur_ns"].tolist()))
    assert got == expected
    assert trace.invalid == invalid and trace.incomplete == 104
    clock = trace.events["kind"] == layout.KIND_CLOCK_SPAN
    np.testing.assert_array_equal(trace.events["dur_cycles"][clock],
                                  records[trace.events["slot"][clock], 1])
    assert (trace.events["dur_cycles"][~clock] == -1).all()
    np.testing.assert_array_equal(trace.events["tid"], records[trace.events["slot"], 3] << 32 >> 32)
