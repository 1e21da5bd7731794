"""Where does zero-edit recording cost FA4 its time? One FA4 forward (b4 s4096 h16 d128, full
mask) compiled plain and in zero-edit variants, timed together (CUPTI, shuffled rounds), with
each kernel's register and spill counts (``cuobjdump -res-usage`` of the kept cubin).

Variants (each but ``zero_edit`` changes what the recorder emits, for the experiment only:
its trace is not valid): ``zero_edit`` (as shipped), ``waits_only`` (commits, releases and
arrives record nothing), ``no_store`` (a record's PTX without its stores), ``store_never``
(the stores stay in the code, under a predicate that is false at run time), ``one_store_per_region``
(a region's START word not stored), ``no_clobber`` (the records' PTX without its memory
clobber), ``local_stage`` (records to a ring in local memory instead of global),
``clock_timer`` / ``clock64_timer`` (``%clock`` / ``%clock64`` read instead of
``%globaltimer_lo``), ``shared_stage`` (records to a ring in static shared memory),
``all_lanes_store`` (every lane stores, not lane 0 alone), ``store_only`` (the words stored
with a constant instead of a timer read), ``untimed_instants`` (the same for the one-word
instants only), ``pipelines_only`` (named barriers not recorded), ``no_records`` /
``pipeline_waits_recorded`` / ``signals_recorded`` (only those calls
recorded; none at all: the slice is still opened and closed; ``waits_recorded`` in
``probe_kinds.json`` is ``waits_only``), ``plain_again`` (a second plain
build: the timing's null result). Results and what they say:
``bench/results/zero_edit_h100/README.md``.

    python bench/zero_edit_probe.py --rounds 20 --json $OUT/probe.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from tools.cupti import time_shuffled  # noqa: E402

import cute_prof  # noqa: E402
from cute_prof.device import autoprof as device_autoprof  # noqa: E402
from cute_prof.device import slices  # noqa: E402


@contextlib.contextmanager
def clock_timer(register64: bool = False):
    """``%clock`` (an S2R, like ``%globaltimer_lo``) or ``%clock64``'s low half (a CS2R)
    read instead of the timer: does the record wait for the timer read's result?"""
    original = slices.SliceRecorder._timer_lines

    def lines(self, register):
        if register64:
            return ["{ .reg .u64 ck;", "mov.u64 ck, %clock64;", f"cvt.u32.u64 {register}, ck; }}"]
        return [line.replace("%globaltimer_lo", "%clock") for line in original(self, register)]

    slices.SliceRecorder._timer_lines = lines
    try:
        yield
    finally:
        slices.SliceRecorder._timer_lines = original


@contextlib.contextmanager
def record_asm(*, drop_stores: bool = False, drop_clobber: bool = False,
               predicate_off: bool = False, drop_start_word: bool = False,
               keep_timer: bool = False, constant_timer: bool = False,
               untimed_instants: bool = False):
    """Rewrite the records' inline PTX (not the slice's open and close).

    ``keep_timer`` (with ``drop_stores``) folds each timer read into the record's storing
    predicate, so ptxas must keep the reads although nothing is stored; ``constant_timer``
    stores the words with a constant instead of the timer (no timer read at all);
    ``untimed_instants`` does that for the one-word instants only."""
    original = slices.inline_asm

    def patched(result_types, operands, text, constraints, **kwargs):
        if "%globaltimer_lo" in text and "st.global.u64" not in text:
            instant = "st.global.v2" in text and ".pred p0" not in text
            if constant_timer or (untimed_instants and instant):
                text = re.sub(r"mov\.u32 (\S+), %globaltimer_lo;", r"mov.u32 \1, 0;", text)
            if keep_timer and "st.global.v2" in text:
                lines = text.splitlines()
                lines.insert(len(lines) - 1, "setp.ne.and.u32 $0, lo, 1, $0;")
                text = "\n".join(lines)
            if drop_stores:
                text = "\n".join(line for line in text.splitlines() if "st.global.v2" not in line)
            if predicate_off and "st.global.v2" in text:  # the store issues; no lane writes
                lines = text.splitlines()
                at = next(i for i, line in enumerate(lines) if "st.global.v2" in line)
                lines[at:at] = [".reg .pred never;", ".reg .u32 ln;", "mov.u32 ln, %laneid;",
                                  "setp.eq.u32 never, ln, 99;"]  # false, unknown to ptxas
                text = "\n".join(lines)
                text = re.sub(r"@\S+ st\.global", "@never st.global", text)
            if drop_start_word:
                text = "\n".join(line for line in text.splitlines() if not line.startswith("@p0 st.global"))
            if drop_clobber:
                constraints = constraints.replace(",~{memory}", "")
        return original(result_types, operands, text, constraints, **kwargs)

    slices.inline_asm = patched
    try:
        yield
    finally:
        slices.inline_asm = original


