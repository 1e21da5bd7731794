"""cute_prof.views.select: every option keeps exactly the records it names."""

from __future__ import annotations

import numpy as np
import pytest

from cute_prof import layout
from cute_prof.errors import ProfileBufferError
from cute_prof.trace import EVENT_DTYPE, Trace
from cute_prof.views import select

S, I = layout.KIND_SPAN, layout.KIND_INSTANT
# (start, dur, tag, tid, kind, sm, warp, launch); tid = cta * 4 + slot
ROWS = [
    (100, 50, 0, 0, S, 1, 0, 0),   # cta 0
    (120, 10, 1, 1, S, 1, 1, 0),   # cta 0
    (200, 0, 2, 4, I, 2, 0, 1),    # cta 1, instant
    (300, 100, 0, 8, S, 3, 0, 1),  # cta 2
    (450, 20, 1, 13, S, 3, 1, 1),  # cta 3
]


def trace() -> Trace:
    ev = np.zeros(len(ROWS), EVENT_DTYPE)
    for i, (start, dur, tag, tid, kind, sm, warp, launch) in enumerate(ROWS):
        ev[i] = (start, dur, tag, tid, 0, kind, sm, warp, -1, i, launch)
    return Trace(ev, ("load", "mma", "done"), 5, 5, 0, 0,
                 metadata={"roles": {"tid_stride": 4}}, launches=[{}, {}])


def starts(view: Trace) -> list[int]:
    return view.events["start_ns"].tolist()


@pytest.mark.parametrize("options, expected", [
    ({"ctas": [0, 2]}, [100, 120, 300]),
    ({"ctas": 3}, [450]),
    ({"sms": [3]}, [300, 450]),
    ({"warps": 1}, [120, 450]),
    ({"tags": ["load"]}, [100, 300]),
    ({"tags": [1, "done"]}, [120, 200, 450]),
    ({"launch": 1}, [200, 300, 450]),
    ({"every_nth_cta": 2}, [100, 120, 300]),
    # relative to the first record (at 100): [0, 50) overlaps [40, 110) -> kept; [20, 30)
    # ends before 40 -> dropped; the instant at 100 is inside; [200, 300) starts after
    ({"time_window": (40, 110)}, [100, 200]),
    ({"sms": [1, 3], "warps": [0]}, [100, 300]),
])
def test_each_option_keeps_exactly_its_records(options, expected):
    view = select(trace(), **options)
    assert starts(view) == expected
    assert view.metadata["view"]
    assert view.capacity == 5 and view.metadata["roles"] == {"tid_stride": 4}


def test_no_option_keeps_everything_and_bad_input_is_clear():
    assert starts(select(trace())) == [100, 120, 200, 300, 450]
    plain = trace()
    plain.metadata = {}
    with pytest.raises(ProfileBufferError, match="tid_stride"):
        select(plain, ctas=[0])
    with pytest.raises(ProfileBufferError, match="unknown tag"):
        select(trace(), tags=["nope"])
    with pytest.raises(ProfileBufferError, match="every_nth_cta"):
        select(trace(), every_nth_cta=0)


def test_export_warns_past_the_ui_size_and_names_the_view_options(tmp_path, monkeypatch):
    import cute_prof.export as export

    monkeypatch.setattr(export, "UI_COMFORTABLE_RECORDS", 4)
    with pytest.warns(UserWarning, match="every_nth_cta="):
        export.export_trace(trace(), tmp_path / "t.json")
    monkeypatch.setattr(export, "UI_COMFORTABLE_RECORDS", 5)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        export.export_trace(trace(), tmp_path / "u.json")
