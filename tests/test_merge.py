"""The torch.profiler merge on a trace recorded on an H200 (tests/data, written by
examples/torch_loop.py: 5 eager steps and 3 CUDA-graph replays of two instrumented kernels)
and on synthetic traces with a known clock offset."""

import copy
import gzip
import json
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest

from cute_prof import layout
from cute_prof.decode import decode_buffer
from cute_prof.errors import ProfileBufferError
from cute_prof.merge import load_torch_trace, merge_torch_trace
from cute_prof.storage import load_trace

DATA = Path(__file__).parent / "data"
TORCH_TRACE = DATA / "torch_loop_h200_torch_trace.json.gz"
RECORDING = DATA / "torch_loop_h200_recording.npz"
ALIGN_NS = 2_000


def test_recorded_launches_land_inside_their_kernel_slices(tmp_path):
    trace = load_trace(RECORDING)
    assert len(trace.launches) == 16 and len(trace) == 1824
    report = merge_torch_trace(TORCH_TRACE, trace, tmp_path / "merged.json")
    assert report.matched == 16 and report.slice_shift == 0
    assert report.start_margin_ns.min() >= -ALIGN_NS and report.end_margin_ns.min() >= -ALIGN_NS
    assert report.max_abs_residual_ns < ALIGN_NS
    merged = json.loads((tmp_path / "merged.json").read_text())
    events = merged["traceEvents"]
    slices = {e["args"]["cute_prof_launch"]: e for e in events
              if e.get("cat") == "kernel" and "cute_prof_launch" in e.get("args", {})}
    assert sorted(slices) == list(range(16))
    ours = [e for e in events if e.get("cat") == "cute_prof"]
    assert len(ours) == len(trace)
    # every record, as written to the file, lies inside its launch's CUPTI slice (2 us slack)
    for event in ours:
        kernel = slices[event["args"]["launch"]]
        assert event["ts"] >= kernel["ts"] - ALIGN_NS / 1e3
        assert event["ts"] + event.get("dur", 0) <= kernel["ts"] + kernel["dur"] + ALIGN_NS / 1e3
        assert event["pid"] == kernel["pid"]
    # staged and direct kernels alternate, and the names come from CUPTI
    assert "staged_kernel" in trace.launches[0]["kernel"]
    assert "direct_kernel" in trace.launches[1]["kernel"]
    # the profiler's own events are all still there, rebased onto one exact time base
    original = json.loads(gzip.decompress(TORCH_TRACE.read_bytes()))["traceEvents"]
    assert len(events) - len(ours) - sum(e.get("ph") == "M" and e.get("tid", 0) >= 1 << 40
                                         for e in events) == len(original)
    base = merged["cute_prof_time_base_us"]
    first = min(Decimal(str(e["ts"])) for e in original if "ts" in e)
    assert base == int(first)


def synthetic(offset_ns, *, extra_before=2):
    """Our trace of 3 launches and a torch trace whose kernel slices are those launches
    shifted by ``offset_ns`` (1 us of launch latency each side), after unrelated kernels."""
    buf = np.zeros(layout.buffer_words(30), dtype=np.int64)
    for i in range(3):
        layout.write_records(buf, 1_000_000 * (i + 1) + np.arange(4) * 100, 50, tag=0,
                             tid=np.arange(4), grid=3 + i)
    trace = decode_buffer(buf, ["work"])
    events = [{"ph": "X", "cat": "kernel", "name": "kernel_cutlass_other", "pid": 0, "tid": 7,
               "ts": 10.0 + k, "dur": 0.5, "args": {"stream": 7}} for k in range(extra_before)]
    for launch in trace.launches:
        start_us = (launch["first_ns"] + offset_ns - 1000) / 1e3
        dur_us = (launch["last_ns"] - launch["first_ns"] + 2000) / 1e3
        events.append({"ph": "X", "cat": "kernel", "name": "kernel_cutlass_work_0", "pid": 0,
                       "tid": 7, "ts": start_us, "dur": dur_us, "args": {"stream": 7}})
    events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mul", "pid": 1, "tid": 1,
                   "ts": 1.0, "dur": 1.0})
    return trace, {"traceEvents": events}


def test_known_offset_is_recovered_and_unrelated_kernels_are_skipped():
    trace, torch_trace = synthetic(5_000_000_000, extra_before=2)
    report = merge_torch_trace(copy.deepcopy(torch_trace), trace)
    assert report.offset_ns == 5_000_000_000 and report.slice_shift == 2
    assert np.all(report.residual_ns == 0)
    assert np.all(report.start_margin_ns == 1000) and np.all(report.end_margin_ns == 1000)


