"""The compiled decode and summary paths (cute_prof.jit) give exactly what the numpy
reference paths give: the same Trace columns, launches, loss counts, and the same summary
numbers and text, on synthetic buffers built through cute_prof.layout and on the traces
committed to the repository."""

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cute_prof import jit, layout
from cute_prof.analysis.summary import summarize
from cute_prof.decode import decode_buffer
from cute_prof.storage import load_trace
from cute_prof.trace import EVENT_DTYPE, Trace

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(not jit.available(), reason="numba not installed")
CLOCK_HZ = 1.5e9


def _decode_both(buf, **options):
    compiled = decode_buffer(buf, **options)
    with jit.disabled():
        reference = decode_buffer(buf, **options)
    return compiled, reference


def _assert_same_trace(compiled, reference):
    assert compiled.events.dtype == reference.events.dtype == EVENT_DTYPE
    assert compiled.events.tobytes() == reference.events.tobytes()
    assert compiled.launches == reference.launches
    assert compiled.metadata == reference.metadata
    for name in ("capacity", "attempted", "overflow", "incomplete", "invalid"):
        assert getattr(compiled, name) == getattr(reference, name), name
    assert compiled.invalid_reasons == reference.invalid_reasons
    assert compiled.clock_syncs.tobytes() == reference.clock_syncs.tobytes()


def _assert_same_summary(trace):
    compiled = summarize(trace)
    with jit.disabled():
        reference = summarize(trace)
    assert compiled.to_dict() == reference.to_dict()
    assert compiled.tags.tobytes() == reference.tags.tobytes()
    assert compiled.tids.tobytes() == reference.tids.tobytes()
    assert compiled.sms.tobytes() == reference.sms.tobytes()
    assert compiled.format_table() == reference.format_table()
    return compiled


def _messy_buffer(seed: int, *, capacity: int = 3000, launches: int = 3) -> np.ndarray:
    """Overlapping regions on shared tracks, instants, clock spans with sync pairs, several
    launches, records out of start order, overflow, and a few broken slots."""
    rng = np.random.default_rng(seed)
    buf = np.zeros(layout.buffer_words(capacity), dtype=np.int64)
    per_launch = capacity // launches
    cycles0 = rng.integers(10**9, 10**10, 4)  # each SM's clock64 at t = 10**12 ns
    for launch in range(launches):
        if launch:
            buf[layout.COUNTER_INDEX] += layout.LAUNCH_EPOCH_INCREMENT
        sms = np.arange(4)
        base = 10**12 + launch * 10**7

        def sync(offset_ns):  # clock64 read back to back with %globaltimer, at CLOCK_HZ
            ns = base + offset_ns + rng.integers(0, 50, 4)
            layout.write_records(buf, ns, cycles0 + np.rint((ns - 10**12) * CLOCK_HZ / 1e9)
                                 .astype(np.int64), 0, sms, kind=layout.KIND_CLOCK_SYNC, sm=sms)

        sync(0)
        n = per_launch - 8
        end = base + 1000 + np.sort(rng.integers(0, 10**6, n))
        dur = rng.integers(0, 30_000, n)  # long regions: many overlap on one track
        kind = rng.choice([layout.KIND_SPAN, layout.KIND_INSTANT, layout.KIND_CLOCK_SPAN], n,
                          p=[0.8, 0.1, 0.1])
        dur[kind == layout.KIND_INSTANT] = 0
        start_word, dur_word = end - dur, dur.copy()
        clock = kind == layout.KIND_CLOCK_SPAN
        start_word[clock] = end[clock]
        dur_word[clock] = np.rint(dur[clock] * CLOCK_HZ / 1e9).astype(np.int64)
        sm = rng.integers(0, 4, n)
        warp = rng.integers(0, 3, n)
        layout.write_records(buf, start_word, dur_word, rng.integers(0, 5, n), sm * 3 + warp,
                             payload=rng.integers(-5, 5, n), kind=kind, sm=sm, warp=warp)
        sync(2 * 10**6)
    records = buf[1:].reshape(capacity, 4)
    used = int(buf[0]) & layout.COUNTER_MASK
    broken = rng.choice(used, 12, replace=False)
    records[broken[0]] = 0  # claimed, never written: incomplete
    records[broken[1], 2] |= 1 << 52  # reserved tag bit
    records[broken[2], 3] |= layout.TID_RESERVED_MASK
    records[broken[3], 2] = (records[broken[3], 2] & ~(0xF << 48)) | (9 << 48)  # unknown kind
    records[broken[4], 0] = -5
    records[broken[5], 1] = -7
    records[broken[6], 2] = layout.encode_tag_words(1, kind=layout.KIND_SPAN)
    records[broken[6], 0:2] = [layout.as_int64((1 << 63) - 10), 100]  # end beyond int64
    records[broken[7], 2] = layout.encode_tag_words(2, kind=layout.KIND_CLOCK_SPAN)
    records[broken[7], 0:2] = [50, 10**12]  # converts to a start before 0: clock_overflow
    buf[layout.COUNTER_INDEX] += 500  # attempted beyond capacity: overflow
    return buf


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_messy_buffers_decode_and_summarise_identically(seed):
    compiled, reference = _decode_both(_messy_buffer(seed))
    _assert_same_trace(compiled, reference)
    assert compiled.overflow == 500 and compiled.incomplete == 1
    assert set(compiled.invalid_reasons) == {"reserved_bits", "unknown_kind", "negative_start",
                                             "negative_duration", "end_overflow",
                                             "clock_overflow"}
    assert len(compiled.launches) == 3
    starts = compiled.events["start_ns"]
    assert (starts[1:] >= starts[:-1]).all()
    _assert_same_summary(compiled)


