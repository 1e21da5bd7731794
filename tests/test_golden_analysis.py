"""The analysis gives today the figures it gave when the golden file was written: every
summary, role split, pipeline report, what-if, derived model and Perfetto flow of the
committed traces, bit for bit (``golden_analysis.py`` says what is covered and how a change
on purpose rewrites the file)."""

from __future__ import annotations

import json
import os
import warnings

import pytest

import golden_analysis


@pytest.fixture(scope="module")
def now_and_golden():
    cwd = os.getcwd()
    os.chdir(golden_analysis.ROOT)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            now = golden_analysis.jsonable(golden_analysis.outputs())
    finally:
        os.chdir(cwd)
    return now, golden_analysis.load_golden()


def test_every_output_of_the_golden_file_is_still_produced(now_and_golden):
    now, golden = now_and_golden
    assert sorted(now) == sorted(golden)


@pytest.mark.parametrize("key", sorted(golden_analysis.load_golden()))
def test_the_analysis_gives_the_golden_figures_bit_for_bit(now_and_golden, key):
    now, golden = now_and_golden
    assert key in now, f"{key} is no longer produced"
    # through JSON both ways, as the file holds it: floats compare by their exact bits
    now_value = json.loads(json.dumps(now[key]))
    assert golden_analysis.first_difference(golden[key], now_value) is None, \
        golden_analysis.first_difference(golden[key], now_value)


def test_the_golden_file_is_not_trivially_satisfied(now_and_golden):
    _, golden = now_and_golden
    # the what-ifs it holds are real predictions, the sampled ones with their sensitivity
    fa4 = golden["fa4 analyze unrecorded"]["what_if"]
    assert len(fa4) == 4 and all("predicted_change" in w for w in fa4)
    sampled = golden["arrivals one"]["what_if"]
    assert sampled[0]["latency_per_tick"] > 0  # two 1-deep rings pay every load
    assert golden["arrivals pooled"]["what_if"][0]["changes_by_probed_launch"]
    # a small perturbation of one figure is caught
    changed = json.loads(json.dumps(golden["fa4 analyze"]))
    changed["what_if"][0]["predicted_change"] = \
        __import__("math").nextafter(changed["what_if"][0]["predicted_change"], 1e9)
    assert golden_analysis.first_difference(golden["fa4 analyze"], changed) is not None
