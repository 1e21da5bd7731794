"""Saved buffers (.npz / .pt) and JSON traces read back exactly; bad files fail clearly."""

from __future__ import annotations

import json
import os
import pickle
from collections import Counter

import numpy as np
import pytest
import torch

from cute_prof import allocate_profile_buffer, layout
from cute_prof.decode import decode_buffer
from cute_prof.errors import ProfileBufferError
from cute_prof.export.chrome_json import events_to_perfetto
from cute_prof.storage import (
    FORMAT_NAME,
    load_buffer,
    load_trace,
    save_buffer,
    save_trace,
    trace_to_buffer,
)
from cute_prof.tags import TagTable

NAMES = ["load", "mma", "store", "tile"]
BASE = 1_700_000_000_000_000_000


def filled_buffer(*, capacity=16, extra=0):
    """A host buffer with spans, an instant, a negative payload; ``extra`` attempts past
    what is written (overflow when they exceed capacity)."""
    buf = np.zeros(layout.buffer_words(capacity), dtype=np.int64)
    layout.write_records(buf, BASE + np.array([0, 10, 40, 45]), [100, 20, 30, 0], [0, 1, 2, 3],
                         [0, 0, 1, 1], payload=[0, 7, -2, 5], sm=[3, 3, 4, 4], warp=[0, 1, 0, 2])
    layout.write_records(buf, BASE + 60, 0, 3, 2, kind=layout.KIND_INSTANT, payload=9)
    buf[0] += extra
    return buf


def same_events(a, b):
    fields = [f for f in a.events.dtype.names if f != "slot"]
    rows = lambda t: Counter(tuple(r[f].item() for f in fields) for r in t.events)  # noqa: E731
    return rows(a) == rows(b)


@pytest.mark.parametrize("suffix", [".npz", ".pt"])
def test_round_trip_buffer(tmp_path, suffix):
    buf = filled_buffer()
    meta = {"device": "NVIDIA H100", "clock_hz": 1.755e9, "grid": [132, 1, 1],
            "step": np.int64(3)}
    path = save_buffer(tmp_path / f"b{suffix}", buf, TagTable(NAMES), metadata=meta)
    words, table, metadata = load_buffer(path)
    assert words.dtype == np.int64 and np.array_equal(words, buf)
    assert isinstance(table, TagTable) and table.names == tuple(NAMES)
    assert metadata == {"device": "NVIDIA H100", "clock_hz": 1.755e9, "grid": [132, 1, 1],
                        "step": 3}
    trace = load_trace(path)
    assert same_events(trace, decode_buffer(buf, NAMES))
    assert trace.metadata["device"] == "NVIDIA H100"
    assert trace.metadata["source_file"] == str(path)


def test_accepts_tensors_profile_buffers_and_name_lists(tmp_path):
    buf = filled_buffer()
    save_buffer(tmp_path / "t.pt", torch.from_numpy(buf), NAMES)
    assert np.array_equal(load_buffer(tmp_path / "t.pt")[0], buf)
    prof = allocate_profile_buffer(16, device="cpu")
    prof.tensor.copy_(torch.from_numpy(buf))
    save_buffer(tmp_path / "p.npz", prof, TagTable.auto(NAMES))
    words, table, metadata = load_buffer(tmp_path / "p.npz")
    assert np.array_equal(words, buf) and metadata["device"] == "cpu"
    assert table.names == tuple(NAMES)


def test_compressed_npz_is_smaller_and_equal(tmp_path):
    buf = np.zeros(layout.buffer_words(50_000), dtype=np.int64)
    buf[: filled_buffer().shape[0]] = filled_buffer()
    plain = save_buffer(tmp_path / "plain.npz", buf, NAMES)
    packed = save_buffer(tmp_path / "packed.npz", buf, NAMES, compress=True)
    assert packed.stat().st_size < plain.stat().st_size / 10
    assert np.array_equal(load_buffer(packed)[0], buf)


