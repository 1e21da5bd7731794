"""Light recording's answers (``analysis.light``): from the producer's waits alone, per ring
the bound, the interval per iteration and the tiles, and the last CTAs. On a full FA4 trace
they agree with the full verdict (the same bound per ring: consumers or not, and the same
producer share), and dropping every record a light recording would not make changes
nothing."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

import cute_prof
from cute_prof.analysis.light import (CONSUMER_BOUND_SHARE, format_light_verdicts,
                                      light_verdicts)
from cute_prof.analysis.zero_edit import finish_zero_edit_trace
from cute_prof.analysis.zero_edit_work import ring_waits
from cute_prof.trace import EVENT_DTYPE, Trace

ROOT = Path(__file__).resolve().parents[1]
FA4 = ROOT / "examples" / "traces" / "fa4_fwd_causal_h100.json.gz"
LIGHT_OPS = ("producer_acquire", "producer_tail")


@pytest.fixture(scope="module")
def fa4():
    return cute_prof.load_trace(FA4)


def light_only(trace: Trace) -> Trace:
    """The records a light recording of the same launch keeps: the producer's waits."""
    sites = {s["name"]: s for s in trace.metadata["autoprof"]["sites"]}
    keep = np.array([sites.get(n, {}).get("op") in LIGHT_OPS for n in trace.tag_names])
    return dataclasses.replace(trace, events=trace.events[keep[trace.events["tag"]]])


def test_light_bound_agrees_with_the_full_verdict_per_ring(fa4):
    light = {r["ring"]: r for r in light_verdicts(fa4)["rings"]}
    full = {r["ring"]: r for r in ring_waits(fa4)}
    assert set(light) == set(full) == {"pipeline_k", "pipeline_q", "pipeline_v"}
    for ring, row in full.items():
        assert (light[ring]["bound_by"] == "consumers") == (row["bound_by"] == "consumers"), ring
        assert light[ring]["producer_wait"] == pytest.approx(row["producer_wait"], abs=0.01)
    assert light["pipeline_k"]["bound_by"] == "consumers"


def test_a_light_recording_answers_the_same(fa4):
    full, light = light_verdicts(fa4), light_verdicts(light_only(fa4))
    assert light == full
    assert len(light_only(fa4)) < len(fa4) / 5  # what light leaves out: most of the records


def _producer_trace(waits, *, gaps=100, ctas=2, tile_gap=None):
    """One producer warp per CTA acquiring one ring: a wait of ``waits[i]`` ns then
    ``gaps`` ns of work each iteration (``tile_gap``: a longer pause every 4 iterations)."""
    rows, tags = [], ("ring.producer_acquire", "ring.producer_tail")
    for cta in range(ctas):
        t = 1_000_000 + 7 * cta
        for i, wait in enumerate(waits):
            rows.append((t, wait, 0, cta * 4, cta))
            t += wait + gaps + (tile_gap if tile_gap and i % 4 == 3 else 0)
        rows.append((t, 10, 1, cta * 4, cta))
    ev = np.zeros(len(rows), EVENT_DTYPE)
    for column, values in zip(("start_ns", "dur_ns", "tag", "tid", "sm"), zip(*rows)):
        ev[column] = values
    ev["tid"] //= 4  # the device's tid: the CTA (the warp is 0)
    meta = {"autoprof": {"kernel": "k", "mode": "light", "sites": [
        {"tag": 0, "name": tags[0], "op": "producer_acquire", "kind": "wait", "pipeline": 0},
        {"tag": 1, "name": tags[1], "op": "producer_tail", "kind": "wait", "pipeline": 0}],
        "pipelines": [{"index": 0, "name": "ring", "cls": "PipelineTmaAsync", "stages": 2,
                       "created_at": "k.py:1"}]}}
    return finish_zero_edit_trace(Trace(ev, tags, len(rows), len(rows), 0, 0, metadata=meta))