def test_clock_rate_argument_and_start_ordered_buffer():
    """Records already in start order skip the sort; an explicit clock rate is used."""
    buf = np.zeros(layout.buffer_words(200), dtype=np.int64)
    start = 1000 + 10 * np.arange(200)
    kind = np.where(np.arange(200) % 7 == 0, layout.KIND_INSTANT, layout.KIND_SPAN)
    layout.write_records(buf, start, np.where(kind == layout.KIND_INSTANT, 0, 25),
                         np.arange(200) % 3, np.arange(200) % 5, kind=kind)
    compiled, reference = _decode_both(buf, clock_hz=CLOCK_HZ)
    _assert_same_trace(compiled, reference)
    np.testing.assert_array_equal(compiled.events["slot"], np.arange(200))
    _assert_same_summary(compiled)


def test_empty_and_all_invalid_buffers():
    empty = np.zeros(layout.buffer_words(16), dtype=np.int64)
    _assert_same_trace(*_decode_both(empty))
    broken = np.zeros(layout.buffer_words(4), dtype=np.int64)
    layout.write_records(broken, [1, 2, 3, 4], [-1, -1, -1, -1], 0, 0)
    compiled, reference = _decode_both(broken)
    _assert_same_trace(compiled, reference)
    assert compiled.invalid_reasons == {"negative_duration": 4} and len(compiled.events) == 0


def _trace(rows, **columns) -> Trace:
    events = np.zeros(len(rows), dtype=EVENT_DTYPE)
    events["start_ns"] = [r[0] for r in rows]
    events["dur_ns"] = [r[1] for r in rows]
    events["tid"] = [r[2] for r in rows]
    for name, values in columns.items():
        events[name] = values
    return Trace(events=events, tag_names=("a", "b"), capacity=len(rows), attempted=len(rows),
                 overflow=0, incomplete=0)


def test_busy_union_and_gaps_by_hand():
    # tid 0: [0,10) [5,20) [30,40) -> busy 30, one gap of 10; tid 1: [2,4) [4,6) -> busy 4,
    # one gap of 0 (back to back); tid 7: [3,3) -> busy 0
    trace = _trace([(0, 10, 0), (2, 2, 1), (3, 0, 7), (4, 2, 1), (5, 15, 0), (30, 10, 0)],
                   tag=[0, 1, 0, 1, 0, 1])
    summary = _assert_same_summary(trace)
    tids = {int(r["track"]): r for r in summary.tids}
    assert int(tids[0]["busy_ns"]) == 30 and int(tids[0]["gap_max_ns"]) == 10
    assert int(tids[1]["busy_ns"]) == 4 and int(tids[1]["gap_count"]) == 1
    assert int(tids[7]["busy_ns"]) == 0
    assert summary.gaps["count"] == 2 and summary.gaps["total_ns"] == 10
    assert summary.kernel_start_ns == 0 and summary.kernel_end_ns == 40
    tags = {int(r["tag"]): r for r in summary.tags}
    assert int(tags[0]["count"]) == 3 and int(tags[0]["total_ns"]) == 25
    assert float(tags[1]["p50_ns"]) == 2.0 and int(tags[1]["max_ns"]) == 10


def test_unsorted_rows_and_sparse_tids_take_the_reference_path():
    unsorted = _trace([(50, 10, 0), (0, 10, 0), (20, 5, 1)])
    _assert_same_summary(unsorted)
    sparse = _trace([(0, 10, -2**31), (5, 10, 2**31 - 1), (7, 1, 0)])
    _assert_same_summary(sparse)


def test_committed_recordings_decode_and_summarise_identically():
    paths = [ROOT / "cute_prof" / "data" / "example_recording.npz",
             *sorted((ROOT / "tests" / "data").glob("*.npz"))]
    assert len(paths) >= 2
    for path in paths:
        compiled = load_trace(path)
        with jit.disabled():
            reference = load_trace(path)
        _assert_same_trace(compiled, reference)
        _assert_same_summary(compiled)


def test_committed_json_traces_summarise_identically():
    folder = ROOT / "examples" / "traces"
    paths = sorted([*folder.glob("*.json"), *folder.glob("*.json.gz")])
    assert paths
    for path in paths:
        _assert_same_summary(load_trace(path))


_words = st.integers(-2**63, 2**63 - 1)


@st.composite
def _near_valid_records(draw):
    n = draw(st.integers(1, 40))
    rows = []
    for _ in range(n):
        kind = draw(st.sampled_from([0, 0, 1, 2, 3, 5]))
        tag = layout.tag_word_constant(draw(st.integers(0, 4)), kind=min(kind, 3),
                                       payload=draw(st.integers(-3, 3)))
        if kind == 5:
            tag = (tag & ~(0xF << 48)) | (5 << 48)
        tid = int(layout.encode_tid_words(draw(st.integers(-3, 3)), sm=draw(st.integers(0, 3)),
                                          warp=draw(st.integers(0, 2)),
                                          epoch=draw(st.integers(0, 1))))
        start = draw(st.one_of(st.integers(0, 2000), _words))
        dur = draw(st.one_of(st.integers(0, 500), _words))
        rows.append([start, dur, layout.as_int64(tag), tid])
    return np.array(rows, dtype=np.int64)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=_near_valid_records(), extra=st.integers(0, 3))
def test_random_buffers_decode_and_summarise_identically(records, extra):
    buf = np.concatenate(([records.shape[0] + extra], records.reshape(-1)))
    compiled, reference = _decode_both(buf, clock_hz=CLOCK_HZ)
    _assert_same_trace(compiled, reference)
    _assert_same_summary(compiled)
