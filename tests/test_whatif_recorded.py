"""The what-if check reads the recorder's cost from the recording kernels' own timings."""

from __future__ import annotations

import pytest
from test_bench_runners import load


def test_recorded_changes_come_from_the_medians_of_the_recording_kernels():
    check = load("whatif_check")
    timings = {"base": [100.0, 101.0, 99.0], "stages2": [150.0, 151.0, 149.0],
               "base:recorded": [110.0, 111.0, 109.0], "stages2:recorded": [160.0, 158.0, 159.0]}
    got = check.recorded_changes(timings, "base", "stages2")
    assert got["measured_recorded"] == pytest.approx(159 / 110 - 1)
    assert got["recorder_cost_base"] == pytest.approx(110 / 100 - 1)
    assert got["recorder_cost_variant"] == pytest.approx(159 / 150 - 1)
    # a run that timed no recording kernel (or not this variant's) leaves the traced span
    assert check.recorded_changes({k: v for k, v in timings.items() if k != "stages2:recorded"},
                                  "base", "stages2") == {}
