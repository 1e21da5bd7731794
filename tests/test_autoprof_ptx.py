"""Zero-edit mode on a CPU box: ws_gemm (level 0: no hand-placed record) compiled for sm_90a
without a GPU. Outside ``autoprofile()`` its PTX is byte-identical to what it always was;
inside, every pipeline call site of the kernel gets its records: a wait is one timer read
before the call and a two-word region after it, a signal a one-word instant. No stack
memory survives: the recorder's cursor lives in registers."""

from __future__ import annotations

import re

import pytest
from sm90_child import compile_in_child

pytest.importorskip("cutlass")
pytest.importorskip("torch")


CHILD = r"""
import json, os, sys, torch
import cutlass.cute as cute
from cutlass import Int32
import examples.ws_gemm as W
import cute_prof
from cute_prof.experimental import autoprofile_probed

def ptx():
    gemm = W.WsGemm(W.GemmConfig(recorder="slices"))
    a = torch.zeros(1000, 520, dtype=torch.bfloat16); b = torch.zeros(1032, 520, dtype=torch.bfloat16)
    c = torch.zeros(1000, 1032, dtype=torch.bfloat16); buf = torch.zeros(1 + 4 * 64, dtype=torch.int64)
    text = cute.compile(gemm, W._cute_tensor(a), W._cute_tensor(b), W._cute_tensor(c),
                        W._cute_prof_buffer(buf), Int32(64), W.default_stream(), 0).__ptx__
    return open(text).read() if os.path.exists(text[:512]) else text

before = ptx()
with cute_prof.autoprofile(per_warp=64, max_warps=1024, device="cpu") as prof:
    recorded = ptx()
after = ptx()
with autoprofile_probed(per_warp=64, max_warps=1024, device="cpu", load_arrivals=7) as probing:
    probed = ptx()
with cute_prof.autoprofile(per_warp=64, max_warps=1024, device="cpu", barriers=False) as quiet:
    pipelines_only = ptx()
with autoprofile_probed(per_warp=64, max_warps=1024, device="cpu", consumer_delay_ns=12345):
    delayed = ptx()
rec = prof.recordings[0]
json.dump({"pipelines_only": pipelines_only,
           "pipelines_only_sites": [s.to_dict() for s in quiet.recordings[0].sites.values()],
           "pipelines_only_meta": quiet.recordings[0].metadata(), "meta": rec.metadata(),
           "before": before, "recorded": recorded, "after": after, "probed": probed,
           "delayed": delayed,
           "probed_sites": [s.to_dict() for s in probing.recordings[0].sites.values()],
           "sites": [s.to_dict() for s in rec.sites.values()],
           "pipelines": [p.to_dict() for p in rec.pipelines], "closed": rec.closed,
           "address": int(rec.buffer.data_ptr())}, open(sys.argv[1], "w"))
"""


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    return compile_in_child(tmp_path_factory.mktemp("autoprof"), CHILD, timeout=900)


def test_ptx_outside_the_block_is_byte_identical(compiled):
    assert compiled["before"] == compiled["after"]
    assert "%globaltimer" not in compiled["before"]


def test_every_pipeline_call_site_is_named_and_recorded(compiled):
    names = {s["name"]: s for s in compiled["sites"]}
    assert {p["name"] for p in compiled["pipelines"]} == {"ab_pipe", "store_pipe"}
    assert next(p for p in compiled["pipelines"] if p["name"] == "ab_pipe")["stages"] == 4
    # ws_gemm arms ab_pipe's full barrier itself (sync_object_full.arrive), before its copies
    arms = {p["name"]: p["commit_arms_copies"] for p in compiled["pipelines"]}
    assert arms == {"ab_pipe": True, "store_pipe": False}
    for name, kind in [("ab_pipe.consumer_wait", "wait"), ("ab_pipe.consumer_release", "signal"),
                       ("ab_pipe.producer_acquire", "wait"), ("store_pipe.producer_acquire", "wait"),
                       ("store_pipe.producer_commit", "signal"), ("bar1.sync", "wait"),
                       # the 2x1 cluster's barrier after ab_pipe's init (PipelineTmaAsync.create)
                       ("cluster.arrive_relaxed", "signal"), ("cluster.wait", "wait")]:
        assert names[name]["kind"] == kind, name
    assert compiled["closed"]  # the slice is closed where the kernel body ends


