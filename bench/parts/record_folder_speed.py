"""What a ``cute-prof record`` run of 50 M records costs on the host: the save at the program's
end (the pool's claimed words to ``pool.npy``, nothing decoded) and ``cute-prof summary`` of
the folder (its own process: wall time and peak resident memory against the raw file).

    python bench/parts/record_folder_speed.py --records 50000000
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tools.machine import cpu_model  # noqa: E402

from cute_prof import layout as L  # noqa: E402

PER_WARP, WARPS, KERNELS, T0 = 256, 6144, 2, 1_760_000_000_000_000_000


def build_pool(records: int):
    """A torch CPU pool holding ``records`` words: launches of WARPS warps, alternating
    between KERNELS kernels, each warp's slice full of wait regions and signals."""
    import torch

    per_launch = WARPS * PER_WARP
    launches = -(-records // per_launch)
    slices = launches * WARPS
    pool = torch.zeros(L.pool_buffer_words(slices, PER_WARP), dtype=torch.int64)
    words = pool.numpy()
    words[:4] = L.slices_header(slices, PER_WARP, pooled=True)
    words[3] = slices
    body = words[4:L.slices_buffer_words(slices, PER_WARP)].reshape(slices, -1)
    launch = np.arange(slices) // WARPS
    kernel, epoch = launch % KERNELS, launch // KERNELS + 1
    opened = T0 + launch * 1_000_000 + np.arange(slices) % WARPS
    body[:, 0] = opened
    body[:, 1] = (np.arange(slices) % WARPS // 12) | ((np.arange(slices) % 12) << L.WARP_SHIFT) | (
        L.SLICE_OPEN_MAGIC << L.SLICE_MAGIC_SHIFT)
    body[:, 2] = PER_WARP | (L.SLICE_CLOSED_MAGIC << L.SLICE_MAGIC_SHIFT)
    body[:, 3] = (PER_WARP | (kernel << L.SLICE_KERNEL_SHIFT) | (epoch << L.SLICE_EPOCH_SHIFT)
                  | (L.SLICE_OPEN_MAGIC << L.SLICE_MAGIC_SHIFT))
    kinds = np.resize([L.SLICE_KIND_START, L.SLICE_KIND_SPAN, L.SLICE_KIND_INSTANT], PER_WARP)
    high = np.array([L.slice_record_high(i % 3, kind=int(k)) for i, k in enumerate(kinds)], np.int64)
    times = np.arange(1, PER_WARP + 1, dtype=np.int64) * 40
    for first in range(0, slices, 65536):  # in blocks: small temporaries
        rows = slice(first, min(first + 65536, slices))
        low = (opened[rows, None] + times[None, :]) & 0xFFFFFFFF
        body[rows, 4:] = (high[None, :] << 32) | low
    return pool, launches


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=50_000_000)
    ap.add_argument("--folder", default="/tmp/record_folder_speed")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    from cute_prof import record_run

    pool, launches = build_pool(args.records)
    run = record_run.RecordingRun({"out": args.folder, "program": ["synthetic"], "kernels": []})
    run.selector = _selector(pool, launches)
    started = time.perf_counter()
    run.save()
    save_s = time.perf_counter() - started
    raw = Path(args.folder, record_run.POOL_FILE).stat().st_size
    del pool, run
    # the summary in a process of its own, which reports its peak resident set (VmHWM: its
    # own address space's, not the forked parent's that the rusage of a child includes)
    child = ("import contextlib, io, sys; from cute_prof.cli import main\n"
             "with contextlib.redirect_stdout(io.StringIO()):\n"
             f"    status = main(['-q', 'summary', {args.folder!r}])\n"
             "peak = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0]\n"
             "print(int(peak.split()[1]) * 1024); sys.exit(status)\n")
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    summary_s = time.perf_counter() - started
    assert proc.returncode == 0, proc.stderr
    peak = int(proc.stdout.split()[-1])
    result = {"records": launches * WARPS * PER_WARP, "launches": launches, "raw_bytes": raw,
              "save_s": round(save_s, 2), "summary_s": round(summary_s, 2),
              "summary_peak_rss_bytes": peak, "peak_over_raw": round(peak / raw, 3),
              "cpu": cpu_model(), "cores": os.cpu_count(), "python": platform.python_version(),
              "date": datetime.date.today().isoformat()}
    print(json.dumps(result, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


def _selector(pool, launches):
    """What the save reads of a run's selector: its pool, kernels and launch table."""
    from types import SimpleNamespace

    from cute_prof.device.launch_select import RunPool

    sites = [{"tag": i, "name": n, "op": n, "kind": k, "pipeline": 0} for i, (n, k) in
             enumerate((("producer_acquire", "wait"), ("consumer_wait", "wait"),
                        ("consumer_release", "signal")))]
    recordings = [SimpleNamespace(
        pool_kernel=k, name=f"kernel_cutlass_kernel_synthetic{k}",
        tags=SimpleNamespace(names=[s["name"] for s in sites]),
        metadata=lambda k=k: {"kernel": f"synthetic{k}", "sites": sites, "pipelines": [
            {"index": 0, "name": "ring", "cls": "PipelineAsync", "stages": 2,
             "created_at": "-"}]}) for k in range(KERNELS)]
    table = [{"kernel_id": i % KERNELS, "kernel": recordings[i % KERNELS].name,
              "launch": i // KERNELS, "epoch": i // KERNELS + 1, "stream": 0, "host_ns": 0,
              "captured": False} for i in range(launches)]
    return SimpleNamespace(pool=RunPool(pool, per_warp=PER_WARP), pool_allocated=True,
                           recordings=recordings, launches=table, counts={}, unknown={},
                           skipped_kernels=set(), entries=[])


if __name__ == "__main__":
    sys.exit(main())
