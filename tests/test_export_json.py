"""Chrome Trace Event JSON export: structure Perfetto needs, exact nanoseconds, atomic writes."""

from __future__ import annotations

import json
import math
import os
from collections import defaultdict
from decimal import Decimal

import numpy as np
import pytest

from cute_prof import (
    ProfileBufferError,
    TagTable,
    decode_buffer,
    decode_events,
    events_to_perfetto,
    layout,
)
from cute_prof import files as files_module
from cute_prof.export import chrome_json as export_json

TAGS = TagTable(["load", "mma", "store"])
BASE_NS = 1_700_000_000_000_000_000


def make_trace(rng, count=400, capacity=None, tids=(-3, 0, 1, 2, 7), sms=(0, 3, 9), **decode_kw):
    capacity = count if capacity is None else capacity
    buf = np.zeros(layout.buffer_words(capacity), dtype=np.int64)
    layout.write_records(
        buf,
        BASE_NS + rng.integers(0, 5_000_000, count),
        rng.integers(0, 200_000, count),
        rng.integers(0, 3, count),
        rng.choice(tids, count),
        payload=rng.integers(-100, 100, count),
        kind=rng.choice([layout.KIND_SPAN, layout.KIND_SPAN, layout.KIND_INSTANT], count),
        sm=rng.choice(sms, count),
        warp=rng.integers(0, 8, count),
    )
    return decode_buffer(buf, TAGS, **decode_kw)


def load(path):
    with open(path) as handle:
        return json.load(handle)


def records(doc):
    return [e for e in doc["traceEvents"] if e["ph"] != "M"]


def test_every_event_has_the_fields_perfetto_needs(tmp_path):
    trace = make_trace(np.random.default_rng(0))
    path = events_to_perfetto(trace, tmp_path / "t.json")
    doc = load(path)
    assert doc["displayTimeUnit"] == "ns"
    for event in doc["traceEvents"]:
        for key in ("name", "ph", "ts", "pid", "tid"):
            assert key in event, (key, event)
        assert isinstance(event["pid"], int) and event["pid"] >= 1
        assert isinstance(event["tid"], int) and event["tid"] >= 1
    evs = records(doc)
    assert len(evs) == len(trace)
    spans = [e for e in evs if e["ph"] == "X"]
    instants = [e for e in evs if e["ph"] == "i"]
    assert len(spans) == int((trace.events["kind"] == layout.KIND_SPAN).sum())
    assert len(instants) == int((trace.events["kind"] == layout.KIND_INSTANT).sum())
    assert all("dur" in e for e in spans)
    assert all(e["s"] == "t" and "dur" not in e for e in instants)


def test_args_keep_raw_nanoseconds_and_ts_is_relative_microseconds(tmp_path):
    trace = make_trace(np.random.default_rng(1))
    with open(events_to_perfetto(trace, tmp_path / "t.json")) as handle:
        doc = json.load(handle, parse_float=Decimal)
    origin = int(trace.events["start_ns"].min())
    assert doc["otherData"]["origin_ns"] == origin
    by_slot = {int(r["slot"]): r for r in trace.events}
    seen = 0
    for event in records(doc):
        args = event["args"]
        match = [r for r in trace.events if int(r["start_ns"]) == args["start_ns"]
                 and int(r["tid"]) == args["tid"] and int(r["payload"]) == args["payload"]]
        assert match, args
        row = match[0]
        assert event["name"] == TAGS.name(int(row["tag"]))
        assert args["dur_ns"] == int(row["dur_ns"])
        assert args["sm"] == int(row["sm"]) and args["warp"] == int(row["warp"])
        # exact decimal µs; a trailing 1 in the 4th decimal (+0.1 ns) is the Perfetto guard
        ts_ns = event["ts"] * 1000
        assert math.floor(ts_ns) == args["start_ns"] - origin
        assert ts_ns - math.floor(ts_ns) in (0, Decimal("0.1"))
        if event["ph"] == "X":
            dur_ns = event["dur"] * 1000
            assert math.floor(dur_ns) == args["dur_ns"]
        seen += 1
    assert seen == len(by_slot)


