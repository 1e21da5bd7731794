"""Allocation of the profile buffer the device ops write into.

The buffer is a 1-D ``torch.int64`` tensor of ``layout.buffer_words(max_events)`` words,
zeroed (a zero counter and all-zero slots, so unwritten slots read back as incomplete).

Alignment: the device writes each 32-byte record with two 16-byte vector stores when the
record is 16-byte aligned. Records start at byte ``8 + 32*i``, so they are aligned exactly
when the tensor's data pointer is 8 mod 16. Allocators return 16-byte (or better) aligned
memory, so we allocate one spare word and view the buffer from element 1; should an
allocator ever return a pointer that is 8 mod 16 we view from element 0 instead. Either way
``tensor.data_ptr() % 16 == 8`` holds, which is checked here and relied on by the ops.

torch is imported lazily so that ``import cute_prof`` and decoding a saved numpy buffer
stay cheap.

Owns the format-1 buffer's allocation and launch epoch (stage 1: it imports only ``layout`` and
``errors``); decoding is :mod:`cute_prof.decode`'s, and it may not import the device ops.
"""

from __future__ import annotations

import operator
import sys
from typing import Any

import numpy as np

from . import layout
from .errors import ProfileBufferError

__all__ = [
    "ProfileBuffer",
    "allocate_profile_buffer",
    "host_words",
    "source_metadata",
    "MAX_EVENTS_LIMIT",
    "RECORD_ALIGNMENT",
]

RECORD_ALIGNMENT = 16
# The device indexes the buffer with 32-bit word offsets; keep 1 + 4 * max_events below 2**31.
# (That is 16 GiB of records: any request above it is a mistake, not a real profile.)
MAX_EVENTS_LIMIT = ((1 << 31) - 1 - layout.HEADER_WORDS) // layout.WORDS_PER_RECORD


def _torch():
    import torch

    return torch


def _check_max_events(max_events) -> int:
    if isinstance(max_events, bool):
        raise ProfileBufferError("max_events must be an integer count of records, not a bool")
    try:
        count = operator.index(max_events)
    except TypeError:
        raise ProfileBufferError(
            f"max_events must be an integer, got {type(max_events).__name__} {max_events!r}"
        ) from None
    if count <= 0:
        raise ProfileBufferError(
            f"max_events must be positive, got {count}; size it to the number of records the "
            "kernel writes (regions x recording threads)"
        )
    if count > MAX_EVENTS_LIMIT:
        raise ProfileBufferError(
            f"max_events={count} is above the limit {MAX_EVENTS_LIMIT} (32-bit word offsets, "
            f"{MAX_EVENTS_LIMIT * layout.RECORD_BYTES / 2**30:.0f} GiB); record fewer events, "
            "e.g. profile fewer threads or fewer iterations"
        )
    return count


class ProfileBuffer:
    """A zeroed, record-aligned int64 profile buffer and the facts needed to decode it.

    Pass ``.tensor`` to the kernel (with ``.max_events``). After a ``profile_session``
    exits (or after :meth:`remember`), ``.trace``, ``.events`` and ``.overflow`` hold the
    decoded result.
    """

    def __init__(self, storage, offset: int, max_events: int, stream=None):
        words = layout.buffer_words(max_events)
        self._storage = storage  # keeps the spare word alive with the view
        self.tensor = storage[offset : offset + words]
        self.max_events = max_events
        self.stream = stream
        self.trace = None  # set by remember() / profile_session
        self._events_cache = None

    # ----------------------------------------------------------------- facts
    @property
    def device(self):
        """The ``torch.device`` the buffer lives on."""
        return self.tensor.device

    @property
    def device_name(self) -> str:
        """Human-readable device name for trace metadata (GPU model or "cpu")."""
        device = self.device
        if device.type == "cuda":
            torch = _torch()
            try:
                return torch.cuda.get_device_name(device)
            except Exception:  # pragma: no cover - driver trouble should not break decode
                return str(device)
        return device.type

    @property
    def data_ptr_alignment_ok(self) -> bool:
        """Whether every record is 16-byte aligned (data pointer is 8 mod 16)."""
        return self.tensor.data_ptr() % RECORD_ALIGNMENT == layout.HEADER_WORDS * 8

    # ------------------------------------------------------------ operations
    def reset(self) -> None:
        """Zero the counter and every slot (on ``self.stream`` for CUDA buffers)."""
        if self.stream is not None:
            torch = _torch()
            with torch.cuda.stream(self.stream):
                self.tensor.zero_()
        else:
            self.tensor.zero_()
        self.trace = None
        self._events_cache = None

    def numpy(self) -> np.ndarray:
        """A host copy of the raw words (waits for the device copy, not for other streams)."""
        return self.tensor.detach().to("cpu", copy=True).numpy()

    def counter(self) -> int:
        """Records the kernel attempted to write (the device counter; reads the device)."""
        return layout.split_counter_word(self.tensor[layout.COUNTER_INDEX].item())[0]

    def launch_epoch(self) -> int:
        """The launch epoch in the counter word (reads the device)."""
        return layout.split_counter_word(self.tensor[layout.COUNTER_INDEX].item())[1]

    def next_launch(self) -> None:
        """Start a new launch epoch: records written after this carry the next epoch, so
        the decoder tells launches (and CUDA-graph replays) apart. One ``add_`` on the
        counter word, queued on the current stream: call it inside a graph capture, before
        each instrumented kernel (or once per replay), and it replays with the graph.
        Records and the overflow count keep accumulating across epochs."""
        self.tensor[layout.COUNTER_INDEX : layout.COUNTER_INDEX + 1].add_(
            layout.LAUNCH_EPOCH_INCREMENT
        )

    def remember(self, trace) -> None:
        """Keep ``trace`` (decoded from this buffer) for ``.trace``, ``.events``, ``.overflow``."""
        self.trace = trace
        self._events_cache = None

    # ------------------------------------------------------ decoded results
    def _decoded(self):
        if self.trace is None:
            raise ProfileBufferError(
                "this buffer has not been decoded yet; leave the profile_session block or "
                "call buffer.remember(decode_buffer(buffer, tag_table)) first"
            )
        return self.trace

    @property
    def events(self):
        """Decoded events as a list of ``Event`` (built once from ``.trace``)."""
        trace = self._decoded()
        if self._events_cache is None:
            self._events_cache = trace.to_events()
        return self._events_cache

    @property
    def overflow(self) -> int:
        """Records that did not fit in the decoded buffer."""
        return self._decoded().overflow

    # ------------------------------------------------------------- interop
    def __dlpack__(self, *args: Any, **kwargs: Any):
        return self.tensor.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return self.tensor.__dlpack_device__()

    def __repr__(self) -> str:
        parts = [f"max_events={self.max_events}", f"device={str(self.device)!r}"]
        if self.device.type == "cpu":  # reading a CUDA counter would synchronise
            parts.append(f"counter={self.counter()}")
        if self.trace is not None:
            parts.append(f"decoded={len(self.trace.events)} events")
        return f"ProfileBuffer({', '.join(parts)})"


