"""The host half of zero-edit mode on synthetic records: tracks per warp, roles from the calls
each warp made, barrier ids from payloads, iterations numbered per warp and call, and the
wait breakdown per role."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import cute_prof
from cute_prof.analysis.zero_edit import (
    finish_zero_edit_trace, format_wait_breakdown, wait_breakdown)
from cute_prof.autoprof import AutoProfile
from cute_prof.errors import ProfileBufferError
from cute_prof.trace import EVENT_DTYPE, Trace

SITES = [
    {"tag": 0, "name": "kv.producer_acquire", "op": "producer_acquire", "kind": "wait", "pipeline": 0},
    {"tag": 1, "name": "kv.consumer_wait", "op": "consumer_wait", "kind": "wait", "pipeline": 0},
    {"tag": 2, "name": "bar.sync", "op": "barrier", "kind": "wait", "pipeline": None},
    {"tag": 3, "name": "kv.consumer_release", "op": "consumer_release", "kind": "signal", "pipeline": 0},
]


def _trace(rows):
    ev = np.zeros(len(rows), dtype=EVENT_DTYPE)
    for column, values in zip(("tid", "warp", "tag", "payload", "start_ns", "dur_ns"), zip(*rows)):
        ev[column] = values
    meta = {"autoprof": {"kernel": "k", "sites": SITES, "pipelines": [
        {"index": 0, "name": "kv", "cls": "PipelineTmaAsync", "stages": 2, "created_at": "k.py:1"}]}}
    return Trace(events=ev, tag_names=tuple(s["name"] for s in SITES), capacity=len(rows),
                 attempted=len(rows), overflow=0, incomplete=0, metadata=meta)


# (cta, warp, tag, payload, start, dur): warp 0 produces, warps 4 and 8 consume and sync
ROWS = [(c, 0, 0, 0, 100 * c + 10 * i, 5) for c in range(2) for i in range(3)] + \
       [(c, w, 1, 0, 100 * c + 10 * i + 1, 2 + w) for c in range(2) for w in (4, 8) for i in range(3)] + \
       [(c, w, 3, 0, 100 * c + 10 * i + 9, 0) for c in range(2) for w in (4, 8) for i in range(3)] + \
       [(c, w, 2, 1 + w // 4, 100 * c + 50, 7) for c in range(2) for w in (4, 8)]


def test_tracks_roles_barriers_and_iterations():
    trace = finish_zero_edit_trace(_trace(ROWS))
    meta = trace.metadata["autoprof"]
    assert meta["warps_per_cta"] == 9
    ev = trace.events
    assert set(np.unique(ev["tid"]).tolist()) == {0, 4, 8, 9, 13, 17}  # cta * 9 + warp
    roles = meta["roles"]["roles"]
    assert roles["producer wg0"] == [0]
    # the two consumer warps sync on different barriers (ids 2 and 3): two roles
    assert roles["consumer wg1"] == [4] and roles["consumer wg2"] == [8]
    assert {"bar2.sync", "bar3.sync"} <= set(trace.tag_names)
    waits = ev[ev["tag"] == trace.tag_names.index("kv.consumer_wait")]
    for tid in (4, 8, 13, 17):  # each warp's calls numbered 0, 1, 2 in time order
        assert sorted(waits["payload"][waits["tid"] == tid].tolist()) == [0, 1, 2]
    assert trace.track_name(13).startswith("consumer wg1 cta 1")


def test_wait_breakdown_per_role():
    rows = wait_breakdown(finish_zero_edit_trace(_trace(ROWS)))
    by = {(r["role"], r["tag"]): r for r in rows}
    wg2 = by[("consumer wg2", "kv.consumer_wait")]
    assert wg2["warps"] == 2 and wg2["calls"] == 6
    assert wg2["blocked_ns_per_warp"] == pytest.approx(3 * 10)  # dur 2 + 8 per wait
    assert by[("consumer wg1", "bar2.sync")]["blocked_ns_per_warp"] == 7
    assert ("consumer wg1", "kv.consumer_release") not in by  # signals are not waits
    assert "consumer wg2" in format_wait_breakdown(rows)


def test_a_trace_without_zero_edit_metadata_is_refused():
    trace = _trace(ROWS)
    trace.metadata.clear()
    with pytest.raises(ProfileBufferError, match="zero-edit"):
        finish_zero_edit_trace(trace)


def test_trace_warm_zeroes_once_launches_warm_plus_one_and_traces_the_last():
    calls = []
    prof = stub_profile(calls, records=["a record"])
    got = prof.trace_warm(lambda: calls.append("launch"), warm=3, kernel="gemm")
    assert got == ["a record"]
    assert calls == [("pick", "gemm"), "reset", *["launch"] * 4, ("trace", "gemm")]


def stub_profile(calls, records):
    """An AutoProfile whose one recording's trace is ``records``; ``calls`` logs its use."""
    class Recorded(AutoProfile):
        def _pick(self, kernel):
            calls.append(("pick", kernel))
            return type("Recording", (), {"name": "gemm_kernel"})()

        def reset(self):
            calls.append("reset")

        def trace(self, kernel=None):
            calls.append(("trace", kernel))
            return records

    return Recorded([], synchronize=False)


