"""What the memory does under the what-if check's ring depths, read from the hardware
counters: ws_gemm 4096^3, the persistent ws_gemm 4096x4096x1024 and quack's GEMM (base, one
and two stages fewer), FA4's forward in the check's four shapes (base, 1-deep K/V), each
launched warm (after back-to-back launches, as the check times them) inside an NVTX range
``measure`` that Nsight Compute profiles with the caches and clocks left alone. The what-if
model scales its loads' queued latency with the change's throughput; these counters say
where the loads were served (L2 hit rate) and how loaded DRAM and the L2 were, base against
variant (stop51/moved_from_results/memory_counters_h100.md in
bench/results/whatif/history/stops_31-64.tar.xz).

    ncu --target-processes all --nvtx --nvtx-include measure/ --cache-control none \
        --clock-control none --metrics "$(python bench/memory_counters_gpu.py --metrics)" \
        --csv --log-file $OUT/ncu.csv python bench/memory_counters_gpu.py [--kernels fa4]
    python bench/memory_counters_gpu.py --report $OUT/ncu.csv   # the table, on any machine

Writes ``$OUT/launch_order.json`` (the variant of each profiled launch, in order). Needs the
GPU environment of the other GPU halves (``source bench/tools/gpu_env.sh``).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import sys
from pathlib import Path

# quack compiles in this process, and CuTe DSL traces every compile: its JIT cache would
# serve a quack variant the kernel of another (the stage count is not in its key)
os.environ.setdefault("QUACK_CACHE_ENABLED", "0")
os.environ.setdefault("CUTE_DSL_NO_CACHE", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

METRICS = ("gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum",
           "dram__throughput.avg.pct_of_peak_sustained_elapsed",
           "lts__t_sector_op_read_hit_rate.pct",
           "lts__throughput.avg.pct_of_peak_sustained_elapsed")
WARM_LAUNCHES = 30
# ncu's units -> the table's (us, MB; percentages as they are)
UNIT_SCALE = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "nsecond": 1e-3, "usecond": 1.0,
              "msecond": 1e3, "byte": 1e-6, "Kbyte": 1e-3, "Mbyte": 1.0, "Gbyte": 1e3}
PROFILED_LAUNCHES = 2
# the what-if check's kernels (bench/whatif_check.py's entries) and the variants profiled
WS_GEMM = {"ws_gemm 4096^3": ((4096, 4096, 4096), False),
           "persistent ws_gemm 4096x4096x1024": ((4096, 4096, 1024), True)}
WS_GEMM_VARIANTS = {"base": {}, "stages3": {"num_stages": 3}, "stages2": {"num_stages": 2}}
QUACK_VARIANTS = {"base": 0, "stages_minus1": -1, "stages_minus2": -2}
FA4 = {"FA4 fwd b4 s4096 h16 d128 bf16": ((4, 4096, 16, 128), False),
       "FA4 fwd causal b4 s4096 h16 d128 bf16": ((4, 4096, 16, 128), True),
       "FA4 fwd b1 s1024 h16 d128 bf16": ((1, 1024, 16, 128), False),
       "FA4 fwd b1 s4096 h16 d128 bf16": ((1, 4096, 16, 128), False)}
FA4_PROFILED = ("base", "stages1")


def ws_gemm_cases():
    import torch

    from examples import ws_gemm as W

    dummy = W.alloc_prof(1)
    for kernel, ((m, n, k), persistent) in WS_GEMM.items():
        a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
        b = torch.randn(n, k, device="cuda").to(torch.bfloat16)
        c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        for variant, over in WS_GEMM_VARIANTS.items():
            runner = W.CompiledWsGemm(W.GemmConfig(**over, persistent=persistent))
            yield kernel, variant, runner.prepare(a, b, c, dummy, 0, 0)


def quack_cases():
    """quack's GEMM as bench/quack_whatif_gpu.py builds its variants (its stage count
    wrapped while each compiles; each variant's launch plan put back before its launches)."""
    import torch
    import quack.gemm as quack_gemm
    from quack.gemm_config import GemmConfig
    from quack.gemm_interface import gemm_tuned
    from quack_whatif_gpu import ab_stages, compile_cache

    m, n, k = 4096, 4096, 4096
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    config = GemmConfig(tile_m=256, tile_n=128, pingpong=False, cluster_m=2, cluster_n=1,
                        is_dynamic_persistent=False, device_capacity=9)
    compiled, plans = compile_cache(quack_gemm._compile_gemm), quack_gemm._gemm_plan_cache
    for variant, offset in QUACK_VARIANTS.items():
        with ab_stages(offset):
            compiled.clear()
            plans.clear()
            gemm_tuned.fn(a, b, out, config=config)
            torch.cuda.synchronize()
        plan = dict(plans)
        yield ("quack GEMM 4096^3 (cooperative, 2x1 cluster, 4 stages)", variant,
               lambda plan=plan: (plans.clear(), plans.update(plan),
                                  gemm_tuned.fn(a, b, out, config=config)))


