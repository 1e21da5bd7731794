"""The vectorised exporters against the earlier ones: the numpy-encoded pftrace parses
(official protos) into exactly the slices the protobuf-per-packet writer produced, lanes
included; the JSON writer nests every track; lane assignment matches first fit."""

from __future__ import annotations

import glob
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from cute_prof import layout
from cute_prof.export.chrome_json import events_to_perfetto
from cute_prof.export.pftrace_reader import read_pftrace
from cute_prof.export.pftrace_writer import _put_varints, _varint_lengths, write_pftrace
from cute_prof.export.regions import (
    assign_lanes,
    build_region_ops,
    misnested_spans,
    nesting_lanes,
    overlap_lanes,
)
from cute_prof.storage import load_chrome_json
from cute_prof.trace import EVENT_DTYPE, Trace

from trace_checks import json_nesting_violations

ROOT = Path(__file__).resolve().parents[1]
GEMM_JSON = ROOT / "examples" / "traces" / "ws_gemm_256x1024x4096_h200.json.gz"


def make_trace(rows, names=("a", "b", "c")) -> Trace:
    """rows: (start, dur, tag, tid, kind[, payload, sm, warp])."""
    ev = np.zeros(len(rows), EVENT_DTYPE)
    for i, row in enumerate(rows):
        start, dur, tag, tid, kind, *rest = row
        payload, sm, warp = (list(rest) + [0, 0, 0])[:3]
        ev[i] = (start, dur, tag, tid, payload, kind, sm, warp, -1, i, 0)
    ev = ev[np.argsort(ev["start_ns"], kind="stable")]
    return Trace(ev, tuple(names), len(rows), len(rows), 0, 0, metadata={"device": "test"})


def random_overlapping_trace(seed: int, n: int = 3000, tracks: int = 7) -> Trace:
    """Regions that mostly nest or follow each other, some overlapping partly, some
    instants, payloads, several SMs and warps (as real consumer warps record)."""
    rng = np.random.default_rng(seed)
    ev = np.zeros(n, EVENT_DTYPE)
    ev["tid"] = rng.integers(0, tracks, n)
    ev["start_ns"] = 10**15 + rng.integers(0, 50 * n, n) // 10 * 10
    ev["dur_ns"] = rng.choice([0, 10, 40, 300, 5000], n)
    ev["tag"] = rng.integers(0, 4, n)
    ev["payload"] = rng.choice([0, 0, 1, -7], n)
    ev["kind"] = np.where(rng.random(n) < 0.1, layout.KIND_INSTANT, layout.KIND_SPAN)
    ev["dur_ns"][ev["kind"] == layout.KIND_INSTANT] = 0
    ev["sm"] = ev["tid"] % 3
    ev["warp"] = rng.integers(0, 2, n)
    ev["dur_cycles"] = -1
    ev["slot"] = np.arange(n)
    ev = ev[np.argsort(ev["start_ns"], kind="stable")]
    return Trace(ev, ("load", "mma", "epilogue"), n, n, 0, 0, metadata={"device": "test"})


def assert_same_slices(a_path, b_path):
    """Same slices on the same tracks (lanes included), as multisets: among identical twin
    regions (same track, start and end) the order in the file is not part of the comparison."""
    a, a_info = read_pftrace(a_path)
    b, b_info = read_pftrace(b_path)
    assert a.shape == b.shape
    fields = list(a.dtype.names)
    rows = lambda s: sorted(tuple(r[f] for f in fields) for r in s)  # noqa: E731
    assert rows(a) == rows(b)
    assert a_info == b_info


def assert_slices_are_the_events(trace: Trace, path) -> None:
    """Every region and instant of ``trace`` is one slice of the file, with its exact start,
    duration and name, and nothing else is (as multisets: twin regions may come in any
    order). The writer it checks once had a second, slower implementation to compare with
    (``tests/reference/old_pftrace_writer.py``, retired; git keeps it)."""
    slices, _ = read_pftrace(path)
    origin = int(trace.events["start_ns"].min())
    names = [trace.tag_name(int(t)) for t in trace.events["tag"]]
    ours = sorted(zip((trace.events["start_ns"] - origin).tolist(),
                      trace.events["dur_ns"].tolist(), names))
    file_origin = int(slices["start_ns"].min())
    theirs = sorted(zip((slices["start_ns"] - file_origin).tolist(), slices["dur_ns"].tolist(),
                        slices["name"].tolist()))
    assert theirs == ours


