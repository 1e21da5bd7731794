"""Native Perfetto export: write with the official protos, parse back, compare."""

from __future__ import annotations

import json
import os
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from cute_prof import layout
from cute_prof.decode import decode_buffer
from cute_prof.errors import ProfileBufferError
from cute_prof.export import export_trace
from cute_prof.export.pftrace_reader import read_pftrace, read_pftrace_metadata, read_pftrace_slices
from cute_prof.export.pftrace_writer import TRACE_INFO_EVENT, write_pftrace
from cute_prof.trace import EVENT_DTYPE, Trace

BASE = 1_700_000_000_000_000_000
NAMES = ["mainloop", "load", "mma", "epilogue", "tile_done"]
SPAN, INSTANT = layout.KIND_SPAN, layout.KIND_INSTANT


def decoded(rows, *, capacity=None, extra_attempts=0, names=NAMES):
    """rows: (start, dur, tag, tid, sm, warp, payload, kind); real buffer + real decoder."""
    capacity = capacity or len(rows)
    buf = np.zeros(layout.buffer_words(capacity), dtype=np.int64)
    for start, dur, tag, tid, sm, warp, payload, kind in rows:
        layout.write_records(buf, BASE + start, dur, tag, tid, payload=payload, kind=kind,
                             sm=sm, warp=warp)
    buf[0] += extra_attempts
    return decode_buffer(buf, names, metadata={"device": "NVIDIA H100 80GB HBM3"})


# tid 0 (SM 1): mainloop [0,1000) with load [10,300) p=0 / mma [300,900) p=1 nested, a
#   zero-length load at 950, an instant at 900 and epilogue [1000,1200) back to back.
# tid 1 (SM 1): mainloop [50,800), identical twin regions [100,200) x2 (nest in each other),
#   a region sharing start and end with its parent's child [100,150).
# tid 7 (SM 3, warps 0 and 2): two regions on different warps.
ROWS = [
    (0, 1000, 0, 0, 1, 0, 0, SPAN),
    (10, 290, 1, 0, 1, 0, 0, SPAN),
    (300, 600, 2, 0, 1, 0, 1, SPAN),
    (950, 0, 1, 0, 1, 0, 2, SPAN),
    (900, 0, 4, 0, 1, 0, 42, INSTANT),
    (1000, 200, 3, 0, 1, 0, 0, SPAN),
    (50, 750, 0, 1, 1, 0, 0, SPAN),
    (100, 100, 1, 1, 1, 0, 5, SPAN),
    (100, 100, 1, 1, 1, 0, 6, SPAN),
    (100, 50, 2, 1, 1, 0, -3, SPAN),
    (20, 30, 2, 7, 3, 0, 0, SPAN),
    (25, 30, 2, 7, 3, 2, 0, SPAN),
]


def expected_multiset(trace):
    ev = trace.events
    return Counter(
        (trace.tag_names[t], int(s), int(d), bool(k == INSTANT), int(p), int(tid))
        for t, s, d, k, p, tid in zip(ev["tag"], ev["start_ns"], ev["dur_ns"], ev["kind"],
                                      ev["payload"], ev["tid"])
    )


def tid_of(track_path: str) -> int:
    part = next(p for p in track_path.split("/") if p.startswith("tid "))
    return int(part.split()[1])


def written_multiset(slices):
    return Counter(
        (s["name"], int(s["start_ns"]), int(s["dur_ns"]), bool(s["instant"]), int(s["payload"]),
         tid_of(s["track"]))
        for s in slices
    )


@pytest.mark.parametrize("group_by", ["tid", "sm", "warp", "device"])
def test_round_trip_every_event(tmp_path, group_by):
    trace = decoded(ROWS)
    path = write_pftrace(trace, tmp_path / "t.pftrace", group_by=group_by)
    slices, info = read_pftrace(path)
    assert written_multiset(slices) == expected_multiset(trace)
    assert len(slices) == len(ROWS)
    assert info["records"] == len(ROWS)
    assert info["group_by"] == group_by


