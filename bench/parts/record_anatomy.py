"""Where the cost of one slices record goes: raw PTX variants of the record on IKET's loop nest.

The probe of ``bench/parts/overhead.py`` (1056 CTAs x 128 threads, 256 iterations of F FMAs in
four chains, one record per warp per iteration) with the record written by hand-made inline
PTX, so that one ingredient changes at a time:

* ``nest``      no record (the baseline)
* ``record``    the first four-instruction ``SliceRecorder(ordered=False).end()``: timer read,
                latched compare, store at the cursor, then the cursor increment (which waits
                for the store to read the cursor; the library now stores at the advanced
                cursor instead, see bench/results/record_cost/runs/2026-11-23_hot3_h100.tar.xz, hot3_h100/README.md)
* ``deferred``  the same four instructions, but each record stores the previous one's timer
                value, so the store never waits for the timer read it follows
* ``no_timer``  compare, store of a constant, increment: the record without its timer
* ``timer``     only the timer read, folded into a register (2 instructions)
* ``clock``     ``record`` with ``%clock`` (the SM's cycle counter) instead of ``%globaltimer_lo``
* ``all_lanes`` ``record`` with every lane storing the same word (no lane-0 predicate)
* ``alu1``, ``alu3``  one / three integer ALU instructions (LOP3) on per-lane values: what an
                ALU instruction costs in this FMA-bound loop
* ``store``     one unpredicated 8-byte store to a fixed address per lane
* ``record_cs`` ``record`` with a streaming store (``st.global.cs``: evict first)
* ``record32``  ``record`` storing only the 4-byte timer value (what the data width costs)
* ``library``   ``SliceRecorder(ordered=False)``: open, ``end(1)`` each iteration, ``close()``
                (on a slices buffer: ``record`` plus the recorder's fixed per-launch costs)
* ``overhead_nest_s1``, ``overhead_slicesu_s1``: bench/parts/overhead.py's nested kernels (what
                bench/parts/overhead_peers.py times beside IKET), in the same rounds

Timed with CUPTI, shuffled every round, medians; ns per record per SM = (variant - nest) /
8192. Prints the SASS loop size of each variant when nvdisasm is available.

    python bench/parts/record_anatomy.py [--rounds 20] [--json out.json]
"""


import argparse
import json
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

CTAS, THREADS, ITERS, CHAINS = 1056, 128, 256, 4
WARPS = THREADS // 32
FS = (64, 16)
VARIANTS = ("nest", "record", "deferred", "no_timer", "timer", "clock", "all_lanes", "alu1", "alu3", "store", "record32", "record_cs", "library")
WORD_HIGH = 0xA000_0001  # a SPAN record's high word, tag 1