def allocate_profile_buffer(max_events: int, device="cuda", stream=None) -> ProfileBuffer:
    """Allocate a zeroed profile buffer for ``max_events`` records on ``device``.

    ``stream`` (a ``torch.cuda.Stream``) is where the zeroing runs and where ``reset`` will
    run; launch the kernel on the same stream or after it. CPU buffers take no stream.
    """
    count = _check_max_events(max_events)
    torch = _torch()
    try:
        target = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ProfileBufferError(f"invalid device {device!r}: {exc}") from None
    if stream is not None and target.type != "cuda":
        raise ProfileBufferError(
            f"a stream only applies to CUDA buffers, but device is {str(target)!r}; "
            "drop stream= or allocate on 'cuda'"
        )
    if target.type == "cuda" and not torch.cuda.is_available():
        raise ProfileBufferError(
            "device='cuda' but torch sees no CUDA device; run on a GPU machine, or pass "
            "device='cpu' to build and decode buffers on the host"
        )
    words = layout.buffer_words(count)
    if stream is not None:
        with torch.cuda.stream(stream):
            storage = torch.zeros(words + 1, dtype=torch.int64, device=target)
    else:
        storage = torch.zeros(words + 1, dtype=torch.int64, device=target)
    base = storage.data_ptr() % RECORD_ALIGNMENT
    if base == 0:
        offset = 1
    elif base == 8:
        offset = 0
    else:  # pragma: no cover - int64 allocations are always 8-byte aligned
        raise ProfileBufferError(f"allocator returned a pointer {base} mod 16; cannot align")
    buffer = ProfileBuffer(storage, offset, count, stream=stream)
    assert buffer.data_ptr_alignment_ok, "profile buffer records must be 16-byte aligned"
    return buffer


def host_words(buf, *, what: str = "profile buffer") -> np.ndarray:
    """The validated raw words of ``buf`` as a native 1-D int64 numpy array on the host.

    ``buf`` may be a ``ProfileBuffer``, a torch tensor on any device (copied to the host;
    synchronise the device first) or a numpy array. The result may share memory with a
    host ``buf``: treat it as read-only."""
    if isinstance(buf, ProfileBuffer):
        buf = buf.tensor
    torch = sys.modules.get("torch")  # a tensor can only exist if torch was imported
    if torch is not None and isinstance(buf, torch.Tensor):
        if buf.dtype != torch.int64:
            raise ProfileBufferError(
                f"{what} tensor has dtype {buf.dtype}, expected torch.int64; allocate it with "
                "cute_prof.allocate_profile_buffer"
            )
        buf = buf.detach().to("cpu").numpy()
    if not isinstance(buf, np.ndarray):
        raise ProfileBufferError(
            f"cannot read a {type(buf).__name__}; pass a ProfileBuffer, a torch.int64 tensor "
            "or a numpy int64 array"
        )
    if buf.dtype.kind != "i" or buf.dtype.itemsize != 8:
        raise ProfileBufferError(
            f"{what} has dtype {buf.dtype}, expected int64; do not convert the raw buffer "
            "(an int64 word holds packed fields that other dtypes destroy)"
        )
    if not buf.dtype.isnative:
        buf = buf.astype(np.int64)
    if buf.ndim != 1:
        raise ProfileBufferError(
            f"{what} must be 1-D, got shape {buf.shape}; pass the flat buffer as allocated"
        )
    length = buf.shape[0]
    if length and int(buf[0]) == layout.SLICES_MAGIC:  # per-warp slices: sized by its header
        return buf
    if length < layout.buffer_words(1) or (length - layout.HEADER_WORDS) % layout.WORDS_PER_RECORD:
        raise ProfileBufferError(
            f"{what} has {length} words, but a profile buffer has 1 + 4*k words (k >= 1); "
            "it was truncated, sliced or is not a profile buffer"
        )
    return buf


def source_metadata(buf) -> dict[str, Any]:
    """Where the buffer lives (GPU model or host), for the trace metadata."""
    if isinstance(buf, ProfileBuffer):
        return {"device": buf.device_name}
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(buf, torch.Tensor):
        if buf.device.type == "cuda":
            try:
                return {"device": torch.cuda.get_device_name(buf.device)}
            except Exception:  # pragma: no cover - metadata must not break decoding
                return {"device": str(buf.device)}
        return {"device": buf.device.type}
    return {}
