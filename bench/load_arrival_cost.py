"""What the load-arrival probes cost (issue #27), with CUPTI: this repository's ws_gemm at level
0 unrecorded, recorded by ``autoprofile()`` and recorded with ``load_arrivals=7``, launched in
shuffled rounds (each recording launch after a reset of its buffer, not timed).

    python bench/load_arrival_cost.py [--rounds 30] [--per-round 5]

Prints one table per shape; writes ``load_arrival_cost.json`` into ``$OUT``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

SHAPES = {"ws_gemm 4096^3": ((4096, 4096, 4096), False),
          "persistent ws_gemm 4096x4096x1024": ((4096, 4096, 1024), True)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--per-round", type=int, default=5)
    ap.add_argument("--every", type=int, default=7, help="load_arrivals=N of the probed kernel")
    args = ap.parse_args(argv)
    import torch

    import cute_prof
    from examples import ws_gemm as W
    from tools.cupti import time_shuffled

    out = Path(os.environ.get("OUT", "load_arrival_cost_out"))
    out.mkdir(parents=True, exist_ok=True)
    result = {"device": torch.cuda.get_device_name(),
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "command": "python bench/load_arrival_cost.py " + " ".join(argv or sys.argv[1:]),
              "rounds": args.rounds, "per_round": args.per_round, "shapes": {}}
    lines = []
    for label, ((m, n, k), persistent) in SHAPES.items():
        a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
        b = torch.randn(n, k, device="cuda").to(torch.bfloat16)
        dummy = W.alloc_prof(1)
        launches, resets, recordings = {}, {}, []
        for name, probes in (("unrecorded", None), ("recorded", 0), ("probed", args.every)):
            runner = W.CompiledWsGemm(W.GemmConfig(persistent=persistent))
            c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            if probes is None:
                launch = runner.prepare(a, b, c, dummy, 0, 0)
            else:
                warps = runner.gemm.num_ctas(m, n) * (runner.gemm.threads_per_cta // 32)
                with cute_prof.autoprofile(per_warp=4096, max_warps=warps,
                                           load_arrivals=probes) as prof:
                    launch = runner.prepare(a, b, c, dummy, 0, 0)
                resets[name] = prof.reset
                recordings.append(prof)
            launch()
            torch.cuda.synchronize()

            def repeated(launch=launch, reset=resets.get(name)):
                for _ in range(args.per_round):
                    if reset is not None:
                        reset()
                    launch()
            launches[name] = repeated
        times = time_shuffled(launches, rounds=args.rounds)  # ms per round (per_round calls)
        med = {name: statistics.median(v) / args.per_round * 1e3 for name, v in times.items()}
        result["shapes"][label] = {"median_us": med, "times_ms_per_round": times}
        lines.append(f"{label}: median us per launch (CUPTI, {args.rounds} shuffled rounds x "
                     f"{args.per_round})")
        for name in ("unrecorded", "recorded", "probed"):
            lines.append(f"  {name:<11} {med[name]:8.2f}  {med[name] / med['unrecorded']:.4f}x "
                         f"unrecorded, {med[name] / med['recorded']:.4f}x recorded")
    (out / "load_arrival_cost.json").write_text(json.dumps(result, indent=1))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
