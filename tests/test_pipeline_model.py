"""Pipeline model (issue #17) on synthetic pipelines whose schedules are computed by hand:
producer-bound, consumer-bound, a ring too shallow, a straggler CTA, per-tile iteration."""

import json

import numpy as np
import pytest

from cute_prof.analysis.critical_path import blockers, critical_path
from cute_prof.analysis.pipeline_data import match_records
from cute_prof.analysis.pipeline_report import analyze_pipeline, perfetto_outputs
from cute_prof.analysis.replay import replay
from cute_prof.analysis.what_if import what_if
from cute_prof.analysis.model import load_pipeline
from cute_prof.errors import ProfileBufferError
from cute_prof.trace import EVENT_DTYPE, Trace

TAGS = ("w_e", "p", "w_f", "c")  # producer: wait empty, produce; consumer: wait full, compute


def spec_dict(depth=2, release_distance=0, tile_modulo=None):
    return {
        "roles": {"tid_stride": 2, "roles": {"producer": [0], "consumer": [1]}},
        "tile_modulo": tile_modulo,
        "resources": [{"name": "ring", "kind": "ring", "depth": depth}],
        "regions": [
            {"tag": "w_e", "role": "producer", "kind": "wait", "acquires": {"resource": "ring"}},
            {"tag": "p", "role": "producer", "kind": "work", "produces": {"resource": "ring"}},
            {"tag": "w_f", "role": "consumer", "kind": "wait", "consumes": {"resource": "ring"}},
            {"tag": "c", "role": "consumer", "kind": "work",
             "releases": {"resource": "ring", "distance": release_distance}},
        ],
    }


def make_trace(ctas):
    """ctas: list of (sm, {tag: [(start, end) per iteration]}) -> Trace (payload = k)."""
    rows = []
    for cta, (sm, regions) in enumerate(ctas):
        for tag, spans in regions.items():
            slot = 0 if tag in ("w_e", "p") else 1
            for k, (s, e) in enumerate(spans):
                rows.append((s, e - s, TAGS.index(tag), cta * 2 + slot, k, sm))
    ev = np.zeros(len(rows), dtype=EVENT_DTYPE)
    arr = np.array(rows, dtype=np.int64)
    for j, col in enumerate(("start_ns", "dur_ns", "tag", "tid", "payload", "sm")):
        ev[col] = arr[:, j]
    ev = ev[np.argsort(ev["start_ns"], kind="stable")]
    return Trace(events=ev, tag_names=TAGS, capacity=len(ev), attempted=len(ev), overflow=0,
                 incomplete=0)


# producer 1000 ns per item, consumer 200 ns, load latency 500 ns, depth 2 (hand schedule)
PRODUCER_BOUND = {
    "w_e": [(0, 0), (1000, 1000), (2000, 2000), (3000, 3000)],
    "p": [(0, 1000), (1000, 2000), (2000, 3000), (3000, 4000)],
    "w_f": [(500, 500), (700, 1500), (1700, 2500), (2700, 3500)],
    "c": [(500, 700), (1500, 1700), (2500, 2700), (3500, 3700)],
}
# producer 100 ns, consumer 1000 ns, load latency 100 ns, depth 2
CONSUMER_BOUND = {
    "w_e": [(0, 0), (100, 100), (200, 1100), (1200, 2100)],
    "p": [(0, 100), (100, 200), (1100, 1200), (2100, 2200)],
    "w_f": [(100, 100), (1100, 1100), (2100, 2100), (3100, 3100)],
    "c": [(100, 1100), (1100, 2100), (2100, 3100), (3100, 4100)],
}
# depth 1: producer 100, consumer 1000, load latency 500, release->acquire latency 200
SHALLOW = {
    "w_e": [(0, 0), (100, 1700), (1800, 3400), (3500, 5100)],
    "p": [(0, 100), (1700, 1800), (3400, 3500), (5100, 5200)],
    "w_f": [(500, 500), (1500, 2200), (3200, 3900), (4900, 5600)],
    "c": [(500, 1500), (2200, 3200), (3900, 4900), (5600, 6600)],
}


def analyse(regions, depth=2):
    spec = load_pipeline(spec_dict(depth))
    data = match_records(make_trace([(0, regions)]), spec)
    sched = replay(data)
    return spec, data, sched


