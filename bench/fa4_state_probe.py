"""Which state makes FA4's recording kernel slow: CUPTI times of its plain and recording kernel
after different predecessors, one process.

FA4 b4 s4096's recording kernel ran 848-856 us in its traced launches (``prof.reset()``, then
ten launches of its own, the eleventh kept: ``tools.cupti.traced_launches``) but 935-970 us
in shuffled rounds and in back-to-back blocks (gpu22, gpu24), against 810-830 us plain. This
times every launch of an 11-launch block under each condition, conditions shuffled per round:

- ``plain`` / ``recorded``: 11 launches back to back, nothing before them;
- ``recorded_after_reset``: ``prof.reset()`` (zero the recording buffer) first;
- ``recorded_after_memset`` / ``plain_after_memset``: zero an unrelated tensor of the buffer's size first;
- ``recorded_after_plain``: ten plain launches, then one recording launch (and the reverse);
- ``recorded_after_idle`` / ``plain_after_idle``: the GPU idle for ``--idle`` seconds first (the
  traced launches followed seconds of compiling or decoding).

``--clocks FILE``: an ``nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv
-lms 20`` log of the same time; each condition's median SM clock and power while it ran.

    python bench/fa4_state_probe.py --rounds 6      # writes fa4_state.json to $OUT
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

from tools.cupti import device_kernels  # noqa: E402

import cute_prof  # noqa: E402

BLOCK = 11


def condition_clocks(path: Path, order: list, spans: list) -> dict:
    """Median SM clock and power of the nvidia-smi samples inside each condition's blocks."""
    import datetime

    samples = []
    for line in path.read_text().splitlines()[1:]:
        parts = [p.strip() for p in line.split(",")]
        try:
            when = datetime.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").replace(
                tzinfo=datetime.timezone.utc).timestamp()
            samples.append((when, float(parts[1].split()[0]), float(parts[2].split()[0])))
        except (ValueError, IndexError):
            continue
    found = {}
    for name, (begin, end) in zip(order, spans):
        found.setdefault(name, []).extend(s[1:] for s in samples if begin <= s[0] <= end)
    return {name: (statistics.median(c for c, _ in got), statistics.median(w for _, w in got))
            for name, got in found.items() if got}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="4,4096,16,128", help="batch,seqlen,heads,dim")
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--idle", type=float, default=2.0)
    ap.add_argument("--clocks", type=Path)
    args = ap.parse_args(argv)
    import torch
    from flash_attn.cute import interface as fa
    from torch.profiler import ProfilerActivity, profile

    from examples.flash_attention import inputs

    q, k, v = inputs(*(int(x) for x in args.shape.split(",")))
    plain_cache = {}
    fa._flash_attn_fwd.compile_cache = plain_cache
    fa._flash_attn_fwd(q, k, v, causal=args.causal)
    with cute_prof.autoprofile(caches=[(fa._flash_attn_fwd, "compile_cache")]) as prof:
        fa._flash_attn_fwd(q, k, v, causal=args.causal)
    torch.cuda.synchronize()
    buffer_bytes = sum(r.buffer.numel() * r.buffer.element_size() for r in prof.recordings)
    scratch = torch.empty(buffer_bytes // 8, dtype=torch.int64, device="cuda")

    def launch(cache):
        fa._flash_attn_fwd.compile_cache = cache
        fa._flash_attn_fwd(q, k, v, causal=args.causal)

    plain = lambda: launch(plain_cache)  # noqa: E731
    recorded = lambda: launch(prof.caches[0])  # noqa: E731
    conditions = {  # name -> (what runs first, untimed apart from its kernels, the timed launch)
        "plain": (None, plain),
        "recorded": (None, recorded),
        "recorded_after_reset": (prof.reset, recorded),
        "recorded_after_memset": (scratch.zero_, recorded),
        "plain_after_memset": (scratch.zero_, plain),
        "recorded_after_idle": ("idle", recorded),
        "plain_after_idle": ("idle", plain),
        "recorded_after_plain": ("swap", recorded),
        "plain_after_recorded": ("swap", plain),
    }
    kinds = {"recorded_after_plain": plain, "plain_after_recorded": recorded}
    for fn in (plain, recorded, plain, recorded):
        fn()
    torch.cuda.synchronize()
    names, order, spans = list(conditions), [], []
    with profile(activities=[ProfilerActivity.CUDA]) as timed:
        for _ in range(args.rounds):
            random.shuffle(names)
            for name in names:
                before, fn = conditions[name]
                if before == "idle":
                    time.sleep(args.idle)
                begin = time.time()
                if before == "swap":  # ten of the other kernel, then the one timed
                    for _ in range(BLOCK - 1):
                        kinds[name]()
                    fn()
                else:
                    if callable(before):
                        before()
                    for _ in range(BLOCK):
                        fn()
                torch.cuda.synchronize()
                order.append(name)
                spans.append((begin, time.time()))
    kernels = device_kernels(timed)
    if len(kernels) != BLOCK * len(order):
        raise RuntimeError(f"CUPTI saw {len(kernels)} kernels, expected {BLOCK * len(order)}")
    launches = {name: [] for name in conditions}
    for i, name in enumerate(order):
        launches[name].append([e.time_range.elapsed_us() for e in kernels[i * BLOCK:(i + 1) * BLOCK]])
    out_dir = Path(os.environ.get("OUT", "fa4_state_out"))
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "fa4_state.json").write_text(json.dumps({
        "device": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": "python bench/fa4_state_probe.py " + " ".join(argv or sys.argv[1:]),
        "shape": args.shape, "causal": args.causal, "buffer_bytes": buffer_bytes,
        "launches_us": launches, "wall_spans": spans, "order": order}, indent=1))
    clocks = condition_clocks(args.clocks, order, spans) if args.clocks else {}
    print(f"recording buffer {buffer_bytes / 2**20:.0f} MiB; CUPTI us, median over {args.rounds} rounds")
    print(f"{'condition':<24} {'launch 1':>9} {'launch 2':>9} {'launch 6':>9} {'launch 11':>9}"
          + ("   SM MHz  power W" if clocks else ""))
    for name, blocks in launches.items():
        cols = [statistics.median(b[i] for b in blocks) for i in (0, 1, 5, BLOCK - 1)]
        extra = "  {:>7.0f}  {:>7.0f}".format(*clocks[name]) if name in clocks else ""
        print(f"{name:<24} " + " ".join(f"{c:>9.1f}" for c in cols) + extra)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