def build():
    import cutlass
    import cutlass.cute as cute
    from cutlass import Boolean, Int32
    from cutlass._mlir.dialects import llvm
    from cutlass.cutlass_dsl import T

    from cute_prof.device.ptx import buffer_address_and_words, inline_asm
    from cute_prof.device.slices import SliceRecorder, prefetch_header

    def two(struct_types, operands, text, cons):
        res = inline_asm(llvm.StructType.get_literal(struct_types), operands, text, cons)
        return [llvm.extractvalue(t, res, [i]) for i, t in enumerate(struct_types)]

    def window(buf, warp_slot):
        """Low half, high half and end of this warp's 256-word region (lane 0 stores)."""
        address, _ = buffer_address_and_words(buf, 0)
        text = ("{ .reg .u64 a; .reg .u32 l; .reg .pred z; cvta.to.global.u64 a, $4; mad.wide.u32 a, $5, 2048, a;"
                "mov.b64 {$0, $1}, a; add.u32 $2, $0, 2048; mov.u32 l, %laneid; setp.eq.u32 $3, l, 0; }")
        lo, hi, end, lane0 = two([T.i32(), T.i32(), T.i32(), T.bool()],
                                 [cutlass.Int64(address).ir_value(), Int32(warp_slot).ir_value()],
                                 text, "=r,=r,=r,=b,l,r")
        return Int32(lo), Int32(hi), Int32(end), Boolean(lane0)

    def record(cur, ok, hi, end, timer="%globaltimer_lo", width=8, hint=""):
        store = f"st.global{hint}.v2.u32 [a], {{t, {WORD_HIGH}}}" if width == 8 else "st.global.u32 [a], t"
        text = ("{ .reg .u32 t; .reg .u64 a; "
                f"mov.u32 t, {timer}; setp.lt.and.u32 $1, $2, $5, $3; mov.b64 a, {{$2, $4}};"
                f"@$1 {store}; add.u32 $0, $2, {width}; }}")
        c, p = two([T.i32(), T.bool()], [cur.ir_value(), ok.ir_value(), hi.ir_value(), end.ir_value()],
                   text, "=r,=b,r,b,r,r,~{memory}")
        return Int32(c), Boolean(p)

    def deferred(cur, pending, pend, hi, end, lane0):
        # store the pending (previous) record at cur - 8 under its own predicate, then read
        # this record's time into the pending register and test this record's slot
        text = ("{ .reg .u64 a; mov.b64 a, {$3, $6};"
                f"@$4 st.global.v2.u32 [a+-8], {{$5, {WORD_HIGH}}};"
                "mov.u32 $2, %globaltimer_lo; setp.lt.and.u32 $1, $3, $7, $8; add.u32 $0, $3, 8; }")
        c, p, t = two([T.i32(), T.bool(), T.i32()],
                      [cur.ir_value(), pending.ir_value(), pend.ir_value(), hi.ir_value(), end.ir_value(),
                       lane0.ir_value()],
                      text, "=r,=b,=r,r,b,r,r,r,b,~{memory}")
        return Int32(c), Boolean(p), Int32(t)

    def no_timer(cur, ok, hi, end):
        text = ("{ .reg .u64 a; setp.lt.and.u32 $1, $2, $5, $3; mov.b64 a, {$2, $4};"
                f"@$1 st.global.v2.u32 [a], {{$5, {WORD_HIGH}}}; add.u32 $0, $2, 8; }}")
        c, p = two([T.i32(), T.bool()], [cur.ir_value(), ok.ir_value(), hi.ir_value(), end.ir_value()],
                   text, "=r,=b,r,b,r,r,~{memory}")
        return Int32(c), Boolean(p)

    def timer_only(acc):
        text = "{ .reg .u32 t; mov.u32 t, %globaltimer_lo; add.u32 $0, $1, t; }"
        return Int32(inline_asm(T.i32(), [acc.ir_value()], text, "=r,r,~{memory}"))

    def alu(accs):
        """One integer ALU instruction on each accumulator (distinct registers and
        constants, so that ptxas cannot merge them)."""
        n = len(accs)
        text = "{ " + " ".join(f"xor.b32 ${i}, ${n + i}, {0x5BD1E995 + 7919 * i};" for i in range(n)) + " }"
        res = inline_asm(llvm.StructType.get_literal([T.i32()] * n), [a.ir_value() for a in accs], text,
                         ",".join(["=r"] * n + ["r"] * n) + ",~{memory}")
        return [Int32(llvm.extractvalue(T.i32(), res, [i])) for i in range(n)]

    def store_fixed(acc, hi, end):
        text = f"{{ .reg .u64 a; mov.b64 a, {{$1, $2}}; st.global.v2.u32 [a], {{$0, {WORD_HIGH}}}; }}"
        inline_asm(None, [acc.ir_value(), end.ir_value(), hi.ir_value()], text, "r,r,r,~{memory}")

    @cute.kernel
    def probe(buf: cute.Tensor, sbuf: cute.Tensor, data: cute.Tensor, fmas: cutlass.Constexpr,
              variant: cutlass.Constexpr):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        warp = cute.arch.warp_idx()
        gidx = bidx * THREADS + tidx
        header = prefetch_header(sbuf) if variant == "library" else None
        x = data[gidx]
        a = x * 0.5 + 1.0
        b = x * 0.25
        y, z, w = x + 1.0, x + 2.0, x + 3.0
        cur, hi, end, ok = window(buf, bidx * WARPS + warp)
        pend = Int32(0)
        acc = Int32(tidx)  # per lane, so the sum stays in vector registers
        acc2, acc3 = Int32(tidx) + 1, Int32(tidx) + 2
        lane0 = ok
        srec = SliceRecorder(sbuf, bidx * WARPS + warp, ordered=False, enabled=variant == "library", header=header)
        ok_all = Boolean(True)  # every lane stores the same word to the same address
        if cutlass.const_expr(variant == "deferred"):
            ok = Boolean(False)  # nothing pending before the first record
        for _o in cutlass.range(ITERS, unroll=1):
            for _ in cutlass.range_constexpr(fmas // CHAINS):
                x = x * a + b
                y = y * a + b
                z = z * a + b
                w = w * a + b
            if cutlass.const_expr(variant == "record"):
                cur, ok = record(cur, ok, hi, end)
            if cutlass.const_expr(variant == "clock"):
                cur, ok = record(cur, ok, hi, end, timer="%clock")
            if cutlass.const_expr(variant == "deferred"):
                cur, ok, pend = deferred(cur, ok, pend, hi, end, lane0)
            if cutlass.const_expr(variant == "no_timer"):
                cur, ok = no_timer(cur, ok, hi, end)
            if cutlass.const_expr(variant == "timer"):
                acc = timer_only(acc)
            if cutlass.const_expr(variant == "record_cs"):
                cur, ok = record(cur, ok, hi, end, hint=".cs")
            if cutlass.const_expr(variant == "record32"):
                cur, ok = record(cur, ok, hi, end, width=4)
            if cutlass.const_expr(variant == "all_lanes"):
                cur, ok = record(cur, ok_all, hi, end)
            if cutlass.const_expr(variant == "alu1"):
                acc = alu([acc])[0]
            if cutlass.const_expr(variant == "alu3"):
                acc, acc2, acc3 = alu([acc, acc2, acc3])

            if cutlass.const_expr(variant == "store"):
                store_fixed(acc, hi, end)
            srec.end(1)
        srec.close()
        data[gidx] = x + y + z + w + (cur + acc + acc2 + acc3 + pend).to(cutlass.Float32) * 0.0
        if cutlass.const_expr(variant == "deferred"):
            # the last pending record
            inline_asm(None, [cur.ir_value(), ok.ir_value(), pend.ir_value(), hi.ir_value()],
                       f"{{ .reg .u64 a; mov.b64 a, {{$0, $3}}; @$1 st.global.v2.u32 [a+-8], {{$2, {WORD_HIGH}}}; }}",
                       "r,b,r,r,~{memory}")

    @cute.jit
    def launch(buf: cute.Tensor, sbuf: cute.Tensor, data: cute.Tensor, fmas: cutlass.Constexpr,
               variant: cutlass.Constexpr):
        probe(buf, sbuf, data, fmas, variant).launch(grid=(CTAS, 1, 1), block=(THREADS, 1, 1))

    return launch


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--json", default=None)
    parser.add_argument("--sass-only", action="store_true", help="compile for sm_90a and count, no GPU")
    parser.add_argument("--sass-dir", default=None, help="keep each variant's SASS here")
    parser.add_argument("--only", default=None, help="comma list of variants to time (nest always)")
    parser.add_argument("--events", action="store_true",
                        help="also time every variant with CUDA events around 5 back-to-back launches "
                             "(the method IKET's process allows), to set the two methods side by side")
    args = parser.parse_args(argv)

    import torch
    import cutlass.cute as cute
    from cutlass.base_dsl.compiler import DumpDir
    from cutlass.cute.runtime import from_dlpack

    from cute_prof.device import buffer_arg
    from cute_prof.sass import disassemble, find_nvdisasm, loop_instructions

    device = "cpu" if args.sass_only else "cuda"
    words = CTAS * WARPS * ITERS
    buf = torch.zeros(words, dtype=torch.int64, device=device)
    address = buf.data_ptr()
    if (address >> 32) != ((address + 8 * words) >> 32):
        raise SystemExit("the record buffer crosses a 4 GiB boundary; run again")
    data = torch.rand(CTAS * THREADS, device=device)
    from cute_prof.decode_slices import allocate_slices_buffer, reset_slices
    sbuf = allocate_slices_buffer(CTAS * WARPS, ITERS, device=device)
    launch = build()
    compiled, loops = {}, {}
    nvdisasm = find_nvdisasm()
    opts = [cute.KeepCUBIN()] + ([cute.GPUArch("sm_90a")] if args.sass_only else [])
    for fmas in FS:
        for variant in VARIANTS:
            d = tempfile.mkdtemp()
            compiled[(variant, fmas)] = cute.compile[tuple(opts) + (DumpDir(d),)](
                launch, buffer_arg(buf), buffer_arg(sbuf), from_dlpack(data), fmas, variant)
            cubins = [os.path.join(d, f) for f in os.listdir(d) if f.endswith(".cubin")]
            if nvdisasm and cubins:
                sass = disassemble(cubins[0], nvdisasm=nvdisasm)
                loops[f"{variant} F={fmas}"] = loop_instructions(sass)
                if args.sass_dir:
                    os.makedirs(args.sass_dir, exist_ok=True)
                    with open(os.path.join(args.sass_dir, f"{variant}_F{fmas}.sass"), "w") as fh:
                        fh.write(sass)
    print("loop instructions:", json.dumps(loops), flush=True)
    if args.sass_only:
        return 0

    from cutlass import Int32

    from tools.cupti import time_shuffled

    buf_arg, sbuf_arg, data_arg = buffer_arg(buf), buffer_arg(sbuf), from_dlpack(data)
    # every record variant stores 256 words a warp; check once that they all landed
    for fmas in FS:
        for variant in ("record", "deferred", "clock", "no_timer", "record32", "record_cs"):
            buf.zero_()
            compiled[(variant, fmas)](buf_arg, sbuf_arg, data_arg)
            torch.cuda.synchronize()
            stored = int((buf != 0).sum()) * (2 if variant == "record32" else 1)
            print(f"# check {variant} F={fmas}: {stored} of {words} words stored", flush=True)
            assert stored == words, (variant, fmas, stored)
    # bench/parts/overhead.py's own nest kernels (what overhead_peers times) in the same rounds
    import overhead

    ov_launch = overhead.build()
    # the same kernel on a second buffer placed after a 35 MB one (as bench/parts/overhead_peers.py
    # allocates), and on normal-distributed data (as it draws): does placement or data matter?
    spacer = torch.zeros(CTAS * WARPS * ITERS * 4, dtype=torch.int64, device=device)
    sbuf2 = allocate_slices_buffer(CTAS * WARPS, ITERS, device=device)
    sbuf2_arg = buffer_arg(sbuf2)
    data2 = torch.randn(CTAS * THREADS, device=device)
    data2_arg = from_dlpack(data2)
    print(f"# buffers: sbuf at {sbuf.data_ptr():#x}, sbuf2 at {sbuf2.data_ptr():#x} (after {spacer.numel() * 8 >> 20} MB)",
          flush=True)
    ov_cases = {"": (sbuf_arg, data_arg), "_buffer2": (sbuf2_arg, data_arg), "_randn": (sbuf_arg, data2_arg)}
    for fmas in FS:
        for mode in ("nest_s1", "slicesu_s1"):
            fn = cute.compile(ov_launch, sbuf_arg, data_arg, Int32(words), Int32(0), Int32(WARPS), fmas, mode, True)
            for suffix, (b_arg, d_arg) in ov_cases.items():
                if mode == "nest_s1" and suffix == "_buffer2":
                    continue
                compiled[(f"overhead_{mode}{suffix}", fmas)] = (
                    lambda fn=fn, b_arg=b_arg, d_arg=d_arg: fn(b_arg, d_arg, Int32(words), Int32(0), Int32(WARPS)))
    from cute_prof.decode import decode_buffer
    for fmas in FS:
        reset_slices(sbuf)
        compiled[("library", fmas)](buf_arg, sbuf_arg, data_arg)
        torch.cuda.synchronize()
        trace = decode_buffer(sbuf)
        print(f"# check library F={fmas}: {len(trace.events)} of {words} records, overflow {trace.overflow}",
              flush=True)
        assert len(trace.events) == words and trace.overflow == 0
    if args.only:
        keep = set(args.only.split(",")) | {"nest"}
        compiled = {k: v for k, v in compiled.items() if k[0] in keep or k[0].startswith("overhead_")}
    variants = {f"{v} F={f}": (fn if v.startswith("overhead_") else
                               (lambda fn=fn: fn(buf_arg, sbuf_arg, data_arg)))
                for (v, f), fn in compiled.items()}
    times = time_shuffled(variants, rounds=args.rounds)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    per_sm = CTAS * WARPS * ITERS / sms
    events = {}
    if args.events:
        from overhead_peers import time_with_events

        events = time_with_events(variants, rounds=max(8, args.rounds // 3), batch=5)  # ns per launch
    rows = []
    print(f"{'variant':10} {'F':>3} {'median us':>10} {'x nest':>7} {'ns/rec/SM':>10} {'loop instr':>10}"
          + ("  | events: us, x nest, ns/rec/SM" if events else ""))
    for fmas in FS:
        base = [t for t in times[f"nest F={fmas}"]]
        for variant in VARIANTS + ("overhead_nest_s1", "overhead_slicesu_s1", "overhead_nest_s1_randn",
                                   "overhead_slicesu_s1_randn", "overhead_slicesu_s1_buffer2"):
            if f"{variant} F={fmas}" not in times:
                continue
            name = f"{variant} F={fmas}"
            mine = times[name]
            ratio = statistics.median([m / b for m, b in zip(mine, base)])
            added = statistics.median([(m - b) * 1e6 / per_sm for m, b in zip(mine, base)])
            row = dict(variant=variant, F=fmas, median_us=statistics.median(mine) * 1e3, x_nest=ratio,
                       ns_per_record_per_sm=added, loop_instructions=loops.get(name))
            line = (f"{variant:10} {fmas:3d} {row['median_us']:10.1f} {ratio:7.3f} {added:10.3f} "
                    f"{str(row['loop_instructions']):>10}")
            if events:
                ev, ev_base = events[name], events[f"nest F={fmas}"]
                row.update(events_us=ev / 1e3, events_x_nest=ev / ev_base,
                           events_ns_per_record_per_sm=(ev - ev_base) / per_sm)
                line += f"  | {ev / 1e3:8.1f} {ev / ev_base:7.3f} {(ev - ev_base) / per_sm:8.3f}"
            rows.append(row)
            print(line, flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(dict(device=torch.cuda.get_device_name(0), rounds=args.rounds,
                           timing="CUPTI kernel durations, shuffled rounds, per-round ratios to nest, medians"
                                  + ("; events: CUDA events around 5 launches behind a sleep kernel" if events else ""),
                           rows=rows), fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
