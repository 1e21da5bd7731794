"""Property tests for the loaders: a corrupted .npz / .pt / .json file gives a trace or
``ProfileBufferError`` (never another exception), leaves the file's bytes unchanged, and a
trace it gives obeys the decoder's validity rules. ``bench/fuzz.py`` runs the same idea at
100,000 cases; these keep it in CI with bounded time (CI=1 derandomizes, see conftest)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cute_prof import ProfileBufferError, ProfileWarning, decode_buffer, layout
from cute_prof.export import export_trace
from cute_prof.storage import load_trace, save_buffer

TAGS = ["load", "mma", "store"]
INT64_MAX = 2**63 - 1
REPO = Path(__file__).resolve().parents[1]


def small_buffer() -> np.ndarray:
    buf = np.zeros(layout.buffer_words(8), dtype=np.int64)
    layout.write_records(buf, 1000 + 100 * np.arange(6), [50, 20, 0, 30, 10, 5], [0, 1, 2, 0, 1, 2],
                         [0, 0, 1, 1, 2, 2], kind=[0, 0, 1, 0, 0, 0])
    return buf


@pytest.fixture(scope="module")
def originals(tmp_path_factory):
    directory = tmp_path_factory.mktemp("originals")
    buf = small_buffer()
    files = {suffix: save_buffer(directory / f"t{suffix}", buf, TAGS).read_bytes()
             for suffix in (".npz", ".pt")}
    files[".json"] = export_trace(decode_buffer(buf, TAGS), directory / "t.json").read_bytes()
    return files


def load_checked(path: Path):
    """Load ``path``; ProfileBufferError is fine, any other exception fails the test."""
    before = path.read_bytes()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ProfileWarning)
        try:
            trace = load_trace(path)
        except ProfileBufferError:
            trace = None
    assert path.read_bytes() == before, "loading modified the input file"
    if trace is not None:
        start, dur = trace.events["start_ns"], trace.events["dur_ns"]
        assert (start >= 0).all() and (dur >= 0).all()
        assert (start <= INT64_MAX - dur).all()
    return trace


byte_edits = st.lists(
    st.tuples(st.integers(0, 10**9), st.integers(1, 255)), min_size=1, max_size=8
)


@settings(max_examples=60)
@given(suffix=st.sampled_from([".npz", ".pt", ".json"]), edits=byte_edits,
       cut=st.one_of(st.none(), st.integers(0, 10**9)))
def test_corrupted_saved_files_load_or_raise_profile_buffer_error(originals, tmp_path_factory,
                                                                   suffix, edits, cut):
    data = bytearray(originals[suffix])
    for position, mask in edits:
        data[position % len(data)] ^= mask
    if cut is not None:
        data = data[: cut % (len(data) + 1)]
    path = tmp_path_factory.mktemp("case") / f"t{suffix}"
    path.write_bytes(bytes(data))
    load_checked(path)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**64), 2**64) | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children,
                                                                      max_size=3),
    max_leaves=8,
)


@settings(max_examples=80)
@given(data=st.data())
def test_json_traces_with_wrong_shapes_load_or_raise(originals, tmp_path_factory, data):
    doc = json.loads(originals[".json"])
    where = data.draw(st.sampled_from(["top", "otherData", "other_key", "event", "args"]))
    value = data.draw(json_values)
    if where == "top":
        doc = value
    elif where == "otherData":
        doc["otherData"] = value
    elif where == "other_key":
        doc["otherData"][data.draw(st.sampled_from(sorted(doc["otherData"])))] = value
    else:
        records = [e for e in doc["traceEvents"] if e.get("ph") in ("X", "i")]
        event = data.draw(st.sampled_from(records))
        target = event if where == "event" else event["args"]
        target[data.draw(st.sampled_from(sorted(target)))] = value
    path = tmp_path_factory.mktemp("case") / "t.json"
    path.write_text(json.dumps(doc))
    load_checked(path)


@pytest.mark.parametrize("start, dur, reason", [
    (-5, 10, "negative_start"), (5, -10, "negative_duration"), (INT64_MAX, 1, "end_overflow"),
])
def test_json_rows_breaking_the_time_rules_are_counted_invalid(originals, tmp_path, start, dur,
                                                               reason):
    doc = json.loads(originals[".json"])
    records = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    records[0]["args"]["start_ns"], records[0]["args"]["dur_ns"] = start, dur
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    trace = load_checked(path)
    assert trace.invalid_reasons == {reason: 1} and trace.invalid == 1
    assert len(trace) == 5


def test_nan_in_json_is_refused(originals, tmp_path):
    path = tmp_path / "t.json"
    path.write_bytes(originals[".json"].replace(b'"producer"', b'"x":NaN,"producer"', 1))
    with pytest.raises(ProfileBufferError, match="not a JSON trace"):
        load_trace(path)


def test_fuzz_harness_runs_clean_on_a_few_hundred_cases():
    import sys

    sys.path.insert(0, str(REPO / "bench"))
    import fuzz

    assert fuzz.main(["--cases", "300", "--workers", "1", "--picture-every", "150",
                      "--no-write"]) == 0
