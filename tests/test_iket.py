"""NVIDIA IKET captures through ``load_trace`` and every CLI verb, on a real capture recorded
on an H100 (bench/gpu_runs/IKET_GPU_LOG.md): 8 CTAs x 4 warps, 16 iterations of two ranges
("short" with payload i, "long") and a marker ("iter_done", payload i), 2 launches and one
CUDA graph replay; plus a --warp-trace capture of the same program."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import cute_prof
from cute_prof import layout
from cute_prof.errors import ProfileBufferError
from cute_prof.readers import iket

DATA = Path(__file__).resolve().parent / "data"
CAPTURE_GZ = DATA / "iket_compare.trace.json.gz"
WARP_TRACE = DATA / "iket_warp_trace.trace.json.gz"
REPO = Path(__file__).resolve().parents[1]
CTAS, WARPS, ITERS, LAUNCHES = 8, 4, 16, 3  # 2 launches + 1 graph replay


@pytest.fixture(scope="module")
def capture_json(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("iket") / "iket_compare.trace.json"
    path.write_bytes(gzip.decompress(CAPTURE_GZ.read_bytes()))
    return path


def test_counts_names_and_launches():
    trace = cute_prof.load_trace(CAPTURE_GZ)
    ev = trace.events
    per_launch_ranges = CTAS * WARPS * ITERS * 2
    assert trace.tag_names == ("short", "long", "iter_done")
    assert len(ev) == LAUNCHES * CTAS * WARPS * ITERS * 3 == 4608
    spans, instants = ev[ev["kind"] == layout.KIND_SPAN], ev[ev["kind"] == layout.KIND_INSTANT]
    assert len(spans) == LAUNCHES * per_launch_ranges == 3072
    assert len(instants) == LAUNCHES * CTAS * WARPS * ITERS == 1536
    assert np.all(instants["tag"] == 2) and np.all(instants["dur_ns"] == 0)
    assert [l["ranges"] for l in trace.launches] == [per_launch_ranges] * LAUNCHES
    assert [l["graph_launch"] for l in trace.launches] == [None, None, "graph_exec_2:0"]
    assert [l["grid_id"] for l in trace.launches] == [2, 3, 0]
    assert all(l["grid"] == [8, 1, 1] and l["block"] == [128, 1, 1] for l in trace.launches)
    assert np.array_equal(np.bincount(ev["launch"]), [1536] * LAUNCHES)
    for index, launch in enumerate(trace.launches):  # each launch's span holds its records
        mine = ev[ev["launch"] == index]
        assert launch["first_ns"] <= mine["start_ns"].min()
        assert launch["last_ns"] >= (mine["start_ns"] + mine["dur_ns"]).max()
        assert launch["records"] == mine.shape[0]
    assert trace.metadata["iket"]["version"] == 1
    assert trace.metadata["iket"]["range_ids"] == {"short": 3122818005, "long": 3270303571}
    assert trace.overflow == 0 and trace.attempted == len(ev)


def test_tracks_sm_warp_and_payloads():
    capture = iket.read_iket(CAPTURE_GZ)
    trace, ev = capture.trace, capture.trace.events
    assert len(trace.track_names) == CTAS * WARPS
    assert trace.track_name(5) == "cta 1,0,0 warp 1"  # tid = cta * 4 + warp here
    assert np.array_equal(ev["warp"], ev["tid"] % WARPS)
    # every (track, tag) has ITERS records per launch: the payload of "short" and of the
    # markers is the iteration index, "long" has none
    for tag, payloads in ((0, np.arange(ITERS)), (2, np.arange(ITERS)), (1, np.zeros(ITERS))):
        rows = ev[ev["tag"] == tag]
        for tid in range(CTAS * WARPS):
            got = np.sort(rows[rows["tid"] == tid]["payload"])
            assert np.array_equal(got, np.repeat(payloads, LAUNCHES).astype(np.int32))
    locations = trace.metadata["iket"]["locations"]
    by_cta_warp = {(l["cta"][0], l["warp"]): set() for l in locations}
    for l in locations:
        by_cta_warp[(l["cta"][0], l["warp"])].add(l["sm"])
    for row in ev[:200]:  # the sm column comes from the location table
        assert int(row["sm"]) in by_cta_warp[(int(row["tid"]) // WARPS, int(row["warp"]))]
    assert capture.warp_lifetimes.shape[0] == LAUNCHES * CTAS * WARPS
    assert capture.launch_spans().shape == (LAUNCHES, 2)


def test_lifetimes_as_spans_enclose_the_ranges(tmp_path):
    trace = iket.load_iket(CAPTURE_GZ, lifetimes_as_spans=True)
    ev = trace.events
    assert trace.tag_names[-1] == iket.LIFETIME_TAG
    life = ev[ev["tag"] == len(trace.tag_names) - 1]
    assert len(life) == LAUNCHES * CTAS * WARPS and len(ev) == 4608 + len(life)
    for row in life[:8]:
        inside = ev[(ev["tid"] == row["tid"]) & (ev["launch"] == row["launch"])]
        assert inside["start_ns"].min() >= row["start_ns"]
        assert (inside["start_ns"] + inside["dur_ns"]).max() <= row["start_ns"] + row["dur_ns"]
    out = json.loads(Path(cute_prof.export_trace(trace, tmp_path / "life.json")).read_text())
    names = [e["name"] for e in out["traceEvents"] if e.get("ph") == "X"]
    assert names.count(iket.LIFETIME_TAG) == len(life)


def test_warp_trace_capture(tmp_path):
    import gzip
    import shutil

    capture = iket.read_iket(WARP_TRACE)
    # run-iket writes it uncompressed: the same capture read from the plain file
    plain = tmp_path / "warp.trace.json"
    with gzip.open(WARP_TRACE) as src, open(plain, "wb") as dst:
        shutil.copyfileobj(src, dst)
    assert (iket.read_iket(plain).trace.launches == capture.trace.launches)
    assert len(capture.trace.events) == 0 and capture.trace.tag_names == ()
    assert len(capture.trace.launches) == 6 and capture.warp_lifetimes.shape[0] == 156
    kernels = [l["kernel"].startswith("kernel_cutlass_compare") for l in capture.trace.launches]
    assert kernels == [False, True, True, False, False, True]
    with_spans = iket.load_iket(WARP_TRACE, lifetimes_as_spans=True)
    assert len(with_spans.events) == 156 and with_spans.tag_names == (iket.LIFETIME_TAG,)


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "cute_prof.cli", *map(str, args)],
                          capture_output=True, text=True, cwd=REPO, timeout=300)


def test_every_cli_verb(capture_json, tmp_path):
    summary = run_cli("-q", "summary", capture_json, "--json")
    assert summary.returncode == 0, summary.stderr
    data = json.loads(summary.stdout)
    assert "short" in json.dumps(data) and "long" in json.dumps(data)
    for out in ("t.json", "t.pftrace", "t.png"):
        result = run_cli("-q", "export", capture_json, "-o", tmp_path / out)
        assert result.returncode == 0, result.stderr
        assert (tmp_path / out).stat().st_size > 0
    result = run_cli("-q", "plot", capture_json, "-o", tmp_path / "p.svg", "--width", "700")
    assert result.returncode == 0, result.stderr
    back = cute_prof.load_trace(tmp_path / "t.json")  # our JSON of it reads back
    assert len(back.events) == 4608
    gz = run_cli("-q", "summary", CAPTURE_GZ, "--json")  # the compressed capture too
    assert gz.returncode == 0
    from_gz = json.loads(gz.stdout)
    from_gz["metadata"]["source_file"] = data["metadata"]["source_file"]
    assert from_gz == data


def test_truncated_capture(capture_json, tmp_path):
    cut = tmp_path / "cut.trace.json"
    cut.write_bytes(capture_json.read_bytes()[: 300_000])
    with pytest.raises(ProfileBufferError, match="cut short"):
        cute_prof.load_trace(cut)
    cut_gz = tmp_path / "cut.trace.json.gz"
    cut_gz.write_bytes(CAPTURE_GZ.read_bytes()[:20_000])
    with pytest.raises(ProfileBufferError, match="truncated or corrupt gzip"):
        cute_prof.load_trace(cut_gz)
    result = run_cli("-q", "summary", cut)
    assert result.returncode != 0 and "cut short" in result.stderr


def test_foreign_and_unknown_version(capture_json, tmp_path):
    foreign = tmp_path / "foreign.json"
    foreign.write_text(json.dumps({"launches": [{"name": "x"}], "meta": {"version": 1}}))
    assert iket.is_iket_capture(foreign)
    with pytest.raises(ProfileBufferError, match="lacks IKET's structure"):
        cute_prof.load_trace(foreign)
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"traceEvents": []}))
    assert not iket.is_iket_capture(other)
    with pytest.raises(ProfileBufferError, match="not a cute_prof JSON trace"):
        cute_prof.load_trace(other)
    newer = tmp_path / "newer.trace.json"
    newer.write_bytes(capture_json.read_bytes().replace(b'"meta":{"version":1}',
                                                        b'"meta":{"version":2}'))
    with pytest.raises(ProfileBufferError, match="version 2 is not supported"):
        cute_prof.load_trace(newer)
    bad_loc = tmp_path / "badloc.trace.json"
    bad_loc.write_bytes(capture_json.read_bytes().replace(b'"locIdx":0,', b'"locIdx":999,', 1))
    with pytest.raises(ProfileBufferError, match="outside the location table"):
        cute_prof.load_trace(bad_loc)


def test_payload_edge_cases_are_kept_or_counted(capture_json, tmp_path):
    data = json.loads(capture_json.read_bytes())
    launch = data["launches"][0]
    first, third = launch["ranges"][0], launch["ranges"][2]  # "short", iterations 0 and 1
    assert first["rangeNameIdx"] == 0 and third["rangeNameIdx"] == 0
    first["internalEvents"][1]["payloadVal"] = 7  # end payload differs from the start's 0
    for event in third["internalEvents"]:  # a 64-bit payload: low 32 bits kept, counted
        event.update(payloadType=7, payloadVal=2**40 + 5)
    marker = launch["markers"][0]
    marker.update(payloadType=13, payloadVal=1.5)  # FP32: kept as its float32 bits
    first["warpLocIdxs"][1] = first["warpLocIdxs"][0] + 1  # an inter-warp range
    edited = tmp_path / "edited.trace.json"
    edited.write_text(json.dumps(data, separators=(",", ":")))
    trace = cute_prof.load_trace(edited)
    meta = trace.metadata["iket"]
    assert meta["end_payloads_differing"] == 1 and meta["payloads_wider_than_32_bits"] == 1
    assert meta["ranges_ending_on_another_warp"] == 1 and meta["inner_events_not_kept"] == 0
    assert first["warpLocIdxs"][0] == third["warpLocIdxs"][0] == marker["locIdx"] == 0
    ev = trace.events[(trace.events["launch"] == 0) & (trace.events["tid"] == 0)]  # location 0
    by_start = {(int(r["start_ns"]), int(r["kind"])): int(r["payload"]) for r in ev}
    assert by_start[(third["startTs"], layout.KIND_SPAN)] == 5
    assert by_start[(first["startTs"], layout.KIND_SPAN)] == 0
    bits = int(np.array([1.5], dtype=np.float32).view(np.int32)[0])
    assert by_start[(marker["timestamp"], layout.KIND_INSTANT)] == bits


def test_newer_version_with_another_structure(tmp_path):
    newer = tmp_path / "v2.trace.json"
    newer.write_text(json.dumps({"launches": {"renamed": []}, "meta": {"version": 2}}))
    with pytest.raises(ProfileBufferError, match="version 2 is not supported"):
        cute_prof.load_trace(newer)