def perfetto_reads_ns(token: str) -> int:
    """What Perfetto's JSON importer makes of a numeric token (json_parser.h, v50+):
    integer part and fraction accumulated as doubles, then ``(int64)(value * 1000.0)``."""
    negative = token.startswith("-")
    digits = token.lstrip("-")
    whole, _, frac = digits.partition(".")
    value = 0.0
    for ch in whole:
        value = value * 10.0 + (ord(ch) - 48)
    if frac:
        numerator, divisor = 0.0, 1.0
        for ch in frac:
            numerator = numerator * 10.0 + (ord(ch) - 48)
            divisor *= 10.0
        value += numerator / divisor
    value = -value if negative else value
    return int(value * 1000.0)  # C++ static_cast truncates toward zero, like int()


def test_perfetto_import_recovers_every_nanosecond(tmp_path):
    rng = np.random.default_rng(2)
    count = 3000
    buf = np.zeros(layout.buffer_words(count), dtype=np.int64)
    starts = BASE_NS + rng.integers(0, 10**10, count)
    durs = rng.integers(0, 10**7, count)
    layout.write_records(buf, starts, durs, tag=0, tid=rng.integers(0, 4, count))
    trace = decode_buffer(buf, TAGS)
    with open(events_to_perfetto(trace, tmp_path / "t.json")) as handle:
        doc = json.load(handle, parse_float=str, parse_int=str)
    origin = int(trace.events["start_ns"].min())
    guarded = 0
    for event in records(doc):
        assert perfetto_reads_ns(event["ts"]) == int(event["args"]["start_ns"]) - origin
        assert perfetto_reads_ns(event["dur"]) == int(event["args"]["dur_ns"])
        guarded += len(event["ts"].split(".")[1]) == 4
    # the data must exercise the guard, or this test would prove nothing about it
    assert guarded > 0
    naive_misses = sum(
        perfetto_reads_ns(f"{n // 1000}.{n % 1000:03d}") != n
        for n in (trace.events["start_ns"] - origin).tolist()
    )
    assert naive_misses == guarded


def test_timestamps_are_monotonic_per_track_and_parents_come_first(tmp_path):
    buf = np.zeros(layout.buffer_words(4), dtype=np.int64)
    # parent and child start at the same ns on one tid; the child was recorded first
    layout.write_records(buf, [BASE_NS + 10, BASE_NS + 10, BASE_NS, BASE_NS + 50],
                         [5, 100, 3, 1], tag=[1, 0, 2, 2], tid=4)
    doc = load(events_to_perfetto(decode_buffer(buf, TAGS), tmp_path / "t.json"))
    evs = records(doc)
    assert [e["name"] for e in evs] == ["store", "load", "mma", "store"]
    big = make_trace(np.random.default_rng(3), count=2000)
    doc = load(events_to_perfetto(big, tmp_path / "big.json"))
    last = defaultdict(lambda: -1.0)
    for event in records(doc):
        key = (event["pid"], event["tid"])
        assert event["ts"] >= last[key]
        last[key] = event["ts"]