def test_varints_hand_computed():
    values = np.array([0, 1, 127, 128, 300, 2**63], np.uint64)
    lengths = _varint_lengths(values)
    assert lengths.tolist() == [1, 1, 1, 2, 2, 10]
    out = np.zeros(int(lengths.sum()), np.uint8)
    _put_varints(out, np.r_[0, np.cumsum(lengths)[:-1]], values, lengths)
    assert out.tobytes() == (b"\x00\x01\x7f\x80\x01\xac\x02" + b"\x80" * 9 + b"\x01")


def test_gemm_trace_slices_are_its_events(tmp_path):
    trace = load_chrome_json(GEMM_JSON)
    trace.metadata.pop("source_file", None)
    write_pftrace(trace, tmp_path / "new.pftrace")
    assert_slices_are_the_events(trace, tmp_path / "new.pftrace")
    # the GEMM trace has one overlapping pair (ws.consumer_mainloop, ws.epilogue on tid 120)
    slices, _ = read_pftrace(tmp_path / "new.pftrace")
    assert len({u for u, t in zip(slices["track_uuid"], slices["track"]) if t == "tid 120"}) == 2


@pytest.mark.parametrize("group_by", ["tid", "sm", "warp"])
@pytest.mark.parametrize("seed", [0, 1])
def test_overlapping_traces_slices_are_their_events(tmp_path, seed, group_by):
    trace = random_overlapping_trace(seed)
    write_pftrace(trace, tmp_path / "new.pftrace", group_by=group_by)
    assert_slices_are_the_events(trace, tmp_path / "new.pftrace")
    slices, _ = read_pftrace(tmp_path / "new.pftrace")
    assert slices.shape[0] == trace.events.shape[0]
    assert len(set(slices["track_uuid"].tolist())) > len(set(slices["track"].tolist()))


def test_overlap_lanes_equal_first_fit_per_track():
    rng = np.random.default_rng(5)
    for _ in range(400):
        n = int(rng.integers(1, 30))
        track = rng.integers(0, 3, n)
        start = rng.integers(0, 50, n)
        end = start + rng.integers(0, 20, n)
        zero = np.zeros(n, np.int64)
        none = np.zeros(0, np.int64)
        ops = build_region_ops(track, start, end, zero + 1, zero, none, none, none, none,
                               3, 0, 100)
        bad = misnested_spans(ops, n)
        lane = overlap_lanes(track, start, end, bad)
        for t in range(3):
            mine = np.flatnonzero(track == t)
            expected = (assign_lanes(start[mine], end[mine]) if np.isin(mine, bad).any()
                        else np.zeros(mine.shape[0], np.int64))
            assert lane[mine].tolist() == expected.tolist()


def test_overlap_lanes_hand_computed():
    # track 0: [0,10) and [5,15) overlap -> lanes 0, 1; [20,30) starts a new cluster -> 0;
    # [22,25) nests in it -> 0. track 1: [0,4) alone.
    track = np.array([0, 0, 0, 0, 1])
    start = np.array([0, 5, 20, 22, 0])
    end = np.array([10, 15, 30, 25, 4])
    assert overlap_lanes(track, start, end, np.array([0, 1])).tolist() == [0, 1, 0, 0, 0]


def test_json_gives_overlapping_regions_extra_lanes(tmp_path):
    S, I = layout.KIND_SPAN, layout.KIND_INSTANT
    trace = make_trace([(0, 10, 0, 4, S), (5, 10, 1, 4, S), (7, 0, 2, 4, I),
                        (20, 10, 0, 4, S), (0, 3, 0, 9, S)])
    trace.track_names = {4: "consumer warp 4"}
    out = events_to_perfetto(trace, tmp_path / "t.json")
    data = json.loads(Path(out).read_text())
    assert json_nesting_violations(data) == []
    events = data["traceEvents"]
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "thread_name"}
    # tid 4 has two lanes (same name), tid 9 one
    assert sorted(names.values()) == ["consumer warp 4", "consumer warp 4", "tid 9"]
    by_start = {e["args"]["start_ns"]: e for e in events
                if e["ph"] in ("X", "i") and e["args"]["tid"] == 4}
    assert by_start[0]["tid"] == by_start[20]["tid"] == by_start[7]["tid"]
    assert by_start[5]["tid"] != by_start[0]["tid"]
    assert names[(1, by_start[5]["tid"])] == "consumer warp 4"
    assert len(by_start) == 4
    assert data["otherData"]["invalid_reasons"] == {}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_json_of_overlapping_traces_nests_and_keeps_every_event(tmp_path, seed):
    trace = random_overlapping_trace(seed)
    # the trace does overlap: a plain per-tid layout would not nest
    out = events_to_perfetto(trace, tmp_path / "t.json")
    assert json_nesting_violations(out) == []
    back = load_chrome_json(out)
    assert np.array_equal(np.sort(back.events[["start_ns", "dur_ns", "tid", "tag"]]),
                          np.sort(trace.events[["start_ns", "dur_ns", "tid", "tag"]]))


