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
import os
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
    # keep each build's PTX: the plain build must be the unhooked kernel's, byte for byte
    os.environ.setdefault("CUTE_DSL_KEEP", "ptx")
    os.environ.setdefault("CUTE_DSL_DUMP_DIR", tempfile.mkdtemp(prefix="record-speed-ptx-"))
    import torch
    import flash_attn.cute.interface as fa

    from cute_prof import record_run
    from cute_prof.calibration import time_shuffled

    cache = fa._flash_attn_fwd.compile_cache.cache  # JITCache's own dict
    inputs, unhooked = {}, {}
    for label, batch, seqlen, causal in SHAPES:
        q, k, v = (torch.randn(batch, seqlen, 16, 128, device="cuda", dtype=torch.bfloat16)
                   for _ in range(3))
        before = set(cache)
        fa.flash_attn_func(q, k, v, causal=causal)
        new = set(cache) - before
        # shapes are dynamic: a shape whose kernel is compiled already adds no key
        key = new.pop() if new else next(i[4] for i in inputs.values() if i[3] == causal)
        inputs[label], unhooked[label] = (q, k, v, causal, key), cache[key]
    # the recorder, in this process, with a range no launch reaches: every launch runs plain
    out = Path(tempfile.mkdtemp(prefix="record-speed-"))
    record_run.start({"out": str(out), "kernels": ["flash"], "launch_skip": 10**9,
                      "launch_count": 1, "per_warp": 256, "max_memory": 1 << 28,
                      "barriers": True, "program": ["record_speed.py"]})
    selecting = {}
    for label, (q, k, v, causal, key) in inputs.items():
        if cache[key] is unhooked[label]:
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
        # the same function again: the A/A spread of this measurement
        variants[f"{label} | unhooked again"] = launcher(label, unhooked[label])
        variants[f"{label} | record, outside range"] = launcher(label, selecting[label])
    times = time_shuffled(variants, rounds=args.rounds, per_block=args.per_block)
    rows = []
    for label in inputs:
        base = statistics.median(times[f"{label} | unhooked"]) / 1e3
        again = statistics.median(times[f"{label} | unhooked again"]) / 1e3
        plain = statistics.median(times[f"{label} | record, outside range"]) / 1e3
        entry = selecting[label]._entry
        ptx = _ptx(unhooked[label])
        same = ptx is not None and ptx == _ptx(entry.plain_fn)
        rows.append({"shape": label, "unhooked_us": base, "outside_range_us": plain,
                     "ratio": plain / base, "a_a_ratio": again / base, "same_ptx": same})
    counts = record_run.current_run().selector.counts
    result = {"device": torch.cuda.get_device_name(), "rounds": args.rounds,
              "per_block": args.per_block, "rows": rows, "counts": counts,
              "recorded_launches": len(record_run.current_run().selector.launches)}
    print(f"{'FA4 forward h16 d128 bf16':28s} {'unhooked us':>12s} {'outside range us':>17s} "
          f"{'ratio':>7s} {'A/A ratio':>9s} {'same PTX':>8s}")
    for r in rows:
        print(f"{r['shape']:28s} {r['unhooked_us']:12.1f} {r['outside_range_us']:17.1f} "
              f"{r['ratio']:7.4f} {r['a_a_ratio']:9.4f} {str(r['same_ptx']):>8s}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return result


def _ptx(fn) -> str | None:
    """The PTX a compiled function was built from (CUTE_DSL_KEEP=ptx keeps it)."""
    artifacts = getattr(fn, "artifacts", None)  # read when the function was built
    return getattr(artifacts, "PTX", None)


if __name__ == "__main__":
    main()