def test_producer_bound_critical_path_and_blockers():
    spec, data, sched = analyse(PRODUCER_BOUND)
    assert np.array_equal(sched.end, data.end)  # the replay reproduces the hand schedule
    share, lat, on_path = critical_path(data, sched)
    # the producer ends last (p(3) at 4000, the consumer at 3700): the path is 4 x 1000
    assert share[0].tolist() == [0, 4000, 0, 0] and lat.sum() == 0
    assert on_path[0, :, 1].all() and not on_path[0, :, 3].any()
    wf = {b["region"]: b for b in blockers(data)}["w_f"]
    assert wf["blocked"] == 3 and wf["blocked_by"] == "producer:p"
    # w_f(k), k >= 1: data at 1000k + 500, the wait began at 1000k - 300 (cost 0): 800 late
    assert wf["median_margin_ns"] == 800
    report = analyze_pipeline(make_trace([(0, PRODUCER_BOUND)]), spec)
    assert report["critical_path_share"]["producer:p"] == 1.0
    # depth + 1 does not help a producer-bound pipeline
    assert what_if(data, depth={"ring": 3})["predicted_change"] == 0.0


def test_consumer_bound():
    spec, data, sched = analyse(CONSUMER_BOUND)
    assert np.array_equal(sched.end, data.end)
    share, lat, _ = critical_path(data, sched)
    assert share[0].tolist() == [0, 0, 0, 4000] and lat.sum() == 0
    we = {b["region"]: b for b in blockers(data)}["w_e"]
    # w_e(2), w_e(3) wait for the release of items 0, 1 (at 1100, 2100): 900 ns late each
    assert we["blocked"] == 2 and we["median_margin_ns"] == 900
    assert we["blocked_by"] == "consumer:c"
    ii = analyze_pipeline(make_trace([(0, CONSUMER_BOUND)]), spec)["initiation_interval"]
    assert ii["resource_bound_ns"] == {"producer": 100.0, "consumer": 1000.0}


def test_ring_too_shallow_depth_plus_one():
    spec, data, sched = analyse(SHALLOW, depth=1)
    assert np.array_equal(sched.end, data.end)
    assert sched.latency[0].tolist() == [200, 0, 500, 0]
    # depth 2 (hand replay): c(3) ends at 4500 instead of 6600: 2100 ns saved
    w = what_if(data, depth={"ring": 2})
    assert w["kernel_ns"] == 6600 and w["predicted_kernel_ns"] == 4500
    assert w["predicted_change"] == pytest.approx(-2100 / 6600)
    occ = analyze_pipeline(make_trace([(0, SHALLOW)]), spec)["occupancy"][0]
    assert occ["peak"] == 1


def test_straggler_cta_and_sm_chain():
    slow = {tag: [(s * 2, e * 2) for s, e in spans] for tag, spans in CONSUMER_BOUND.items()}
    spec = load_pipeline(spec_dict(2))
    trace = make_trace([(0, CONSUMER_BOUND), (1, slow)])
    report = analyze_pipeline(trace, spec)
    assert report["worst_units"][0]["group"] == 1
    assert report["worst_units"][0]["span_ns"] == 8200
    assert report["worst_units"][0]["vs_median"] == pytest.approx(8200 / 6150)
    data = match_records(trace, spec)
    # consumer 20% faster: CTA 0 saves 800 ns, CTA 1 1600 ns; the kernel ends with CTA 1
    w = what_if(data, scale={"c": 0.8})
    assert w["kernel_ns"] == 8200 and w["predicted_kernel_ns"] == 8200 - 1600


def test_tiles_separate_units_and_missing_records_are_reported():
    spec = load_pipeline(spec_dict(2, tile_modulo=100))
    rows = dict(CONSUMER_BOUND)
    second = {tag: [(s + 5000, e + 5000) for s, e in spans] for tag, spans in rows.items()}
    trace = make_trace([(0, rows)])
    tiled = make_trace([(0, rows)])
    ev2 = make_trace([(0, second)]).events.copy()
    ev2["payload"] += 100  # tile 1
    ev = np.concatenate([tiled.events, ev2])
    full = Trace(events=ev, tag_names=TAGS, capacity=len(ev), attempted=len(ev), overflow=0,
                 incomplete=0)
    data = match_records(full, spec)
    assert data.shape == (2, 4, 4) and data.unit_tile.tolist() == [0, 1]
    dropped = Trace(events=ev[1:], tag_names=TAGS, capacity=len(ev), attempted=len(ev),
                    overflow=0, incomplete=0)
    data = match_records(dropped, spec)
    assert data.missing == 1 and data.dropped_units.tolist() == [[0, 0]]
    assert trace is not None