def test_trace_warm_says_when_the_launches_did_not_run_the_recording_kernel():
    with pytest.raises(ProfileBufferError, match="gemm_kernel: the 2 launches recorded nothing"):
        stub_profile([], records=[]).trace_warm(lambda: None, warm=1)


@pytest.mark.parametrize("launch, warm, match", [(None, 1, "callable"), (print, -1, "warm"),
                                                 (print, 1.5, "warm"), (print, True, "warm")])
def test_trace_warm_refuses_bad_input_before_launching(launch, warm, match):
    with pytest.raises(ProfileBufferError, match=match):
        AutoProfile([], synchronize=False).trace_warm(launch, warm=warm)


def test_trace_warm_without_a_recorded_kernel_says_so_before_launching():
    launched = []
    with pytest.raises(ProfileBufferError, match="no kernel recorded"):
        AutoProfile([], synchronize=False).trace_warm(lambda: launched.append(1))
    assert launched == []


@pytest.mark.parametrize("options, match", [({"per_warp": 0}, "per_warp"),
                                            ({"barriers": "no"}, "barriers")])
def test_autoprofile_refuses_bad_options_before_recording(options, match):
    pytest.importorskip("cutlass")
    from cute_prof.device import autoprof as device_autoprof

    with pytest.raises(ProfileBufferError, match=match):
        with cute_prof.autoprofile(device="cpu", **options):
            pass
    assert not device_autoprof.is_recording()  # nothing was left wrapped


@pytest.mark.parametrize("options, match", [({"load_arrivals": -1}, "load_arrivals"),
                                            ({"load_arrivals": True}, "load_arrivals"),
                                            ({"consumer_delay_ns": -5}, "consumer_delay_ns"),
                                            ({"consumer_delay_ns": 2.5}, "consumer_delay_ns"),
                                            ({"per_warp": 0}, "per_warp"),
                                            ({"barriers": "no"}, "barriers")])
def test_autoprofile_probed_refuses_bad_options_before_recording(options, match):
    pytest.importorskip("cutlass")
    from cute_prof.device import autoprof as device_autoprof
    from cute_prof.experimental import autoprofile_probed

    with pytest.raises(ProfileBufferError, match=match):
        with autoprofile_probed(device="cpu", **options):
            pass
    assert not device_autoprof.is_recording()


@pytest.mark.parametrize("option", ["load_arrivals", "consumer_delay_ns"])
def test_autoprofile_points_an_experiment_option_to_cute_prof_experimental(option):
    with pytest.raises(TypeError, match=f"{option}.*cute_prof.experimental.autoprofile_probed"):
        cute_prof.autoprofile(**{option: 7})


