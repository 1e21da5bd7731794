"""Does where a kernel's buffers sit in GPU memory set a what-if's measured change? The
persistent GEMM's 4 -> 2 stages measured +27.0% .. +34.7% over sixteen H100 runs, each run
at its own level within +-1 point over 300 paired rounds (round_changes_persistent.txt),
while the variants' traced launches ran alike across runs: each run allocates its tensors
afresh. Here one process times the base and a variant on several placements (a spacer of
random size, then fresh copies of A and B and an output for each kernel), every (kernel,
placement) once per shuffled round (``calibration.time_shuffled``, CUPTI), and prints each
placement's paired change.

    python bench/whatif_placement_gpu.py --persistent --mnk 4096,4096,1024 --variant stages2

Writes ``placement.json`` (per-round times per kernel and placement) under $OUT.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import torch  # noqa: E402
from whatif_gpu import VARIANTS  # noqa: E402

from cute_prof.calibration import paired_change, round_spread, time_shuffled  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mnk", default="4096,4096,1024")
    ap.add_argument("--persistent", action="store_true")
    ap.add_argument("--variant", default="stages2", choices=[v for v in VARIANTS if v != "base"])
    ap.add_argument("--placements", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--per-block", type=int, default=10)
    ap.add_argument("--seed", type=int, default=5)
    args = ap.parse_args(argv)
    m, n, k = (int(x) for x in args.mnk.split(","))
    out = Path(os.environ.get("OUT", "placement_out"))
    out.mkdir(parents=True, exist_ok=True)
    from examples import ws_gemm as W

    dev = torch.cuda.get_device_name()
    torch.manual_seed(0)
    a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    b = torch.randn(n, k, device="cuda").to(torch.bfloat16)
    dummy = W.alloc_prof(1)
    runners = {name: W.CompiledWsGemm(W.GemmConfig(**VARIANTS[name], persistent=args.persistent))
               for name in ("base", args.variant)}
    rng = random.Random(args.seed)
    keep, launches, spacers = [], {}, []
    for p in range(args.placements):
        # a spacer of 1-256 MiB moves everything after it; fresh A, B and outputs
        spacer_mb = rng.randint(1, 256)
        spacers.append(spacer_mb)
        keep.append(torch.empty(spacer_mb << 20, dtype=torch.uint8, device="cuda"))
        a_p, b_p = a.clone(), b.clone()
        for name, runner in runners.items():
            c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            keep += [a_p, b_p, c]
            launches[f"{name}@{p}"] = runner.prepare(a_p, b_p, c, dummy, 0, 0)
            launches[f"{name}@{p}"]()
    torch.cuda.synchronize()
    t0 = time.time()
    times = time_shuffled(launches, rounds=args.rounds, per_block=args.per_block)
    elapsed = time.time() - t0
    (out / "placement.json").write_text(json.dumps(
        {"device": dev, "mnk": [m, n, k], "persistent": args.persistent,
         "variant": args.variant, "spacers_mb": spacers, "rounds": args.rounds,
         "per_block": args.per_block, "times_ns": times}, indent=1))
    print(f"{dev}; {'persistent ' if args.persistent else ''}ws_gemm {m}x{n}x{k}, base vs "
          f"{args.variant}; {args.placements} placements, {args.rounds} shuffled rounds of "
          f"{args.per_block}-launch blocks ({elapsed:.0f} s)")
    print(f"{'placement':>9} {'spacer MB':>9} {'base us':>8} {args.variant + ' us':>10} "
          f"{'change':>8} {'round IQR/2':>11}")
    changes = []
    for p in range(args.placements):
        base, var = f"base@{p}", f"{args.variant}@{p}"
        change = paired_change(times, var, base)
        changes.append(change)
        print(f"{p:>9} {spacers[p]:>9} {statistics.median(times[base]) / 1e3:>8.2f} "
              f"{statistics.median(times[var]) / 1e3:>10.2f} {change:>+8.2%} "
              f"{round_spread(times, var, base):>+11.2%}")
    print(f"placements' changes: {min(changes):+.2%} .. {max(changes):+.2%} "
          f"(median {statistics.median(changes):+.2%})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
