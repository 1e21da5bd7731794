"""Pipeline model on a persistent kernel's trace (issue #17): one CTA runs several output
tiles through one ring (payload = tile * tile_modulo + k); schedules computed by hand."""

import numpy as np
import pytest

from cute_prof.analysis.critical_path import blockers, critical_path
from cute_prof.analysis.pipeline_data import match_records
from cute_prof.analysis.pipeline_report import analyze_pipeline, perfetto_outputs
from cute_prof.analysis.replay import replay
from cute_prof.analysis.what_if import what_if
from cute_prof.analysis.model import load_pipeline
from cute_prof.trace import EVENT_DTYPE, Trace

TAGS = ("w_e", "p", "w_f", "c", "epi")
MODULO = 16
SPEC = {
    "roles": {"tid_stride": 2, "roles": {"producer": [0], "consumer": [1]}},
    "tile_modulo": MODULO,
    "resources": [{"name": "ring", "kind": "ring", "depth": 2}],
    "regions": [
        {"tag": "w_e", "role": "producer", "kind": "wait", "acquires": {"resource": "ring"}},
        {"tag": "p", "role": "producer", "kind": "work", "produces": {"resource": "ring"}},
        {"tag": "w_f", "role": "consumer", "kind": "wait", "consumes": {"resource": "ring"}},
        {"tag": "c", "role": "consumer", "kind": "work", "releases": {"resource": "ring"}},
    ],
}

# One CTA, two tiles, depth 2, producer 100 ns per item, consumer 1000 ns, epilogue 500 ns
# after each tile. The ring is carried: the producer starts tile 1 right after its last
# issue of tile 0 and waits for tile 0's releases of items 2 and 3 (3100, 4100).
TILE0 = {
    "w_e": [(0, 0), (100, 100), (200, 1100), (1200, 2100)],
    "p": [(0, 100), (100, 200), (1100, 1200), (2100, 2200)],
    "w_f": [(100, 100), (1100, 1100), (2100, 2100), (3100, 3100)],
    "c": [(100, 1100), (1100, 2100), (2100, 3100), (3100, 4100)],
}
TILE1 = {
    "w_e": [(2200, 3100), (3200, 4100), (4200, 5600), (5700, 6600)],
    "p": [(3100, 3200), (4100, 4200), (5600, 5700), (6600, 6700)],
    "w_f": [(4600, 4600), (5600, 5600), (6600, 6600), (7600, 7600)],
    "c": [(4600, 5600), (5600, 6600), (6600, 7600), (7600, 8600)],
}
EPILOGUES = [(4100, 4600), (8600, 9100)]


def persistent_trace(ctas):
    """ctas: list of (sm, [tile regions], [epilogue spans]) -> Trace with
    payload = tile * MODULO + k (the epilogue's payload is not an iteration)."""
    rows = []
    for cta, (sm, tiles, epilogues) in enumerate(ctas):
        for t, regions in enumerate(tiles):
            for tag, spans in regions.items():
                slot = 0 if tag in ("w_e", "p") else 1
                for k, (s, e) in enumerate(spans):
                    rows.append((s, e - s, TAGS.index(tag), cta * 2 + slot, t * MODULO + k, sm))
        for s, e in epilogues:
            rows.append((s, e - s, TAGS.index("epi"), cta * 2 + 1, 7, sm))
    arr = np.array(rows, dtype=np.int64)
    ev = np.zeros(len(rows), dtype=EVENT_DTYPE)
    for j, col in enumerate(("start_ns", "dur_ns", "tag", "tid", "payload", "sm")):
        ev[col] = arr[:, j]
    ev = ev[np.argsort(ev["start_ns"], kind="stable")]
    return Trace(events=ev, tag_names=TAGS, capacity=len(ev), attempted=len(ev), overflow=0,
                 incomplete=0)


def test_tiles_are_units_with_their_own_spans():
    spec = load_pipeline(SPEC)
    data = match_records(persistent_trace([(0, [TILE0, TILE1], EPILOGUES)]), spec)
    assert data.shape == (2, 4, 4)
    assert data.unit_group.tolist() == [0, 0] and data.unit_tile.tolist() == [0, 1]
    # tile 0 from the CTA's first record to its own last (c(3) at 4100); tile 1 from its
    # first record (w_e(0) at 2200) to the CTA's last (the epilogue at 9100)
    assert data.unit_first.tolist() == [0, 2200] and data.unit_last.tolist() == [4100, 9100]
    assert data.missing == 0 and data.extra == 0
    assert data.unit_prev.tolist() == [-1, 0]  # tile 1 follows tile 0 on the same ring


