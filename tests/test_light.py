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
