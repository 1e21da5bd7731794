"""The compiled exporters (numba: cute_prof/export/kernels.py, pftrace_kernels.py and
json_kernels.py) against the numpy ones they replace on hot paths: the same pftrace bytes
(or at least the same slices on the same tracks and lanes, parsed with the official protos)
and the same JSON events."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from cute_prof import jit, layout
from cute_prof.export import json_kernels, kernels
from cute_prof.export.chrome_json import events_to_perfetto
from cute_prof.export.pftrace_reader import read_pftrace
from cute_prof.export.pftrace_writer import write_pftrace
from cute_prof.export.regions import nesting_lanes
from cute_prof.storage import load_chrome_json
from cute_prof.trace import EVENT_DTYPE, Trace

sys.path.insert(0, str(Path(__file__).parent))
from test_host_export import (  # noqa: E402
    COUNTER,
    FLOW_DTYPE,
    GEMM_JSON,
    assert_same_slices,
    flow_trace,
    random_overlapping_trace,
    two_launch_trace,
)

pytestmark = pytest.mark.skipif(not jit.enabled(), reason="numba not installed or CUTE_PROF_NO_JIT=1")


def write_both(trace, tmp_path, writer, suffix, **options) -> tuple[Path, Path]:
    compiled = writer(trace, tmp_path / f"compiled{suffix}", **options)
    with jit.disabled():
        reference = writer(trace, tmp_path / f"numpy{suffix}", **options)
    return Path(compiled), Path(reference)


def shuffled(trace: Trace, seed: int) -> Trace:
    """The same records in random row order (the exporters must not rely on start order)."""
    order = np.random.default_rng(seed).permutation(trace.events.shape[0])
    return Trace(trace.events[order], trace.tag_names, trace.capacity, trace.attempted,
                 trace.overflow, trace.incomplete, metadata=dict(trace.metadata))


def heavy_overlap_trace(seed: int) -> Trace:
    """Few tracks, long regions that overlap in every way: many lanes, big clusters."""
    rng = np.random.default_rng(seed)
    n = 2000
    ev = np.zeros(n, EVENT_DTYPE)
    ev["tid"] = rng.integers(0, 3, n)
    ev["start_ns"] = rng.integers(-5000, 5000, n)  # negative times are shifted in the pftrace
    ev["dur_ns"] = rng.integers(0, 800, n)
    ev["tag"] = rng.integers(0, 5, n)
    ev["payload"] = rng.choice([0, 3, -(2**31), 2**31 - 1], n)
    ev["kind"] = rng.choice([layout.KIND_SPAN, layout.KIND_INSTANT, layout.KIND_CLOCK_SPAN], n)
    ev["dur_ns"][ev["kind"] == layout.KIND_INSTANT] = 0
    ev["dur_cycles"] = np.where(ev["kind"] == layout.KIND_CLOCK_SPAN, ev["dur_ns"] * 2, -1)
    ev["sm"] = rng.integers(0, 3, n)
    ev["warp"] = rng.integers(0, 4, n)
    ev = ev[np.argsort(ev["start_ns"], kind="stable")]
    return Trace(ev, ("a", "b", "c"), n, n, 0, 0, metadata={"device": "test"})


@pytest.mark.parametrize("group_by", ["tid", "sm", "warp"])
def test_pftrace_gemm_trace_same_bytes(tmp_path, group_by):
    trace = load_chrome_json(GEMM_JSON)
    compiled, reference = write_both(trace, tmp_path, write_pftrace, ".pftrace",
                                     group_by=group_by)
    assert compiled.read_bytes() == reference.read_bytes()


@pytest.mark.parametrize("make", [lambda: random_overlapping_trace(0),
                                  lambda: random_overlapping_trace(3, n=6000, tracks=2),
                                  lambda: heavy_overlap_trace(0), lambda: heavy_overlap_trace(1),
                                  lambda: shuffled(heavy_overlap_trace(2), 2),
                                  lambda: shuffled(random_overlapping_trace(4), 4),
                                  two_launch_trace])
@pytest.mark.parametrize("group_by", ["tid", "warp"])
def test_pftrace_overlapping_traces_same_slices_and_lanes(tmp_path, make, group_by):
    trace = make()
    compiled, reference = write_both(trace, tmp_path, write_pftrace, ".pftrace",
                                     group_by=group_by)
    assert_same_slices(compiled, reference)  # track uuids included: the same lanes
    slices, _ = read_pftrace(compiled)
    kind = trace.events["kind"]
    assert slices.shape[0] == int(np.isin(kind, [0, 1, 2]).sum())


def test_pftrace_without_payloads_with_flows_and_counters_same_bytes(tmp_path):
    flows = np.array([(1, 2), (0, 2)], FLOW_DTYPE)
    counters = [COUNTER, {"name": "zeros", "ts": np.array([-5, 0, 7]),
                          "value": np.array([0.0, -0.0, 1e300])}]
    for options in ({"flows": flows, "counters": counters}, {"payloads": False}):
        compiled, reference = write_both(flow_trace(), tmp_path, write_pftrace, ".pftrace",
                                         **options)
        assert compiled.read_bytes() == reference.read_bytes()
    compiled, reference = write_both(heavy_overlap_trace(5), tmp_path, write_pftrace,
                                     ".pftrace", payloads=False, counters=counters)
    assert_same_slices(compiled, reference)


def test_pftrace_progress_reaches_every_record(tmp_path):
    trace = heavy_overlap_trace(7)
    seen = []
    write_pftrace(trace, tmp_path / "t.pftrace", chunk_progress=lambda d, t: seen.append((d, t)))
    assert seen[-1] == (trace.events.shape[0], trace.events.shape[0])
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)


def json_events(path: Path) -> dict:
    return json.loads(path.read_text())


@pytest.mark.parametrize("make", [lambda: load_chrome_json(GEMM_JSON),
                                  lambda: random_overlapping_trace(1),
                                  lambda: heavy_overlap_trace(3),
                                  lambda: shuffled(heavy_overlap_trace(4), 4),
                                  two_launch_trace])
@pytest.mark.parametrize("group_by", ["device", "sm"])
def test_json_same_events(tmp_path, make, group_by):
    trace = make()
    compiled, reference = write_both(trace, tmp_path, events_to_perfetto, ".json",
                                     group_by=group_by)
    assert json_events(compiled) == json_events(reference)


def test_json_flows_counters_and_extreme_numbers_same_events(tmp_path):
    flows = np.array([(1, 2), (0, 2)], FLOW_DTYPE)
    compiled, reference = write_both(flow_trace(), tmp_path, events_to_perfetto, ".json",
                                     flows=flows, counters=[COUNTER])
    assert json_events(compiled) == json_events(reference)
    trace = flow_trace()
    trace.events["dur_ns"] = [-(2**63), 2**63 - 1, -1]
    trace.events["payload"] = [-(2**31), 2**31 - 1, 0]
    trace.events["sm"] = [-(2**15), 2**15 - 1, 0]
    trace.events["warp"] = [-128, 127, 0]
    compiled, reference = write_both(trace, tmp_path, events_to_perfetto, ".json")
    assert json_events(compiled) == json_events(reference)


def test_number_text_hand_computed():
    values = np.array([0, 7, -7, 100, 10**18, 2**63 - 1, -(2**63), 1_000_001], np.int64)
    out = np.zeros(400, np.uint8)

    at = 0
    for v in values:
        at = json_kernels._put_int(out, at, v)
        out[at] = ord(",")
        at += 1
    assert out[:at].tobytes() == (b"0,7,-7,100,1000000000000000000,9223372036854775807,"
                                  b"-9223372036854775808,1000001,")
    # microseconds; Perfetto reads "1.001" as 1000 ns (1.001 * 1000 truncates): guard digit 1
    at = 0
    for v in (0, 1500, -1500, 1001, 1002, 123456789):
        at = json_kernels._put_micros(out, at, v)
        out[at] = ord(",")
        at += 1
    assert out[:at].tobytes() == b"0.000,1.500,-1.500,1.0011,1.002,123456.789,"


def test_compiled_lanes_equal_the_numpy_lanes():
    rng = np.random.default_rng(11)
    n = 5000
    track = rng.integers(0, 6, n)
    start = np.sort(rng.integers(0, 20_000, n))
    end = start + rng.choice([0, 5, 40, 300, 2000], n)
    expected = nesting_lanes(track, start, end, 6)
    offsets, rows = kernels.count_sort_tracks(track, 6)
    kind = np.zeros(n, np.uint8)
    lane, lanes_of = json_kernels.lanes_by_row(offsets, rows, kind, start, end - start,
                                          layout.KIND_INSTANT)
    assert lane.tolist() == expected.tolist()
    assert lanes_of.tolist() == [int(expected[track == t].max()) + 1 for t in range(6)]


def test_lanes_hand_computed():
    # one track: [0,10) opens lane 0; [2,5) nests; [4,12) overlaps both -> lane 1;
    # [10,11) starts when [0,10) ended -> lane 0; [11,13) crosses [4,12) -> lane 0 is free
    start = np.array([0, 2, 4, 10, 11])
    end = np.array([10, 5, 12, 11, 13])
    offsets, rows = kernels.count_sort_tracks(np.zeros(5, np.int64), 1)
    lane, lanes_of = json_kernels.lanes_by_row(offsets, rows, np.zeros(5, np.uint8), start,
                                          end - start, layout.KIND_INSTANT)
    assert lane.tolist() == [0, 0, 1, 0, 0]
    assert lanes_of.tolist() == [2]


def test_tag_ids_spread_wide_fall_back_to_numpy(tmp_path):
    trace = flow_trace()
    trace.events["tag"] = [0, 2**30, -(2**30)]
    compiled, reference = write_both(trace, tmp_path, events_to_perfetto, ".json")
    assert json_events(compiled) == json_events(reference)
    compiled, reference = write_both(trace, tmp_path, write_pftrace, ".pftrace")
    assert compiled.read_bytes() == reference.read_bytes()


def test_many_small_chunks_give_the_same_files(tmp_path, monkeypatch):
    from cute_prof.export import chrome_json, pftrace_writer

    monkeypatch.setattr(chrome_json, "_STREAM_CHUNK_BYTES", 4096)  # ~8 events a chunk
    monkeypatch.setattr(pftrace_writer, "_STREAM_CHUNK_BYTES", 4096)
    trace = heavy_overlap_trace(9)
    compiled, reference = write_both(trace, tmp_path, write_pftrace, ".pftrace")
    assert_same_slices(compiled, reference)
    compiled, reference = write_both(trace, tmp_path, events_to_perfetto, ".json")
    assert json_events(compiled) == json_events(reference)


def test_plan_chunks_hand_computed():
    sizes = np.array([3, 4, 10, 1, 1, 2])
    assert kernels.plan_chunks(sizes, 7) == [(0, 2), (2, 3), (3, 6)]
    assert kernels.plan_chunks(sizes, 100) == [(0, 6)]
    assert kernels.plan_chunks(np.zeros(0, np.int64), 7) == []