def test_blocked_share_interval_tiles_and_stragglers_hand_computed():
    busy = light_verdicts(_producer_trace([300] * 8))
    (ring,) = busy["rings"]
    assert ring["producer_wait"] == pytest.approx(8 * 300 / (8 * 400 + 10), rel=1e-9)
    assert ring["bound_by"] == "consumers" and ring["interval_ns"] == 400
    assert ring["tiles_per_warp_median"] == 1
    free = light_verdicts(_producer_trace([20] * 8, tile_gap=5000))["rings"][0]
    assert free["producer_wait"] < CONSUMER_BOUND_SHARE and free["bound_by"] == "loads or balanced"
    assert free["interval_ns"] == 120 and free["tiles_per_warp_median"] == 2
    late = busy["stragglers"]
    assert late["ctas"] == 2 and late["last"][0]["cta"] == 1 and late["spread_ns"] == 7
    text = format_light_verdicts(busy)
    assert "bound by the consumers" in text and "one iteration every 400 ns" in text


def _two_ring_trace(k_wait: int, v_wait: int, *, v_every: int = 1, iterations: int = 12):
    """One producer warp acquiring ring k then ring v each iteration (v only every
    ``v_every``-th), 40 ns of work after each acquire: FA4's K and V in turn."""
    rows, t = [], 1_000_000
    for i in range(iterations):
        rows.append((t, k_wait, 0))
        t += k_wait + 40
        if i % v_every == 0:
            rows.append((t, v_wait, 1))
            t += v_wait + 40
    ev = np.zeros(len(rows), EVENT_DTYPE)
    for column, values in zip(("start_ns", "dur_ns", "tag"), zip(*rows)):
        ev[column] = values
    sites = [{"tag": i, "name": f"{ring}.producer_acquire", "op": "producer_acquire",
              "kind": "wait", "pipeline": i} for i, ring in enumerate("kv")]
    pipes = [{"index": i, "name": ring, "cls": "PipelineTmaAsync", "stages": 1,
              "created_at": "k.py:1"} for i, ring in enumerate("kv")]
    meta = {"autoprof": {"kernel": "k", "mode": "light", "sites": sites, "pipelines": pipes}}
    tags = [s["name"] for s in sites]
    return finish_zero_edit_trace(Trace(ev, tags, len(rows), len(rows), 0, 0, metadata=meta))


def test_rings_acquired_in_lockstep_are_judged_together():
    # the producer waits on k's slot nearly all the time, v's is free by then: both rings
    # are paced by that one wait (what light recording measured on FA4's forward)
    rings = {r["ring"]: r for r in light_verdicts(_two_ring_trace(400, 8))["rings"]}
    assert rings["v"]["producer_wait"] * 2 < CONSUMER_BOUND_SHARE  # alone, v looks free
    assert rings["v"]["interval_ns"] == rings["k"]["interval_ns"] == 400 + 8 + 80
    assert rings["v"]["lockstep"] == ["k"] and rings["k"]["lockstep"] == ["v"]
    assert rings["v"]["judged_wait"] == pytest.approx(
        rings["k"]["producer_wait"] + rings["v"]["producer_wait"])
    assert rings["k"]["bound_by"] == rings["v"]["bound_by"] == "consumers"
    assert "in lockstep" in format_light_verdicts({"rings": list(rings.values())})
    # v at half k's pace is not in lockstep: it is judged on its own waits
    apart = {r["ring"]: r for r in light_verdicts(_two_ring_trace(400, 8, v_every=2))["rings"]}
    assert apart["v"]["lockstep"] == [] and apart["v"]["bound_by"] == "loads or balanced"


def test_the_report_of_a_light_recording_gives_its_verdicts(fa4, tmp_path):
    from cute_prof.report import write_report

    page = write_report(light_only(fa4), tmp_path / "light.html").read_text()
    assert "A light recording: the producer's waits alone." in page
    assert "pipeline_k: producer blocked" in page and "bound by the consumers" in page
    assert "No ring has both a producer and a consumer" not in page
