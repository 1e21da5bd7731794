"""cute_prof.distributed on CPU: the merge of synthetic per-rank buffers (known offsets, tag
tables that differ), the clock fit, errors naming the rank, and the real gather over
torch.distributed's gloo backend with 2 processes."""

from __future__ import annotations

import socket
import warnings

import numpy as np
import pytest

from cute_prof import layout
from cute_prof.distributed import (
    DistributedTraceError, fit_clock_offset, gather_trace, merge_rank_payloads, rank_payload,
)
from cute_prof.errors import ProfileWarning

BASE = 1_800_000_000_000_000_000


def buffer(starts, tags, tids, *, capacity=16, dur=100):
    words = np.zeros(layout.buffer_words(capacity), dtype=np.int64)
    layout.write_records(words, np.asarray(starts) + BASE, dur, np.asarray(tags), np.asarray(tids))
    return words


def clock(offset, uncertainty=10.0):
    return {"offset_ns": float(offset), "uncertainty_ns": float(uncertainty)}


def test_known_offsets_align_onto_rank_0():
    # the same instant (host time T) is BASE+1000 on GPU 0, BASE+1000+5000 on GPU 1 (offset
    # 5000 more), BASE+1000-300 on GPU 2
    payloads = [
        rank_payload(buffer([1000], [0], [3]), ["work"], rank=0, clock=clock(200)),
        rank_payload(buffer([6000], [0], [3]), ["work"], rank=1, clock=clock(5200)),
        rank_payload(buffer([700], [0], [3]), ["work"], rank=2, clock=clock(-100)),
    ]
    trace = merge_rank_payloads(payloads)
    assert trace.events["start_ns"].tolist() == [BASE + 1000] * 3
    ranks = trace.metadata["distributed"]["ranks"]
    assert [r["shift_ns"] for r in ranks] == [0, 5000, -300]
    assert [r["alignment_uncertainty_ns"] for r in ranks] == [0.0, 20.0, 20.0]
    stride = trace.metadata["distributed"]["tid_stride"]
    assert stride == 4 and sorted(trace.events["tid"].tolist()) == [3, 7, 11]
    assert [l["rank"] for l in trace.launches] == [0, 1, 2]
    assert sorted(trace.events["launch"].tolist()) == [0, 1, 2]
    assert trace.track_name(7).startswith("rank 1 ") and trace.track_name(7).endswith("tid 3")
    unaligned = merge_rank_payloads(payloads, align=False)
    assert sorted(unaligned.events["start_ns"].tolist()) == [BASE + 700, BASE + 1000, BASE + 6000]


def test_tag_tables_merge_by_name():
    payloads = [
        rank_payload(buffer([10, 20], [0, 1], [0, 0]), ["load", "mma"], rank=0, clock=clock(0)),
        rank_payload(buffer([30, 40], [0, 1], [0, 0]), ["mma", "epilogue"], rank=1,
                     clock=clock(0)),
    ]
    trace = merge_rank_payloads(payloads)
    assert trace.tag_names == ("load", "mma", "epilogue")
    names = [trace.tag_names[t] for t in trace.events["tag"].tolist()]
    assert names == ["load", "mma", "mma", "epilogue"]


def test_empty_and_overflowing_ranks_are_reported_not_fatal():
    full = buffer(np.arange(5) * 10, [0] * 5, [0] * 5, capacity=3)  # 5 attempted, 3 fit
    payloads = [
        rank_payload(full, ["a"], rank=0, clock=clock(0)),
        rank_payload(buffer([], [], [], capacity=4), ["a"], rank=1, clock=clock(0)),
    ]
    assert payloads[0]["words"].shape[0] == layout.buffer_words(3)  # only claimed slots travel
    assert payloads[1]["words"].shape[0] == layout.buffer_words(1)
    with pytest.warns(ProfileWarning, match="rank 0 overflow, rank 1 empty"):
        trace = merge_rank_payloads(payloads)
    ranks = trace.metadata["distributed"]["ranks"]
    assert [r["status"] for r in ranks] == ["overflow", "empty"]
    assert ranks[0]["overflow"] == 2 and ranks[0]["capacity"] == 3 and len(trace.events) == 3
    assert ranks[1]["capacity"] == 4 and trace.overflow == 2


