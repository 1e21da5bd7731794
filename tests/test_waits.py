"""Per-role time split, k-tile latency, run-ahead and verdicts on pipelines worked out by hand."""

import numpy as np
import pytest

from cute_prof import ProfileBufferError, layout
from cute_prof.analysis import RoleSpec
from cute_prof.analysis.waits import analyze_waits
from cute_prof.decode import decode_buffer

TAGS = ["issue", "wait_empty", "wait_full", "mma", "mainloop"]
SPEC = RoleSpec.from_dict({
    "tid_stride": 16, "roles": {"producer": [0], "consumer": [1]},
    "tags": {"issue": "work", "wait_empty": "wait", "wait_full": "wait", "mma": "work",
             "mainloop": "phase"},
    "pipeline": {"producer": "producer", "consumer": "consumer", "issue": "issue",
                 "acquire": "wait_full"},
})


def build(regions, ctas=1):
    """regions: (tag, tid_slot, start, end, k) for CTA 0; repeated for every CTA."""
    rows = [(t, cta * 16 + slot, s, e, k) for cta in range(ctas) for t, slot, s, e, k in regions]
    buf = np.zeros(layout.buffer_words(len(rows)), np.int64)
    tag, tid, start, end, k = (np.array(c) for c in zip(*rows))
    layout.write_records(buf, start, end - start, tag=[TAGS.index(x) for x in tag], tid=tid,
                         payload=k)
    return decode_buffer(buf, TAGS)


def consumer_bound():
    # producer: issue 10 ns, then waits 90 ns for a free stage; consumer: waits 10 ns for
    # data, computes 90 ns
    out = []
    for k in range(4):
        out += [("issue", 0, 100 * k, 100 * k + 10, k),
                ("wait_empty", 0, 100 * k + 10, 100 * k + 100, k),
                ("wait_full", 1, 100 * k + 10, 100 * k + 20, k),
                ("mma", 1, 100 * k + 20, 100 * k + 110, k)]
    return out + [("mainloop", 1, 0, 420, 4)]


def producer_bound():
    # producer: issue takes 80 ns, waits 20; consumer: waits 70 ns for data, computes 30
    out = []
    for k in range(4):
        out += [("issue", 0, 100 * k, 100 * k + 80, k),
                ("wait_empty", 0, 100 * k + 80, 100 * k + 100, k),
                ("wait_full", 1, 100 * k + 10, 100 * k + 80, k),
                ("mma", 1, 100 * k + 80, 100 * k + 110, k)]
    return out


def test_consumer_bound_pipeline():
    result = analyze_waits(build(consumer_bound()), SPEC, stall_ns=5)
    producer, consumer = result.roles
    assert (producer["window_ns"], producer["work_ns"], producer["wait_ns"]) == (400, 40, 360)
    # consumer window 0..420 (the mainloop phase widens it): work 360, wait 40, idle 20
    assert (consumer["window_ns"], consumer["work_ns"], consumer["wait_ns"],
            consumer["idle_ns"]) == (420, 360, 40, 20)
    np.testing.assert_array_equal(result.latency_ns, [10, 10, 10, 10])
    np.testing.assert_array_equal(result.run_ahead, [0, 0, 0, 0])
    assert result.stalls == 4 and result.acquires == 4 and result.unmatched_acquires == 0
    assert "bound by the consumers" in result.verdict
    assert result.facts["producer_wait"] == pytest.approx(0.9)


def test_producer_bound_pipeline_gets_the_opposite_verdict():
    result = analyze_waits(build(producer_bound(), ctas=3), SPEC)
    producer, consumer = result.roles
    assert producer["tracks"] == 3 and consumer["tracks"] == 3
    assert producer["wait_ns"] == 3 * 80 and consumer["wait_ns"] == 3 * 280
    np.testing.assert_array_equal(result.latency_ns, np.zeros(12))
    assert result.stalls == 12  # 70 ns waits > the default 64 ns
    assert "bound by the producer" in result.verdict
    assert result.share("consumer", "wait") == pytest.approx(0.7)


def test_run_ahead_counts_issues_before_the_acquire():
    # the producer issues k-tiles 0..3 at once (ends 10, 20, 30, 40); the consumer acquires
    # k at 45 + 100k: by then all 4 are issued, so it is 3, 2, 1, 0 ahead
    regions = [("issue", 0, 10 * k, 10 * k + 10, k) for k in range(4)]
    regions += [("wait_full", 1, 40 + 100 * k, 45 + 100 * k, k) for k in range(4)]
    result = analyze_waits(build(regions), SPEC)
    np.testing.assert_array_equal(result.run_ahead, [3, 2, 1, 0])
    np.testing.assert_array_equal(result.latency_ns, [35, 125, 215, 305])