@contextlib.contextmanager
def record_only(*kinds: str, barriers: bool = True):
    """Record only calls of these kinds ("wait", "signal"); none at all with no kinds (the
    slice is still opened and closed)."""
    original = device_autoprof._record_call
    original_barriers = device_autoprof._patch_barriers

    def selected(tag_of, payload_of, call):
        state = device_autoprof._tracing_here()
        if state is not None and tag_of(state.recording)[1] not in kinds:
            if state.recorder is None:
                device_autoprof._open(state)
            return call()
        return original(tag_of, payload_of, call)

    device_autoprof._record_call = selected
    if not barriers:
        device_autoprof._patch_barriers = lambda: None
    try:
        yield
    finally:
        device_autoprof._record_call = original
        device_autoprof._patch_barriers = original_barriers


@contextlib.contextmanager
def all_lanes_store():
    """Every lane of a warp stores the record (the same word to the same address, one
    transaction) instead of lane 0 alone: does a store that only one lane makes cost more
    than one the whole warp makes?"""
    original = slices._OPEN_LINES
    slices._OPEN_LINES = tuple(line.replace("setp.eq.and.u32 l0, lane, 0, ok;",
                                            "setp.lt.and.u32 l0, lane, 32, ok;")
                               for line in original)
    try:
        yield
    finally:
        slices._OPEN_LINES = original


@contextlib.contextmanager
def scratch_ring(space: str):
    """Records go to a 64-record ring in the recording thread's ``local`` memory (a stack
    array made at the kernel's entry) or in static ``shared`` memory (one per CTA, so its
    contents are garbage) instead of global memory. A local or shared store completes in the
    SM, a global one only when L2 acknowledges it: do the kernel's release-ordered arrives and
    barriers wait for the records' global stores?"""
    from cutlass import Int32, Int64, cute
    from cutlass._mlir import ir
    from cutlass._mlir.dialects import llvm
    from cutlass.cutlass_dsl import T

    original_open, original_asm = device_autoprof._open, slices.inline_asm
    scratch = {}

    def open_with_scratch(state):
        original_open(state)
        entry = state.kernel_op.regions[0].blocks[0]
        with ir.InsertionPoint.at_block_begin(entry):
            if space == "local":
                ring = llvm.alloca(llvm.PointerType.get(), Int32(64).ir_value(), T.i64(), alignment=16)
                scratch["address"] = llvm.ptrtoint(T.i64(), ring)  # generic: cvta below
            else:
                scratch["address"] = cute.arch.alloc_smem(Int64, 64, alignment=16).toint().ir_value()

    def patched(result_types, operands, text, constraints, **kwargs):
        if "%globaltimer_lo" in text and "st.global.v2" in text and "address" in scratch:
            operands = list(operands) + [scratch["address"]]
            index = len(operands)  # the one output is $0
            cons = constraints.split(",")
            cons.insert(len(cons) - 1, "l" if space == "local" else "r")  # before the clobber
            constraints = ",".join(cons)
            if space == "local":
                address = [".reg .u64 ra, o64; .reg .u32 o;", f"cvta.to.local.u64 ra, ${index};",
                           "and.b32 o, $1, 504;", "cvt.u64.u32 o64, o;", "add.u64 ra, ra, o64;"]
            else:
                address = [".reg .u32 ra, o;", f"mov.u32 ra, ${index};", "and.b32 o, $1, 504;",
                           "add.u32 ra, ra, o;"]
            lines = text.splitlines()
            lines.insert(1, address[0])
            first = next(i for i, line in enumerate(lines) if "st.global.v2" in line)
            lines[first:first] = address[1:]
            text = "\n".join(lines).replace("st.global.v2.u32 [a+-8]", f"st.{space}.v2.u32 [ra]")
            text = text.replace("st.global.v2.u32 [a]", f"st.{space}.v2.u32 [ra+8]")
        return original_asm(result_types, operands, text, constraints, **kwargs)

    device_autoprof._open, slices.inline_asm = open_with_scratch, patched
    try:
        yield
    finally:
        device_autoprof._open, slices.inline_asm = original_open, original_asm


