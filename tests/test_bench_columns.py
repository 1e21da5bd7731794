"""The GPU benches' compact trace files (bench/tools/columns.py) give back the trace they were
given, in the same order, whatever its ties, and a base's traced launches are found in order."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from cute_prof.trace import EVENT_DTYPE, Trace

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from tools.columns import launch_path, launch_paths, load_columns, save_columns  # noqa: E402


def trace_of(starts, tids, *, decode_order=True) -> Trace:
    ev = np.zeros(len(starts), dtype=EVENT_DTYPE)
    ev["start_ns"] = np.asarray(starts, dtype=np.int64) + 1_795_576_972_039_349_568
    ev["tid"] = tids
    ev["dur_ns"] = np.arange(ev.size) % 7 * 32
    ev["tag"] = np.arange(ev.size) % 5
    ev["payload"] = np.arange(ev.size)  # tells each record apart
    ev["sm"] = np.asarray(tids) // 4
    if decode_order:
        ev = ev[np.lexsort((ev["tid"], ev["start_ns"]))]
    return Trace(events=ev, tag_names=("a", "b", "c", "d", "e"), capacity=ev.size,
                 attempted=ev.size, overflow=0, incomplete=0, metadata={"kernel": "k"})


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 9)), min_size=0, max_size=200),
       st.booleans())
def test_columns_round_trip_keeps_every_record_and_its_order(tmp_path_factory, records,
                                                                decode_order):
    starts = [32 * s for s, _ in records]  # a 32 ns timer: many ties, within and across warps
    tids = [t for _, t in records]
    trace = trace_of(starts, tids, decode_order=decode_order)
    path = tmp_path_factory.mktemp("cols") / "trace.npz"
    save_columns(path, trace, stages=4)
    back = load_columns(path)
    want = trace.events.copy()
    if want.size:
        want["start_ns"] -= want["start_ns"].min()  # times relative to the first record
    assert back.events.dtype == want.dtype
    np.testing.assert_array_equal(back.events, want)
    assert back.metadata["stages"] == 4 and back.metadata["kernel"] == "k"
    assert "columns_by_warp" not in back.metadata


def test_a_decoded_trace_is_stored_by_warp_and_smaller(tmp_path):
    rng = np.random.default_rng(3)
    tids = rng.integers(0, 512, 60_000)
    starts = np.sort(rng.integers(0, 2_000_000, tids.size)) // 32 * 32
    trace = trace_of(starts, tids)
    packed = save_columns(tmp_path / "packed.npz", trace)
    shuffled = trace_of(starts, tids, decode_order=False)  # not the decode's order: as it is
    shuffled.events[:] = shuffled.events[rng.permutation(tids.size)]
    plain = save_columns(tmp_path / "plain.npz", shuffled)
    assert packed.stat().st_size < 0.7 * plain.stat().st_size
    np.testing.assert_array_equal(load_columns(plain).events["payload"],
                                  shuffled.events["payload"])


def test_launch_paths_lists_the_traced_launches_first_to_last(tmp_path):
    base = tmp_path / "trace_base.npz"
    assert launch_paths(base) == []
    for index in range(3):
        launch_path(base, index).write_bytes(b"x")
    launch_path(base, 4).write_bytes(b"x")  # not after a gap
    assert [p.name for p in launch_paths(base)] == [
        "trace_base.npz", "trace_base.launch1.npz", "trace_base.launch2.npz"]