def test_track_names_follow_group_by(tmp_path):
    trace = decoded(ROWS)
    paths = {}
    for group_by in ("tid", "sm", "warp"):
        slices = read_pftrace_slices(write_pftrace(trace, tmp_path / f"{group_by}.pftrace",
                                                   group_by=group_by))
        paths[group_by] = set(slices["track"].tolist())
    assert paths["tid"] == {"tid 0", "tid 1", "tid 7"}
    assert paths["sm"] == {"SM 1/tid 0", "SM 1/tid 1", "SM 3/tid 7"}
    assert paths["warp"] == {"tid 0/warp 0", "tid 1/warp 0", "tid 7/warp 0", "tid 7/warp 2"}


def test_nesting_and_ties_are_paired_correctly(tmp_path):
    trace = decoded(ROWS)
    slices = read_pftrace_slices(write_pftrace(trace, tmp_path / "t.pftrace"))
    # the stack-based reader pairs each END with the latest BEGIN on its track; durations
    # only come out right if the writer ordered same-timestamp events properly
    tid1 = sorted((int(s["start_ns"]) - BASE, int(s["dur_ns"]), s["name"])
                  for s in slices if s["track"] == "tid 1")
    assert tid1 == [(50, 750, "mainloop"), (100, 50, "mma"), (100, 100, "load"),
                    (100, 100, "load")]
    zero = [s for s in slices if s["name"] == "load" and int(s["start_ns"]) == BASE + 950]
    assert len(zero) == 1 and zero[0]["dur_ns"] == 0 and not zero[0]["instant"]


def test_packets_use_interning_and_sequences(tmp_path):
    trace = decoded(ROWS)
    path = write_pftrace(trace, tmp_path / "t.pftrace", group_by="sm")
    parsed = pb.Trace()
    parsed.ParseFromString(path.read_bytes())
    packets = list(parsed.packet)
    descriptors = {p.track_descriptor.uuid: p.track_descriptor for p in packets
                   if p.HasField("track_descriptor")}
    names = {d.name for d in descriptors.values()}
    assert {"SM 1", "SM 3", "tid 0", "tid 1", "tid 7"} <= names
    root = [d for d in descriptors.values() if not d.HasField("parent_uuid")]
    assert len(root) == 1 and "NVIDIA H100" in root[0].name
    assert "overflow 0" in root[0].description
    for d in descriptors.values():  # every parent exists
        assert not d.HasField("parent_uuid") or d.parent_uuid in descriptors

    events = [p for p in packets if p.HasField("track_event")
              and p.track_event.name != TRACE_INFO_EVENT]
    assert all(not e.track_event.HasField("name") for e in events)  # names are interned
    named = [e for e in events if e.track_event.type != pb.TrackEvent.TYPE_SLICE_END]
    assert all(e.track_event.name_iid > 0 for e in named)
    assert all(e.sequence_flags == pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE for e in named)
    # every event's sequence was opened (state cleared, names interned) before it is used
    opened = {}
    for packet in packets:
        if packet.sequence_flags & pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED:
            opened[packet.trusted_packet_sequence_id] = {
                e.iid: e.name for e in packet.interned_data.event_names
            }
            assert packet.trace_packet_defaults.track_event_defaults.track_uuid in descriptors
        elif packet.HasField("track_event") and packet.track_event.name != TRACE_INFO_EVENT:
            interned = opened[packet.trusted_packet_sequence_id]
            if packet.track_event.name_iid:
                assert packet.track_event.name_iid in interned
    # timestamps are the original nanoseconds, unchanged
    end_type = pb.TrackEvent.TYPE_SLICE_END
    begins = sorted(e.timestamp for e in events if e.track_event.type != end_type)
    assert begins == sorted(trace.events["start_ns"].tolist())
    ends = sorted(e.timestamp for e in events if e.track_event.type == end_type)
    span = trace.events["kind"] == SPAN
    assert ends == sorted((trace.events["start_ns"] + trace.events["dur_ns"])[span].tolist())


