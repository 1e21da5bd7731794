"""Issue times on a ring's recurrence scale with the load as a load's latency does (issue
#27): under the base's load the SM issues a ring's copies and its next async job later than
a starved ring does (ws_gemm 4 -> 2: the copies' commit 50 ns after the acquire in the base,
38 in the 2-stage variant; a release 160 ns after its wait in the base's unwaited releases,
117 in the variant). The replay keeps each such time's least loaded part (the base's
``UNQUEUED_QUANTILE``) and keeps each unit's busy share of the rest (``replay(load_share=)``:
how much of its consumers' time stays work in the change against the base, ``what_if``'s
fixed point)."""

import numpy as np
import pytest

from cute_prof.analysis.pipeline_data import match_records
from cute_prof.analysis.replay import replay
from cute_prof.analysis.replay_terms import UNQUEUED_QUANTILE
from cute_prof.analysis.what_if import what_if
from cute_prof.analysis.model import load_pipeline
from tests.test_pipeline_model import make_trace, spec_dict

LATENCY, WAKE, CONSUME = 500, 200, 1000


def ring_with_issue_gaps(gaps):
    """Depth 1, every item waits for the one before (the consumer's 1000 ns work, the
    producer's wake, the load): the producer's commit stamp ``gaps[k]`` ns after its acquire
    ends, on the ring's recurrence."""
    w_e, p, w_f, c = [(0, 0)], [], [], []
    for gap in gaps:
        acquired = w_e[-1][1]
        p.append((acquired + gap, acquired + gap + 36))
        data_at = p[-1][0] + LATENCY
        wait_from = c[-1][1] if c else 500
        w_f.append((wait_from, max(wait_from, data_at)))
        c.append((w_f[-1][1], w_f[-1][1] + CONSUME))
        w_e.append((p[-1][1], c[-1][1] + WAKE))
    return {"w_e": w_e[:len(gaps)], "p": p, "w_f": w_f, "c": c}


GAPS = [32, 96, 32, 96, 32, 96, 32, 96]


def test_at_the_base_load_the_replay_is_the_measured_schedule():
    data = match_records(make_trace([(0, ring_with_issue_gaps(GAPS))]),
                         load_pipeline(spec_dict(1)))
    np.testing.assert_allclose(replay(data, load_share=np.ones(1)).end, data.end)


@pytest.mark.parametrize("ratio", [1.5, 2.0, 4.0])
def test_each_issue_time_keeps_its_unqueued_part_and_scales_the_rest(ratio):
    # a busy share of 1 / ratio: the consumers work that much less of their time
    data = match_records(make_trace([(0, ring_with_issue_gaps(GAPS))]),
                         load_pipeline(spec_dict(1)))
    unqueued = np.quantile(GAPS, UNQUEUED_QUANTILE)
    assert unqueued == 32
    sched = replay(data, load_share=np.full(1, 1.0 / ratio))
    # each consumes wait now waits for the commit stamp the scaled gap puts there: every
    # item's step on the recurrence shrinks by what its gap lost, the 32 ns ones by nothing
    steps = np.diff(sched.end[0, :, 2])
    scaled = [unqueued + (g - unqueued) / ratio for g in GAPS[1:]]
    assert steps.tolist() == pytest.approx([CONSUME + WAKE + s + LATENCY for s in scaled])
    assert steps.min() == CONSUME + WAKE + 32 + LATENCY


def test_what_if_scales_the_issue_times_by_the_consumers_busy_share():
    # two bases of the same length: every commit 64 ns after its acquire, or 32 and 96 in
    # turn (a queued part above 32). Faster consumer work leaves the consumer waiting for a
    # larger share of its time: the spread base's 96 ns issues shrink by its busy share, the
    # even base has nothing queued. Slower consumer work keeps it busier: the SM stays as
    # loaded, and no issue time shrinks (a throughput ratio alone would have shrunk them).
    def predict(gaps, **change):
        data = match_records(make_trace([(0, ring_with_issue_gaps(gaps))]),
                             load_pipeline(spec_dict(1)))
        got = what_if(data, **change)
        return got["kernel_ns"], got["predicted_kernel_ns"]
    even, spread = [64] * 8, [32, 96] * 4
    assert predict(even)[0] == predict(spread)[0]
    for gaps in (even, spread):  # no change: the base itself
        measured, predicted = predict(gaps)
        assert predicted == pytest.approx(measured)
    _, faster_even = predict(even, scale={"c": 0.5})
    _, faster_spread = predict(spread, scale={"c": 0.5})
    # the items after the first whose commits came 96 ns after the acquire (3 on the
    # recurrence) each lose part of their 64 ns queued time, none all of it
    assert 0 < faster_even - faster_spread < 3 * 64
    _, busier_even = predict(even, scale={"c": 1.5})
    _, busier_spread = predict(spread, scale={"c": 1.5})
    assert busier_even == pytest.approx(busier_spread)
