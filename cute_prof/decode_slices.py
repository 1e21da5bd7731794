"""Decoding a per-warp slices buffer (layout format 2) into the same :class:`Trace`.

Vectorised over all slices at once: the 32-bit record times of each warp are unwrapped by
summing their differences modulo 2**32 from the warp's full 64-bit open time.

Counts: ``attempted`` = the warps' own counts (from ``close()``) plus records of warps that
found no slice; ``overflow`` = attempted - stored, exactly, per warp. A warp that never
called ``close()`` still has every record that fit decoded; it is counted in
``metadata["slices_unclosed_warps"]`` and, if its slice is full, its overflow is unknown.
A warp that recorded from divergent code (its lanes' counts disagreed at ``close()``) is
counted in ``metadata["slices_diverged_warps"]`` and warned about. A slice that crosses a
4 GiB boundary of the address space holds only the records that fit below it (slice word 3);
the rest count as overflow (``slices_cut_warps``, ``slices_cut_records``, a warning). Device
counts are modulo 2**29: for a warp whose recorder stayed open long enough to wrap one,
the written records are trusted over the count, and a full slice is warned about.

Owns format 2's decoding and its buffer's allocation and reset (stage 2); it may not import the
device ops (the CUTLASS DSL) nor analysis or export.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from . import layout
from .buffer import host_words, source_metadata
from .errors import ProfileBufferError, ProfileWarning
from .launches import drop_outside_launch
from .tags import as_tag_table
from .trace import EVENT_DTYPE, Trace

__all__ = ["is_slices_buffer", "decode_slices", "allocate_slices_buffer", "allocate_pool",
           "pool_slices", "launch_slices_buffer"]

_LOW32 = np.int64(0xFFFFFFFF)
_HALF32 = np.int64(1 << 31)
_PLACEMENT_TRIES = 4


def is_slices_buffer(words: np.ndarray) -> bool:
    return words.shape[0] >= 1 and int(words[0]) == layout.SLICES_MAGIC


def allocate_slices_buffer(n_warps: int, per_warp: int, device="cuda"):
    """A zeroed int64 torch tensor holding ``n_warps`` slices of ``per_warp`` records, with
    its header written; pass it to ``SliceRecorder`` (through ``buffer_arg``) and decode it
    with ``decode_buffer``. Zero it and rewrite the header to reuse it: ``reset_slices``."""
    import torch

    n_warps, per_warp = int(n_warps), int(per_warp)
    if not (0 < n_warps <= layout.MAX_SLICES and 0 <= per_warp < (1 << 32)):
        raise ProfileBufferError(
            f"need 1..{layout.MAX_SLICES} warps and 0..2**32-1 records per warp, got "
            f"n_warps={n_warps}, per_warp={per_warp}")
    size = layout.slices_buffer_words(n_warps, per_warp)
    words = torch.zeros(size, dtype=torch.int64, device=device)
    # a slice across a 4 GiB boundary of the address space holds fewer records (the device's
    # cursor is the low half of an address): allocate again, while the misplaced ones are
    # still held, so the allocator hands out another place
    misplaced = []
    while (len(misplaced) < _PLACEMENT_TRIES
           and (layout.slice_records_that_fit(words.data_ptr(), n_warps, per_warp) < per_warp).any()):
        misplaced.append(words)
        words = torch.zeros(size, dtype=torch.int64, device=device)
    del misplaced
    words[: layout.SLICES_HEADER_WORDS] = torch.as_tensor(
        layout.slices_header(n_warps, per_warp), dtype=torch.int64)
    return words


def reset_slices(words) -> None:
    """Zero a slices tensor in place, keeping its header (so it can be launched again)."""
    import torch

    header = words[: layout.SLICES_HEADER_WORDS].clone()
    if int(header[0]) != layout.SLICES_MAGIC:
        words.zero_()
        raise ProfileBufferError("not a slices buffer: word 0 is not SLICES_MAGIC")
    words.zero_()
    n_slices, per_warp, pooled = layout.split_slices_dims(int(header[1]))
    words[: layout.SLICES_HEADER_WORDS] = torch.as_tensor(
        layout.slices_header(n_slices, per_warp, pooled=pooled), dtype=torch.int64)


def allocate_pool(n_slices: int, per_warp: int, device="cuda", *, pin_memory: bool = False):
    """A zeroed pooled slices buffer (``layout``'s "Pooled slices") for one run: ``n_slices``
    slices of ``per_warp`` records that every recording kernel's warps claim, then its lost
    and epoch tables. ``pin_memory=True``: in pinned host memory that the GPU writes through
    its mapping (readable while a kernel hangs or after the context faulted; pass the tensor's
    device address, ``cute_prof.flight``'s way), else on ``device``."""
    import torch

    n_slices, per_warp = int(n_slices), int(per_warp)
    if not (0 < n_slices <= layout.MAX_SLICES and 0 < per_warp < (1 << 32)):
        raise ProfileBufferError(
            f"a pool needs 1..{layout.MAX_SLICES} slices of 1..2**32-1 records, got "
            f"{n_slices} slices of {per_warp}")
    size = layout.pool_buffer_words(n_slices, per_warp)
    if pin_memory:
        words = torch.zeros(size, dtype=torch.int64, pin_memory=True)
    else:
        words = torch.zeros(size, dtype=torch.int64, device=device)
    words[: layout.SLICES_HEADER_WORDS] = torch.as_tensor(
        layout.slices_header(n_slices, per_warp, pooled=True), dtype=torch.int64)
    return words


def pool_slices(words: np.ndarray) -> dict:
    """Per claimed slice of a pooled buffer: ``kernel`` (id), ``epoch`` (the kernel's launch
    epoch, unwrapped in claim order; -1 for a slice claimed but never opened), and the lost
    table (kernels x ``layout.POOL_LOST_EPOCHS``). Reads the slice headers only."""
    n_slices, per_warp, pooled = layout.split_slices_dims(int(words[1]))
    if not pooled:
        raise ProfileBufferError("not a pooled slices buffer (header word 1 has no pool bit)")
    claimed = min(int(words[3]), n_slices)
    stride = layout.SLICE_HEADER_WORDS + per_warp
    first = layout.SLICES_HEADER_WORDS
    heads = words[first:first + claimed * stride].reshape(claimed, stride)[:, :4]
    fit_word = heads[:, 3]
    opened = ((fit_word >> layout.SLICE_MAGIC_SHIFT) & 0x7F) == layout.SLICE_OPEN_MAGIC
    kernel = (fit_word >> layout.SLICE_KERNEL_SHIFT) & layout.field_mask(layout.SLICE_KERNEL_BITS)
    low = (fit_word >> layout.SLICE_EPOCH_SHIFT) & layout.field_mask(layout.SLICE_EPOCH_BITS)
    epoch = np.full(claimed, -1, dtype=np.int64)
    span = np.int64(1 << layout.SLICE_EPOCH_BITS)
    for k in np.unique(kernel[opened]):  # one pass per kernel id (a handful), vectorised inside
        rows = np.nonzero(opened & (kernel == k))[0]
        step = np.diff(low[rows], prepend=np.int64(0))
        step = ((step + span // 2) % span) - span // 2  # signed: claims are < 2**13 epochs apart
        step[0] = low[rows[0]]
        epoch[rows] = np.cumsum(step)
    lost, _ = layout.pool_tables(words, n_slices, per_warp)
    return {"kernel": np.where(opened, kernel, -1), "epoch": epoch, "lost": lost,
            "claimed": int(words[3]), "per_warp": per_warp, "slices": n_slices}


def launch_slices_buffer(words: np.ndarray, rows: np.ndarray, *, lost: int = 0) -> np.ndarray:
    """The slices ``rows`` of a pooled buffer (one launch's) as a per-warp slices buffer of
    their own, whose header word 2 holds ``lost`` (records of that launch's warps that found
    no slice): what :func:`decode_slices` reads."""
    _, per_warp, _ = layout.split_slices_dims(int(words[1]))
    stride = layout.SLICE_HEADER_WORDS + per_warp
    rows = np.asarray(rows, dtype=np.int64)
    out = np.empty(layout.slices_buffer_words(rows.shape[0], per_warp), dtype=np.int64)
    out[:layout.SLICES_HEADER_WORDS] = layout.slices_header(rows.shape[0], per_warp)
    out[2] = int(lost)
    body = words[layout.SLICES_HEADER_WORDS:layout.SLICES_HEADER_WORDS + (int(rows.max()) + 1 if
                                                                          rows.size else 0) * stride]
    if rows.size:
        out[layout.SLICES_HEADER_WORDS:].reshape(rows.shape[0], stride)[:] = body.reshape(-1, stride)[rows]
    return out


def decode_slices(buf, tag_table=None, *, metadata: dict[str, Any] | None = None) -> Trace:
    """Decode a slices buffer (``decode_buffer`` calls this when word 0 says so)."""
    table = as_tag_table(tag_table)
    words = host_words(buf)
    if not is_slices_buffer(words):
        raise ProfileBufferError("not a slices buffer: word 0 is not SLICES_MAGIC")
    if words.shape[0] < layout.SLICES_HEADER_WORDS:
        raise ProfileBufferError("slices buffer is shorter than its header")
    n_slices, per_warp, pooled = layout.split_slices_dims(int(words[1]))
    expected = (layout.pool_buffer_words if pooled else layout.slices_buffer_words)(n_slices, per_warp)
    if words.shape[0] != expected:
        raise ProfileBufferError(
            f"slices buffer has {words.shape[0]} words but its header says {n_slices} slices of "
            f"{per_warp} records{' and a pool' if pooled else ''} ({expected} words)")
    # a pool: every launch's slices together (split them with pool_slices)
    lost_no_slice = int(layout.pool_tables(words, n_slices, per_warp)[0].sum()) if pooled else int(words[2])
    slices = words[layout.SLICES_HEADER_WORDS:layout.slices_buffer_words(n_slices, per_warp)].reshape(
        n_slices, layout.SLICE_HEADER_WORDS + per_warp)
    base, ident, closing, fit_word = slices[:, 0], slices[:, 1], slices[:, 2], slices[:, 3]
    records = slices[:, layout.SLICE_HEADER_WORDS:]

    opened = ((ident >> layout.SLICE_MAGIC_SHIFT) & 0x7F) == layout.SLICE_OPEN_MAGIC
    closed = opened & (((closing >> layout.SLICE_MAGIC_SHIFT) & 0x7F) == layout.SLICE_CLOSED_MAGIC)
    # records that fit where each slice lies (word 3; older buffers leave it zero: per_warp)
    has_fit = opened & (((fit_word >> layout.SLICE_MAGIC_SHIFT) & 0x7F) == layout.SLICE_OPEN_MAGIC)
    fits = np.where(has_fit, np.minimum(fit_word & _LOW32, per_warp), per_warp)
    cut = opened & (fits < per_warp)
    written = records < 0  # bit 63 set
    # unclosed warps: the leading written records are all there is
    leading = np.where(written.all(axis=1), per_warp, np.argmin(written, axis=1))
    leading = np.minimum(leading, fits)
    counts = np.where(closed, closing & _LOW32, 0)
    diverged = closed & (((closing >> layout.SLICE_DIVERGED_BIT) & 1) == 1)
    # open for 2**28 ns or more: the device's count is modulo 2**29, so trust the written
    # records over it, and where the slice filled, say that the overflow may be short
    long_open = closed & (((closing >> layout.SLICE_LONG_OPEN_BIT) & 1) == 1)
    wrap = np.int64(1 << layout.SLICE_COUNT_BITS)
    short = long_open & (counts < leading)
    counts = np.where(short, counts + (leading - counts + wrap - 1) // wrap * wrap, counts)
    ambiguous = long_open & (leading >= fits)
    stored = np.where(closed, np.minimum(counts, fits), np.where(opened, leading, 0))
    column = np.arange(per_warp)
    in_count = column[None, :] < stored[:, None]
    incomplete = int(np.count_nonzero(in_count & ~written))
    valid = in_count & written

    kind = (records >> layout.SLICE_KIND_SHIFT) & layout.field_mask(layout.SLICE_KIND_BITS)
    lo = records & _LOW32
    prev = np.empty_like(lo)
    if per_warp:
        prev[:, 0] = base & _LOW32
        prev[:, 1:] = lo[:, :-1]
    step = (lo - prev) & _LOW32
    # an explicit start may lie before the record stored ahead of it: a signed difference
    step = np.where(kind == layout.SLICE_KIND_START, ((step + _HALF32) & _LOW32) - _HALF32, step)
    step = np.where(valid, step, 0)
    times = base[:, None] + np.cumsum(step, axis=1)
    starts = np.empty_like(times)
    if per_warp:
        starts[:, 0] = base
        starts[:, 1:] = times[:, :-1]
    is_event = valid & ((kind == layout.SLICE_KIND_SPAN) | (kind == layout.SLICE_KIND_INSTANT))
    rows, cols = np.nonzero(is_event)
    event_kind = kind[rows, cols]
    end = times[rows, cols]
    start = np.where(event_kind == layout.SLICE_KIND_SPAN, starts[rows, cols], end)
    rec = records[rows, cols]
    events = np.zeros(rows.shape[0], dtype=EVENT_DTYPE)
    events["start_ns"] = start
    events["dur_ns"] = end - start
    events["tag"] = (rec >> layout.SLICE_TAG_SHIFT) & layout.field_mask(layout.SLICE_TAG_BITS)
    payload = (rec >> layout.SLICE_PAYLOAD_SHIFT) & layout.MAX_SLICE_PAYLOAD
    # a span right after a START: that record holds its payload's bits 13..31
    before = np.where(cols > 0, records[rows, np.maximum(cols - 1, 0)], 0)
    started = (cols > 0) & (event_kind == layout.SLICE_KIND_SPAN) & (
        ((before >> layout.SLICE_KIND_SHIFT) & layout.field_mask(layout.SLICE_KIND_BITS))
        == layout.SLICE_KIND_START)
    high = (before >> layout.SLICE_START_PAYLOAD_SHIFT) & layout.field_mask(layout.SLICE_START_PAYLOAD_BITS)
    payload = np.where(started, payload | (high << layout.SLICE_PAYLOAD_BITS), payload)
    events["payload"] = ((payload + _HALF32) & _LOW32) - _HALF32  # the flat format's int32
    events["kind"] = np.where(event_kind == layout.SLICE_KIND_SPAN, layout.KIND_SPAN,
                              layout.KIND_INSTANT)
    ident_rows = ident[rows]
    events["tid"] = (ident_rows & _LOW32).astype(np.uint32).view(np.int32)
    events["sm"] = (ident_rows >> layout.SM_SHIFT) & layout.field_mask(layout.SM_BITS)
    events["warp"] = (ident_rows >> layout.WARP_SHIFT) & layout.field_mask(layout.WARP_BITS)
    events["dur_cycles"] = -1
    events["slot"] = (layout.SLICES_HEADER_WORDS + rows * (layout.SLICE_HEADER_WORDS + per_warp)
                      + layout.SLICE_HEADER_WORDS + cols)
    events = events[np.argsort(events["start_ns"], kind="stable")]

    unclosed = opened & ~closed
    attempted = int(counts.sum()) + int(stored[unclosed].sum()) + lost_no_slice
    overflow = int(np.maximum(counts - fits, 0).sum()) + lost_no_slice
    capacity = int(np.where(opened, fits, per_warp).sum())
    meta: dict[str, Any] = source_metadata(buf)
    meta.update(
        format="slices", slices=n_slices, slice_capacity=per_warp,
        slices_opened=int(opened.sum()), slices_unclosed_warps=int(unclosed.sum()),
        slices_unclosed_full=int(np.count_nonzero(unclosed & (stored == fits))),
        slices_no_slice_records=lost_no_slice,
        slices_diverged_warps=int(diverged.sum()),
        slices_cut_warps=int(cut.sum()), slices_cut_records=int((per_warp - fits[cut]).sum()),
        slices_long_open_warps=int(long_open.sum()),
        slices_count_modulo_warps=int(ambiguous.sum()),
        slices_marks=int(np.count_nonzero(valid & (kind == layout.SLICE_KIND_MARK))),
        slices_region_starts=int(np.count_nonzero(valid & (kind == layout.SLICE_KIND_START))),
        capacity=capacity,
    )
    if metadata:
        meta.update(metadata)
    if diverged.any():
        warnings.warn(
            f"{int(diverged.sum())} warp(s) recorded with a SliceRecorder from divergent code "
            "(their lanes' record counts disagreed at close()): lane 0 stores every record, so "
            "records made while it sat out a branch are missing and not counted. Record from "
            "code the whole warp runs (a WarpRecorder handles divergent callers)",
            ProfileWarning, stacklevel=2)
    if cut.any():
        warnings.warn(
            f"{int(cut.sum())} slice(s) cross a 4 GiB boundary of the device's address space and "
            f"held {meta['slices_cut_records']} fewer records than per_warp (the records past it "
            "are counted as overflow): allocate the buffer with allocate_slices_buffer, which "
            "places slices clear of such boundaries", ProfileWarning, stacklevel=2)
    if ambiguous.any():
        warnings.warn(
            f"{int(ambiguous.sum())} warp(s) filled their slice and kept their recorder open "
            f"for over {2 ** layout.SLICE_LONG_OPEN_SHIFT / 1e9:.2f} s: the device counts a "
            f"warp's records modulo 2**{layout.SLICE_COUNT_BITS}, so their overflow is exact "
            f"only modulo {1 << layout.SLICE_COUNT_BITS:,}", ProfileWarning, stacklevel=2)
    if unclosed.any():
        warnings.warn(
            f"{int(unclosed.sum())} warp(s) never called close() on their SliceRecorder: their "
            f"{int(stored[unclosed].sum())} written records were decoded, but "
            f"{meta['slices_unclosed_full']} of those warps filled their slice, so how many "
            "records they dropped is unknown; call rec.close() before the warp exits",
            ProfileWarning, stacklevel=2)
    return drop_outside_launch(Trace(
        events=events, tag_names=table.names, capacity=capacity,
        attempted=attempted, overflow=overflow, incomplete=incomplete, metadata=meta,
    ))