def test_pattern_selects_the_instrumented_kernels():
    trace, torch_trace = synthetic(-7_000, extra_before=3)
    report = merge_torch_trace(torch_trace, trace, kernel_pattern="work")
    assert report.slice_shift == 0 and report.offset_ns == -7_000


def test_too_few_kernel_slices_is_an_error():
    trace, torch_trace = synthetic(0, extra_before=0)
    torch_trace["traceEvents"] = torch_trace["traceEvents"][:2]
    with pytest.raises(ProfileBufferError, match="kernel slices"):
        merge_torch_trace(torch_trace, trace)


def test_not_a_chrome_trace_is_an_error(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"events": []}')
    with pytest.raises(ProfileBufferError, match="traceEvents"):
        load_torch_trace(bad)
    with pytest.raises(ProfileBufferError, match="cannot read"):
        load_torch_trace(tmp_path / "missing.json")


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "cute_prof.cli", *map(str, args)],
                          capture_output=True, text=True, timeout=120)


def test_cli_merge(tmp_path):
    out = tmp_path / "merged.json"
    result = run_cli("merge", TORCH_TRACE, RECORDING, "-o", out)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(out)
    assert "merged 16 launches" in result.stderr
    merged = json.loads(out.read_text())
    assert sum(e.get("cat") == "cute_prof" for e in merged["traceEvents"]) == 1824
    bad = run_cli("merge", RECORDING, RECORDING, "-o", tmp_path / "x.json")
    assert bad.returncode != 0 and "cute-prof: error" in bad.stderr


def test_caller_dict_is_left_alone_and_example_draws_the_merge(tmp_path):
    trace, torch_trace = synthetic(0)
    before = copy.deepcopy(torch_trace)
    merge_torch_trace(torch_trace, trace, tmp_path / "m.json")
    assert torch_trace == before
    assert all(l["kernel"] == "kernel_cutlass_work_0" for l in trace.launches)
    from examples.torch_loop import draw_merged

    recorded = load_trace(RECORDING)
    merge_torch_trace(TORCH_TRACE, recorded, tmp_path / "rec.json")
    draw_merged(tmp_path / "rec.json", tmp_path / "rec.png")
    assert (tmp_path / "rec.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


IKET_CAPTURE = Path(__file__).parent / "data" / "iket_compare.trace.json.gz"


def test_iket_capture_merges_by_its_kernel_names(tmp_path):
    """An IKET capture knows its kernels' CUPTI names, so it lands on exactly those slices,
    even between other cutlass kernels, at the known offset (issue 18 item 2)."""
    from cute_prof.readers.iket import load_iket

    trace = load_iket(IKET_CAPTURE)
    offset = -1_795_000_000_000_000_000  # %globaltimer counts from the Unix epoch
    events = [{"ph": "X", "cat": "kernel", "name": "kernel_cutlass_other_0", "pid": 0,
               "tid": 7, "ts": 1.0, "dur": 0.5}]
    for launch in sorted(trace.launches, key=lambda l: l["first_ns"]):
        start_ns = launch["first_ns"] + offset - 2000
        end_ns = launch["last_ns"] + offset + 2000
        events.append({"ph": "X", "cat": "kernel", "name": launch["kernel"], "pid": 0, "tid": 7,
                       "ts": start_ns / 1e3, "dur": (end_ns - start_ns) / 1e3})
        events.append({"ph": "X", "cat": "kernel", "name": "kernel_cutlass_other_0", "pid": 0,
                       "tid": 7, "ts": end_ns / 1e3 + 1.0, "dur": 0.5})
    torch_path = tmp_path / "torch.json"
    torch_path.write_text(json.dumps({"traceEvents": events}))
    report = merge_torch_trace(torch_path, trace)
    assert report.matched == len(trace.launches) == 3
    assert abs(report.offset_ns - offset) <= 1 and report.max_abs_residual_ns <= 1
    assert report.worst_margin_ns >= 1999
    out = tmp_path / "merged.json"
    result = run_cli("merge", torch_path, IKET_CAPTURE, "-o", out)
    assert result.returncode == 0, result.stderr
    merged = json.loads(out.read_text())
    assert sum(e.get("cat") == "cute_prof" for e in merged["traceEvents"]) == len(trace)
