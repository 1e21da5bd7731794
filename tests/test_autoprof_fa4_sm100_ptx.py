"""Zero-edit mode on FlashAttention-4's Blackwell forward (``flash_fwd_sm100``, ``_arch=100``),
compiled for sm_100a on a CPU box: what can be proven about Blackwell without a Blackwell GPU.

Outside ``autoprofile()`` the kernel's PTX reads no timer (the block leaves every wrapped call
as it found it: ``test_autoprof_host.py``);
inside, every pipeline of the kernel is named with its class (the TMA->UMMA rings for Q and
K/V, the UMMA->threads and threads->UMMA handoffs, the threads' own rings), and every record
the recorder made while tracing is in the PTX: each wait a region (a START and a SPAN store
around the blocking instruction), each signal an instant after it, including the UMMA side's
calls whose signal is a ``tcgen05.commit`` (``PipelineUmmaAsync.producer_commit``,
``PipelineTmaUmma.consumer_release``), and every named-, CTA- and cluster-barrier instruction
of the kernel sits inside its record. The count of ``%globaltimer`` reads follows from the
records: two per region (its start, its end), one per instant, one each for the slice's open
and close. What a launch would show (timings, the decoded trace, the derived model) is not
proven here.

No driver answers here: FA4 takes the SM count for its heuristics from
``FLASH_ATTENTION_NUM_SMS`` (its cross-compilation override) and its persistent tile
scheduler asks ``cutlass.utils.HardwareInfo`` for it while building the grid; the child gives
both a B200's 148 SMs (``HardwareInfo`` patched in the child only: a CPU compile for a named
target is a test's concern, not the library's). As in ``test_autoprof_fa4_ptx.py`` the child
runs with ``python -O`` and CPU tensors, and stops at the launch, after the PTX is written.
"""

from __future__ import annotations

import re
from collections import Counter

import pytest
from sm90_child import FA4_PTX, ROOT, compile_in_child

pytest.importorskip("cutlass")
pytest.importorskip("torch")
pytest.importorskip("einops")
if not (ROOT / "tests" / "stubs" / "triton").exists():  # pragma: no cover
    pytest.skip("tests/stubs is missing", allow_module_level=True)

B200_SMS = 148

CHILD = (r"""
import collections, importlib.util, json, os, sys
import torch, torch._dynamo  # before the stub: torch must see that there is no triton
if importlib.util.find_spec("triton") is None:
    sys.path.insert(0, os.path.join(os.getcwd(), "tests", "stubs"))
os.environ["FLASH_ATTENTION_NUM_SMS"] = "%(sms)d"  # FA4's heuristics: a B200's SM count
try:
    import flash_attn.cute.interface as fa
except ImportError as err:
    json.dump({"skip": f"flash-attn-4 not importable: {err}"}, open(sys.argv[1], "w"))
    sys.exit(0)
from cutlass.utils.hardware_info import HardwareInfo

# the persistent tile scheduler's grid: the SM count without a driver
HardwareInfo.__init__ = lambda self, device_id=0: None
HardwareInfo.get_device_multiprocessor_count = lambda self: %(sms)d

import cute_prof
from cute_prof.device import autoprof_state

# every record the recorder makes while tracing, by tag, and the kernel lines that made it
made, lines = collections.Counter(), collections.defaultdict(set)
kernel_file = os.path.join("flash_attn", "cute", "flash_fwd_sm100.py")


def counted(original, tag_at):
    def wrapper(*args):
        tag = args[tag_at]
        made[tag] += 1
        frame = sys._getframe(1)
        while frame is not None and not frame.f_code.co_filename.endswith(kernel_file):
            frame = frame.f_back
        if frame is not None:
            lines[tag].add(frame.f_lineno)
        return original(*args)
    return wrapper


autoprof_state.span_end = counted(autoprof_state.span_end, 2)
autoprof_state.instant = counted(autoprof_state.instant, 1)

dump = os.environ["CUTE_DSL_DUMP_DIR"]
q, k, v = (torch.zeros(1, 1024, 16, 128, dtype=torch.bfloat16) for _ in range(3))


""" + FA4_PTX + r"""


def ptx():
    return fa4_ptx(False, 100, ".sm_100a.ptx")


before = ptx()
with cute_prof.autoprofile(per_warp=4096, max_warps=16384, device="cpu") as prof:
    recorded = ptx()
rec = prof.recordings[-1]
json.dump({"before": before, "recorded": recorded,
           "sites": [s.to_dict() for s in rec.sites.values()],
           "pipelines": [p.to_dict() for p in rec.pipelines],
           "made": {str(t): n for t, n in made.items()},
           "lines": {str(t): sorted(ls) for t, ls in lines.items()},
           "closed": rec.closed, "address": int(rec.buffer.data_ptr())},
          open(sys.argv[1], "w"))
""") % {"sms": B200_SMS}