# name -> what the recorder emits (each but "zero_edit" is an experiment: its trace is not valid)
VARIANTS = {"zero_edit": contextlib.nullcontext,
            "waits_only": lambda: record_only("wait"),
            "no_store": lambda: record_asm(drop_stores=True),
            "store_never": lambda: record_asm(predicate_off=True),
            "one_store_per_region": lambda: record_asm(drop_start_word=True),
            "no_clobber": lambda: record_asm(drop_clobber=True),
            "local_stage": lambda: scratch_ring("local"),
            "shared_stage": lambda: scratch_ring("shared"),
            "all_lanes_store": all_lanes_store,
            "timer_only": lambda: record_asm(drop_stores=True, keep_timer=True),
            "store_only": lambda: record_asm(constant_timer=True),
            "untimed_instants": lambda: record_asm(untimed_instants=True),
            "pipelines_only": lambda: record_only("wait", "signal", barriers=False),
            "no_records": lambda: record_only(),
            "pipeline_waits_recorded": lambda: record_only("wait", barriers=False),
            "signals_recorded": lambda: record_only("signal"),
            "clock_timer": clock_timer,
            "clock64_timer": lambda: clock_timer(True)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--json")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--shape", default="4,4096,16,128", help="batch,seqlen,heads,dim")
    ap.add_argument("--once", action="store_true",
                    help="compile and launch each of --variants once (\"plain\" allowed), no "
                    "timing: for ptxas and Nsight Compute (bench/zero_edit_ptxas.sh, _ncu.sh)")
    args = ap.parse_args(argv)
    import torch
    from flash_attn.cute import interface as fa

    from examples.flash_attention import inputs

    q, k, v = inputs(*(int(x) for x in args.shape.split(",")))
    calls = {}

    def compile_into(cache_name, context):
        cache = {}
        fa._flash_attn_fwd.compile_cache = cache
        with context():
            if cache_name.startswith("plain"):  # "plain_again": a second plain build
                fa._flash_attn_fwd(q, k, v)
            else:
                with cute_prof.autoprofile(per_warp=4096):
                    fa._flash_attn_fwd(q, k, v)
        torch.cuda.synchronize()

        def run():
            fa._flash_attn_fwd.compile_cache = cache
            fa._flash_attn_fwd(q, k, v)
        calls[cache_name] = run

    names = args.variants.split(",")
    if args.once:
        for name in names:
            compile_into(name, VARIANTS.get(name, contextlib.nullcontext))
        return 0
    compile_into("plain", contextlib.nullcontext)
    for name in names:
        compile_into(name, VARIANTS.get(name, contextlib.nullcontext) if name.startswith("plain")
                     else VARIANTS[name])
    times = time_shuffled(calls, rounds=args.rounds, warmup=5)
    base = times["plain"]
    rows = {}
    for name, values in times.items():
        ratio = statistics.median(v / b for v, b in zip(values, base))
        rows[name] = {"median_us": 1e3 * statistics.median(values), "x_plain": ratio}
        print(f"{name:<20} {rows[name]['median_us']:>9.1f} us  x{ratio:.4f}")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "device": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d"),
            "command": "python bench/zero_edit_probe.py " + " ".join(argv or sys.argv[1:]),
            "rows": rows}, indent=1))
    return 0

if __name__ == "__main__":
    raise SystemExit(main())
