"""The pipeline model read from a zero-edit trace's own pipeline calls (no spec written):
roles, rings, the loop's place of every call (a software-pipelined loop runs V one
iteration behind K) and the prologue/epilogue calls kept out of the loop."""

from __future__ import annotations

import numpy as np
import pytest

from cute_prof.analysis.pipeline_data import match_records, prologue_slots
from cute_prof.analysis.pipeline_report import analyze_pipeline
from cute_prof.analysis.derived_pipeline import derive_pipeline
from cute_prof.analysis.zero_edit import finish_zero_edit_trace
from cute_prof.errors import ProfileBufferError
from cute_prof.trace import EVENT_DTYPE, Trace

SITES = [
    {"tag": 0, "name": "pk.producer_acquire", "op": "producer_acquire", "kind": "wait", "pipeline": 0},
    {"tag": 1, "name": "pk.producer_commit", "op": "producer_commit", "kind": "signal", "pipeline": 0},
    {"tag": 2, "name": "pv.producer_acquire", "op": "producer_acquire", "kind": "wait", "pipeline": 1},
    {"tag": 3, "name": "pv.producer_commit", "op": "producer_commit", "kind": "signal", "pipeline": 1},
    {"tag": 4, "name": "pk.consumer_wait", "op": "consumer_wait", "kind": "wait", "pipeline": 0},
    {"tag": 5, "name": "pv.consumer_wait", "op": "consumer_wait", "kind": "wait", "pipeline": 1},
    {"tag": 6, "name": "pk.consumer_release", "op": "consumer_release", "kind": "signal", "pipeline": 0},
    {"tag": 7, "name": "pv.consumer_release", "op": "consumer_release", "kind": "signal", "pipeline": 1},
    {"tag": 8, "name": "pq.consumer_wait", "op": "consumer_wait", "kind": "wait", "pipeline": 2},
]
CONSUMER_WARPS = (4, 5, 6, 7, 8, 9, 10, 11)


def _raw_trace(rows, stages=(2, 2, 1)):
    ev = np.zeros(len(rows), dtype=EVENT_DTYPE)
    for column, values in zip(("tid", "warp", "tag", "payload", "start_ns", "dur_ns"), zip(*rows)):
        ev[column] = values
    pipes = [{"index": i, "name": name, "cls": "PipelineTmaAsync", "stages": s, "created_at": "k.py:1"}
             for i, (name, s) in enumerate(zip(("pk", "pv", "pq"), stages))]
    meta = {"autoprof": {"kernel": "k", "sites": SITES, "pipelines": pipes}}
    return Trace(events=ev, tag_names=tuple(s["name"] for s in SITES), capacity=len(rows),
                 attempted=len(rows), overflow=0, incomplete=0, metadata=meta)


