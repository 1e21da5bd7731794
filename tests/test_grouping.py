"""cute_prof.analysis.grouping: each counting form returns exactly what the sorting form it
replaces returns, on countable columns and on the ones it hands back to numpy."""

import numpy as np
import pytest

from cute_prof.analysis.grouping import (in_time_order, rows_by_value, tags_in, unique_ints,
                                         warp_order)

RNG = np.random.default_rng(7)


def _columns():
    return {
        "dense": RNG.integers(0, 50, 5000),
        "int32": RNG.integers(0, 3000, 5000).astype(np.int32),
        "negative": RNG.integers(-20, 20, 5000),  # not countable: np.unique
        "spread": RNG.integers(0, 1 << 40, 500),  # not countable: np.unique
        "one": np.array([3]),
        "empty": np.zeros(0, dtype=np.int64),
    }


@pytest.mark.parametrize("name", list(_columns()))
def test_unique_ints_is_np_unique(name):
    values = _columns()[name]
    got = unique_ints(values, return_inverse=True, return_counts=True)
    want = np.unique(values, return_inverse=True, return_counts=True)
    for a, b in zip(got, want):
        assert a.tolist() == b.tolist()
    assert unique_ints(values).tolist() == np.unique(values).tolist()
    assert unique_ints(values).dtype == np.unique(values).dtype


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64, np.uint8,
                                   np.uint32, np.uint64])
@pytest.mark.parametrize("wanted", [[], [0], [1, 5, 7], [59, 3], [0, 1000], [-1, 4]])
def test_tags_in_is_np_isin(dtype, wanted):
    info = np.iinfo(dtype)
    tag = RNG.integers(max(info.min, -50), min(info.max, 60), 2000).astype(dtype)
    tag[:3] = [info.min, info.max, 0]  # the extremes: a negative id reads as a huge one
    assert tags_in(tag, wanted).tolist() == np.isin(tag, wanted).tolist()


def test_tags_in_a_record_column():
    ev = np.zeros(10, dtype=[("start_ns", np.int64), ("tag", np.int32)])
    ev["tag"] = np.arange(-5, 5)
    assert tags_in(ev["tag"], [0, 3]).tolist() == np.isin(ev["tag"], [0, 3]).tolist()


def test_rows_by_value_is_flatnonzero():
    values = RNG.integers(0, 9, 3000)
    rows = rows_by_value(values, 10)
    assert len(rows) == 10
    for v, got in enumerate(rows):
        assert got.tolist() == np.flatnonzero(values == v).tolist()


@pytest.mark.parametrize("sorted_times", [True, False])
@pytest.mark.parametrize("tids", [40, 70000])  # 16-bit ids (radix sort) and wider ones
def test_warp_order_is_lexsort(sorted_times, tids):
    tid = RNG.integers(0, tids, 20000)
    start = RNG.integers(0, 5000, 20000)  # many ties: kept in row order
    if sorted_times:
        start = np.sort(start)
    assert in_time_order(start) == sorted_times
    assert warp_order(tid, start).tolist() == np.lexsort((start, tid)).tolist()
