import numpy as np

from cute_prof import layout
from cute_prof.analysis.diff import diff_traces
from cute_prof.decode import decode_buffer


def trace_of(names, tags, durations, *, launches=None):
    buf = np.zeros(layout.buffer_words(len(tags)), np.int64)
    grid = 0 if launches is None else np.asarray(launches) + 1
    layout.write_records(buf, np.arange(len(tags)) * 1000, durations, tag=tags, tid=0, grid=grid)
    return decode_buffer(buf, names)


def test_tags_match_by_name_across_tag_tables_and_real_changes_are_flagged():
    rng = np.random.default_rng(0)
    a = trace_of(["x", "y"], [0] * 50 + [1] * 50,
                 np.r_[rng.integers(95, 106, 50), rng.integers(9, 12, 50)])
    b = trace_of(["y", "x", "z"], [1] * 50 + [0] * 50 + [2],
                 np.r_[rng.integers(195, 206, 50), rng.integers(9, 12, 50), 7])
    diff = diff_traces(a, b)
    rows = {str(r["name"]): r for r in diff.tags}
    assert set(rows) == {"x", "y", "z"}
    assert rows["x"]["count_a"] == rows["x"]["count_b"] == 50
    assert rows["x"]["mean_b"] - rows["x"]["mean_a"] > 90 and rows["x"]["flagged"]
    assert not rows["y"]["flagged"]  # same distribution: within noise
    assert rows["z"]["count_a"] == 0 and rows["z"]["count_b"] == 1 and not rows["z"]["flagged"]
    text = diff.format_text()
    assert "x" in text and "*" in text


def test_launch_to_launch_spread_widens_the_noise():
    # A's two launches average 100 and 110 ns: B's 108 is +3 ns, beyond 3 standard errors of
    # the 40 regions (3 * 5 / sqrt(40) = 2.4) but inside the launch spread (3 * sqrt(50 / 2) = 15)
    a = trace_of(["x"], [0] * 40, [100] * 20 + [110] * 20, launches=[0] * 20 + [1] * 20)
    assert len(a.launches) == 2
    b = trace_of(["x"], [0] * 40, [108] * 40)
    row = diff_traces(a, b).tags[0]
    assert row["delta_mean"] == 3 and row["noise"] == 15 and not row["flagged"]
    c = trace_of(["x"], [0] * 40, [130] * 40)
    assert diff_traces(a, c).tags[0]["flagged"]
