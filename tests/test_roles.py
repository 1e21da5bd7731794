import numpy as np
import pytest

from cute_prof import ProfileBufferError, layout
from cute_prof.analysis import RoleSpec, apply_roles, load_role_spec
from cute_prof.decode import decode_buffer

SPEC = {"tid_stride": 16, "roles": {"producer": [0], "consumer": [1, 2]},
        "tags": {"wait_full": "wait", "mainloop": "phase"}}


def make_trace():
    buf = np.zeros(layout.buffer_words(8), np.int64)
    # CTA 0: producer tid 0, consumer tid 1; CTA 2: consumer tid 34; tid 5 has no role
    layout.write_records(buf, [10, 20, 30, 40], 5, tag=[0, 1, 2, 1], tid=[0, 1, 34, 5])
    return decode_buffer(buf, ["mainloop", "wait_full", "mma"])


def test_roles_by_slot_name_tracks_and_tag_kinds():
    spec = load_role_spec(SPEC)
    assert spec.role_of(np.array([0, 1, 34, 5, 16])).tolist() == [0, 1, 1, -1, 0]
    trace = apply_roles(make_trace(), spec)
    assert trace.track_name(0) == "producer cta 0 slot 0"
    assert trace.track_name(34) == "consumer cta 2 slot 2"
    assert trace.track_name(5) == "tid cta 0 slot 5"
    assert trace.track_name(99) == "tid 99"  # never recorded: default name
    assert spec.tag_kinds(trace).tolist() == [2, 1, 0]  # phase, wait, work (unnamed)
    assert trace.metadata["roles"]["roles"]["producer"] == [0]


def test_spec_round_trips_through_json(tmp_path):
    path = tmp_path / "spec.json"
    path.write_text(__import__("json").dumps(SPEC))
    assert load_role_spec(path) == RoleSpec.from_dict(load_role_spec(path).to_dict())


@pytest.mark.parametrize("bad, message", [
    ({"roles": {"a": [0], "b": [0]}}, "both"),
    ({"tid_stride": 4, "roles": {"a": [4]}}, "outside"),
    ({"roles": {"a": [0]}, "tags": {"x": "sleep"}}, "kind must be"),
    ({"roles": {"a": [0]}, "colour": 1}, "unknown role-spec keys"),
    ({"tid_stride": 0, "roles": {"a": [0]}}, "positive"),
])
def test_bad_specs_say_what_is_wrong(bad, message):
    with pytest.raises(ProfileBufferError, match=message):
        load_role_spec(bad)


def test_spec_naming_tags_the_trace_lacks_is_an_error():
    spec = load_role_spec({"roles": {"a": [0]}, "tags": {"nope": "wait"}})
    with pytest.raises(ProfileBufferError, match="nope"):
        spec.tag_kinds(make_trace())