# what FA4's Blackwell forward creates (hdim 128, bf16, not causal), by variable and class
PIPELINES = {
    "pipeline_q": "PipelineTmaUmma", "pipeline_kv": "PipelineTmaUmma",  # TMA loads -> UMMA
    "pipeline_s_p_o": "PipelineUmmaAsync", "pipeline_o_acc": "PipelineUmmaAsync",  # UMMA -> warps
    "pipeline_p_lastsplit": "PipelineAsyncUmma",  # softmax warps -> UMMA
    "pipeline_sm_stats": "PipelineAsync", "pipeline_o_epi": "PipelineAsync",  # warps -> warps
}
# the calls the UMMA warp signals with a tcgen05.commit (the MMA's completion arrives)
UMMA_COMMITS = ("pipeline_s_p_o.producer_commit", "pipeline_o_acc.producer_commit",
                "pipeline_q.consumer_release", "pipeline_kv.consumer_release")
WAIT_OPS = ("mbarrier.try_wait", "bar.sync", "barrier.sync", "barrier.cluster.wait")
BARRIERS = re.compile(r"^\s*(bar\.sync|bar\.arrive|barrier\.sync|barrier\.arrive"
                      r"|barrier\.cluster\.\w+)\b", re.M)
ASM = re.compile(r"// begin inline asm\n(.*?)// end inline asm", re.S)


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    result = compile_in_child(tmp_path_factory.mktemp("fa4_sm100"), CHILD, timeout=1500,
                              python_flags=("-O",), arch="sm_100a")
    if "skip" in result:
        pytest.skip(result["skip"])
    return result


def _constants(ptx: str) -> dict[str, int]:
    """Registers a ``mov.b32 %rN, <int>;`` sets (a dynamic-payload record's tag operand)."""
    return {m.group(1): int(m.group(2))
            for m in re.finditer(r"mov\.b32\s+(%r\d+),\s*(-?\d+);", ptx)}


def records(ptx: str) -> list[dict]:
    """The recorder's inline-asm blocks in PTX order: ``now`` (a region's start: a timer read,
    no store), ``region`` (START + SPAN stores), ``instant`` (one store), ``slice`` (the slice's
    open and close); with each record's tag and kind decoded from its high word, and the
    block's span of the text."""
    from cute_prof import layout

    regs, out = _constants(ptx), []
    for m in ASM.finditer(ptx):
        body = m.group(1)
        if "%globaltimer" not in body:
            continue
        stores = body.count("st.global.v2.u32")
        what = {0: "now", 1: "instant", 2: "region"}[stores]
        if stores == 0 and ("st.global.u64" in body or "cvta.to.global" in body):
            what = "slice"
        block = {"what": what, "start": m.start(), "end": m.end()}
        if stores:
            imm = re.search(r"mov\.u32 hi, (\d+);", body)
            if imm:  # a tag (and payload) known while tracing: one immediate
                high = int(imm.group(1))
            else:  # packed on the device from the tag's register and the payload's
                tag_reg = re.search(r"and\.b32 hi, (%r\d+), 65535;", body).group(1)
                kind = int(re.search(r"or\.b32 hi, hi, (\d+);", body).group(1))
                high = regs[tag_reg] | kind
            block["tag"] = high & layout.field_mask(layout.SLICE_TAG_BITS)
            block["kind"] = (high >> (layout.SLICE_KIND_SHIFT - 32)) & layout.field_mask(
                layout.SLICE_KIND_BITS)
        out.append(block)
    return out


def test_sm100_ptx_outside_the_block_reads_no_timer(compiled):
    # that the block leaves every wrapped call as it found it is arch-independent:
    # test_autoprof_host.py checks it without a compile, test_autoprof_fa4_ptx.py on sm90 PTX
    assert "%globaltimer" not in compiled["before"]
    assert compiled["recorded"] != compiled["before"]
    assert "tcgen05.mma" in compiled["before"]  # the Blackwell kernel, not a fallback
    ptx = compiled["recorded"]
    assert str(compiled["address"]) in ptx  # the buffer is a constant: no parameter was added
    assert ptx.count(".param") == compiled["before"].count(".param")


def test_sm100_pipelines_and_their_classes(compiled):
    assert {p["name"]: p["cls"] for p in compiled["pipelines"]} == PIPELINES
    assert compiled["closed"]
    # every pipeline has its calls recorded
    used = {s["pipeline"] for s in compiled["sites"] if s["pipeline"] is not None}
    assert used == {p["index"] for p in compiled["pipelines"]}


def test_sm100_every_site_records_where_the_ptx_says(compiled):
    """Every record the recorder made while tracing is in the PTX, each tagged with its site:
    a wait's all regions, a signal's all instants. The compiler may copy a record with the
    code around it (a loop's last iteration peeled, a tail duplicated onto two paths), so a
    site has at least the records it made, never fewer."""
    from cute_prof import layout

    sites = {s["tag"]: s for s in compiled["sites"]}
    made = {int(t): n for t, n in compiled["made"].items()}
    assert set(made) == set(sites)  # every site made at least one record
    blocks = records(compiled["recorded"])
    stored = [b for b in blocks if b["what"] in ("region", "instant")]
    in_ptx = Counter(b["tag"] for b in stored)
    assert set(in_ptx) == set(sites)
    assert all(in_ptx[t] >= n for t, n in made.items()), (in_ptx, made)
    for b in stored:
        site = sites[b["tag"]]
        if site["kind"] == "wait":
            assert (b["what"], b["kind"]) == ("region", layout.SLICE_KIND_SPAN), site["name"]
        else:
            assert (b["what"], b["kind"]) == ("instant", layout.SLICE_KIND_INSTANT), site["name"]
    assert {s["kind"] for s in sites.values()} == {"wait", "signal"}
    # every site is at least one line of the kernel's source
    assert all(compiled["lines"].get(str(t)) for t in sites)