def test_metadata_survives(tmp_path):
    trace = decoded(ROWS, capacity=len(ROWS) + 3, extra_attempts=5)
    # 3 slots claimed but never written, 5 - 3 = 2 attempts beyond capacity
    assert trace.incomplete == 3 and trace.overflow == 2
    info = read_pftrace_metadata(write_pftrace(trace, tmp_path / "t.pftrace"))
    assert info["overflow"] == 2
    assert info["incomplete"] == 3
    assert info["capacity"] == len(ROWS) + 3
    assert info["attempted"] == len(ROWS) + 5
    assert info["tag_names"] == NAMES
    assert info["device"] == "NVIDIA H100 80GB HBM3"
    assert info["metadata"]["device"] == "NVIDIA H100 80GB HBM3"


def test_overlapping_regions_get_a_lane_under_the_same_name(tmp_path):
    # tid 4: A [0,100) and B [50,150) overlap without nesting; C [60,70) nests in both
    rows = [(0, 100, 1, 4, 0, 0, 0, SPAN), (50, 100, 2, 4, 0, 0, 0, SPAN),
            (60, 10, 3, 4, 0, 0, 0, SPAN), (200, 5, 1, 4, 0, 0, 0, SPAN)]
    trace = decoded(rows)
    path = write_pftrace(trace, tmp_path / "t.pftrace")
    slices = read_pftrace_slices(path)
    assert written_multiset(slices) == expected_multiset(trace)
    assert set(slices["track"].tolist()) == {"tid 4"}  # the lane shows under the tid's name
    assert len(set(slices["track_uuid"].tolist())) == 2
    parsed = pb.Trace()
    parsed.ParseFromString(path.read_bytes())
    tid4 = {p.track_descriptor.uuid: p.track_descriptor for p in parsed.packet
            if p.HasField("track_descriptor") and p.track_descriptor.name == "tid 4"}
    assert len(tid4) == 2
    lane = next(d for d in tid4.values() if d.parent_uuid in tid4)
    assert lane.parent_uuid != lane.uuid


def test_parallel_workers_write_the_same_packets(tmp_path):
    rng = np.random.default_rng(3)
    rows = []
    for tid in range(40):
        t = 0
        for _ in range(30):
            dur = int(rng.integers(1, 50))
            rows.append((t, dur, int(rng.integers(0, 4)), tid, tid % 5, 0,
                         int(rng.integers(0, 3)), SPAN))
            t += dur + int(rng.integers(0, 5))
    trace = decoded(rows)

    def per_sequence(path):
        parsed = pb.Trace()
        parsed.ParseFromString(path.read_bytes())
        sequences = {}
        for packet in parsed.packet:  # packet order matters only inside a sequence
            sequences.setdefault(packet.trusted_packet_sequence_id, []).append(
                packet.SerializeToString())
        return sequences

    serial = per_sequence(write_pftrace(trace, tmp_path / "serial.pftrace", workers=1))
    parallel = per_sequence(write_pftrace(trace, tmp_path / "parallel.pftrace", workers=3))
    assert len(serial) == 41  # the descriptors' sequence and one per tid
    assert serial == parallel


def test_empty_trace(tmp_path):
    trace = decoded([], capacity=4)
    slices, info = read_pftrace(write_pftrace(trace, tmp_path / "empty.pftrace"))
    assert len(slices) == 0 and info["records"] == 0 and info["incomplete"] == 0


def test_negative_timestamps_are_shifted_and_recorded(tmp_path):
    events = np.zeros(2, dtype=EVENT_DTYPE)
    events["start_ns"] = [-100, 50]
    events["dur_ns"] = [10, 10]
    trace = Trace(events, ("a",), 2, 2, 0, 0)
    slices, info = read_pftrace(write_pftrace(trace, tmp_path / "neg.pftrace"))
    assert info["timestamp_offset_ns"] == 100
    assert sorted(slices["start_ns"].tolist()) == [0, 150]