def test_barriers_false_records_the_pipelines_alone(compiled):
    every = {s["name"] for s in compiled["sites"]}
    alone = {s["name"] for s in compiled["pipelines_only_sites"]}
    assert any(n.startswith("bar") for n in every) and "cluster.wait" in every
    assert alone == {n for n in every if not n.startswith(("bar", "cluster."))}
    assert compiled["meta"]["barriers_recorded"] is True
    assert compiled["pipelines_only_meta"]["barriers_recorded"] is False
    # the barrier's records are gone from the code, not only from the table: fewer timer reads
    reads = [c.count("%globaltimer_lo") for c in (compiled["recorded"], compiled["pipelines_only"])]
    assert reads[1] < reads[0]


def _record_blocks(ptx):
    return re.findall(r"// begin inline asm\n(.*?)// end inline asm", ptx, flags=re.S)


def test_records_are_slice_stores_and_the_cursor_stays_in_registers(compiled):
    ptx = compiled["recorded"]
    blocks = _record_blocks(ptx)
    regions = [b for b in blocks if b.count("st.global.v2.u32") == 2]  # START + SPAN
    instants = [b for b in blocks if b.count("st.global.v2.u32") == 1 and "%globaltimer_lo" in b]
    assert regions and instants
    assert not any("atom" in b for b in regions + instants)
    assert ".local" not in ptx  # the stack slots were promoted to registers
    # the buffer's address is a constant of the kernel (no parameter was added)
    assert str(compiled["address"]) in ptx
    assert ptx.count(".param") == compiled["before"].count(".param")


def test_load_arrival_probes_poll_the_full_barrier_after_the_loads(compiled):
    """ws_gemm arms its full barrier itself, then issues its copies: the probe of an item
    sits before the next acquire, waits on the full barrier's parity with a bounded
    try_wait loop, and fires only after an arm (the ring's drain probes nothing)."""
    sites = {s["name"]: s for s in compiled["probed_sites"]}
    assert sites["ab_pipe.load_arrival"]["op"] == "load_arrival"
    assert sites["ab_pipe.load_arrival"]["kind"] == "wait"
    assert not any(name.startswith("store_pipe") and s["op"] == "load_arrival"
                   for name, s in sites.items())  # a TMA store ring loads nothing
    ptx = compiled["probed"]
    probes = [b for b in _record_blocks(ptx) if "ARRIVAL_POLL:" in b]
    assert probes and all("mbarrier.try_wait.parity" in b and "%globaltimer" in b
                          for b in probes)
    # the mainloop's acquire and the drain's first one (the last item loaded); the
    # drain's later acquires follow no arm and the compiler drops their probes
    assert len(probes) == 2
    assert ".local" not in ptx  # the armed flag lives in a register, like the cursor
    assert "ARRIVAL_POLL" not in compiled["recorded"]  # off unless asked for


def test_consumer_delay_spins_on_the_timer_after_each_release(compiled):
    """``consumer_delay_ns``: the consumers' release of ab_pipe (the TMA-loaded ring) is
    followed by a loop on %globaltimer bounded by the delay; nothing else changes."""
    delayed, recorded = compiled["delayed"], compiled["recorded"]
    assert "12345" in delayed and "12345" not in recorded
    # one spin (a first read, then a polling loop's) per release site of ab_pipe
    releases = sum(1 for s in compiled["sites"] if s["name"] == "ab_pipe.consumer_release")
    assert releases >= 1
    assert delayed.count("%globaltimer;") - recorded.count("%globaltimer;") >= 2 * releases
