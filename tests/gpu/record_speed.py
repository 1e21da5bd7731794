"""What ``cute-prof record`` costs a launch it leaves plain: FlashAttention-4's forward compiled
normally, against the same call served by the recorder's plain build outside the launch
range, in one process, CUPTI times in shuffled rounds (``calibration.time_shuffled``).

    python tests/gpu/record_speed.py --rounds 15 --json out.json

Prints a table (median us per launch and the ratio to the unhooked kernel); the GPU test
``test_record_gpu.py`` runs it and checks the ratio.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

SHAPES = (("b4 s4096 full", 4, 4096, False), ("b4 s4096 causal", 4, 4096, True),
          ("b1 s1024 full", 1, 1024, False))


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--per-block", type=int, default=5)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    import torch
    import flash_attn.cute.interface as fa

    from cute_prof import record_run
    from cute_prof.calibration import time_shuffled

    cache = fa._flash_attn_fwd.compile_cache
    inputs, unhooked = {}, {}
    for label, batch, seqlen, causal in SHAPES:
        q, k, v = (torch.randn(batch, seqlen, 16, 128, device="cuda", dtype=torch.bfloat16)
                   for _ in range(3))
        before = set(cache.keys()) if hasattr(cache, "keys") else set(cache)
        fa.flash_attn_func(q, k, v, causal=causal)
        (key,) = set(cache.keys() if hasattr(cache, "keys") else cache) - before
        inputs[label], unhooked[label] = (q, k, v, causal, key), cache[key]
    # the recorder, in this process, with a range no launch reaches: every launch runs plain
    out = Path(tempfile.mkdtemp(prefix="record-speed-"))
    record_run.start({"out": str(out), "kernels": ["flash"], "launch_skip": 10**9,
                      "launch_count": 1, "per_warp": 256, "max_memory": 1 << 28,
                      "barriers": True, "program": ["record_speed.py"]})
    selecting = {}
    for label, (q, k, v, causal, key) in inputs.items():
        del cache[key]
        fa.flash_attn_func(q, k, v, causal=causal)
        selecting[label] = cache[key]
        if type(selecting[label]).__name__ != "SelectingFunction":
            raise SystemExit(f"{label}: the recorder did not take FA4's compile "
                             f"({type(selecting[label]).__name__})")

    def launcher(label, fn):
        q, k, v, causal, key = inputs[label]

        def launch():
            cache[key] = fn
            fa.flash_attn_func(q, k, v, causal=causal)
        return launch

    variants = {}
    for label in inputs:
        variants[f"{label} | unhooked"] = launcher(label, unhooked[label])
        variants[f"{label} | record, outside range"] = launcher(label, selecting[label])
    times = time_shuffled(variants, rounds=args.rounds, per_block=args.per_block)
    rows = []
    for label in inputs:
        base = statistics.median(times[f"{label} | unhooked"]) / 1e3
        plain = statistics.median(times[f"{label} | record, outside range"]) / 1e3
        rows.append({"shape": label, "unhooked_us": base, "outside_range_us": plain,
                     "ratio": plain / base})
    counts = record_run._RUN.selector.counts
    result = {"device": torch.cuda.get_device_name(), "rounds": args.rounds,
              "per_block": args.per_block, "rows": rows, "counts": counts,
              "recorded_launches": len(record_run._RUN.selector.launches)}
    print(f"{'FA4 forward h16 d128 bf16':28s} {'unhooked us':>12s} {'outside range us':>17s} {'ratio':>7s}")
    for r in rows:
        print(f"{r['shape']:28s} {r['unhooked_us']:12.1f} {r['outside_range_us']:17.1f} "
              f"{r['ratio']:7.4f}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