def test_tracks_one_process_per_gpu_and_one_thread_per_tid(tmp_path):
    trace = make_trace(np.random.default_rng(4), metadata={"device": "NVIDIA H100"})
    doc = load(events_to_perfetto(trace, tmp_path / "t.json"))
    meta = [e for e in doc["traceEvents"] if e["ph"] == "M"]
    processes = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    assert processes == {1: "NVIDIA H100"}
    threads = {e["tid"]: e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    tids = sorted(set(trace.events["tid"].tolist()))
    # overlapping regions of one tid get extra lanes: threads with the same name
    assert sorted(set(threads.values()), key=lambda n: int(n.split()[1])) == [f"tid {t}" for t in tids]
    assert 1 not in threads, "thread ids must not reuse the process id"
    sort_index = {e["tid"]: e["args"]["sort_index"] for e in meta if e["name"] == "thread_sort_index"}
    ordered = sorted(threads, key=lambda t: sort_index[t])
    in_order = [int(threads[t].split()[1]) for t in ordered]
    assert in_order == sorted(in_order) and sorted(set(in_order)) == tids, "sorted by the kernel's tid"
    for event in records(doc):
        assert threads[event["tid"]] == f"tid {event['args']['tid']}"


def test_group_by_sm_gives_one_process_per_sm(tmp_path):
    trace = make_trace(np.random.default_rng(5))
    doc = load(events_to_perfetto(trace, tmp_path / "t.json", group_by="sm"))
    meta = [e for e in doc["traceEvents"] if e["ph"] == "M"]
    processes = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    assert sorted(processes.values()) == [f"SM {s}" for s in sorted(set(trace.events["sm"].tolist()))]
    thread_owner = {e["tid"]: e["pid"] for e in meta if e["name"] == "thread_name"}
    assert not set(thread_owner) & set(processes), "pids and tids never collide"
    for event in records(doc):
        assert processes[event["pid"]] == f"SM {event['args']['sm']}"
        assert thread_owner[event["tid"]] == event["pid"], "a thread belongs to one process"


def test_other_data_carries_loss_counts_and_tag_table(tmp_path):
    trace = make_trace(np.random.default_rng(6), count=50, capacity=40, clock_hz=1.41e9)
    doc = load(events_to_perfetto(trace, tmp_path / "t.json", metadata={"kernel": "gemm"}))
    other = doc["otherData"]
    assert other["overflow"] == 10 and other["attempted"] == 50 and other["capacity"] == 40
    assert other["incomplete"] == 0
    assert other["clock_hz"] == 1.41e9
    assert other["tag_names"] == list(TAGS.names)
    assert other["kernel"] == "gemm"
    assert other["device"] == "GPU"


def test_clock_spans_carry_cycles(tmp_path):
    buf = np.zeros(layout.buffer_words(1), dtype=np.int64)
    layout.write_records(buf, [BASE_NS + 5000], [3000], tag=1, tid=0, kind=layout.KIND_CLOCK_SPAN)
    trace = decode_buffer(buf, TAGS, clock_hz=1.5e9)
    (event,) = records(load(events_to_perfetto(trace, tmp_path / "t.json")))
    assert event["args"]["dur_cycles"] == 3000
    assert event["args"]["dur_ns"] == 2000 and event["dur"] == 2.0
    assert event["cat"] == "clock_span"


def test_list_of_events_gives_the_same_file_as_the_trace(tmp_path):
    rng = np.random.default_rng(7)
    trace = make_trace(rng, count=300)
    buf_events = trace.to_events()
    a = load(events_to_perfetto(trace, tmp_path / "a.json"))
    b = load(events_to_perfetto(buf_events, tmp_path / "b.json"))
    assert a["traceEvents"] == b["traceEvents"]


def test_reference_style_call_with_decode_events(tmp_path):
    buf = np.zeros(layout.buffer_words(3), dtype=np.int64)
    layout.write_records(buf, [BASE_NS, BASE_NS + 10, BASE_NS + 20], 5, tag=[0, 1, 2], tid=0)
    events, _ = decode_events(buf, TAGS)
    events_to_perfetto(events, str(tmp_path / "trace.json"))
    assert [e["name"] for e in records(load(tmp_path / "trace.json"))] == ["load", "mma", "store"]


@pytest.mark.parametrize("name", ['quo"te', "back\\slash", "100%", "%d %s", "ünï ☃", "tab\there"])
def test_awkward_tag_names_survive(tmp_path, name):
    buf = np.zeros(layout.buffer_words(2), dtype=np.int64)
    layout.write_records(buf, [BASE_NS, BASE_NS + 1], 1, tag=0, tid=0)
    trace = decode_buffer(buf, TagTable([name]))
    doc = load(events_to_perfetto(trace, tmp_path / "t.json"))
    assert [e["name"] for e in records(doc)] == [name, name]


def test_empty_trace_is_valid_json(tmp_path):
    trace = decode_buffer(np.zeros(layout.buffer_words(2), dtype=np.int64), TAGS)
    doc = load(events_to_perfetto(trace, tmp_path / "t.json"))
    assert records(doc) == [] and doc["otherData"]["events"] == 0


def test_missing_directory_fails_before_writing(tmp_path):
    trace = make_trace(np.random.default_rng(8), count=5)
    with pytest.raises(ProfileBufferError, match="does not exist"):
        events_to_perfetto(trace, tmp_path / "nope" / "t.json")
    assert not (tmp_path / "nope").exists()
    with pytest.raises(ProfileBufferError, match="directory"):
        events_to_perfetto(trace, tmp_path)


def test_bad_arguments_raise(tmp_path):
    trace = make_trace(np.random.default_rng(9), count=5)
    with pytest.raises(ProfileBufferError, match="group_by"):
        events_to_perfetto(trace, tmp_path / "t.json", group_by="warp")
    with pytest.raises(ProfileBufferError):
        events_to_perfetto(trace.events, tmp_path / "t.json")
    with pytest.raises(ProfileBufferError):
        events_to_perfetto("not events", tmp_path / "t.json")
    assert list(tmp_path.iterdir()) == []


class ExplodingFile:
    """Wraps a real file; the Nth write raises, as a full disk would."""

    def __init__(self, real, fail_on_write):
        self.real, self.left = real, fail_on_write

    def write(self, text):
        self.left -= 1
        if self.left == 0:
            raise OSError(28, "No space left on device")
        return self.real.write(text)

    def __getattr__(self, name):
        return getattr(self.real, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return self.real.__exit__(*exc)


@pytest.mark.parametrize("fail_on_write", [1, 2, 3, 5])
def test_failed_write_leaves_no_file_and_no_temp(tmp_path, monkeypatch, fail_on_write):
    trace = make_trace(np.random.default_rng(10), count=200)
    monkeypatch.setattr(export_json, "_CHUNK_EVENTS", 16)  # many writes, fail mid-way
    real_fdopen = os.fdopen
    monkeypatch.setattr(
        files_module.os, "fdopen", lambda *a, **k: ExplodingFile(real_fdopen(*a, **k), fail_on_write)
    )
    with pytest.raises(OSError, match="No space"):
        events_to_perfetto(trace, tmp_path / "t.json")
    assert list(tmp_path.iterdir()) == []


def test_failed_write_keeps_the_previous_trace_intact(tmp_path, monkeypatch):
    target = tmp_path / "t.json"
    target.write_text("previous")

    def broken_fsync(fd):
        raise OSError(5, "I/O error")

    monkeypatch.setattr(files_module.os, "fsync", broken_fsync)
    with pytest.raises(OSError):
        events_to_perfetto(make_trace(np.random.default_rng(11), count=5), target)
    assert target.read_text() == "previous"
    assert [p.name for p in tmp_path.iterdir()] == ["t.json"]


def test_chunked_rendering_matches_a_single_chunk(tmp_path, monkeypatch):
    trace = make_trace(np.random.default_rng(12), count=257)
    whole = load(events_to_perfetto(trace, tmp_path / "whole.json"))
    monkeypatch.setattr(export_json, "_CHUNK_EVENTS", 10)  # 26 chunks, last one partial
    chunked = load(events_to_perfetto(trace, tmp_path / "chunked.json"))
    assert chunked == whole


def test_negative_durations_and_extreme_fields_are_written_exactly(tmp_path):
    buf = np.zeros(layout.buffer_words(3), dtype=np.int64)
    layout.write_records(buf, [BASE_NS, BASE_NS + 1, BASE_NS + 2], [5, 2**62, 0],
                         tag=0, tid=[-(2**31), 2**31 - 1, 0],
                         payload=[-(2**31), 2**31 - 1, -1], sm=[layout.MAX_SM_ID, 0, 1],
                         warp=[layout.MAX_WARP_ID, 0, 1])
    trace = decode_buffer(buf, TAGS)
    # the decoder rejects negative durations (invalid: negative_duration); a hand-built
    # Trace can still carry one, and the writer must keep it exact
    trace.events["dur_ns"][0] = -5
    with open(events_to_perfetto(trace, tmp_path / "t.json")) as handle:
        doc = json.load(handle, parse_float=Decimal)
    evs = records(doc)
    assert [e["args"]["dur_ns"] for e in evs] == [-5, 2**62, 0]
    assert evs[0]["dur"] == Decimal("-0.005")
    assert evs[1]["dur"] * 1000 // 1 == 2**62
    assert [e["args"]["tid"] for e in evs] == [-(2**31), 2**31 - 1, 0]
    assert [e["args"]["payload"] for e in evs] == [-(2**31), 2**31 - 1, -1]
    assert [e["args"]["sm"] for e in evs] == [layout.MAX_SM_ID, 0, 1]
    assert [e["args"]["warp"] for e in evs] == [layout.MAX_WARP_ID, 0, 1]


def test_every_committed_json_trace_nests():
    from pathlib import Path

    from trace_checks import json_nesting_violations

    folder = Path(__file__).parent.parent / "examples" / "traces"
    paths = sorted([*folder.glob("*.json"), *folder.glob("*.json.gz")])
    assert paths
    for path in paths:
        assert json_nesting_violations(path) == [], path