def software_pipelined(ctas: int = 3, blocks: int = 6, step: int = 1000, k_wait=lambda j: 20):
    """Calls as FA4 makes them: the producer loads K(j) then V(j-1); the consumers wait for
    Q once, K(j), then V(j-1), and release both. ``k_wait(j)``: how long K(j)'s wait takes."""
    rows = []
    for c in range(ctas):
        t0 = c * 100 * step
        for j in range(blocks + 1):  # producer
            at = t0 + j * step
            if j < blocks:
                rows += [(c, 0, 0, 0, at, 40), (c, 0, 1, 0, at + 50, 0)]
            if j >= 1:
                rows += [(c, 0, 2, 0, at + 100, 40), (c, 0, 3, 0, at + 150, 0)]
        for w in CONSUMER_WARPS:
            lag = 10 * (w // 4)  # the second warpgroup runs a little behind
            rows.append((c, w, 8, 0, t0 + 200 + lag, 30))
            for j in range(blocks + 1):
                at = t0 + j * step + 300 + lag
                if j < blocks:
                    rows.append((c, w, 4, 0, at, k_wait(j)))
                if j >= 1:
                    rows.append((c, w, 5, 0, at + 400, 20))
                if j < blocks:
                    rows.append((c, w, 6, 0, at + 500, 0))
                if j >= 1:
                    rows.append((c, w, 7, 0, at + 800, 0))
    return finish_zero_edit_trace(_raw_trace(rows))


def test_roles_rings_and_places_come_from_the_calls():
    derived = derive_pipeline(software_pipelined())
    spec = derived.spec
    assert spec.roles.roles == {"producer": [0], "consumer": list(CONSUMER_WARPS)}
    assert {r.name: r.depth for r in spec.resources} == {"pk": 2, "pv": 2}
    # V's calls run one iteration behind K's
    assert derived.offsets == {"pk.producer_acquire": 0, "pk.producer_commit": 0,
                               "pv.producer_acquire": 1, "pv.producer_commit": 1,
                               "pk.consumer_wait": 0, "pv.consumer_wait": 1,
                               "pk.consumer_release": 0, "pv.consumer_release": 1}
    assert "pq.consumer_wait" in derived.skipped  # once per tile, not in the loop
    relations = {r.tag: (r.role, r.kind, *r.relations) for r in spec.regions}
    assert relations["pk.producer_acquire"] == ("producer", "wait", "acquires")
    assert relations["pv.producer_commit"] == ("producer", "work", "produces")
    assert relations["pv.consumer_wait"] == ("consumer", "wait", "consumes")
    assert relations["pk.consumer_release"] == ("consumer", "work", "releases")
    # program order inside an iteration, as the calls were made
    consumer = [r.tag for r in spec.regions if r.role == "consumer"]
    assert consumer == ["pk.consumer_wait", "pv.consumer_wait", "pk.consumer_release",
                        "pv.consumer_release"]


def test_prologue_and_epilogue_calls_stay_out_of_the_loop():
    blocks = 6
    derived = derive_pipeline(software_pipelined(blocks=blocks))
    names = derived.trace.tag_names
    # K(0) before the loop, V(blocks-1) after it: the loop has blocks - 1 full iterations
    assert "pk.consumer_wait@prologue" in names and "pv.consumer_wait@epilogue" in names
    data = match_records(derived.trace, derived.spec)
    assert data.shape == (3, blocks - 1, 8)
    assert data.missing == 0 and data.extra == 0
    # K(0) was committed before the loop; its release too (distance 0): it holds no slot
    # the loop's releases free
    spec = derived.spec
    assert {r.name: r.prologue_items for r in spec.resources} == {"pk": 1, "pv": 0}
    assert prologue_slots(spec, "pk") == (0, 0) and prologue_slots(spec, "pv") == (0, 0)
    # nothing was lost: the renamed calls plus the loop's are every call the kernel made
    assert len(derived.trace) == len(software_pipelined(blocks=blocks))


def test_the_derived_model_runs_the_analysis_and_what_ifs():
    derived = derive_pipeline(software_pipelined())
    report = analyze_pipeline(derived.trace, derived.spec,
                              what_ifs=[{"depth": {"pk": 3, "pv": 3}}])
    assert report["units"] == 3
    change = report["what_if"][0]
    assert change["change"]["depth"] == {"pk": 3, "pv": 3}
    # the synthetic producer never blocks the consumer: a deeper ring changes nothing
    assert abs(change["predicted_change"]) < 0.01


def test_a_trace_without_a_loop_is_refused_with_the_reason():
    rows = [(0, 0, 0, 0, 0, 5), (0, 0, 1, 0, 10, 0), (0, 4, 4, 0, 20, 5), (0, 4, 6, 0, 30, 0)]
    with pytest.raises(ProfileBufferError, match="no producer/consumer loop"):
        derive_pipeline(finish_zero_edit_trace(_raw_trace(rows)))


def test_a_call_that_moves_in_the_loop_is_refused():
    trace = software_pipelined(blocks=12)
    ev = trace.events.copy()
    # V's consumer wait drifts: for half the warps it comes before K's wait of its iteration
    wait_v = (ev["tag"] == trace.tag_names.index("pv.consumer_wait")) & (ev["tid"] % 12 < 8)
    ev["start_ns"][wait_v] -= 700
    import dataclasses
    with pytest.raises(ProfileBufferError, match="does not keep one place"):
        derive_pipeline(dataclasses.replace(trace, events=ev))


def test_cli_analyze_derives_the_model_of_a_zero_edit_trace(tmp_path, capsys):
    import cute_prof
    from cute_prof.cli import main

    path = cute_prof.save_trace(tmp_path / "zero_edit.npz", software_pipelined())
    assert main(["-q", "analyze", str(path), "--depth", "pk=1,pv=1", "--json"]) == 0
    import json
    report = json.loads(capsys.readouterr().out)
    assert report["derived"]["rings"] == {"pk": 2, "pv": 2}
    assert report["what_if"][0]["change"]["depth"] == {"pk": 1, "pv": 1}  # one what-if, both rings
    assert main(["-q", "analyze", str(path)]) == 0
    text = capsys.readouterr().out
    assert "consumer loop: pk.consumer_wait -> pv.consumer_wait (+1)" in text


def test_call_balance_finds_a_lost_record():
    from cute_prof.analysis.zero_edit import call_balance

    trace = software_pipelined()
    rows = {r["pipeline"]: r for r in call_balance(trace)}
    assert rows["pk"]["waits"] == 3 * 8 * 6 and rows["pk"]["acquires"] == 3 * 6
    assert all(rows[p]["warps_wait_release_differ"] == rows[p]["warpgroups_disagree"] == 0
               for p in ("pk", "pv"))
    assert rows["pq"]["warps_wait_release_differ"] == 3 * 8  # Q: waited for, never released
    import dataclasses
    wait_k = np.flatnonzero(trace.events["tag"] == trace.tag_names.index("pk.consumer_wait"))
    lost = dataclasses.replace(trace, events=np.delete(trace.events, wait_k[7]))
    rows = {r["pipeline"]: r for r in call_balance(lost)}
    assert rows["pk"]["warps_wait_release_differ"] == 1 and rows["pk"]["warpgroups_disagree"] == 1


def test_a_ring_without_commits_gets_its_issue_points():
    """TMA producers often never call producer_commit (the load completes the barrier): the
    model lets the load start where the acquire ended."""
    trace = software_pipelined()
    ev = trace.events
    no_commits = np.isin(ev["tag"], [trace.tag_names.index("pk.producer_commit"),
                                     trace.tag_names.index("pv.producer_commit")])
    import dataclasses
    derived = derive_pipeline(dataclasses.replace(trace, events=ev[~no_commits]))
    produces = {r.tag: r for r in derived.spec.regions if "produces" in r.relations}
    assert set(produces) == {"pk.issued", "pv.issued"}
    names = derived.trace.tag_names
    issued = derived.trace.events[np.isin(derived.trace.events["tag"], [
        names.index("pk.issued"), names.index("pk.issued@prologue")])]  # K(0): before the loop
    acquires = ev[ev["tag"] == trace.tag_names.index("pk.producer_acquire")]
    assert np.array_equal(np.sort(issued["start_ns"]),
                          np.sort(acquires["start_ns"] + acquires["dur_ns"]))


def ping_pong_rows():
    """Two consumer warpgroups take the ring's items in turn (a ping-pong GEMM)."""
    rows = []
    for c in range(2):
        for j in range(8):
            rows += [(c, 0, 0, 0, c * 10**5 + j * 100, 10), (c, 0, 1, 0, c * 10**5 + j * 100 + 20, 0)]
            for w in ((4, 5, 6, 7) if j % 2 == 0 else (8, 9, 10, 11)):
                rows += [(c, w, 4, 0, c * 10**5 + j * 100 + 30, 5),
                         (c, w, 6, 0, c * 10**5 + j * 100 + 80, 0)]
    return rows


def test_a_ping_pong_ring_is_refused_with_the_reason():
    """Two consumer warpgroups taking the ring's items in turn: not a shared ring."""
    with pytest.raises(ProfileBufferError, match="ping-pong"):
        derive_pipeline(finish_zero_edit_trace(_raw_trace(ping_pong_rows())))


def test_a_ring_only_some_consumer_warps_use_is_set_aside():
    """quack's epilogue: one warp per consumer warpgroup also fills a store ring per k-tile
    group; the consumers stay one role and that ring is listed as not in the loop."""
    rows = []
    for c in range(2):
        t0 = c * 10**5
        for j in range(8):
            rows += [(c, 0, 0, 0, t0 + j * 100, 10), (c, 0, 1, 0, t0 + j * 100 + 20, 0)]
            for w in CONSUMER_WARPS:
                rows += [(c, w, 4, 0, t0 + j * 100 + 30, 5), (c, w, 6, 0, t0 + j * 100 + 80, 0)]
                if w % 4 == 0:  # the store ring: only the first warp of each warpgroup
                    rows += [(c, w, 2, 0, t0 + j * 100 + 85, 1), (c, w, 3, 0, t0 + j * 100 + 90, 0)]
    derived = derive_pipeline(finish_zero_edit_trace(_raw_trace(rows)))
    assert derived.spec.roles.roles["consumer"] == list(CONSUMER_WARPS)
    assert "pv.producer_acquire" in derived.skipped and "only some of the warps" in \
        derived.skipped["pv.producer_acquire"]


def test_format_recording_names_losses_pipelines_and_roles():
    from cute_prof.analysis.zero_edit import format_recording

    trace = software_pipelined()
    meta = {**trace.metadata, "slices_opened": 27, "slices_unclosed_warps": 1,
            "slices_diverged_warps": 0}
    import dataclasses
    text = format_recording(dataclasses.replace(trace, metadata=meta))
    assert f"{len(trace):,} events from 27 warps" in text and "unclosed 1" in text
    assert "pk (PipelineTmaAsync, 2 stages)" in text and "consumer wg1-2 = warps [4, 5, 6, 7, 8, 9, 10, 11]" in text


def test_cli_analyze_falls_back_to_the_role_split_when_no_model_derives(tmp_path, capsys):
    """A ping-pong ring has no derived model; analyze still says who waited on what, with
    the zero-edit roles, and why there is no pipeline model."""
    import cute_prof
    from cute_prof.cli import main

    path = cute_prof.save_trace(tmp_path / "pingpong.npz",
                                finish_zero_edit_trace(_raw_trace(ping_pong_rows())))
    assert main(["-q", "analyze", str(path)]) == 0
    out, err = capsys.readouterr()
    assert "ping-pong" in err and "consumer wg1" in out
    assert main(["-q", "analyze", str(path), "--depth", "pk=1"]) == 2  # a what-if needs a model
