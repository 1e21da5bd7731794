"""Launch identity decoded from synthetic buffers written exactly as the device writes them."""

import numpy as np
import pytest

from cute_prof import layout
from cute_prof.decode import decode_buffer
from cute_prof.launches import launch_identity, launch_tag_stats

TAGS = ["a", "b"]


def empty(capacity):
    return np.zeros(layout.buffer_words(capacity), dtype=np.int64)


def launch(buf, n, *, grid, start, tag=0, dur=10):
    layout.write_records(buf, start + 100 * np.arange(n), dur, tag=tag, tid=np.arange(n), grid=grid)


def next_launch(buf):
    buf[layout.COUNTER_INDEX] += layout.LAUNCH_EPOCH_INCREMENT


def test_direct_launches_are_told_apart_by_grid_id():
    buf = empty(100)
    for i, n in enumerate([5, 7, 3]):
        launch(buf, n, grid=2 + i, start=10_000 * (i + 1))
    trace = decode_buffer(buf, TAGS)
    assert [l["records"] for l in trace.launches] == [5, 7, 3]
    assert [l["grid_id"] for l in trace.launches] == [2, 3, 4]
    assert [l["epoch"] for l in trace.launches] == [0, 0, 0]
    assert np.array_equal(np.bincount(trace.events["launch"]), [5, 7, 3])
    # first/last: start of the earliest record, end of the latest
    assert trace.launches[1]["first_ns"] == 20_000
    assert trace.launches[1]["last_ns"] == 20_000 + 600 + 10
    assert trace.launches[2]["first_slot"] == 12 and trace.launches[2]["last_slot"] == 14


def test_graph_replays_are_told_apart_by_epoch():
    buf = empty(100)
    for replay in range(3):
        next_launch(buf)
        launch(buf, 4, grid=7, start=100_000 * replay)
        launch(buf, 2, grid=8, start=100_000 * replay + 50_000, tag=1)
    trace = decode_buffer(buf, TAGS)
    assert trace.attempted == 18
    assert [(l["epoch"], l["grid_id"], l["records"]) for l in trace.launches] == [
        (1, 7, 4), (1, 8, 2), (2, 7, 4), (2, 8, 2), (3, 7, 4), (3, 8, 2)]
    ev = trace.events
    assert np.all(ev["tag"][ev["launch"] % 2 == 1] == 1)


def test_epochs_unwrap_past_eight_bits_and_anchor_on_the_counter():
    buf = empty(400)
    for i in range(300):
        next_launch(buf)
        launch(buf, 1, grid=1, start=1000 * i)
    trace = decode_buffer(buf, TAGS)
    assert [l["epoch"] for l in trace.launches] == list(range(1, 301))
    assert np.array_equal(trace.events["launch"], np.arange(300))


def test_old_buffers_decode_as_one_launch():
    buf = empty(10)
    layout.write_records(buf, [5, 6, 7], 1, tag=0, tid=0)
    trace = decode_buffer(buf, TAGS)
    assert len(trace.launches) == 1 and trace.launches[0]["records"] == 3
    assert np.all(trace.events["launch"] == 0)


def test_overflow_stays_exact_across_epochs():
    buf = empty(5)
    for i in range(3):
        next_launch(buf)
        launch(buf, 3, grid=4, start=1000 * i)
    trace = decode_buffer(buf, TAGS)
    assert trace.attempted == 9 and trace.overflow == 4
    assert [(l["epoch"], l["records"]) for l in trace.launches] == [(1, 3), (2, 2)]
    assert layout.split_counter_word(buf[0]) == (9, 3)


def test_tid_word_bits_round_trip():
    words = layout.encode_tid_words(-5, sm=131, warp=63, epoch=0x1FF, grid=33)
    assert layout.decode_tid_words(words)["tid"] == -5
    assert layout.decode_tid_words(words)["warp"] == 63
    bits = layout.decode_launch_bits(words)
    assert bits["epoch"] == 0xFF and bits["grid"] == 1
    assert int(words) >= 0  # bit 63 stays clear


def test_launch_identity_of_nothing():
    index, launches = launch_identity(np.zeros(0, np.int64), np.zeros(0), np.zeros(0), np.zeros(0))
    assert index.shape == (0,) and launches == []


def test_per_launch_and_pooled_tag_statistics():
    buf = empty(100)
    layout.write_records(buf, [0, 100], [10, 30], tag=0, tid=0, grid=1)
    layout.write_records(buf, [1000, 1100, 1200], [20, 20, 50], tag=[0, 0, 1], tid=0, grid=2)
    trace = decode_buffer(buf, TAGS)
    stats = launch_tag_stats(trace)
    rows = {(int(r["launch"]), int(r["tag"])): r for r in stats}
    assert rows[(0, 0)]["count"] == 2 and rows[(0, 0)]["total_ns"] == 40
    assert rows[(0, 0)]["mean_ns"] == pytest.approx(20.0)
    assert rows[(1, 0)]["count"] == 2 and rows[(1, 0)]["max_ns"] == 20
    assert rows[(1, 1)]["total_ns"] == 50
    pooled = rows[(-1, 0)]
    assert pooled["count"] == 4 and pooled["total_ns"] == 80 and pooled["min_ns"] == 10
    assert rows[(-1, 1)]["count"] == 1


def test_saved_traces_keep_their_launches(tmp_path):
    from cute_prof.storage import load_trace, save_trace

    buf = empty(100)
    for replay in range(2):
        next_launch(buf)
        launch(buf, 3, grid=9, start=100_000 * replay)
        launch(buf, 2, grid=10, start=100_000 * replay + 50_000)
    trace = decode_buffer(buf, TAGS)
    save_trace(tmp_path / "t.npz", trace)
    again = load_trace(tmp_path / "t.npz")
    keys = ("epoch", "grid_id", "records", "first_ns", "last_ns")
    assert [[l[k] for k in keys] for l in again.launches] == [[l[k] for k in keys] for l in trace.launches]
    assert np.array_equal(again.events["launch"], trace.events["launch"])
    assert again.attempted == trace.attempted == 10


from hypothesis import given, strategies as st  # noqa: E402


@given(st.lists(st.tuples(st.integers(0, 300), st.integers(0, 40), st.integers(1, 4)),
                min_size=1, max_size=12))
def test_any_sequence_of_launches_decodes_to_its_launches(plan):
    """plan: per launch (epoch bumps before it, %gridid, records). Launches of one epoch
    whose grid ids agree in the low 5 bits are one launch (the documented limit)."""
    buf = empty(sum(n for _, _, n in plan))
    expected: dict = {}
    epoch = 0
    for i, (bumps, grid, n) in enumerate(plan):
        # a jump of 256 or more bumps between two recorded slots is the documented limit
        bumps = bumps % 256
        buf[layout.COUNTER_INDEX] += bumps * layout.LAUNCH_EPOCH_INCREMENT
        epoch += bumps
        launch(buf, n, grid=grid, start=1000 * i)
        key = (epoch, grid % 32)
        expected[key] = expected.get(key, 0) + n
    trace = decode_buffer(buf, TAGS)
    got = {(l["epoch"], l["grid_id"]): l["records"] for l in trace.launches}
    assert got == expected
    assert len(trace) == sum(expected.values())
    first_slots = [l["first_slot"] for l in trace.launches]
    assert first_slots == sorted(first_slots)
