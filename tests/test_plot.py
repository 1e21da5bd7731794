"""Timeline pictures: written at the asked size, with the tag colours visible."""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from matplotlib import colormaps
from matplotlib.image import imread

from cute_prof import layout
from cute_prof.errors import ProfileBufferError
from cute_prof.export.picture import _coverage, _stack_view, plot_timeline
from cute_prof.trace import EVENT_DTYPE, Trace

SPAN, INSTANT = layout.KIND_SPAN, layout.KIND_INSTANT
TAB10 = np.array(colormaps["tab10"].colors)


def make_trace(rows, names=("mainloop", "load", "mma", "store")):
    """rows: (start, dur, tag, tid, sm, kind)."""
    events = np.zeros(len(rows), dtype=EVENT_DTYPE)
    if rows:
        start, dur, tag, tid, sm, kind = map(np.array, zip(*rows))
        events["start_ns"] = 10**18 + start
        events["dur_ns"], events["tag"], events["tid"] = dur, tag, tid
        events["sm"], events["kind"] = sm, kind
        events = events[np.argsort(events["start_ns"], kind="stable")]
    return Trace(events, tuple(names), len(rows), len(rows), 0, 0, {"device": "test GPU"})


def pipeline_rows(n_tids, iterations, *, seed=0):
    """Per tid: mainloop holding alternating load (short) / mma (long) regions, then a
    store, and an instant per iteration."""
    rng = np.random.default_rng(seed)
    rows = []
    for tid in range(n_tids):
        t = int(rng.integers(0, 2000))
        begin = t
        for i in range(iterations):
            rows.append((t, 300, 1, tid, tid % 4, SPAN))
            rows.append((t + 300, 900, 2, tid, tid % 4, SPAN))
            rows.append((t + 1200, 0, 3, tid, tid % 4, INSTANT))
            t += 1250
        rows.append((begin, t - begin, 0, tid, tid % 4, SPAN))
        rows.append((t + 10, 2000, 3, tid, tid % 4, SPAN))
    return rows


def colours_present(image, colours, tolerance=3 / 255):
    rgb = image[..., :3].reshape(-1, 3)
    return [bool((np.abs(rgb - c).max(axis=1) <= tolerance).any()) for c in colours]


def test_small_trace_png_vector_mode(tmp_path):
    trace = make_trace(pipeline_rows(6, 8))
    path = plot_timeline(trace, tmp_path / "t.png", width_px=1000, height_px=400)
    image = imread(path)
    assert image.shape[:2] == (400, 1000)
    # load, mma and store are visible in their legend colours (tab10 by total time:
    # mainloop, mma, load, store); mainloop shows at the edges of its bar
    assert all(colours_present(image, TAB10[:4]))
    assert len(np.unique((image[..., :3] * 255).astype(np.uint8).reshape(-1, 3), axis=0)) > 8


def test_large_trace_raster_and_aggregated_rows(tmp_path):
    trace = make_trace(pipeline_rows(300, 40))
    assert len(trace.events) > 30_000
    path = plot_timeline(trace, tmp_path / "big.png", width_px=1200, max_tracks=32)
    image = imread(path)
    assert image.shape[1] == 1200 and image.shape[0] >= 260
    present = colours_present(image, TAB10[:4], tolerance=4 / 255)
    # the fully busy rows show the inner tags (mma wins over mainloop: same rows, deeper)
    assert present[1], "mma colour missing"
    assert present[2] or present[3]


def test_raster_can_be_forced_and_size_is_exact(tmp_path):
    trace = make_trace(pipeline_rows(5, 10))
    path = plot_timeline(trace, tmp_path / "r.png", width_px=800, height_px=300,
                         max_vector_regions=0, dpi=80)
    image = imread(path)
    assert image.shape[:2] == (300, 800)
    assert colours_present(image, [TAB10[1]])[0]


