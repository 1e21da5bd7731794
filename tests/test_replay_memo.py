"""A what-if replays one PipelineData many times: what the replay derives from the measured
arrays alone is kept on the data (pipeline_data.memoized). A replay of data replayed before,
under another spec, scale or record time, must equal the replay of fresh data."""

from __future__ import annotations

import numpy as np

from cute_prof.analysis.pipeline_data import match_records
from cute_prof.analysis.replay import replay
from cute_prof.analysis.what_if import what_if
from cute_prof.analysis.derived_pipeline import derive_pipeline
from tests.test_derived_model_terms import gemm_like

FIELDS = ("start", "end", "dep_time", "dep_peer", "blocked")


def _same(got, want):
    for name in FIELDS:
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=name)


def test_replays_of_one_data_equal_those_of_fresh_data():
    derived = derive_pipeline(gemm_like(ctas=4, cluster=[2, 1]))
    spec = derived.spec
    data = match_records(derived.trace, spec)
    work = next(r.tag for r in spec.regions if r.kind == "work")
    deeper = spec.with_changes(depth={r.name: r.depth + 1 for r in spec.resources},
                                shared_by={r.name: 1 for r in spec.resources})
    runs = [dict(record_ns=32.0), dict(scale={work: 0.5}, record_ns=32.0),
            dict(spec=deeper), dict(record_ns=0.0), dict(record_ns=32.0)]
    for kwargs in runs:
        fresh = match_records(derived.trace, spec)
        _same(replay(data, **kwargs), replay(fresh, **kwargs))
    np.testing.assert_array_equal(data.start, match_records(derived.trace, spec).start)


def test_what_if_hands_back_the_replays_it_compared():
    derived = derive_pipeline(gemm_like(ctas=4, cluster=[2, 1]))
    spec = derived.spec
    data = match_records(derived.trace, spec)
    ring = spec.resources[0]
    change = {"depth": {ring.name: ring.depth + 1}, "shared_by": {ring.name: 1}}
    result = what_if(data, schedules=True, **change)
    # the fixture's CTAs follow one another on one SM: the change, which ends the first
    # sooner, starts the later ones sooner (dispatch_shift)
    assert (result["changed_unit_shift"][1:] < 0).all()
    for which, changed_spec in (("base", spec), ("changed", spec.with_changes(**change))):
        _same(result[f"{which}_schedule"], replay(
            match_records(derived.trace, spec), changed_spec,
            unit_shift=result[f"{which}_unit_shift"]))
    assert "base_schedule" not in what_if(data, **change)