def test_perfetto_outputs_forms():
    spec = load_pipeline(spec_dict(2))
    trace = make_trace([(0, PRODUCER_BOUND)])
    flows, counters, critical_rows = perfetto_outputs(trace, spec)
    ev = trace.events
    names = np.array(TAGS)[ev["tag"]]
    assert flows.dtype.names == ("src", "dst") and len(flows) == 3
    assert set(names[flows["src"]]) == {"p"} and set(names[flows["dst"]]) == {"w_f"}
    # slot k is taken at 1000k and released at 1000k + 700: never more than one held
    assert counters[0]["value"].tolist() == [1, 0] * 4 and counters[0]["ts"].dtype == np.int64
    assert counters[0]["ts"].tolist() == [0, 700, 1000, 1700, 2000, 2700, 3000, 3700]
    assert set(names[critical_rows]) == {"p", "w_e"}  # the producer's chain


@pytest.mark.parametrize("change, message", [
    (lambda d: d["regions"][2]["consumes"].update(resource="nope"), "unknown resource"),
    (lambda d: d["regions"].pop(1), "no region produces"),
    (lambda d: d["regions"][3]["releases"].update(distance=-1), "distance"),
    (lambda d: d["regions"][0].update(role="nobody"), "unknown role"),
])
def test_validation(change, message):
    d = spec_dict()
    change(d)
    with pytest.raises(ProfileBufferError, match=message):
        load_pipeline(d)


def test_cycle_inside_one_iteration(tmp_path):
    d = {"roles": {"tid_stride": 2, "roles": {"x": [0], "y": [1]}},
         "resources": [{"name": "r1"}, {"name": "r2"}],
         "regions": [
             {"tag": "a", "role": "x", "kind": "wait", "consumes": "r1"},
             {"tag": "b", "role": "x", "kind": "work", "produces": "r2"},
             {"tag": "c", "role": "y", "kind": "wait", "consumes": "r2"},
             {"tag": "d", "role": "y", "kind": "work", "produces": "r1"}]}
    path = tmp_path / "cycle.json"
    path.write_text(json.dumps(d))
    with pytest.raises(ProfileBufferError, match="cycle inside one iteration"):
        load_pipeline(path)
    d["regions"][0]["consumes"] = {"resource": "r1", "distance": 1}  # across iterations: fine
    assert len(load_pipeline(d).step_order()) == 4


def test_unknown_tag_in_trace():
    d = spec_dict()
    d["regions"][3]["tag"] = "not_recorded"
    with pytest.raises(ProfileBufferError, match="tags the trace does not have"):
        match_records(make_trace([(0, PRODUCER_BOUND)]), load_pipeline(d))


def test_ws_gemm_spec_loads():
    spec = load_pipeline("examples/ws_gemm_pipeline.json")
    assert spec.resource("smem_ab").depth == 4 and spec.resource("smem_ab").shared_by == 2


def test_cli_analyze_pipeline(tmp_path, capsys):
    from cute_prof.cli import main
    from cute_prof.export import export_trace

    trace_path = tmp_path / "shallow.json"
    export_trace(make_trace([(0, SHALLOW)]), trace_path)
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(json.dumps(spec_dict(depth=1)))
    assert main(["-q", "analyze", str(trace_path), "--pipeline", str(spec_path),
                 "--depth", "ring=2", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["what_if"][0]["predicted_kernel_ns"] == 4500
    assert main(["-q", "analyze", str(trace_path), "--pipeline", str(spec_path),
                 "--faster", "c=50"]) == 0
    text = capsys.readouterr().out
    assert "critical path" in text and "what-if {'scale': {'c': 0.5}}" in text


def test_async_work_overlaps_the_wait_before_it():
    d = spec_dict(depth=1)
    d["regions"][3]["async"] = True
    spec = load_pipeline(d)
    data = match_records(make_trace([(0, SHALLOW)]), spec)
    sched = replay(data)
    # c(k) runs 1000 ns from its issue; the 700 ns waits came first, so nothing overlaps
    assert np.array_equal(sched.end, data.end)
    # with depth 2 (hand): c(1) issued at 1500 needs data at 100 + 500: the replay of the
    # synchronous case (end 4500) holds, the floor (1000) is the whole work
    assert what_if(data, depth={"ring": 2})["predicted_kernel_ns"] == 4500
    d["regions"][2]["async"] = True
    with pytest.raises(ProfileBufferError, match="only work can be asynchronous"):
        load_pipeline(d)