def test_missing_or_corrupted_rank_is_named():
    good = rank_payload(buffer([1], [0], [0]), ["a"], rank=0, clock=clock(0))
    with pytest.raises(DistributedTraceError, match="rank 1: no contribution"):
        merge_rank_payloads([good, None])
    with pytest.raises(DistributedTraceError, match="rank 1: no contribution"):
        merge_rank_payloads([good], world_size=2)
    broken = rank_payload(buffer([1], [0], [0]), ["a"], rank=1, clock=clock(0))
    broken["words"] = broken["words"][:-2]  # cut inside a record
    with pytest.raises(DistributedTraceError, match="rank 1: its buffer cannot be decoded"):
        merge_rank_payloads([good, broken])
    with pytest.raises(DistributedTraceError, match="rank 1: .*not a cute_prof rank payload"):
        merge_rank_payloads([good, {"something": "else"}])
    swapped = rank_payload(buffer([1], [0], [0]), ["a"], rank=0, clock=clock(0))
    with pytest.raises(DistributedTraceError, match="rank 1: the payload in its place says"):
        merge_rank_payloads([good, swapped])


def test_rank_without_clock_stays_unaligned_with_a_warning():
    payloads = [rank_payload(buffer([1], [0], [0]), ["a"], rank=0, clock=clock(0)),
                rank_payload(buffer([1], [0], [0]), ["a"], rank=1)]
    with pytest.warns(ProfileWarning, match="left unaligned"):
        trace = merge_rank_payloads(payloads)
    assert trace.metadata["distributed"]["aligned"] is False


def test_clock_fit():
    rng = np.random.default_rng(1)
    before = np.arange(40, dtype=np.int64) * 1_000_000 + 10**18
    trip = rng.integers(10_000, 20_000, size=40)
    trip[::5] = 300_000  # slow pairs the fit must drop
    # GPU read in the middle of the round trip, GPU clock = host + 123_456 + 20 ppm drift
    gpu = before + trip // 2 + 123_456 + ((before - before[0]) * 20e-6).astype(np.int64)
    fit = fit_clock_offset(before, gpu, before + trip, keep=0.5)
    expected_offset = 123_456 + (fit["reference_host_ns"] - before[0]) * 20e-6
    assert abs(fit["offset_ns"] - expected_offset) < 5
    assert abs(fit["drift_ppm"] - 20) < 0.5 and fit["residual_ns"] < 5
    assert fit["pairs"] == 20 and 5_000 <= fit["uncertainty_ns"] <= 10_005
    with pytest.raises(Exception, match="earlier"):
        fit_clock_offset([10], [5], [0])


def _gloo_worker(rank, port, queue):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2)
    names = ["setup", "work"] if rank == 0 else ["work", "other", "setup"]
    words = buffer([1000 + 5000 * rank, 2000 + 5000 * rank], [0, 1], [rank, rank])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trace = gather_trace(words, names, clock=clock(5000 * rank), gpu=f"cpu{rank}")
    if rank == 0:
        queue.put((trace.tag_names, trace.events["start_ns"].tolist(),
                   [trace.tag_names[t] for t in trace.events["tag"].tolist()],
                   [r["gpu"] for r in trace.metadata["distributed"]["ranks"]]))
    else:
        queue.put(trace)
    dist.destroy_process_group()


def test_gather_over_gloo_two_processes():
    torch = pytest.importorskip("torch")
    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_gloo_worker, args=(r, port, queue)) for r in range(2)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    merged = next(r for r in results if r is not None)
    assert [r for r in results if r is None] == [None]
    tag_names, starts, names, gpus = merged
    assert tag_names == ("setup", "work", "other")
    assert starts == [BASE + 1000, BASE + 1000, BASE + 2000, BASE + 2000]
    assert sorted(names[:2]) == ["setup", "work"] and sorted(names[2:]) == ["other", "work"]
    assert gpus == ["cpu0", "cpu1"]


def test_chrome_json_one_process_per_rank(tmp_path):
    import json

    from cute_prof.export.chrome_json import events_to_perfetto

    payloads = [rank_payload(buffer([10, 20], [0, 0], [0, 1]), ["a"], rank=r, clock=clock(0),
                             gpu=f"{r} (H200)") for r in range(3)]
    trace = merge_rank_payloads(payloads)
    out = json.loads(events_to_perfetto(trace, tmp_path / "r.json", group_by="rank").read_text())
    names = {e["pid"]: e["args"]["name"] for e in out["traceEvents"]
             if e.get("name") == "process_name"}
    assert len(names) == 3 and all(f"rank {r} " in names[r + 1] for r in range(3))
    assert all(names[r + 1].endswith(f"GPU {r} (H200)") for r in range(3))
    spans = [e for e in out["traceEvents"] if e.get("ph") == "X"]
    assert sorted(e["pid"] for e in spans) == [1, 1, 2, 2, 3, 3]
