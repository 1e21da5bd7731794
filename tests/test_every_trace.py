"""Every consumer accepts every Trace the decoder can return (issue 16, item 2): summary,
Chrome JSON, pftrace, picture, save/load round trips and the CLI verbs, on the edge cases:
empty, one record, only instants, deep nesting, timestamps at the int64 limit, tags the
table lacks, non-ASCII and 10 kB tag names, every kind of invalid record."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from cute_prof import ProfileWarning, decode_buffer, layout
from cute_prof.analysis import summarize
from cute_prof.cli import main
from cute_prof.export import export_trace
from cute_prof.export.pftrace_reader import read_pftrace
from cute_prof.storage import load_trace, save_trace
from trace_checks import json_nesting_violations

INT64_MAX = 2**63 - 1
BASE = 1_800_000_000_000_000_000
CLOCK_HZ = 1.5e9
# numpy RuntimeWarnings (overflowing casts, NaN) mean silently wrong numbers: fail on them
pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")


def buffer_of(start, dur, tag, tid, *, kind=layout.KIND_SPAN, capacity=None, **fields):
    start = np.atleast_1d(np.asarray(start, dtype=np.int64))
    buf = np.zeros(layout.buffer_words(capacity or max(1, start.shape[0])), dtype=np.int64)
    layout.write_records(buf, start, dur, tag, tid, kind=kind, **fields)
    return buf


def empty():
    return buffer_of([], [], [], [], capacity=4), ["a"]


def one_record():
    return buffer_of([BASE], [700], [0], [5]), ["only"]


def only_instants():
    n = 50
    return buffer_of(BASE + 10 * np.arange(n), 0, np.arange(n) % 3, np.arange(n) % 4,
                     kind=layout.KIND_INSTANT), ["i0", "i1", "i2"]


def nested_on_one_track(depth=2000):
    """``depth`` regions, each strictly inside the one before it, all on tid 0."""
    i = np.arange(depth)
    return buffer_of(BASE + i, 2 * (depth - i) + 1, i % 4, 0), ["d0", "d1", "d2", "d3"]


def near_int64_limits():
    """Valid records whose end is exactly 2**63 - 1, next to ordinary ones."""
    start = [INT64_MAX - 5000, INT64_MAX - 4999, INT64_MAX - 1000, INT64_MAX - 10, INT64_MAX]
    dur = [5, 4999, 1000, 10, 0]
    kind = [0, 0, 0, 0, layout.KIND_INSTANT]
    return buffer_of(start, dur, [0, 1, 0, 1, 0], [0, 1, 0, 0, 2], kind=kind), ["lo", "hi"]


def unknown_tags():
    n = 40
    return buffer_of(BASE + 100 * np.arange(n), 50, np.arange(n) * 1600 % 65536,
                     np.arange(n) % 5), ["known"]


def unusual_names():
    names = ["träge Schleife ✓", "矩阵乘法", "emoji 🚀 \"quoted\" \\ back", "x" * 10_000,
             "line\nbreak\ttab"]
    n = 3 * len(names)
    return buffer_of(BASE + 1000 * np.arange(n), 500, np.arange(n) % len(names),
                     np.arange(n) % 2), names


def with_invalid_and_clock_records():
    buf = buffer_of(BASE + 1000 * np.arange(12), 400, np.arange(12) % 3, np.arange(12) % 2,
                    capacity=16)
    records = buf[1:].reshape(-1, 4)
    records[1, 0] = -5  # negative start
    records[2, 1] = -5  # negative duration
    records[3, 0], records[3, 1] = INT64_MAX - 3, 4  # end beyond int64
    records[4, 2] |= 1 << layout.TAG_RESERVED_SHIFT  # reserved bit
    records[5, 3] |= layout.TID_RESERVED_MASK  # reserved tid bit (the sign bit)
    records[6, 2] = layout.encode_tag_words(0, kind=12)  # unknown kind
    records[7, 2] = 0  # never completely written
    layout.write_records(buf, [BASE + 20_000, BASE + 30_000], 3000, 1, 9,
                         kind=layout.KIND_CLOCK_SPAN)  # clock spans: END time, cycles
    layout.write_records(buf, [BASE, BASE + 60_000], [10**9, 10**9 + 90_000], 0, 0,
                         kind=layout.KIND_CLOCK_SYNC)
    buf[0] += 3  # overflow
    return buf, ["a", "b", "c"]


CASES = {
    "empty": empty,
    "one_record": one_record,
    "only_instants": only_instants,
    "nested_on_one_track": nested_on_one_track,
    "near_int64_limits": near_int64_limits,
    "unknown_tags": unknown_tags,
    "unusual_names": unusual_names,
    "invalid_and_clock": with_invalid_and_clock_records,
}


def decoded(case: str):
    buf, names = CASES[case]()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ProfileWarning)
        return decode_buffer(buf, names)


def same_events(a, b, fields=("start_ns", "dur_ns", "tag", "tid", "payload", "kind", "sm",
                              "warp")):
    order_a = np.lexsort((a["slot"], a["tid"], a["dur_ns"], a["start_ns"]))
    order_b = np.lexsort((b["slot"], b["tid"], b["dur_ns"], b["start_ns"]))
    for field in fields:
        np.testing.assert_array_equal(a[field][order_a], b[field][order_b], err_msg=field)


@pytest.mark.parametrize("case", sorted(CASES))
def test_summary_accepts_it(case):
    trace = decoded(case)
    summary = summarize(trace)
    data = summary.to_dict()
    json.dumps(data)  # plain JSON values only
    assert data["invalid"] == trace.invalid and data["incomplete"] == trace.incomplete
    assert isinstance(summary.format_table(), str)


@pytest.mark.parametrize("case", sorted(CASES))
def test_json_export_round_trips(case, tmp_path):
    trace = decoded(case)
    path = export_trace(trace, tmp_path / "t.json")
    back = load_trace(path)
    same_events(trace.events, back.events)
    assert [back.tag_name(t) for t in back.events["tag"]] == [
        trace.tag_name(t) for t in back.events["tag"]] or len(trace) == len(back)
    assert (back.invalid, back.incomplete, back.overflow) == (
        trace.invalid, trace.incomplete, trace.overflow)


@pytest.mark.parametrize("case", sorted(CASES))
def test_json_export_nesting_is_reported(case, tmp_path):
    """Every (pid, tid) of every JSON we write nests strictly."""
    trace = decoded(case)
    assert json_nesting_violations(export_trace(trace, tmp_path / "t.json")) == []


@pytest.mark.parametrize("case", sorted(CASES))
def test_pftrace_export_keeps_every_record(case, tmp_path):
    trace = decoded(case)
    slices, info = read_pftrace(export_trace(trace, tmp_path / "t.pftrace"))
    assert slices.shape[0] == len(trace)
    assert info["invalid"] == trace.invalid and info["incomplete"] == trace.incomplete
    starts = np.sort(trace.events["start_ns"])
    np.testing.assert_array_equal(np.sort(slices["start_ns"]), starts)


@pytest.mark.parametrize("case", sorted(CASES))
def test_picture_export_draws_it(case, tmp_path):
    trace = decoded(case)
    path = export_trace(trace, tmp_path / "t.png", width_px=600, height_px=300)
    assert path.stat().st_size > 0


@pytest.mark.parametrize("suffix", [".npz", ".pt"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_save_load_round_trip_is_exact(case, suffix, tmp_path):
    trace = decoded(case)
    path = save_trace(tmp_path / f"t{suffix}", trace)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ProfileWarning)
        back = load_trace(path)
    same_events(trace.events, back.events, fields=tuple(
        f for f in trace.events.dtype.names if f != "launch"))
    assert back.tag_names[: len(trace.tag_names)] == trace.tag_names
    assert (back.invalid, back.incomplete, back.overflow, back.capacity, back.attempted) == (
        trace.invalid, trace.incomplete, trace.overflow, trace.capacity, trace.attempted)
    assert back.invalid_reasons == trace.invalid_reasons


@pytest.mark.parametrize("case", sorted(CASES))
def test_cli_verbs_accept_it(case, tmp_path, capsys):
    trace = decoded(case)
    saved = save_trace(tmp_path / "t.npz", trace)
    before = saved.read_bytes()
    assert main(["-q", "summary", str(saved)]) == 0
    assert main(["-q", "summary", "--json", str(saved)]) == 0
    for out in ("o.json", "o.pftrace", "o.svg"):
        assert main(["-q", "export", str(saved), "-o", str(tmp_path / out)]) == 0
    assert main(["-q", "plot", str(saved), "-o", str(tmp_path / "p.png"), "--width", "600",
                 "--height", "300"]) == 0
    assert main(["-q", "summary", str(tmp_path / "o.json")]) == 0
    assert saved.read_bytes() == before, "an input file was modified"
    assert "Traceback" not in capsys.readouterr().err


def test_invalid_reasons_are_named_everywhere(tmp_path):
    trace = decoded("invalid_and_clock")
    assert trace.invalid_reasons == {
        "negative_start": 1, "negative_duration": 1, "end_overflow": 1, "reserved_bits": 2,
        "unknown_kind": 1,
    }
    assert trace.incomplete == 1 and trace.overflow == 3 and len(trace) == 5 + 2
    summary = summarize(trace)
    assert summary.to_dict()["invalid_reasons"] == trace.invalid_reasons
    assert ("6 records are invalid (2 reserved_bits, 1 unknown_kind, 1 negative_start, "
            "1 negative_duration, 1 end_overflow)") in summary.format_table()
    clock = trace.events[trace.events["kind"] == layout.KIND_CLOCK_SPAN]
    # fitted rate: 90,000 cycles in 60,000 ns = 1.5 GHz; 3000 cycles = 2000 ns
    np.testing.assert_array_equal(clock["dur_ns"], [2000, 2000])
    np.testing.assert_array_equal(clock["start_ns"], [BASE + 18_000, BASE + 28_000])


def test_a_million_nested_regions_on_one_track(tmp_path):
    """Deep nesting at scale: every consumer finishes and keeps every region."""
    depth = 1_000_000
    buf, names = nested_on_one_track(depth)
    trace = decode_buffer(buf, names)
    assert len(trace) == depth
    summary = summarize(trace).to_dict()
    assert summary["invalid"] == 0
    back = load_trace(save_trace(tmp_path / "t.npz", trace))
    same_events(trace.events, back.events)
    json_path = export_trace(trace, tmp_path / "t.json")
    assert json_nesting_violations(json_path) == []
    slices, _ = read_pftrace(export_trace(trace, tmp_path / "t.pftrace"))
    assert slices.shape[0] == depth
    assert export_trace(trace, tmp_path / "t.png").stat().st_size > 0