def test_sm100_timer_reads_follow_from_the_records(compiled):
    """``%globaltimer`` is read twice per region (its start, its end), once per instant and
    once each at the slice's open and close; nowhere else."""
    sites = {s["tag"]: s for s in compiled["sites"]}
    made = {int(t): n for t, n in compiled["made"].items()}
    ptx = compiled["recorded"]
    blocks = Counter(b["what"] for b in records(ptx))
    regions, instants = blocks["region"], blocks["instant"]
    assert blocks == {"now": regions, "region": regions, "instant": instants, "slice": 2}
    assert ptx.count("%globaltimer") == 2 * regions + instants + 2
    assert regions >= sum(n for t, n in made.items() if sites[t]["kind"] == "wait")
    assert instants >= sum(n for t, n in made.items() if sites[t]["kind"] == "signal")
    # what this compile gives (FA4 4.0.0b36, cutlass-dsl 4.8.1): 7 pipelines, 26 sites (25
    # through cutlass.pipeline and cute.arch, and FA4's TMEM-allocation barrier)
    assert (len(compiled["pipelines"]), len(sites)) == (7, 26)


def test_sm100_each_wait_is_a_region_around_its_blocking_instruction(compiled):
    ptx = compiled["recorded"]
    blocks = records(ptx)
    for before, block in zip(blocks, blocks[1:]):
        if block["what"] == "region":
            assert before["what"] == "now"  # its start, read just before the call
            between = ptx[before["end"]:block["start"]]
            assert any(op in between for op in WAIT_OPS), between[:400]


def test_sm100_umma_commits_and_barriers_get_their_records(compiled):
    """The UMMA warp's signals are tcgen05 commits: each is followed by its instant; every
    named-, CTA- and cluster-barrier instruction of the kernel is inside a record (a sync in
    a region, an arrive just before an instant)."""
    ptx = compiled["recorded"]
    sites = {s["tag"]: s for s in compiled["sites"]}
    blocks = records(ptx)
    commits = [m.start() for m in re.finditer(r"tcgen05\.commit", ptx)]
    assert commits and len(commits) == compiled["before"].count("tcgen05.commit")
    for at in commits:
        after = next(b for b in blocks if b["start"] > at)
        assert after["what"] == "instant" and sites[after["tag"]]["name"] in UMMA_COMMITS
        assert "tcgen05.commit" not in ptx[at + 1:after["start"]]
    umma = Counter(sites[b["tag"]]["name"] for b in blocks
                   if b["what"] == "instant" and sites[b["tag"]]["name"] in UMMA_COMMITS)
    assert set(umma) == set(UMMA_COMMITS) and sum(umma.values()) == len(commits)

    barriers = list(BARRIERS.finditer(ptx))
    assert len(barriers) == len(BARRIERS.findall(compiled["before"])) > 0
    for m in barriers:
        nxt = next(b for b in blocks if b["start"] > m.start())
        prev = [b for b in blocks if b["end"] < m.start()][-1]
        if "arrive" in m.group(1):
            assert nxt["what"] == "instant", m.group(0)
        else:
            assert (prev["what"], nxt["what"]) == ("now", "region"), m.group(0)
    # FA4's TMEM-allocation handshake syncs through nvvm.barrier_cta_sync, not cute.arch
    names = {s["name"] for s in sites.values()}
    assert {"bar2.sync", "bar2.arrive", "cluster.wait", "cluster.arrive_relaxed"} <= names


def test_sm100_the_waits_left_outside_a_region_are_no_call_of_a_pipeline(compiled):
    """Every mbarrier wait of the kernel is inside a region but five, which are no pipeline or
    barrier call the recorder could wrap: four inside FA4's MMA helper (the PV GEMM waits on
    ``pipeline_p_lastsplit``'s full barrier itself, given its address), one in the two-CTA
    TMEM deallocation handshake of ``cutlass.utils.TmemAllocator``."""
    ptx = compiled["recorded"]
    blocks = records(ptx)
    regions = [(a["end"], b["start"]) for a, b in zip(blocks, blocks[1:]) if b["what"] == "region"]
    waits = [m.start() for m in re.finditer(r"mbarrier\.try_wait", ptx)]
    outside = [at for at in waits if not any(s <= at < e for s, e in regions)]
    assert len(outside) == 5 and len(waits) == compiled["before"].count("mbarrier.try_wait")