@pytest.mark.parametrize("path", sorted(glob.glob(str(ROOT / "examples" / "traces" / "*.json"))))
def test_every_committed_json_trace_nests(path):
    assert json_nesting_violations(path) == []


def test_invalid_reasons_in_json_other_data(tmp_path):
    trace = make_trace([(0, 10, 0, 1, layout.KIND_SPAN)])
    trace.invalid, trace.invalid_reasons = 3, {"negative_duration": 3}
    data = json.loads(Path(events_to_perfetto(trace, tmp_path / "t.json")).read_text())
    assert data["otherData"]["invalid_reasons"] == {"negative_duration": 3}


def test_nesting_lanes_equal_lanes_from_the_full_check():
    rng = np.random.default_rng(9)
    for _ in range(300):
        n = int(rng.integers(2, 40))
        start = np.sort(rng.integers(0, 80, n))
        end = start + rng.choice([0, 3, 10, 30], n)
        track = rng.integers(0, 4, n)
        zero = np.zeros(n, np.int64)
        none = np.zeros(0, np.int64)
        ops = build_region_ops(track, start, end, zero, zero, none, none, none, none,
                               4, 0, 200)
        expected = overlap_lanes(track, start, end, misnested_spans(ops, n))
        assert nesting_lanes(track, start, end, 4).tolist() == expected.tolist()


def two_launch_trace() -> Trace:
    S = layout.KIND_SPAN
    trace = make_trace([(0, 10, 0, 3, S, 0, 1), (20, 10, 1, 3, S, 0, 1), (25, 2, 2, 4, S, 0, 2)])
    trace.events["launch"] = [0, 1, 1]  # rows are in start order
    trace.launches = [{"name": "gemm"}, {"kernel": "gemm_v2"}]
    trace.track_names = {3: "producer"}
    return trace


def test_json_shows_each_launch_as_its_own_process(tmp_path):
    data = json.loads(Path(events_to_perfetto(two_launch_trace(), tmp_path / "t.json")).read_text())
    processes = {e["pid"]: e["args"]["name"] for e in data["traceEvents"]
                 if e["ph"] == "M" and e["name"] == "process_name"}
    assert sorted(processes.values()) == ["gemm #0 (test)", "gemm_v2 #1 (test)"]
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in data["traceEvents"]
               if e["ph"] == "M" and e["name"] == "thread_name"}
    assert sorted(threads.values()) == ["producer", "producer", "tid 4"]
    for event in (e for e in data["traceEvents"] if e["ph"] == "X"):
        expected = "gemm #0 (test)" if event["args"]["start_ns"] == 0 else "gemm_v2 #1 (test)"
        assert processes[event["pid"]] == expected
    by_sm = json.loads(Path(events_to_perfetto(two_launch_trace(), tmp_path / "s.json",
                                               group_by="sm")).read_text())
    assert sorted(e["args"]["name"] for e in by_sm["traceEvents"]
                  if e["ph"] == "M" and e["name"] == "process_name") == [
        "gemm #0 / SM 1", "gemm_v2 #1 / SM 1", "gemm_v2 #1 / SM 2"]


@pytest.mark.parametrize("group_by, tracks", [
    ("tid", {(0, "gemm #0/producer"), (20, "gemm_v2 #1/producer"), (25, "gemm_v2 #1/tid 4")}),
    ("sm", {(0, "gemm #0 / SM 1/producer"), (20, "gemm_v2 #1 / SM 1/producer"),
            (25, "gemm_v2 #1 / SM 2/tid 4")}),
    ("warp", {(0, "gemm #0 / producer/warp 0"), (20, "gemm_v2 #1 / producer/warp 0"),
              (25, "gemm_v2 #1 / tid 4/warp 0")}),
])
def test_pftrace_shows_each_launch_as_its_own_track_group(tmp_path, group_by, tracks):
    slices, _ = read_pftrace(write_pftrace(two_launch_trace(), tmp_path / "t.pftrace",
                                           group_by=group_by))
    assert {(int(s["start_ns"]), s["track"]) for s in slices} == tracks


FLOW_DTYPE = np.dtype([("src", np.int64), ("dst", np.int64)])