def test_group_by_sm_and_svg(tmp_path):
    trace = make_trace(pipeline_rows(8, 4))
    path = plot_timeline(trace, tmp_path / "t.svg", group_by="sm")
    root = ET.parse(path).getroot()
    assert root.tag.endswith("svg")
    text = path.read_text()
    assert "SM 0" in text or "SM" in text


def test_many_tags_fold_into_other(tmp_path):
    rows = [(i * 100, 90, i, 0, 0, SPAN) for i in range(20)]
    names = [f"tag{i}" for i in range(20)]
    path = plot_timeline(make_trace(rows, names), tmp_path / "t.svg", max_legend_tags=5)
    text = path.read_text()
    assert "other tags" in text
    assert "tag4" in text and "tag19" not in text


def test_empty_and_instant_only_traces(tmp_path):
    assert imread(plot_timeline(make_trace([]), tmp_path / "e.png")).shape[1] == 1600
    rows = [(0, 0, 1, 0, 0, INSTANT), (50, 0, 1, 3, 0, INSTANT)]
    assert imread(plot_timeline(make_trace(rows), tmp_path / "i.png")).size > 0


def test_bad_arguments(tmp_path):
    trace = make_trace(pipeline_rows(2, 2))
    with pytest.raises(ProfileBufferError, match="format"):
        plot_timeline(trace, tmp_path / "t.bmp")
    with pytest.raises(ProfileBufferError, match="group_by"):
        plot_timeline(trace, tmp_path / "t.png", group_by="cluster")
    with pytest.raises(ProfileBufferError, match="too small"):
        plot_timeline(trace, tmp_path / "t.png", width_px=50)
    with pytest.raises(ProfileBufferError, match="does not exist"):
        plot_timeline(trace, tmp_path / "nope" / "t.png")
    assert os.listdir(tmp_path) == []


def test_coverage_matches_brute_force():
    rng = np.random.default_rng(5)
    n_rows, n_slots, n_cols = 3, 2, 17
    a = rng.uniform(0, n_cols, 200)
    b = np.minimum(a + rng.exponential(3, 200), n_cols)
    row = rng.integers(0, n_rows, 200)
    slot = rng.integers(0, n_slots, 200)
    got = _coverage(row, slot, a, b, n_rows, n_slots, n_cols)
    expected = np.zeros((n_rows, n_slots, n_cols))
    for r, s, x0, x1 in zip(row, slot, a, b):
        for c in range(n_cols):
            expected[r, s, c] += max(0.0, min(x1, c + 1) - max(x0, c))
    np.testing.assert_allclose(got, expected, atol=1e-9)


def test_stack_view_levels_and_innermost_segments():
    # track 0: A [0,100) > B [10,50) > C [20,30); D [60,70) in A; E [100,110) after A
    # track 1: F [0,40) and G [20,60) overlap without nesting; H [50,55) inside G
    track = np.array([0, 0, 0, 0, 0, 1, 1, 1])
    start = np.array([0, 10, 20, 60, 100, 0, 20, 50])
    end = np.array([100, 50, 30, 70, 110, 40, 60, 55])
    levels, (seg_track, seg_start, seg_end, seg_span) = _stack_view(track, start, end)
    assert levels.tolist() == [1, 2, 3, 2, 1, 1, 2, 2]
    segments = sorted(zip(seg_track.tolist(), seg_start.tolist(), seg_end.tolist(),
                          seg_span.tolist()))
    assert segments == [
        (0, 0, 10, 0), (0, 10, 20, 1), (0, 20, 30, 2), (0, 30, 50, 1), (0, 50, 60, 0),
        (0, 60, 70, 3), (0, 70, 100, 0), (0, 100, 110, 4),
        (1, 0, 20, 5), (1, 20, 40, 6), (1, 40, 50, 6), (1, 50, 55, 7), (1, 55, 60, 6),
    ]
    # self time adds up to the busy (union) time of each track
    for t, busy in ((0, 110), (1, 60)):
        assert sum(e - s for tr, s, e, _ in segments if tr == t) == busy
