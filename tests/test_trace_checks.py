from trace_checks import json_nesting_violations


def test_nesting_check_accepts_nested_and_rejects_crossing_slices():
    nested = [{"ph": "X", "pid": 0, "tid": 1, "ts": 0, "dur": 10},
              {"ph": "X", "pid": 0, "tid": 1, "ts": 2, "dur": 3},
              {"ph": "X", "pid": 0, "tid": 1, "ts": 10, "dur": 1}]
    assert json_nesting_violations({"traceEvents": nested}) == []
    crossing = nested + [{"ph": "X", "pid": 0, "tid": 1, "ts": 8, "dur": 4}]
    assert len(json_nesting_violations({"traceEvents": crossing})) == 1
    other_track = nested + [{"ph": "X", "pid": 0, "tid": 2, "ts": 8, "dur": 4}]
    assert json_nesting_violations(other_track) == []
