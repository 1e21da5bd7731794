"""Aggregated export: busy/wait counters per SM, role or CTA, hand-computed on a small trace,
the same with and without the compiled pass, and written by both exporters."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from cute_prof import export, jit, layout
from cute_prof.analysis.roles import RoleSpec, apply_roles
from cute_prof.errors import ProfileBufferError
from cute_prof.export import export_trace
from cute_prof.export.aggregate import aggregate_counters
from cute_prof.export.pftrace_reader import read_pftrace
from cute_prof.trace import EVENT_DTYPE, Trace

S, I = layout.KIND_SPAN, layout.KIND_INSTANT


def small_trace() -> Trace:
    """SM 0: tid 0 works [0,100) and waits [50,150) (overlapping), tid 1 waits [200,300);
    SM 1: tid 2 works [0,300) with a wait [100,200) nested in it; an instant (ignored)."""
    rows = [(0, 100, 0, 0, S, 0), (50, 100, 1, 0, S, 0), (200, 100, 1, 1, S, 0),
            (0, 300, 0, 2, S, 1), (100, 100, 1, 2, S, 1), (120, 0, 0, 2, I, 1)]
    ev = np.zeros(len(rows), EVENT_DTYPE)
    for i, (start, dur, tag, tid, kind, sm) in enumerate(rows):
        ev[i] = (start, dur, tag, tid, 0, kind, sm, 0, -1, i, 0)
    ev = ev[np.argsort(ev["start_ns"], kind="stable")]
    return Trace(ev, ("work", "w"), 6, 6, 0, 0, metadata={"device": "test"})


# bins [0,100) [100,200) [200,300); values: mean tracks busy/waiting per bin, then a closing 0
EXPECTED_BY_SM = {
    "SM 0 busy": [0.5, 0.0, 0.0, 0.0],  # tid 0 works alone in [0,50)
    "SM 0 wait": [0.5, 0.5, 1.0, 0.0],
    "SM 1 busy": [1.0, 0.0, 1.0, 0.0],
    "SM 1 wait": [0.0, 1.0, 0.0, 0.0],
}


def as_dict(counters):
    return {c["name"]: c["value"].tolist() for c in counters}


@pytest.fixture(params=["compiled", "numpy"])
def paths(request):
    if request.param == "compiled" and not jit.available():
        pytest.skip("numba not installed")
    if request.param == "numpy":
        with jit.disabled():
            yield request.param
    else:
        yield request.param


def test_by_sm_hand_computed(paths):
    counters = aggregate_counters(small_trace(), by="sm", bins=3, wait_tags=["w"])
    assert as_dict(counters) == EXPECTED_BY_SM
    assert all(c["ts"].tolist() == [0, 100, 200, 300] for c in counters)


def test_by_role_and_cta_from_the_role_spec(paths):
    spec = RoleSpec(roles={"producer": [0], "consumer": [1, 2]}, tags={"w": "wait"})
    by_role = aggregate_counters(apply_roles(small_trace(), spec), by="role", bins=3)
    assert as_dict(by_role) == {
        "producer busy": [0.5, 0.0, 0.0, 0.0], "producer wait": [0.5, 0.5, 0.0, 0.0],
        "consumer busy": [1.0, 0.0, 1.0, 0.0], "consumer wait": [0.0, 1.0, 1.0, 0.0]}
    strided = RoleSpec(roles={"p": [0], "c": [1]}, tid_stride=2, tags={"w": "wait"})
    by_cta = aggregate_counters(apply_roles(small_trace(), strided), by="cta", bins=3)
    assert as_dict(by_cta) == {k.replace("SM", "CTA"): v for k, v in EXPECTED_BY_SM.items()}


def test_without_wait_tags_only_busy(paths):
    counters = aggregate_counters(small_trace(), by="sm", bins=1)
    # one bin [0,300): SM 0 covered 150 + 100, SM 1 300
    assert as_dict(counters) == {"SM 0 busy": [round(250 / 300, 6), 0.0], "SM 1 busy": [1.0, 0.0]}


def test_compiled_equals_numpy_on_random_overlaps():
    if not jit.available():
        pytest.skip("numba not installed")
    rng = np.random.default_rng(5)
    n = 4000
    ev = np.zeros(n, EVENT_DTYPE)
    ev["start_ns"] = rng.integers(0, 100_000, n)
    ev["dur_ns"] = rng.choice([0, 7, 300, 4000], n)
    ev["tag"] = rng.integers(0, 3, n)
    ev["tid"] = rng.integers(0, 40, n)
    ev["sm"] = ev["tid"] % 5
    ev["kind"] = rng.choice([S, I], n, p=[0.9, 0.1])
    ev = ev[rng.permutation(n)]  # not in start order
    trace = Trace(ev, ("a", "b", "c"), n, n, 0, 0)
    compiled = aggregate_counters(trace, by="sm", bins=77, wait_tags=["b"])
    with jit.disabled():
        reference = aggregate_counters(trace, by="sm", bins=77, wait_tags=["b"])
    for a, b in zip(compiled, reference):
        assert a["name"] == b["name"]
        np.testing.assert_allclose(a["value"], b["value"], atol=1e-9)


def test_bad_options():
    with pytest.raises(ProfileBufferError, match="aggregate must be one of"):
        aggregate_counters(small_trace(), by="warp")
    with pytest.raises(ProfileBufferError, match="bins must be"):
        aggregate_counters(small_trace(), bins=0)
    with pytest.raises(ProfileBufferError, match="role spec"):
        aggregate_counters(small_trace(), by="role")
    with pytest.raises(ProfileBufferError, match="unknown wait tags"):
        aggregate_counters(small_trace(), wait_tags=["nope"])
    with pytest.raises(ProfileBufferError, match="counter tracks"):
        export_trace(small_trace(), "x.png", aggregate="sm")


def test_pftrace_and_json_carry_the_counters_and_no_slices(tmp_path):
    path = export_trace(small_trace(), tmp_path / "a.pftrace", aggregate="sm", bins=3,
                        wait_tags=["w"])
    slices, info = read_pftrace(path)
    assert slices.shape[0] == 0
    metadata = info["metadata"]
    assert (json.loads(metadata) if isinstance(metadata, str) else metadata)["aggregate"] == {
        "by": "sm", "bins": 3, "records": 6, "counters": 4}
    parsed = pb.Trace()
    parsed.ParseFromString(Path(path).read_bytes())
    names = {p.track_descriptor.uuid: p.track_descriptor.name for p in parsed.packet
             if p.HasField("track_descriptor") and p.track_descriptor.HasField("counter")}
    samples: dict[str, list[float]] = {}
    for p in parsed.packet:
        if p.HasField("track_event") and p.track_event.type == pb.TrackEvent.TYPE_COUNTER:
            samples.setdefault(names[p.track_event.track_uuid], []).append(
                p.track_event.double_counter_value)
    assert samples == EXPECTED_BY_SM
    data = json.loads(Path(export_trace(small_trace(), tmp_path / "a.json", aggregate="sm",
                                        bins=3, wait_tags=["w"])).read_text())
    values: dict[str, list[float]] = {}
    for e in data["traceEvents"]:
        if e["ph"] == "C":
            values.setdefault(e["name"], []).append(e["args"]["value"])
        assert e["ph"] in ("C", "M")
    assert values == EXPECTED_BY_SM


def test_big_export_warns_and_names_the_aggregate_option(tmp_path, monkeypatch):
    monkeypatch.setattr(export, "UI_COMFORTABLE_RECORDS", 3)
    with pytest.warns(UserWarning, match="aggregate="):
        export_trace(small_trace(), tmp_path / "b.json")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        export_trace(small_trace(), tmp_path / "c.json", aggregate="sm")