def test_autoprofile_and_autoprofile_probed_refuse_an_unknown_option_alike():
    from cute_prof.experimental import autoprofile_probed

    for enter in (cute_prof.autoprofile, autoprofile_probed):
        with pytest.raises(TypeError, match="unexpected keyword argument 'per_wrap'$"):
            enter(per_wrap=64)


def test_the_block_behind_both_entries_has_autoprofiles_defaults():
    """autoprofile_probed() passes the user's options on to the block as given: the block's
    defaults must be autoprofile()'s."""
    import inspect

    from cute_prof.autoprof import autoprofile, recording_block

    user = {k: p.default for k, p in inspect.signature(autoprofile).parameters.items()
            if p.kind is p.KEYWORD_ONLY}
    block = {k: p.default for k, p in inspect.signature(recording_block).parameters.items()
             if k in user}
    assert block == user and set(user) == set(inspect.signature(recording_block).parameters) - {
        "experiments"}
    assert not {"load_arrivals", "consumer_delay_ns"} & set(inspect.signature(autoprofile).parameters)


def test_the_block_leaves_every_wrapped_call_as_it_found_it():
    """Inside the block the pipeline methods, the named, CTA and cluster barriers and the
    NVVM named barrier are wrapped; after it each is the very object it was before, so a
    kernel compiled later is the one it always was."""
    pytest.importorskip("cutlass")
    from cutlass import pipeline
    from cutlass._mlir.dialects import nvvm
    from cutlass.cute import arch

    places = [(nvvm, "barrier_cta_sync"), (arch, "barrier"), (arch, "barrier_arrive"),
              (arch, "sync_threads"), (arch, "cluster_wait"), (arch, "cluster_arrive"),
              (pipeline.PipelineTmaAsync, "producer_acquire"),
              (pipeline.PipelineAsync, "consumer_wait"),
              (pipeline.PipelineAsync, "consumer_release")]
    before = [getattr(owner, name) for owner, name in places]
    with cute_prof.autoprofile(device="cpu"):
        inside = [getattr(owner, name) for owner, name in places]
    after = [getattr(owner, name) for owner, name in places]
    assert all(a is not b for a, b in zip(inside, before))
    assert all(a is b for a, b in zip(after, before))


def test_fa4_compile_caches_are_emptied_for_the_block_without_being_named(monkeypatch):
    """A block hands FlashAttention-4's compile caches an empty one of their own type (its
    kernels compile again, and record) and puts them back after; named caches stay first."""
    pytest.importorskip("cutlass")
    import types

    class JITCache(dict):
        pass

    def _flash_attn_fwd():
        pass

    def _flash_attn_bwd():
        pass

    _flash_attn_fwd.compile_cache = JITCache(plain="fwd kernel")
    _flash_attn_bwd.compile_cache = JITCache(plain="bwd kernel")
    interface = types.ModuleType("flash_attn.cute.interface")
    interface._flash_attn_fwd, interface._flash_attn_bwd = _flash_attn_fwd, _flash_attn_bwd
    interface.not_a_function = 3
    monkeypatch.setitem(sys.modules, "flash_attn.cute.interface", interface)
    named = types.SimpleNamespace(cache={"other": 1})
    with cute_prof.autoprofile(device="cpu", caches=[(named, "cache")]) as prof:
        inside = (_flash_attn_fwd.compile_cache, _flash_attn_bwd.compile_cache)
        assert all(type(c) is JITCache and not c for c in inside)
        _flash_attn_fwd.compile_cache["recording"] = "fwd recording kernel"
    assert _flash_attn_fwd.compile_cache == {"plain": "fwd kernel"}
    assert _flash_attn_bwd.compile_cache == {"plain": "bwd kernel"}
    assert prof.caches[0] == {} and prof.caches[1] == {"recording": "fwd recording kernel"}
    assert named.cache == {"other": 1}