def test_per_tile_critical_path_and_blockers():
    spec = load_pipeline(SPEC)
    data = match_records(persistent_trace([(0, [TILE0, TILE1], EPILOGUES)]), spec)
    sched = replay(data)
    # the consumer side replays exactly; tile 1's first two producer waits (blocked by
    # tile 0's releases, outside this tile) replay as unblocked
    assert np.array_equal(sched.end[:, :, 2:], data.end[:, :, 2:])
    assert np.array_equal(sched.end[0], data.end[0])
    assert sched.end[1, :2, 0].tolist() == [2200, 2300]
    share, lat, _ = critical_path(data, sched)
    # both tiles are consumer-bound: 4 x 1000 ns of "c" on each tile's path
    assert share.tolist() == [[0, 0, 0, 4000], [0, 0, 0, 4000]] and lat.sum() == 0
    by = {b["region"]: b for b in blockers(data)}
    # w_e(2), w_e(3): tile 0 waits 900 and 900 ns past its own start; tile 1 waits on
    # c(0) (5600) from 4200: 1400, and on c(1) (6600) from 5700: 900. The ring is carried:
    # tile 1's w_e(0), w_e(1) wait on tile 0's c(2) (3100) from 2200 and c(3) (4100) from
    # 3200: 900 each
    assert by["w_e"]["blocked"] == 6 and by["w_e"]["median_margin_ns"] == 900
    assert by["w_e"]["blocked_ns_total"] == 900 * 5 + 1400
    assert by["w_e"]["blocked_by"] == "consumer:c"
    assert by["w_f"]["blocked"] == 0  # the consumer never waited for data
    report = analyze_pipeline(persistent_trace([(0, [TILE0, TILE1], EPILOGUES)]), spec)
    assert report["units"] == 2 and report["critical_path_share"]["consumer:c"] == 1.0
    assert [(w["group"], w["tile"], w["span_ns"]) for w in report["worst_units"]] == [
        (0, 1, 6400), (0, 0, 4100)]


def test_carried_blocker_edges_cross_tiles():
    spec = load_pipeline(SPEC)
    trace = persistent_trace([(0, [TILE0, TILE1], EPILOGUES)])
    flows, _, _ = perfetto_outputs(trace, spec)
    ev = trace.events
    edges = sorted((TAGS[ev["tag"][a]], int(ev["payload"][a]), TAGS[ev["tag"][b]],
                    int(ev["payload"][b])) for a, b in zip(flows["src"], flows["dst"]))
    # every blocked producer wait points at the consumer's release it waited for: within
    # a tile item k waits on c(k - 2); tile 1's first two on tile 0's c(2), c(3)
    assert edges == [("c", 0, "w_e", 2), ("c", 1, "w_e", 3),
                     ("c", 2, "w_e", MODULO + 0), ("c", 3, "w_e", MODULO + 1),
                     ("c", MODULO + 0, "w_e", MODULO + 2), ("c", MODULO + 1, "w_e", MODULO + 3)]


def test_what_if_chains_tiles_of_a_cta():
    spec = load_pipeline(SPEC)
    data = match_records(persistent_trace([(0, [TILE0, TILE1], EPILOGUES)]), spec)
    # consumer-bound: one more slot changes nothing
    assert what_if(data, depth={"ring": 3})["predicted_change"] == 0.0
    # consumer 20% faster: each tile's 4 x 1000 ns chain loses 800 ns; tile 1 starts 800 ns
    # earlier as well, so the CTA ends at 9100 - 1600 (the kernel then: tile 0's consumer
    # ends at 3300, epilogue to 3800, tile 1's consumer 3800..7000, epilogue to 7500)
    w = what_if(data, scale={"c": 0.8})
    assert w["kernel_ns"] == 9100 and w["predicted_kernel_ns"] == 7500


def test_missing_and_extra_records_per_tile():
    spec = load_pipeline(SPEC)
    trace = persistent_trace([(0, [TILE0, TILE1], EPILOGUES), (1, [TILE0, TILE1], EPILOGUES)])
    ev = trace.events
    # drop CTA 1's c(2) of tile 1 (payload 16 + 2), duplicate CTA 0's p(1) of tile 0
    drop = np.flatnonzero((ev["tid"] == 3) & (ev["tag"] == TAGS.index("c"))
                          & (ev["payload"] == MODULO + 2))
    dup = np.flatnonzero((ev["tid"] == 0) & (ev["tag"] == TAGS.index("p")) & (ev["payload"] == 1))
    assert drop.size == 1 and dup.size == 1
    ev2 = np.concatenate([np.delete(ev, drop), ev[dup]])
    bad = Trace(events=ev2, tag_names=TAGS, capacity=len(ev2), attempted=len(ev2), overflow=0,
                incomplete=0)
    data = match_records(bad, spec)
    assert data.missing == 1 and data.extra == 1
    # the tile with the hole is dropped, not guessed; the other three tiles stay
    assert data.dropped_units.tolist() == [[1, 1]]
    assert list(zip(data.unit_group.tolist(), data.unit_tile.tolist())) == [(0, 0), (0, 1), (1, 0)]
    assert data.unit_prev.tolist() == [-1, 0, -1]
    report = analyze_pipeline(bad, spec)
    assert report["records_missing"] == 1 and report["records_extra"] == 1
    assert report["units_dropped"] == 1


def test_without_tile_modulo_tiles_collide():
    """The same trace read without tile_modulo: iterations 16.. are tile 1's, and the
    cells 4..15 in between have no record: every CTA is reported, nothing is guessed."""
    d = dict(SPEC, tile_modulo=None)
    data = match_records(persistent_trace([(0, [TILE0, TILE1], EPILOGUES)]), load_pipeline(d))
    assert data.shape[0] == 0 and data.missing == 12 * 4
    assert data.dropped_units.tolist() == [[0, 0]]


def test_persistent_spec_loads():
    spec = load_pipeline("examples/ws_gemm_persistent_pipeline.json")
    assert spec.tile_modulo == 1 << 16
    ws_gemm = pytest.importorskip("examples.ws_gemm")  # needs cutlass
    assert spec.tile_modulo == ws_gemm.PERSISTENT_TILE_MODULO
    assert spec.resource("smem_ab").depth == 4 and spec.resource("smem_ab").shared_by == 2
    assert [r.tag for r in spec.regions] == ["ws.wait_empty", "ws.tma_issue", "ws.wait_full",
                                             "ws.mma_ktile"]