def test_bad_group_by_and_paths(tmp_path):
    trace = decoded(ROWS)
    with pytest.raises(ProfileBufferError, match="group_by"):
        write_pftrace(trace, tmp_path / "t.pftrace", group_by="cluster")
    with pytest.raises(ProfileBufferError, match="does not exist"):
        write_pftrace(trace, tmp_path / "missing" / "t.pftrace")
    assert os.listdir(tmp_path) == []  # nothing half-written anywhere


def test_read_rejects_foreign_bytes(tmp_path):
    junk = tmp_path / "junk.pftrace"
    junk.write_bytes(b"\xff\xfe not a protobuf \x00\x01" * 10)
    with pytest.raises(ProfileBufferError, match="not a Perfetto"):
        read_pftrace(junk)


def test_export_trace_dispatches_on_suffix(tmp_path):
    trace = decoded(ROWS)
    out = export_trace(trace, tmp_path / "a.perfetto-trace")
    assert len(read_pftrace_slices(out)) == len(ROWS)
    out = export_trace(trace, tmp_path / "a.json", group_by="sm")
    data = json.loads(out.read_text())
    assert data["otherData"]["producer"] == "cute_prof"
    out = export_trace(trace, tmp_path / "a.bin", format="pftrace")
    assert len(read_pftrace_slices(out)) == len(ROWS)
    with pytest.raises(ProfileBufferError, match="suffix"):
        export_trace(trace, tmp_path / "a.txt")
    with pytest.raises(ProfileBufferError, match="unknown export format"):
        export_trace(trace, tmp_path / "a.json", format="xml")


region = st.tuples(
    st.integers(0, 300),  # start
    st.integers(0, 80),  # duration
    st.integers(0, 4),  # tag
    st.integers(0, 3),  # tid
    st.sampled_from([SPAN, SPAN, SPAN, INSTANT]),
    st.integers(-2, 2),  # payload
)


@settings(max_examples=40, deadline=None)
@given(st.lists(region, min_size=1, max_size=30))
def test_random_traces_round_trip(tmp_path_factory, regions):
    rows = [(s, 0 if k == INSTANT else d, tag, tid, tid % 2, 0, p, k)
            for s, d, tag, tid, k, p in regions]
    trace = decoded(rows)
    path = tmp_path_factory.mktemp("pf") / "r.pftrace"
    assert written_multiset(read_pftrace_slices(write_pftrace(trace, path))) == \
        expected_multiset(trace)


def _stack_pairs_correctly(sequence):
    stack = []
    for is_begin, span in sequence:
        if is_begin:
            stack.append(span)
        elif stack.pop() != span:
            return False
    return True


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_level_check_equals_stack_simulation(data):
    """The vectorised nesting check (begin level == end level) against a real stack."""
    from cute_prof.export.regions import RegionOps, misnested_spans

    n = data.draw(st.integers(1, 7))
    sequence, open_spans, pending = [], [], list(range(n))
    while pending or open_spans:
        if pending and (not open_spans or data.draw(st.booleans())):
            span = pending.pop()
            sequence.append((True, span))
            open_spans.append(span)
        else:
            span = open_spans.pop(data.draw(st.integers(0, len(open_spans) - 1)))
            sequence.append((False, span))
    m = len(sequence)
    ops = RegionOps(
        track=np.zeros(m, np.int64), ts=np.arange(m, dtype=np.int64),
        type=np.array([1 if b else 2 for b, _ in sequence], np.int8),
        iid=np.ones(m, np.int64), payload=np.zeros(m, np.int64),
        span=np.array([s for _, s in sequence], np.int64),
    )
    assert (misnested_spans(ops, n).shape[0] == 0) == _stack_pairs_correctly(sequence)