def flow_trace() -> Trace:
    S = layout.KIND_SPAN
    # rows (start order): 0 = [100, 200) tid 1, 1 = [150, 160) tid 1, 2 = [300, 400) tid 2
    return make_trace([(100, 100, 0, 1, S), (150, 10, 1, 1, S), (300, 100, 2, 2, S)])


COUNTER = {"name": "smem bytes", "ts": np.array([100, 250], np.int64),
           "value": np.array([1.5, 4096.0]), "tid": 2}


def test_json_flows_and_counters(tmp_path):
    flows = np.array([(1, 2), (0, 2)], FLOW_DTYPE)
    data = json.loads(Path(events_to_perfetto(flow_trace(), tmp_path / "t.json", flows=flows,
                                              counters=[COUNTER])).read_text())
    events = data["traceEvents"]
    slice_of = {e["args"]["start_ns"]: e for e in events if e["ph"] == "X"}
    starts = [e for e in events if e["ph"] == "s"]
    ends = [e for e in events if e["ph"] == "f"]
    assert [(e["id"], e["ts"], e["tid"]) for e in starts] == [
        (1, 0.05, slice_of[150]["tid"]), (2, 0.0, slice_of[100]["tid"])]  # µs since 100 ns
    assert [(e["id"], e["ts"], e["tid"], e["bp"]) for e in ends] == [
        (1, 0.2, slice_of[300]["tid"], "e"), (2, 0.2, slice_of[300]["tid"], "e")]
    samples = [(e["name"], e["ts"], e["args"]["value"]) for e in events if e["ph"] == "C"]
    assert samples == [("smem bytes (tid 2)", 0.0, 1.5), ("smem bytes (tid 2)", 0.15, 4096.0)]
    assert json_nesting_violations(data) == []


def test_pftrace_flows_and_counters(tmp_path):
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    flows = np.array([(1, 2), (0, 2)], FLOW_DTYPE)
    path = write_pftrace(flow_trace(), tmp_path / "t.pftrace", flows=flows, counters=[COUNTER])
    parsed = pb.Trace()
    parsed.ParseFromString(Path(path).read_bytes())
    begins = {p.timestamp: p.track_event for p in parsed.packet
              if p.HasField("track_event") and p.track_event.type == pb.TrackEvent.TYPE_SLICE_BEGIN}
    assert list(begins[150].flow_ids) == [1] and list(begins[100].flow_ids) == [2]
    assert list(begins[300].terminating_flow_ids) == [1, 2]
    assert not begins[300].flow_ids and not begins[100].terminating_flow_ids
    counter_tracks = {p.track_descriptor.uuid: p.track_descriptor.name for p in parsed.packet
                      if p.HasField("track_descriptor") and p.track_descriptor.HasField("counter")}
    assert list(counter_tracks.values()) == ["smem bytes (tid 2)"]
    samples = [(p.timestamp, p.track_event.double_counter_value) for p in parsed.packet
               if p.HasField("track_event") and p.track_event.type == pb.TrackEvent.TYPE_COUNTER]
    assert samples == [(100, 1.5), (250, 4096.0)]
    # the slices are unchanged by the flows
    slices, _ = read_pftrace(path)
    assert sorted(slices["start_ns"].tolist()) == [100, 150, 300]


def test_flows_must_connect_existing_regions(tmp_path):
    from cute_prof.errors import ProfileBufferError

    with pytest.raises(ProfileBufferError, match="flow rows must be in"):
        write_pftrace(flow_trace(), tmp_path / "t.pftrace",
                      flows=np.array([(0, 9)], FLOW_DTYPE))
    with pytest.raises(ProfileBufferError, match="flow rows must be in"):
        events_to_perfetto(flow_trace(), tmp_path / "t.json",
                           flows=np.array([(-1, 0)], FLOW_DTYPE))


def test_a_gzipped_chrome_trace_reads_back_like_the_plain_one(tmp_path):
    import gzip

    from cute_prof.errors import ProfileBufferError

    plain = tmp_path / "gemm.json"
    plain.write_bytes(gzip.decompress(GEMM_JSON.read_bytes()))
    zipped, unzipped = load_chrome_json(GEMM_JSON), load_chrome_json(plain)
    assert len(zipped.events) == len(unzipped.events) > 0
    assert (zipped.events == unzipped.events).all() and zipped.tag_names == unzipped.tag_names
    broken = tmp_path / "broken.json.gz"
    broken.write_bytes(GEMM_JSON.read_bytes()[:1000])
    with pytest.raises(ProfileBufferError, match="not a JSON trace"):
        load_chrome_json(broken)
