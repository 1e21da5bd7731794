"""Launch identity on a real GPU: many launches into one buffer, CUDA-graph replays, and the
merge into a torch.profiler trace (records inside their CUPTI kernel slice within 2 us)."""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest

from gpu_required import require_gpu  # noqa: E402

torch = require_gpu("cutlass")

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from examples import torch_loop as L  # noqa: E402

import cute_prof  # noqa: E402
from cute_prof import layout  # noqa: E402
from cute_prof.merge import merge_torch_trace  # noqa: E402

ALIGN_NS = 2_000


def figure(text: str) -> None:
    path = os.environ.get("CUTE_PROF_FIGURES")
    if path:
        with open(path, "a") as fh:
            fh.write(text + "\n")


@pytest.fixture(scope="module")
def step():
    buffer = cute_prof.allocate_profile_buffer(64 * (L.STAGED_RECORDS + L.DIRECT_RECORDS))
    s = L.InstrumentedStep(buffer)
    s()
    torch.cuda.synchronize()
    return s


def decode(step):
    torch.cuda.synchronize()
    return cute_prof.decode_buffer(step.buffer, L.TAGS)


def test_five_launches_accumulate_in_one_buffer(step):
    step.buffer.reset()
    for _ in range(5):
        step.launch_staged()
    trace = decode(step)
    assert trace.attempted == 5 * L.STAGED_RECORDS and trace.overflow == 0 and trace.incomplete == 0
    assert len(trace.launches) == 5
    assert [launch["records"] for launch in trace.launches] == [L.STAGED_RECORDS] * 5
    assert np.array_equal(np.bincount(trace.events["launch"]), [L.STAGED_RECORDS] * 5)
    grids = [launch["grid_id"] for launch in trace.launches]
    assert len(set(grids)) == 5  # %gridid alone tells direct launches apart
    # launches ran one after another: spans do not overlap and are in slot order
    first = [launch["first_ns"] for launch in trace.launches]
    last = [launch["last_ns"] for launch in trace.launches]
    assert all(last[i] <= first[i + 1] for i in range(4))
    figure(f"5 direct launches, one buffer: records per launch {[l['records'] for l in trace.launches]}, "
           f"grid ids {grids}")


def test_next_launch_numbers_epochs_and_overflow_stays_exact(step):
    small = cute_prof.allocate_profile_buffer(3 * L.STAGED_RECORDS + 10)
    other = L.InstrumentedStep.__new__(L.InstrumentedStep)
    other.__dict__.update(step.__dict__)
    other.buffer = small
    other.buf_arg = cute_prof.buffer_arg(small)
    other.max_events = type(step.max_events)(small.max_events)
    for _ in range(5):
        small.next_launch()
        other.launch_staged()
    torch.cuda.synchronize()
    assert small.counter() == 5 * L.STAGED_RECORDS and small.launch_epoch() == 5
    trace = cute_prof.decode_buffer(small, L.TAGS)
    assert trace.overflow == 2 * L.STAGED_RECORDS - 10
    assert [launch["epoch"] for launch in trace.launches] == [1, 2, 3, 4]
    assert [launch["records"] for launch in trace.launches] == [L.STAGED_RECORDS] * 3 + [10]


def test_reset_per_iteration_gives_one_launch_each(step):
    for _ in range(3):
        step.buffer.reset()
        step.launch_direct()
        trace = decode(step)
        assert len(trace.launches) == 1 and len(trace) == L.DIRECT_RECORDS
        assert trace.attempted == L.DIRECT_RECORDS


def test_graph_of_two_kernels_replayed_three_times(step):
    graph = L.capture_graph(step)
    torch.cuda.synchronize()
    step.buffer.reset()
    torch.cuda.synchronize()
    for _ in range(3):
        graph.replay()
    trace = decode(step)
    assert len(trace.launches) == 6
    records = [launch["records"] for launch in trace.launches]
    assert records == [L.STAGED_RECORDS, L.DIRECT_RECORDS] * 3
    epochs = [launch["epoch"] for launch in trace.launches]
    assert epochs == [1, 1, 2, 2, 3, 3]
    grids = [launch["grid_id"] for launch in trace.launches]
    assert grids[0::2] == [grids[0]] * 3 and grids[1::2] == [grids[1]] * 3 and grids[0] != grids[1]
    assert trace.attempted == 3 * (L.STAGED_RECORDS + L.DIRECT_RECORDS)
    figure(f"graph of 2 kernels x 3 replays: {len(trace.launches)} launches, epochs {epochs}, "
           f"grid ids {grids}, records {records}")


def test_graph_without_next_launch_merges_replays(step):
    """Documented limit: without an epoch bump, replays share (epoch, grid id)."""
    graph = L.capture_graph(step, next_launch=False)
    torch.cuda.synchronize()
    step.buffer.reset()
    torch.cuda.synchronize()
    for _ in range(3):
        graph.replay()
    trace = decode(step)
    assert [launch["records"] for launch in trace.launches] == [3 * L.STAGED_RECORDS, 3 * L.DIRECT_RECORDS]


def test_merged_torch_trace_holds_every_launch_inside_its_kernel_slice(tmp_path):
    out = os.environ.get("CUTE_PROF_LAUNCH_OUT") or str(tmp_path)
    from pathlib import Path

    trace, report = L.run(Path(out))
    expected = L.EAGER_STEPS * 2 + L.GRAPH_REPLAYS * 2
    assert len(trace.launches) == expected
    assert report.matched == expected
    first = np.array([launch["first_ns"] for launch in trace.launches]) + report.offset_ns
    assert report.start_margin_ns.min() >= -ALIGN_NS and report.end_margin_ns.min() >= -ALIGN_NS
    merged = json.load(open(Path(out) / "merged_trace.json"))
    ours = [e for e in merged["traceEvents"] if e.get("cat") == "cute_prof"]
    assert len(ours) == len(trace)
    figure(f"torch.profiler merge: {report.describe()}")
    figure(f"  per-launch residual ns: {report.residual_ns.tolist()}")
    figure(f"  start margins ns: {report.start_margin_ns.tolist()}")
    figure(f"  end margins ns: {report.end_margin_ns.tolist()}")
    figure(f"  offset ns: {report.offset_ns}; first record (profiler clock) {first.min()}")


def test_profile_loop_records_every_second_iteration(step):
    with cute_prof.profile_loop(8 * (L.STAGED_RECORDS + L.DIRECT_RECORDS), L.TAGS, every=2) as loop:
        for _ in loop.iterations(6):
            step.run_into(loop.target)
    trace = loop.trace
    assert loop.recorded_iterations == [0, 2, 4]
    assert [l["iteration"] for l in trace.launches] == [0, 0, 2, 2, 4, 4]
    assert [l["records"] for l in trace.launches] == [L.STAGED_RECORDS, L.DIRECT_RECORDS] * 3
    assert trace.attempted == 3 * (L.STAGED_RECORDS + L.DIRECT_RECORDS)
    pooled = loop.stats[loop.stats["launch"] == -1]
    assert int(pooled[pooled["tag"] == 0]["count"][0]) == 3 * L.STAGED_RECORDS
    figure(f"profile_loop every=2 over 6 iterations: launches {len(trace.launches)}, "
           f"iterations {[l['iteration'] for l in trace.launches]}")