@pytest.mark.parametrize("suffix", [".npz", ".pt"])
def test_save_trace_round_trips_losses_and_clock_spans(tmp_path, suffix):
    buf = filled_buffer(capacity=12, extra=20)  # 5 written, 25 attempted, 12 slots
    # clock mode: two calibration pairs on SM 3 and one clock span (1,000 cycles at 1 GHz)
    sync_word = layout.encode_tag_words(0, kind=layout.KIND_CLOCK_SYNC)
    records = buf[1:].reshape(-1, 4)
    records[5] = [BASE, 5_000, sync_word, layout.encode_tid_words(0, sm=3)]
    records[6] = [BASE + 10_000, 15_000, sync_word, layout.encode_tid_words(0, sm=3)]
    records[7] = [BASE + 3_000, 1_000, layout.encode_tag_words(1, kind=layout.KIND_CLOCK_SPAN),
                  layout.encode_tid_words(5, sm=3)]
    original = decode_buffer(buf, NAMES)
    assert original.overflow == 13 and original.incomplete == 4
    assert (original.events["kind"] == layout.KIND_CLOCK_SPAN).sum() == 1
    loaded = load_trace(save_trace(tmp_path / f"t{suffix}", original))
    assert same_events(loaded, original)
    assert np.array_equal(loaded.events["slot"], original.events["slot"])
    for field in ("capacity", "attempted", "overflow", "incomplete"):
        assert getattr(loaded, field) == getattr(original, field)
    assert loaded.tag_names == original.tag_names
    assert np.array_equal(trace_to_buffer(original), buf)


def test_json_trace_reads_back(tmp_path):
    original = decode_buffer(filled_buffer(capacity=8, extra=4), NAMES,
                             metadata={"device": "NVIDIA H100", "kernel": "gemm"})
    path = events_to_perfetto(original, tmp_path / "t.json", group_by="sm")
    loaded = load_trace(path)
    assert same_events(loaded, original)
    assert (loaded.capacity, loaded.attempted, loaded.overflow, loaded.incomplete) == (
        original.capacity, original.attempted, original.overflow, original.incomplete)
    assert loaded.tag_names == tuple(NAMES)
    assert loaded.metadata["device"] == "NVIDIA H100"
    assert loaded.metadata["kernel"] == "gemm"


def test_json_unknown_tags_keep_their_ids(tmp_path):
    buf = np.zeros(layout.buffer_words(4), dtype=np.int64)
    layout.write_records(buf, BASE + np.arange(3), 5, [0, 9, 1], 0)
    original = decode_buffer(buf, ["a", "b"])
    loaded = load_trace(events_to_perfetto(original, tmp_path / "u.json"))
    assert sorted(loaded.events["tag"].tolist()) == [0, 1, 9]
    assert loaded.tag_name(9) == "<unknown tag 9>"


# ------------------------------------------------------------------ bad input


def write_good(tmp_path, suffix=".npz"):
    return save_buffer(tmp_path / f"good{suffix}", filled_buffer(), NAMES)


