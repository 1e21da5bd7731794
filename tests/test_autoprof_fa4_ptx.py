"""Zero-edit mode on FlashAttention-4's Hopper forward, compiled for sm_90a on a CPU box (no
GPU): outside ``autoprofile()`` the kernel's PTX is byte-identical to what FA4 builds without
cute_prof; inside, each of its pipeline call sites (Q, K, V rings, the producer's tail) and
named barriers gets its records, and nothing else of the kernel changes its interface.

FA4's Python front end checks that its tensors are on a GPU; the child runs with ``python -O``
(asserts off) and CPU tensors, compiles, and stops at the launch, after the PTX is written.
Needs ``flash-attn-4`` and ``quack-kernels`` (requirements-fa4.txt); quack imports triton,
for which ``tests/stubs`` stands in where triton is not installed."""

from __future__ import annotations

import re

import pytest
from sm90_child import FA4_PTX, ROOT, compile_in_child

pytest.importorskip("cutlass")
pytest.importorskip("torch")
pytest.importorskip("einops")
if not (ROOT / "tests" / "stubs" / "triton").exists():  # pragma: no cover
    pytest.skip("tests/stubs is missing", allow_module_level=True)

CHILD = r"""
import importlib.util, json, os, sys
import torch, torch._dynamo  # before the stub: torch must see that there is no triton
if importlib.util.find_spec("triton") is None:
    sys.path.insert(0, os.path.join(os.getcwd(), "tests", "stubs"))
try:
    import flash_attn.cute.interface as fa
except ImportError as err:
    json.dump({"skip": f"flash-attn-4 not importable: {err}"}, open(sys.argv[1], "w"))
    sys.exit(0)
import cute_prof
from cute_prof.experimental import autoprofile_probed

dump = os.environ["CUTE_DSL_DUMP_DIR"]
fa.get_num_sms_for_selection = lambda *a, **k: 132  # an H100's, instead of asking the GPU
q, k, v = (torch.zeros(1, 1024, 16, 128, dtype=torch.bfloat16) for _ in range(3))


""" + FA4_PTX + r"""


def ptx(causal):
    return fa4_ptx(causal, 90, ".ptx")


out = {}
for causal in (False, True):
    before = ptx(causal)
    with cute_prof.autoprofile(per_warp=4096, max_warps=16384, device="cpu") as prof:
        recorded = ptx(causal)
    after = ptx(causal)
    rec = prof.recordings[-1]
    out[str(causal)] = {"before": before, "recorded": recorded, "after": after,
                        "sites": [s.to_dict() for s in rec.sites.values()],
                        "pipelines": [p.to_dict() for p in rec.pipelines],
                        "closed": rec.closed, "address": int(rec.buffer.data_ptr())}
with cute_prof.autoprofile(per_warp=4096, max_warps=16384, device="cpu", mode="light"):
    out["light"] = ptx(False)
with autoprofile_probed(per_warp=4096, max_warps=16384, device="cpu", load_arrivals=7) as prof:
    probed = ptx(False)
out["probed"] = {"ptx": probed, "sites": [s.to_dict() for s in prof.recordings[-1].sites.values()]}
json.dump(out, open(sys.argv[1], "w"))
"""


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    result = compile_in_child(tmp_path_factory.mktemp("fa4"), CHILD, timeout=1500,
                              python_flags=("-O",))
    if "skip" in result:
        pytest.skip(result["skip"])
    return result


@pytest.mark.parametrize("causal", ["False", "True"])
def test_fa4_ptx_outside_the_block_is_byte_identical(compiled, causal):
    plain = compiled[causal]
    assert plain["before"] == plain["after"]
    assert "%globaltimer" not in plain["before"]
    assert plain["recorded"] != plain["before"]


def _stores(block):
    return block.count("st.global.v2.u32")


@pytest.mark.parametrize("causal", ["False", "True"])
def test_fa4_every_pipeline_call_site_gets_its_records(compiled, causal):
    run = compiled[causal]
    names = {s["name"]: s for s in run["sites"]}
    assert {p["name"] for p in run["pipelines"]} >= {"pipeline_q", "pipeline_k", "pipeline_v"}
    # FA4 arms its TMA rings in producer_acquire (PipelineTmaAsync), before the copies
    assert not any(p["commit_arms_copies"] for p in run["pipelines"])
    for name, kind in [("pipeline_k.producer_acquire", "wait"), ("pipeline_k.consumer_wait", "wait"),
                       ("pipeline_k.consumer_release", "signal"),
                       ("pipeline_v.producer_acquire", "wait"), ("pipeline_v.consumer_wait", "wait"),
                       ("pipeline_v.consumer_release", "signal"),
                       ("pipeline_q.consumer_wait", "wait"), ("pipeline_v.producer_tail", "wait")]:
        assert names[name]["kind"] == kind, name
    assert any(s["op"] in ("barrier", "sync_threads") for s in run["sites"])
    assert run["closed"]
    ptx = run["recorded"]
    blocks = re.findall(r"// begin inline asm\n(.*?)// end inline asm", ptx, flags=re.S)
    regions = [b for b in blocks if _stores(b) == 2]  # a wait: START + SPAN
    instants = [b for b in blocks if _stores(b) == 1 and "%globaltimer_lo" in b]
    waits = [s for s in run["sites"] if s["kind"] == "wait"]
    signals = [s for s in run["sites"] if s["kind"] == "signal"]
    # every call site is at least one record in the PTX (a site traced twice, e.g. in both
    # branches of a constexpr-free if, has more)
    assert len(regions) >= len(waits) and len(instants) >= len(signals)
    assert not any("atom" in b for b in regions + instants)
    assert str(run["address"]) in ptx  # the buffer is a constant: no parameter was added
    assert ptx.count(".param") == run["before"].count(".param")


def test_fa4_load_arrival_probes_follow_the_k_and_v_commits(compiled):
    """FA4 commits each K/V load after its copy (a no-op for a TMA ring): the probe follows
    that commit, on every TMA-loaded ring it commits."""
    probed = compiled["probed"]
    names = {s["name"]: s for s in probed["sites"] if s["op"] == "load_arrival"}
    assert {"pipeline_k.load_arrival", "pipeline_v.load_arrival"} <= set(names)
    blocks = re.findall(r"// begin inline asm\n(.*?)// end inline asm", probed["ptx"], flags=re.S)
    probes = [b for b in blocks if "ARRIVAL_POLL:" in b]
    assert len(probes) >= 2 and all("mbarrier.try_wait.parity" in b for b in probes)
    assert "ARRIVAL_POLL" not in compiled["False"]["recorded"]


def test_fa4_light_acquire_ends_before_its_arm_of_the_full_barrier(compiled):
    """Light mode: each producer acquire's region ends where its wait on the empty barrier
    returns, before the acquire arms the full barrier (``expect_tx``): a timer read after the
    arm kept the arm and the copy's set-up apart, on the path from the consumers' release to
    the copy (bench/results/light_cost)."""
    ptx = compiled["light"]
    arms = [m.start() for m in re.finditer(r"mbarrier\.arrive\.expect_tx", ptx)]
    assert len(arms) >= 3  # Q, K and V
    for arm in arms:
        wait = ptx.rfind("mbarrier.try_wait", 0, arm)
        assert wait >= 0 and "%globaltimer_lo" in ptx[wait:arm], ptx[wait:arm][-400:]