def test_acquire_without_issue_is_counted_not_guessed():
    regions = [("issue", 0, 0, 10, 0), ("wait_full", 1, 5, 20, 0), ("wait_full", 1, 30, 40, 1)]
    result = analyze_waits(build(regions), SPEC)
    assert result.acquires == 2 and result.unmatched_acquires == 1
    np.testing.assert_array_equal(result.latency_ns, [10])


def test_tail_per_sm_and_per_cta():
    trace = build(consumer_bound(), ctas=2)
    trace.events["sm"] = (trace.events["tid"] // 16).astype(np.int16)
    # CTA 1 (on SM 1) ends 50 ns early: shift its records
    late = trace.events["tid"] >= 16
    trace.events["start_ns"][late] -= 50
    result = analyze_waits(trace, SPEC)
    assert sorted(result.sm_tail_ns.tolist()) == [0, 50]
    assert sorted(result.group_tail_ns.tolist()) == [0, 50]


def test_pipeline_tags_must_exist():
    spec = RoleSpec.from_dict({**SPEC.to_dict(), "pipeline": {"issue": "nope", "acquire": "mma"}})
    with pytest.raises(ProfileBufferError, match="nope"):
        analyze_waits(build(consumer_bound()), spec)


def test_bad_pipeline_spec():
    with pytest.raises(ProfileBufferError, match="not a role"):
        RoleSpec.from_dict({"roles": {"a": [0]}, "pipeline": {"producer": "b"}})
    with pytest.raises(ProfileBufferError, match="both"):
        RoleSpec.from_dict({"roles": {"a": [0]}, "pipeline": {"issue": "x"}})


def test_cli_analyze_and_diff_on_the_committed_gemm_trace():
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).parent.parent
    trace = root / "examples" / "traces" / "ws_gemm_256x1024x4096_h200.json.gz"
    spec = root / "examples" / "ws_gemm_roles.json"
    run = lambda *a: subprocess.run([sys.executable, "-m", "cute_prof.cli", "-q", *map(str, a)],
                                    capture_output=True, text=True, timeout=120)
    out = run("analyze", trace, "--roles", spec, "--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    roles = {r["role"]: r for r in result["roles"]}
    assert roles["producer"]["tracks"] == 8 and roles["consumer"]["tracks"] == 64
    assert roles["producer"]["wait_ns"] / roles["producer"]["window_ns"] > 0.8
    assert result["acquires"] == 64 * 64  # 64 consumer warps x 64 k-tiles
    assert "bound by the consumers" in result["verdict"]
    text = run("analyze", trace, "--roles", spec)
    assert text.stdout == (root / "examples" / "traces"
                           / "ws_gemm_256x1024x4096_h200.analysis.txt").read_text()
    same = run("diff", trace, trace, "--json", "--roles", spec)
    assert same.returncode == 0, same.stderr
    assert not any(row["flagged"] for row in json.loads(same.stdout)["tags"])
    bad = run("analyze", trace, "--roles", root / "README.md")
    assert bad.returncode == 2 and bad.stderr.startswith("cute-prof: error")


def test_flows_connect_exactly_the_matching_k_tiles():
    from cute_prof.analysis.flows import pipeline_flows

    trace = build(consumer_bound(), ctas=2)
    flows = pipeline_flows(trace, SPEC)
    ev = trace.events
    assert flows.shape[0] == 8  # 4 k-tiles x 2 CTAs, one consumer each
    src, dst = ev[flows["src"]], ev[flows["dst"]]
    assert (ev["tag"][flows["src"]] == TAGS.index("issue")).all()
    assert (ev["tag"][flows["dst"]] == TAGS.index("wait_full")).all()
    np.testing.assert_array_equal(src["payload"], dst["payload"])
    np.testing.assert_array_equal(src["tid"] // 16, dst["tid"] // 16)
    assert sorted(zip((dst["tid"] // 16).tolist(), dst["payload"].tolist())) == [
        (c, k) for c in range(2) for k in range(4)]


def test_cli_export_with_roles_and_flows(tmp_path):
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).parent.parent
    trace = root / "examples" / "traces" / "ws_gemm_256x1024x4096_h200.json.gz"
    spec = root / "examples" / "ws_gemm_roles.json"
    out = tmp_path / "flows.json"
    done = subprocess.run([sys.executable, "-m", "cute_prof.cli", "-q", "export", str(trace),
                           "--roles", str(spec), "--flows", "--ctas", "0", "-o", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    events = json.loads(out.read_text())["traceEvents"]
    names = {e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    assert names == {"producer cta 0 slot 0"} | {f"consumer cta 0 slot {s}" for s in range(1, 9)}
    # CTA 0: 8 consumer warps x 64 k-tiles acquire, each fed by the producer's issue
    assert sum(e.get("ph") == "s" for e in events) == sum(e.get("ph") == "f" for e in events) == 512