@pytest.mark.parametrize("suffix", [".npz", ".pt"])
def test_truncated_files(tmp_path, suffix):
    good = write_good(tmp_path, suffix)
    data = good.read_bytes()
    for cut in (10, len(data) // 2, len(data) - 30):
        bad = tmp_path / f"cut{cut}{suffix}"
        bad.write_bytes(data[:cut])
        with pytest.raises(ProfileBufferError, match="not a cute_prof buffer file"):
            load_buffer(bad)


@pytest.mark.parametrize("suffix", [".npz", ".pt"])
def test_random_bytes(tmp_path, suffix):
    bad = tmp_path / f"random{suffix}"
    bad.write_bytes(np.random.default_rng(0).bytes(4096))
    with pytest.raises(ProfileBufferError, match="not a cute_prof buffer file"):
        load_trace(bad)


def test_foreign_npz_and_pt(tmp_path):
    np.savez(tmp_path / "other.npz", weights=np.ones(3))
    with pytest.raises(ProfileBufferError, match="missing entries"):
        load_buffer(tmp_path / "other.npz")
    np.savez(tmp_path / "marker.npz", format=np.array('{"format": "x", "version": 1}'),
             buffer=np.zeros(5, np.int64), tag_names=np.array("[]"), metadata=np.array("{}"))
    with pytest.raises(ProfileBufferError, match="format marker"):
        load_buffer(tmp_path / "marker.npz")
    torch.save(torch.zeros(5, dtype=torch.int64), tmp_path / "tensor.pt")
    with pytest.raises(ProfileBufferError, match="not a dict"):
        load_buffer(tmp_path / "tensor.pt")
    torch.save({"format": FORMAT_NAME, "version": 1, "buffer": torch.zeros(5),
                "tag_names": "[]", "metadata": "{}"}, tmp_path / "float.pt")
    with pytest.raises(ProfileBufferError, match="int64"):
        load_buffer(tmp_path / "float.pt")


def test_newer_version_asks_for_upgrade(tmp_path):
    np.savez(tmp_path / "new.npz", format=np.array(json.dumps({"format": FORMAT_NAME,
                                                                "version": 99})),
             buffer=np.zeros(5, np.int64), tag_names=np.array("[]"), metadata=np.array("{}"))
    with pytest.raises(ProfileBufferError, match="upgrade"):
        load_buffer(tmp_path / "new.npz")


class _Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
def test_pt_with_code_is_refused_not_run(tmp_path):
    path = tmp_path / "evil.pt"
    with open(path, "wb") as handle:
        pickle.dump({"format": FORMAT_NAME, "x": _Evil()}, handle)
    with pytest.raises(ProfileBufferError, match="not a cute_prof buffer file"):
        load_buffer(path)


def test_bad_json(tmp_path):
    (tmp_path / "garbage.json").write_text("{not json")
    with pytest.raises(ProfileBufferError, match="not a JSON trace"):
        load_trace(tmp_path / "garbage.json")
    (tmp_path / "chrome.json").write_text(json.dumps({"traceEvents": [{"ph": "X"}]}))
    with pytest.raises(ProfileBufferError, match="not a cute_prof JSON trace"):
        load_trace(tmp_path / "chrome.json")
    (tmp_path / "edited.json").write_text(json.dumps(
        {"otherData": {"producer": "cute_prof"}, "traceEvents": [{"ph": "X", "name": "a"}]}))
    with pytest.raises(ProfileBufferError, match="lacks the cute_prof fields"):
        load_trace(tmp_path / "edited.json")


def test_paths_and_arguments(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_buffer(tmp_path / "missing.npz")
    with pytest.raises(ProfileBufferError, match="unknown buffer file type"):
        save_buffer(tmp_path / "b.h5", filled_buffer(), NAMES)
    with pytest.raises(ProfileBufferError, match="does not exist"):
        save_buffer(tmp_path / "no" / "b.npz", filled_buffer(), NAMES)
    with pytest.raises(ProfileBufferError, match="int64"):
        save_buffer(tmp_path / "b.npz", filled_buffer().astype(np.float64), NAMES)
    with pytest.raises(ProfileBufferError, match="list of names"):
        save_buffer(tmp_path / "b.npz", filled_buffer(), "load")
    assert os.listdir(tmp_path) == []


def test_failed_save_keeps_the_old_file(tmp_path, monkeypatch):
    good = write_good(tmp_path)
    before = good.read_bytes()

    def explode(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(np, "savez", explode)
    with pytest.raises(RuntimeError):
        save_buffer(good, filled_buffer(capacity=4), NAMES)
    assert good.read_bytes() == before
    assert os.listdir(tmp_path) == ["good.npz"]
