"""profile_loop on CPU buffers: the 'kernel' is layout.write_records on the loop's target,
which writes exactly what the device ops write (counter word with its epoch, tid words)."""

import json

import numpy as np
import pytest

from cute_prof import layout, profile_loop
from cute_prof.errors import ProfileBufferError

TAGS = ["load", "mma"]


def kernel(buffer, *, grid, start, durations):
    words = buffer.tensor.numpy()
    n = len(durations)
    layout.write_records(words, start + 1000 * np.arange(n), durations, tag=np.arange(n) % 2,
                         tid=0, grid=grid)


def test_every_second_iteration_is_recorded_and_summarised(tmp_path):
    path = tmp_path / "loop.json"
    with profile_loop(64, TAGS, path, device="cpu", every=2, export=True) as loop:
        for i in loop.iterations(5):
            kernel(loop.target, grid=1, start=100_000 * i, durations=[10 * (i + 1), 5])
            kernel(loop.target, grid=2, start=100_000 * i + 50_000, durations=[7])
    trace = loop.trace
    assert loop.recorded_iterations == [0, 2, 4]
    assert trace.attempted == 9  # 3 recorded iterations x 3 records; the others went to scratch
    assert [(l["iteration"], l["grid_id"], l["records"]) for l in trace.launches] == [
        (0, 1, 2), (0, 2, 1), (2, 1, 2), (2, 2, 1), (4, 1, 2), (4, 2, 1)]
    stats = {(int(r["launch"]), int(r["tag"])): r for r in loop.stats}
    # tag 0 ("load"): 10 + 7 ns in iteration 0's two launches, 30, 50 in iterations 2 and 4
    assert stats[(0, 0)]["total_ns"] == 10 and stats[(1, 0)]["total_ns"] == 7
    assert stats[(2, 0)]["total_ns"] == 30 and stats[(4, 0)]["total_ns"] == 50
    assert stats[(-1, 0)]["count"] == 6 and stats[(-1, 0)]["total_ns"] == 10 + 30 + 50 + 3 * 7
    assert stats[(-1, 1)]["count"] == 3 and stats[(-1, 1)]["median_ns"] == 5
    assert path.exists()


def test_export_some_iterations(tmp_path):
    path = tmp_path / "some.json"
    with profile_loop(64, TAGS, path, device="cpu", export=True, export_iterations=[1]) as loop:
        for i in loop.iterations(3):
            kernel(loop.target, grid=1, start=100_000 * i, durations=[10, 20])
    assert len(loop.trace) == 6
    exported = json.loads(path.read_text())
    events = exported["traceEvents"] if isinstance(exported, dict) else exported
    spans = [e for e in events if e.get("ph") == "X"]
    assert len(spans) == 2
    assert sorted(e["args"]["start_ns"] for e in spans) == [100_000, 101_000]


def test_export_none(tmp_path):
    path = tmp_path / "none.json"
    with profile_loop(8, TAGS, path, device="cpu", export=False) as loop:
        for i in loop.iterations(2):
            kernel(loop.target, grid=1, start=0, durations=[1])
    assert not path.exists() and len(loop.trace) == 2


def test_bad_every():
    with pytest.raises(ProfileBufferError, match="every"):
        with profile_loop(8, TAGS, device="cpu", every=0):
            pass
