"""The work between a zero-edit trace's pipeline calls, derived as regions (a consumer's wait's
end to its release of that item, a producer's acquire's end to its commit), where they
appear (Perfetto, the picture, the report) and how they are marked; the verdict per ring; and
the statistics listing instants apart from regions."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import cute_prof
from cute_prof.analysis.summary import summarize
from cute_prof.analysis.waits import bound_kind
from cute_prof.analysis.zero_edit_work import (DERIVED_TAGS_KEY, derived_tag_ids, is_derived_tag,
    ring_headline, ring_verdicts, ring_waits, with_work_regions, work_regions)
from cute_prof.export import export_trace
from cute_prof.export.pftrace_reader import read_pftrace_slices
from cute_prof.export.picture import stack_tops
from cute_prof.report import write_report
from test_derived_pipeline import CONSUMER_WARPS, _raw_trace, software_pipelined

ROOT = Path(__file__).resolve().parents[1]
FA4 = ROOT / "examples" / "traces" / "fa4_fwd_causal_h100.json.gz"
GEMM = ROOT / "examples" / "traces" / "ws_gemm_256x1024x4096_h200.json.gz"


@pytest.fixture(scope="module")
def fa4():
    return cute_prof.load_trace(FA4)


def regions_by_name(trace):
    regions, names = work_regions(trace)
    return {name: regions[regions["tag"] == i] for i, name in enumerate(names)}


def calls(trace, name):
    ev = trace.events
    return ev[ev["tag"] == trace.tag_names.index(name)]


def test_synthetic_one_region_per_release_from_the_wait_end_to_the_release():
    trace = software_pipelined(ctas=2, blocks=5)
    found = regions_by_name(trace)
    assert sorted(found) == ["pk.consumer_work (derived)", "pk.producer_work (derived)",
                             "pv.consumer_work (derived)", "pv.producer_work (derived)"]
    for ring in ("pk", "pv"):
        for side, opens, closes in (("consumer", "consumer_wait", "consumer_release"),
                                    ("producer", "producer_acquire", "producer_commit")):
            got = found[f"{ring}.{side}_work (derived)"]
            waits, signals = calls(trace, f"{ring}.{opens}"), calls(trace, f"{ring}.{closes}")
            assert got.shape[0] == signals.shape[0]  # one region per released / committed item
            # the k-th wait of a warp pairs with its k-th release (payload: the ordinal)
            wait_end = {(int(w["tid"]), int(w["payload"])): int(w["start_ns"] + w["dur_ns"])
                        for w in waits}
            signal_at = {(int(s["tid"]), int(s["payload"])): int(s["start_ns"]) for s in signals}
            for r in got:
                key = (int(r["tid"]), int(r["payload"]))
                assert r["start_ns"] == wait_end[key]
                assert r["start_ns"] + r["dur_ns"] == signal_at[key]
    consumers = found["pk.consumer_work (derived)"]
    assert set((consumers["tid"] % 12).tolist()) == set(CONSUMER_WARPS)
    assert set((found["pk.producer_work (derived)"]["tid"] % 12).tolist()) == {0}
    # pq: waited for, never released: nothing
    assert not any(name.startswith("pq.") for name in found)


def test_pairs_follow_each_warps_order_when_items_overlap_and_skip_a_broken_pair():
    # one consumer warp that waits for item k + 1 before it releases item k (a release one
    # iteration behind), and one whose release of item 1 was stamped before its wait ended
    rows = [(0, 4, 4, 0, 100, 10), (0, 4, 4, 0, 200, 10), (0, 4, 6, 0, 250, 0),
            (0, 4, 4, 0, 300, 10), (0, 4, 6, 0, 350, 0), (0, 4, 6, 0, 450, 0),
            (0, 5, 4, 0, 100, 10), (0, 5, 6, 0, 150, 0), (0, 5, 4, 0, 200, 50),
            (0, 5, 6, 0, 220, 0), (0, 0, 0, 0, 50, 5)]  # warp 0 acquires, never commits
    trace = cute_prof.analysis.zero_edit.finish_zero_edit_trace(_raw_trace(rows))
    regions, names = work_regions(trace)
    assert names == ["pk.consumer_work (derived)"]
    got = sorted((int(r["tid"]) % 6, int(r["payload"]), int(r["start_ns"]),
                  int(r["start_ns"] + r["dur_ns"])) for r in regions)
    assert got == [(4, 0, 110, 250), (4, 1, 210, 350), (4, 2, 310, 450), (5, 0, 110, 150)]


def test_with_work_regions_appends_marks_and_is_idempotent():
    trace = software_pipelined()
    shown = with_work_regions(trace)
    n = trace.events.shape[0]
    assert np.array_equal(shown.events[:n], trace.events)  # recorded rows keep their rows
    derived = derived_tag_ids(shown)
    assert np.isin(shown.events["tag"][n:], derived).all()
    assert shown.metadata[DERIVED_TAGS_KEY] == [shown.tag_names[t] for t in derived]
    assert all(is_derived_tag(shown.tag_names[t]) for t in derived)
    assert with_work_regions(shown) is shown
    # read back from a file that kept no metadata: the names still say so
    bare = dataclasses.replace(shown, metadata={k: v for k, v in shown.metadata.items()
                                                if k != DERIVED_TAGS_KEY})
    assert with_work_regions(bare) is bare
    plain = cute_prof.load_trace(GEMM)
    assert with_work_regions(plain) is plain


def test_fa4_one_region_per_release_between_its_wait_and_its_release(fa4):
    found = regions_by_name(fa4)
    for ring in ("pipeline_k", "pipeline_v", "pipeline_q"):
        got = found[f"{ring}.consumer_work (derived)"]
        waits = calls(fa4, f"{ring}.consumer_wait")
        releases = calls(fa4, f"{ring}.consumer_release")
        assert got.shape[0] == releases.shape[0]
        # one call site per ring: the payload (the call's ordinal) is the item's number
        def keyed(rows, at):
            return set(zip(rows["tid"].tolist(), rows["payload"].tolist(), at.tolist()))

        assert keyed(got, got["start_ns"]) <= keyed(waits, waits["start_ns"] + waits["dur_ns"])
        assert keyed(got, got["start_ns"] + got["dur_ns"]) == keyed(releases,
                                                                    releases["start_ns"])
    for ring in ("pipeline_k", "pipeline_v"):
        got = found[f"{ring}.producer_work (derived)"]
        assert got.shape[0] == calls(fa4, f"{ring}.producer_commit").shape[0] == 264
    # the sync warps (slots 1-3) made no pipeline call: no region
    every = np.concatenate(list(found.values()))
    assert not np.isin(every["tid"] % 12, [1, 2, 3]).any()


def test_fa4_verdict_per_ring(fa4):
    rows = {row["ring"]: row for row in ring_waits(fa4)}
    assert rows["pipeline_k"]["producers"] == ["producer wg0"]
    assert rows["pipeline_k"]["consumers"] == ["consumer wg1", "consumer wg2"]
    assert rows["pipeline_k"]["producer_wait"] == pytest.approx(0.384, abs=0.001)
    assert rows["pipeline_k"]["consumer_wait"] == pytest.approx(0.0174, abs=0.001)
    assert [rows[r]["bound_by"] for r in ("pipeline_k", "pipeline_v", "pipeline_q")] == \
        ["consumers", "consumers", "balanced"]
    assert ring_headline(list(rows.values())) == \
        "pipeline_k, pipeline_v: bound by the consumers; pipeline_q: balanced"
    said = ring_verdicts(list(rows.values()))
    assert said[0].startswith("pipeline_k (2 stages; filled by producer wg0, drained by "
                              "consumer wg1, consumer wg2): consumer tracks wait 2% of their "
                              "time for full stages while the producer waits 38% for empty "
                              "ones: the ring is bound by the consumers")


def test_a_ring_is_judged_on_its_share_of_a_side_that_waits_on_several():
    # 38% on one of three rings is most of what the producer can wait on that ring
    assert bound_kind(0.38, 0.02, (3, 3)) == "consumers"
    assert bound_kind(0.38, 0.02) == "balanced"  # the pipeline's own thresholds
    assert bound_kind(0.02, 0.4) == "producer"


def test_perfetto_shows_derived_regions_marked_by_default(fa4, tmp_path):
    shown, plain = tmp_path / "shown.pftrace", tmp_path / "plain.pftrace"
    export_trace(fa4, shown)
    export_trace(fa4, plain, derived=False)
    names = set(read_pftrace_slices(shown)["name"].tolist())
    assert "pipeline_k.consumer_work (derived)" in names
    assert not any(is_derived_tag(n) for n in read_pftrace_slices(plain)["name"].tolist())
    # the CLI's switch
    out = tmp_path / "cli.pftrace"
    done = subprocess.run([sys.executable, "-m", "cute_prof.cli", "-q", "export", str(FA4), "-o",
                           str(out), "--no-derived"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert not any(is_derived_tag(n) for n in read_pftrace_slices(out)["name"].tolist())


def test_other_traces_export_and_draw_as_before(tmp_path):
    gemm = cute_prof.load_trace(GEMM)
    for suffix in ("pftrace", "json", "png"):
        a, b = tmp_path / f"a.{suffix}", tmp_path / f"b.{suffix}"
        export_trace(gemm, a)
        export_trace(gemm, b, derived=False)
        assert a.read_bytes() == b.read_bytes(), suffix


def test_picture_marks_derived_regions(fa4, tmp_path):
    from matplotlib.image import imread

    small = dataclasses.replace(fa4, events=fa4.events[fa4.events["tid"] // 12 == 124])
    with_regions, without = tmp_path / "a.png", tmp_path / "b.png"
    cute_prof.plot_timeline(small, with_regions)
    cute_prof.plot_timeline(small, without, derived=False)
    a, b = imread(with_regions), imread(without)
    assert a.shape == b.shape
    # the consumers' rows are no longer blank between their waits: fewer white pixels
    assert (a[..., :3] > 0.99).all(-1).sum() < 0.9 * (b[..., :3] > 0.99).all(-1).sum()


def test_stack_tops_is_the_stack_walk():
    rng = np.random.default_rng(1)
    for _ in range(50):
        n = int(rng.integers(1, 12))
        ops = [(0, s) for s in range(n)] + [(1, s) for s in range(n)]
        order = rng.permutation(2 * n)
        # every end after its begin: take begins and ends in a random valid order
        opened, seq = set(), []
        pending = [op for op in (ops[i] for i in order)]
        while pending:
            for i, (kind, span) in enumerate(pending):
                if kind == 0 or span in opened:
                    seq.append((1 if kind == 0 else 2, span))
                    opened.add(span)
                    pending.pop(i)
                    break
        expected, stack = [], []
        for kind, span in seq:
            stack.append(span) if kind == 1 else stack.remove(span)
            expected.append(stack[-1] if stack else -1)
        kinds = np.array([k for k, _ in seq], np.int64)
        spans = np.array([s for _, s in seq], np.int64)
        assert stack_tops(kinds, spans).tolist() == expected


def test_report_of_a_zero_edit_trace_has_the_verdict_and_the_derived_work(fa4, tmp_path):
    out = write_report(fa4, tmp_path / "fa4.html")
    text = out.read_text()
    for said in ("Who waited on what", "pipeline_k, pipeline_v: bound by the consumers",
                 "the ring is bound by the consumers", "Derived regions",
                 "pipeline_v.consumer_work (derived)", "Instants (signals", "<td>consumer wg1</td>"):
        assert said in text, said
    # commits and releases are instants, not regions of count 0
    regions_table = text.split("Derived regions")[0]
    assert "pipeline_k.consumer_release" not in regions_table
    plain = write_report(fa4, tmp_path / "plain.html", derived=False).read_text()
    assert "(derived)" not in plain and "bound by the consumers" in plain
    gemm = write_report(cute_prof.load_trace(GEMM), tmp_path / "gemm.html").read_text()
    assert "Who waited on what" not in gemm and "(derived)" not in gemm


def test_summary_lists_instants_apart_from_regions(fa4):
    text = summarize(fa4).format_table()
    regions, instants = text.split("Instants per tag")
    assert "pipeline_k.producer_commit" not in regions
    assert "pipeline_k.producer_commit     264" in instants
    assert "pipeline_k.consumer_release  2,112" in instants
