"""Profile buffer allocation: size, zeroing, 16-byte record alignment, validation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from cute_prof import ProfileBufferError, allocate_profile_buffer, decode_buffer, layout
from cute_prof.buffer import MAX_EVENTS_LIMIT, RECORD_ALIGNMENT


@pytest.mark.parametrize("max_events", [1, 2, 3, 7, 64, 1000, 4097])
def test_cpu_buffer_shape_dtype_zeroed(max_events):
    prof = allocate_profile_buffer(max_events, device="cpu")
    assert prof.max_events == max_events
    assert prof.tensor.dtype == torch.int64
    assert prof.tensor.dim() == 1
    assert prof.tensor.numel() == layout.buffer_words(max_events)
    assert not prof.tensor.any()
    assert prof.device == torch.device("cpu")


@pytest.mark.parametrize("max_events", range(1, 40))
def test_every_record_is_16_byte_aligned(max_events):
    prof = allocate_profile_buffer(max_events, device="cpu")
    base = prof.tensor.data_ptr()
    assert base % RECORD_ALIGNMENT == 8
    record_bytes = base + 8 + layout.RECORD_BYTES * np.arange(max_events)
    assert (record_bytes % 16 == 0).all()
    assert prof.data_ptr_alignment_ok


def test_alignment_holds_whichever_way_the_allocator_lands(monkeypatch):
    """Force the allocator result to be 8 mod 16 and check the view starts at element 0."""
    real_zeros = torch.zeros

    def misaligned_zeros(*args, **kwargs):
        storage = real_zeros(args[0] + 1, **kwargs)  # 16-aligned; element 1 is 8 mod 16
        return storage[1:] if storage.data_ptr() % 16 == 0 else storage

    monkeypatch.setattr(torch, "zeros", misaligned_zeros)
    prof = allocate_profile_buffer(5, device="cpu")
    assert prof.tensor.data_ptr() % 16 == 8
    assert prof.tensor.numel() == layout.buffer_words(5)


@pytest.mark.parametrize("bad", [0, -1, True, 2.5, "10", None, MAX_EVENTS_LIMIT + 1])
def test_bad_max_events_raise(bad):
    with pytest.raises(ProfileBufferError):
        allocate_profile_buffer(bad, device="cpu")


def test_numpy_integer_max_events_is_accepted():
    assert allocate_profile_buffer(np.int64(3), device="cpu").max_events == 3


def test_cuda_without_gpu_raises_actionable_error():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(ProfileBufferError, match="device='cpu'"):
        allocate_profile_buffer(8)


def test_stream_with_cpu_device_is_rejected():
    with pytest.raises(ProfileBufferError, match="stream"):
        allocate_profile_buffer(8, device="cpu", stream=object())


def test_invalid_device_string_is_rejected():
    with pytest.raises(ProfileBufferError):
        allocate_profile_buffer(8, device="not-a-device")


def test_reset_zeroes_counter_and_slots_and_forgets_trace():
    prof = allocate_profile_buffer(4, device="cpu")
    layout.write_records(prof.tensor.numpy(), [1, 2, 3], 5, tag=0, tid=0)
    prof.remember(decode_buffer(prof, ["a"]))
    assert prof.counter() == 3
    prof.reset()
    assert prof.counter() == 0
    assert not prof.tensor.any()
    assert prof.trace is None


def test_numpy_is_an_independent_host_copy():
    prof = allocate_profile_buffer(2, device="cpu")
    host = prof.numpy()
    host[0] = 99
    assert prof.counter() == 0
    assert host.dtype == np.int64 and host.shape == (layout.buffer_words(2),)


def test_results_before_decode_raise_then_work_after():
    prof = allocate_profile_buffer(4, device="cpu")
    with pytest.raises(ProfileBufferError, match="not been decoded"):
        _ = prof.events
    with pytest.raises(ProfileBufferError):
        _ = prof.overflow
    layout.write_records(prof.tensor.numpy(), [10, 20, 30, 40, 50, 60], 1, tag=1, tid=3)
    trace = decode_buffer(prof, ["a", "b"])
    prof.remember(trace)
    assert prof.trace is trace
    assert prof.overflow == 2
    assert [e.name for e in prof.events] == ["b"] * 4


def test_dlpack_shares_memory_with_the_tensor():
    prof = allocate_profile_buffer(2, device="cpu")
    view = torch.from_dlpack(prof)
    view[0] = 5
    assert prof.counter() == 5


def test_repr_mentions_size_device_and_counter():
    prof = allocate_profile_buffer(3, device="cpu")
    text = repr(prof)
    assert "max_events=3" in text and "cpu" in text and "counter=0" in text