def fa4_cases():
    from flash_attn.cute import interface as fa

    from examples.flash_attention import inputs
    from fa4_whatif_gpu import VARIANTS, kernel_class_overrides

    for kernel, (shape, causal) in FA4.items():
        q, k, v = inputs(*shape)
        for variant in FA4_PROFILED:
            call_kwargs, overrides = VARIANTS[variant]
            cache = {}
            fa._flash_attn_fwd.compile_cache = cache
            with kernel_class_overrides(overrides):  # compiled here, launched from its cache
                fa._flash_attn_fwd(q, k, v, causal=causal, **call_kwargs)

            def launch(cache=cache, q=q, k=k, v=v, causal=causal, kw=call_kwargs):
                fa._flash_attn_fwd.compile_cache = cache
                fa._flash_attn_fwd(q, k, v, causal=causal, **kw)
            yield kernel, variant, launch


def run(out: Path, families) -> None:
    import torch

    torch.manual_seed(0)
    order = []
    for family in families:
        for kernel, variant, launch in family():
            for _ in range(WARM_LAUNCHES):
                launch()
            torch.cuda.synchronize()
            torch.cuda.nvtx.range_push("measure")
            for _ in range(PROFILED_LAUNCHES):
                launch()
                order.append({"kernel": kernel, "variant": variant})
            torch.cuda.synchronize()
            torch.cuda.nvtx.range_pop()
            print(f"{kernel} {variant}: {PROFILED_LAUNCHES} launches profiled", flush=True)
    (out / "launch_order.json").write_text(json.dumps(order, indent=1))


def report(csv_path: Path, order_path: Path) -> str:
    """The counters of each profiled launch, with its variant (ncu's CSV: one row per
    kernel and metric, in launch order)."""
    text = csv_path.read_text()
    start = text.find('"ID"')
    if start < 0:
        raise SystemExit(f"{csv_path}: no ncu CSV table in it")
    rows = list(csv.DictReader(io.StringIO(text[start:])))
    order = json.loads(order_path.read_text())
    by_id = {}
    for row in rows:
        by_id.setdefault(int(row["ID"]), {})[row["Metric Name"]] = (
            row["Metric Value"].replace(",", ""), row["Metric Unit"])
    if len(by_id) != len(order):
        raise SystemExit(f"{len(by_id)} profiled kernels, {len(order)} launches in "
                         f"{order_path}: not the same launches")
    head = ("kernel", "variant", "time us", "DRAM read MB", "DRAM write MB", "DRAM % peak",
            "L2 read hit %", "L2 % peak")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for launch, kid in zip(order, sorted(by_id)):
        got = by_id[kid]

        def value(name):
            v, unit = got[name]
            return float(v) * UNIT_SCALE.get(unit, 1.0)
        lines.append("| " + " | ".join([
            launch["kernel"], launch["variant"],
            f"{value('gpu__time_duration.sum'):.2f}",
            f"{value('dram__bytes_read.sum'):.1f}", f"{value('dram__bytes_write.sum'):.1f}",
            f"{value('dram__throughput.avg.pct_of_peak_sustained_elapsed'):.1f}",
            f"{value('lts__t_sector_op_read_hit_rate.pct'):.1f}",
            f"{value('lts__throughput.avg.pct_of_peak_sustained_elapsed'):.1f}"]) + " |")
    return "\n".join(lines) + "\n"


FAMILIES = {"ws_gemm": ws_gemm_cases, "quack": quack_cases, "fa4": fa4_cases}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--metrics", action="store_true", help="print ncu's --metrics list")
    ap.add_argument("--report", type=Path, help="ncu's CSV log: print the table")
    ap.add_argument("--kernels", nargs="+", default=list(FAMILIES), choices=list(FAMILIES))
    args = ap.parse_args(argv)
    out = Path(os.environ.get("OUT", "memory_counters_out"))
    if args.metrics:
        print(",".join(METRICS))
        return 0
    if args.report:
        print(report(args.report, args.report.parent / "launch_order.json"), end="")
        return 0
    out.mkdir(parents=True, exist_ok=True)
    run(out, [FAMILIES[name] for name in args.kernels])
    return 0


if __name__ == "__main__":
    sys.exit(main())
