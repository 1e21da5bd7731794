"""profile_session on the CPU: decode on exit, loss warnings, export switches, failures."""

from __future__ import annotations

import json
import sys
import warnings

import numpy as np
import pytest

import cute_prof
from cute_prof import (
    ProfileBuffer,
    ProfileBufferError,
    ProfileWarning,
    TagTable,
    default_tag_table,
    export_enabled,
    layout,
    profile_session,
    set_export_enabled,
    set_export_trace_off,
    set_export_trace_on,
)
from cute_prof.session import EXPORT_ENV_VAR


def record(prof: ProfileBuffer, count: int, tag: int = 0, start: int = 1000) -> None:
    """Write ``count`` records into the session's buffer as a kernel would."""
    layout.write_records(prof.tensor.numpy(), start + 10 * np.arange(count), 5, tag=tag, tid=1)


def test_session_yields_buffer_and_exposes_decoded_trace(tmp_path):
    path = tmp_path / "trace.json"
    with profile_session(8, ["load", "mma"], path, device="cpu") as prof:
        assert isinstance(prof, ProfileBuffer) and prof.max_events == 8
        assert prof.tensor.data_ptr() % 16 == 8
        record(prof, 3, tag=1)
    assert prof.overflow == 0
    assert len(prof.trace) == 3 and [e.name for e in prof.events] == ["mma"] * 3
    assert prof.trace.metadata["trace_path"] == str(path)
    doc = json.loads(path.read_text())
    assert len([e for e in doc["traceEvents"] if e["ph"] == "X"]) == 3


def test_overflow_warns_with_exact_dropped_count(tmp_path):
    with pytest.warns(ProfileWarning, match=r"overflow: 13 of 17 records were dropped \(capacity 4\)"):
        with profile_session(4, ["a"], tmp_path / "t.json", device="cpu") as prof:
            record(prof, 17)
    assert prof.overflow == 13 and len(prof.events) == 4
    assert json.loads((tmp_path / "t.json").read_text())["otherData"]["overflow"] == 13


def test_incomplete_slots_warn(tmp_path):
    with pytest.warns(ProfileWarning, match="1 of 3 claimed slots"):
        with profile_session(4, ["a"], device="cpu") as prof:
            record(prof, 2)
            prof.tensor[0] = 3  # a third slot claimed, never written
    assert prof.trace.incomplete == 1


def test_no_warning_without_losses():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with profile_session(4, ["a"], device="cpu") as prof:
            record(prof, 4)
    assert len(prof.events) == 4


def test_exception_in_body_still_decodes_writes_and_propagates(tmp_path):
    path = tmp_path / "crash.json"
    with pytest.raises(KeyError, match="boom"):
        with profile_session(8, ["a"], path, device="cpu") as prof:
            record(prof, 2)
            raise KeyError("boom")
    assert len(prof.events) == 2
    assert len([e for e in json.loads(path.read_text())["traceEvents"] if e["ph"] == "X"]) == 2


def test_decode_failure_after_body_failure_does_not_mask_it(tmp_path):
    with pytest.warns(ProfileWarning, match="could not decode"):
        with pytest.raises(RuntimeError, match="kernel failed"):
            with profile_session(4, ["a"], tmp_path / "t.json", device="cpu") as prof:
                prof.tensor[0] = -5  # garbage counter: decoding will fail
                raise RuntimeError("kernel failed")
    assert not (tmp_path / "t.json").exists()


def test_decode_failure_without_body_failure_raises(tmp_path):
    with pytest.raises(ProfileBufferError, match="counter"):
        with profile_session(4, ["a"], tmp_path / "t.json", device="cpu") as prof:
            prof.tensor[0] = -5


def test_export_false_per_call_skips_writing_but_still_decodes(tmp_path):
    path = tmp_path / "t.json"
    with profile_session(4, ["a"], path, device="cpu", export=False) as prof:
        record(prof, 1)
    assert not path.exists() and len(prof.events) == 1


def test_global_switch_functions(tmp_path):
    path = tmp_path / "t.json"
    set_export_trace_off()
    assert not export_enabled()
    with profile_session(4, ["a"], path, device="cpu") as prof:
        record(prof, 1)
    assert not path.exists() and len(prof.events) == 1
    with profile_session(4, ["a"], path, device="cpu", export=True):
        pass
    assert path.exists(), "an explicit export=True overrides the global switch"
    path.unlink()
    set_export_trace_on()
    with profile_session(4, ["a"], path, device="cpu"):
        pass
    assert path.exists()
    set_export_enabled(False)
    assert cute_prof.export_enabled() is False


@pytest.mark.parametrize("value,expected", [("0", False), ("off", False), ("False", False),
                                            ("1", True), ("yes", True)])
def test_environment_variable_switch(tmp_path, monkeypatch, value, expected):
    monkeypatch.setenv(EXPORT_ENV_VAR, value)
    assert export_enabled() is expected
    with profile_session(4, ["a"], tmp_path / "t.json", device="cpu"):
        pass
    assert (tmp_path / "t.json").exists() is expected
    set_export_enabled(not expected)
    assert export_enabled() is (not expected), "the function switch beats the environment"


def test_no_trace_path_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with profile_session(4, ["a"], device="cpu") as prof:
        record(prof, 1)
    assert list(tmp_path.iterdir()) == [] and len(prof.events) == 1


def test_tag_names_accepts_table_list_or_default():
    table = TagTable(["x", "y"])
    with profile_session(2, table, device="cpu") as prof:
        record(prof, 1, tag=1)
    assert prof.events[0].name == "y"
    tag = default_tag_table().id("test_session::auto")
    with profile_session(2, device="cpu") as prof:
        record(prof, 1, tag=tag)
    assert prof.events[0].name == "test_session::auto"


def test_bad_paths_fail_before_the_kernel_runs(tmp_path):
    ran = []
    with pytest.raises(ProfileBufferError, match="does not exist"):
        with profile_session(4, ["a"], tmp_path / "missing" / "t.json", device="cpu"):
            ran.append(True)
    with pytest.raises(ProfileBufferError, match="suffix"):
        with profile_session(4, ["a"], tmp_path / "t.txt", device="cpu"):
            ran.append(True)
    with pytest.raises(ProfileBufferError, match="group_by"):
        with profile_session(4, ["a"], device="cpu", group_by="nope"):
            ran.append(True)
    assert ran == []


def test_pftrace_suffix_writes_a_native_perfetto_trace(tmp_path):
    from cute_prof.export.pftrace_reader import read_pftrace_slices

    with profile_session(4, ["a"], tmp_path / "t.pftrace", device="cpu") as prof:
        record(prof, 2)
    slices = read_pftrace_slices(tmp_path / "t.pftrace")
    assert len(slices) == 2 and set(slices["name"]) == {"a"}


def test_summary_prints_analysis_summary(tmp_path, capsys):
    with profile_session(4, ["only_tag"], device="cpu", summary=True) as prof:
        record(prof, 3)
    out = capsys.readouterr().out
    assert "only_tag" in out and "attempted 3" in out


def test_import_needs_no_gpu_and_no_cutlass():
    import subprocess

    code = (
        "import sys, cute_prof\n"
        "assert 'cutlass' not in sys.modules, 'cutlass imported eagerly'\n"
        "assert 'torch' not in sys.modules, 'torch imported eagerly'\n"
        "assert callable(cute_prof.decode_buffer) and callable(cute_prof.profile_session)\n"
        "assert 'profile_region' in dir(cute_prof)\n"
        "print('ok')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_unknown_attribute_raises_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'not_a_thing'"):
        cute_prof.not_a_thing  # noqa: B018
