"""Decoding a raw profile buffer into a :class:`~cute_prof.trace.Trace`.

The passes are vectorised numpy, or, where numba is installed (``cute_prof.jit``), a few
compiled kernels that give exactly the same Trace (``tests/test_host_speed.py`` compares
them); a million records decode in a few tens of milliseconds, so decoding is never the
reason to profile fewer events.

What the decoder guarantees (and the fuzz tests check):

* ``counter`` is the record count in the low 40 bits of word 0 (the bits above are the
  launch epoch, see ``cute_prof.launches``); only a negative word 0 is rejected.
* Only ``min(counter, capacity)`` slots are read; slots at or above the counter are ignored.
* ``overflow == max(0, counter - capacity)`` exactly.
* A claimed slot whose tag word lacks the completion magic is counted in ``incomplete`` and
  never decoded (a zero slot would otherwise look like tag 0 at time 0).
* A complete slot that breaks a validity rule (:data:`INVALID_REASONS`: reserved bits set,
  unknown kind, negative start or duration, an end beyond int64, a clock conversion that
  overflows, a start far outside its launch's time window) is counted in ``invalid`` and ``invalid_reasons[reason]`` and never decoded, so
  every event has ``start_ns >= 0``, ``dur_ns >= 0`` and ``start_ns + dur_ns <= 2**63 - 1``.
* ``len(events) + len(clock_syncs) + incomplete + invalid == min(counter, capacity)``.
* Anything that is not a profile buffer raises :class:`ProfileBufferError`, nothing else.

Owns format 1's decoding, the clock fit and the loss warnings (stage 2); it may not import the
device ops (the CUTLASS DSL) nor analysis or export.
"""

from __future__ import annotations

import math
import os
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from . import jit, layout
from .buffer import host_words, source_metadata
from .errors import ClockRateError, ProfileBufferError, ProfileWarning
from .launches import drop_outside_launch, launch_identity, outside_launch
from .tags import as_tag_table
from .trace import CLOCK_SYNC_DTYPE, EVENT_DTYPE, Event, Trace

__all__ = [
    "decode_buffer",
    "decode_events",
    "fit_clock_rate",
    "warn_about_losses",
    "MIN_SYNC_SPAN_NS",
    "INVALID_REASONS",
    "screen_events",
    "outside_launch",
]

# Calibration pairs on one SM must span at least this long to give a usable slope: the
# %globaltimer tick is 32 ns to 1 us depending on the GPU, so shorter spans give rates
# that are off by whole percents. Pass ``min_sync_span_ns=`` to trade accuracy for reach.
MIN_SYNC_SPAN_NS = 1_000
# SM clocks outside this range mean the calibration pairs are garbage.
_PLAUSIBLE_CLOCK_HZ = (1e7, 1e11)
_EVENT_KINDS = (layout.KIND_SPAN, layout.KIND_INSTANT, layout.KIND_CLOCK_SPAN)
_NS_LIMIT = 9.0e18  # keep float->int64 conversions in range for corrupted cycle counts


# ----------------------------------------------------------------------------- input
def _check_clock_hz(clock_hz) -> float:
    try:
        rate = float(clock_hz)
    except (TypeError, ValueError):
        raise ProfileBufferError(f"clock_hz must be a number in Hz, got {clock_hz!r}") from None
    low, high = _PLAUSIBLE_CLOCK_HZ
    if not (math.isfinite(rate) and low <= rate <= high):
        raise ProfileBufferError(
            f"clock_hz={clock_hz!r} is not a plausible SM clock; pass the rate in Hz "
            f"(between {low:.0e} and {high:.0e}, e.g. 1.98e9 for 1980 MHz)"
        )
    return rate


# ------------------------------------------------------------------ clock calibration
def fit_clock_rate(syncs: np.ndarray, *, min_span_ns: int = MIN_SYNC_SPAN_NS) -> dict[str, Any]:
    """Fit the SM clock rate from KIND_CLOCK_SYNC pairs (``CLOCK_SYNC_DTYPE`` rows).

    Per SM: least-squares slope of %globaltimer ns against clock64 cycles over that SM's
    pairs (needs >= 2 pairs spanning ``min_span_ns``). SMs combine by median. Returns a
    dict with ``clock_hz`` (None when no SM qualifies) and the fit's quality figures."""
    result: dict[str, Any] = {"clock_hz": None, "clock_sync_pairs": int(syncs.shape[0])}
    if syncs.shape[0] < 2:
        return result
    sm_ids, group, counts = np.unique(syncs["sm"], return_inverse=True, return_counts=True)
    order = np.argsort(group.reshape(-1), kind="stable")
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    ns = syncs["globaltimer_ns"][order]
    cycles = syncs["clock_cycles"][order]
    # Differences from each SM's first pair are exact in int64 and small enough for float64.
    dy = (ns - np.repeat(ns[starts], counts)).astype(np.float64)
    dx = (cycles - np.repeat(cycles[starts], counts)).astype(np.float64)
    mean_x = np.add.reduceat(dx, starts) / counts
    mean_y = np.add.reduceat(dy, starts) / counts
    cx = dx - np.repeat(mean_x, counts)
    cy = dy - np.repeat(mean_y, counts)
    sxx = np.add.reduceat(cx * cx, starts)
    sxy = np.add.reduceat(cx * cy, starts)
    span_ns = np.maximum.reduceat(dy, starts) - np.minimum.reduceat(dy, starts)
    with np.errstate(divide="ignore", invalid="ignore"):
        ns_per_cycle = np.where(sxx > 0, sxy / np.where(sxx > 0, sxx, 1.0), 0.0)
        hz = np.where(ns_per_cycle > 0, 1e9 / np.where(ns_per_cycle > 0, ns_per_cycle, 1.0), 0.0)
    low, high = _PLAUSIBLE_CLOCK_HZ
    usable = (counts >= 2) & (sxx > 0) & (span_ns >= min_span_ns) & (hz >= low) & (hz <= high)
    result["clock_sync_sms"] = int(sm_ids.shape[0])
    result["clock_fit_sms"] = int(np.count_nonzero(usable))
    result["clock_sync_max_span_ns"] = float(span_ns.max())
    if not usable.any():
        return result
    residual = np.abs(cy - np.repeat(ns_per_cycle, counts) * cx)
    worst_residual = np.maximum.reduceat(residual, starts)
    rates = hz[usable]
    median = float(np.median(rates))
    result.update(
        clock_hz=median,
        clock_hz_source="clock_sync",
        clock_hz_min=float(rates.min()),
        clock_hz_max=float(rates.max()),
        clock_hz_rel_spread=float((rates.max() - rates.min()) / median),
        clock_fit_max_residual_ns=float(worst_residual[usable].max()),
    )
    return result


# ----------------------------------------------------------------------------- decode
# Validity rules, the one place they live (the README's layout section mirrors this list).
# A claimed slot is classified as exactly one of: an event (span, instant, clock span), a
# clock_sync pair, incomplete (no magic), or invalid for the FIRST reason that applies:
INVALID_REASONS = (
    "reserved_bits",  # a bit layout.TAG_RESERVED_MASK / TID_RESERVED_MASK says is zero is set
    "unknown_kind",  # a record kind this decoder does not know (newer format or corruption)
    "negative_start",  # start word < 0 (clock spans: the end %globaltimer word)
    "negative_duration",  # dur word < 0 (ns for spans and instants, cycles for clock kinds)
    "end_overflow",  # span or instant whose start + dur is beyond int64
    "clock_overflow",  # clock span whose cycles -> ns conversion leaves int64 or starts < 0
    "outside_launch",  # starts far outside the trace's time window (layout.TRACE_WINDOW_NS)
                       # or its launch's (layout.LAUNCH_GAP_LIMIT_NS)
)
# Per-slot class codes: record kinds 0..3 for valid records, then incomplete, then reasons.
_INCOMPLETE = 4
_FIRST_INVALID = 5
_CODES = _FIRST_INVALID + len(INVALID_REASONS)
_INVALID_CODE = {reason: _FIRST_INVALID + i for i, reason in enumerate(INVALID_REASONS)}
_INT64_MAX = np.iinfo(np.int64).max
# One test decides "valid and of kind 0..3": magic present, reserved bits zero, kind < 4.
_VALID_TAG_MASK = layout.MAGIC_MASK | layout.TAG_RESERVED_MASK | (0b1100 << layout.KIND_SHIFT)
assert max(_EVENT_KINDS + (layout.KIND_CLOCK_SYNC,)) < 4, "valid kinds must fit in 2 bits"
# Records are processed in blocks that stay in cache, spread over a few threads (numpy
# releases the GIL inside each call).
_BLOCK = 1 << 16
_PARALLEL_ABOVE = 1 << 20
_RANK_BASE = np.arange(_BLOCK, dtype=np.uint64)


def _workers() -> int:
    return max(1, min(4, os.cpu_count() or 1))


def _run_blocks(function, count: int) -> list:
    """``function(lo, hi)`` over ``[0, count)``: in one thread for small inputs, else split
    into one contiguous range per worker. Returns the per-range results."""
    if count <= _PARALLEL_ABOVE or _workers() == 1:
        return [function(0, count)]
    bounds = np.linspace(0, count, _workers() + 1).astype(np.int64).tolist()
    with ThreadPoolExecutor(max_workers=_workers()) as pool:
        return list(pool.map(function, bounds[:-1], bounds[1:]))


def _classify_exactly(records: np.ndarray) -> np.ndarray:
    """Class codes of ``records`` by the full rules (used where the fast test failed)."""
    start, dur = records[:, layout.WORD_START], records[:, layout.WORD_DUR]
    tag, tid = records[:, layout.WORD_TAG], records[:, layout.WORD_TID]
    kind = (tag >> layout.KIND_SHIFT) & layout.field_mask(layout.KIND_BITS)
    is_event_kind = (kind == layout.KIND_SPAN) | (kind == layout.KIND_INSTANT)
    with np.errstate(over="ignore"):
        end_room = _INT64_MAX - np.maximum(dur, 0)
    rules = [  # (condition, code), the first that holds wins
        ((tag & layout.MAGIC_MASK) != layout.MAGIC_FIELD, _INCOMPLETE),
        (((tag & layout.TAG_RESERVED_MASK) | (tid & layout.TID_RESERVED_MASK)) != 0,
         _INVALID_CODE["reserved_bits"]),
        (kind > layout.KIND_CLOCK_SYNC, _INVALID_CODE["unknown_kind"]),
        (start < 0, _INVALID_CODE["negative_start"]),
        (dur < 0, _INVALID_CODE["negative_duration"]),
        (is_event_kind & (start > end_room), _INVALID_CODE["end_overflow"]),
    ]
    return np.select([c for c, _ in rules], [code for _, code in rules], kind).astype(np.uint8)


def _classify(records: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(class code per slot (uint8), count per code)``, before clock-span conversion.

    The fast test covers the common case (every rule passes) with a few in-place ops per
    block; only blocks with a failing record run :func:`_classify_exactly` on those."""
    codes = np.empty(records.shape[0], dtype=np.uint8)

    def work(lo: int, hi: int) -> np.ndarray:
        counts = np.zeros(_CODES, dtype=np.int64)
        size = min(_BLOCK, hi - lo)
        a = np.empty(size, dtype=np.int64)
        b = np.empty(size, dtype=np.int64)
        good = np.empty(size, dtype=bool)
        test = np.empty(size, dtype=bool)
        for first in range(lo, hi, _BLOCK):
            block = records[first : min(first + _BLOCK, hi)]
            n = block.shape[0]
            a_, b_, good_, test_ = a[:n], b[:n], good[:n], test[:n]
            start, dur = block[:, layout.WORD_START], block[:, layout.WORD_DUR]
            tag, tid = block[:, layout.WORD_TAG], block[:, layout.WORD_TID]
            np.bitwise_and(tag, _VALID_TAG_MASK, out=a_)
            np.equal(a_, layout.MAGIC_FIELD, out=good_)
            np.bitwise_and(tid, layout.TID_RESERVED_MASK, out=a_)
            np.equal(a_, 0, out=test_)
            good_ &= test_
            np.bitwise_or(start, dur, out=a_)
            np.greater_equal(a_, 0, out=test_)
            good_ &= test_
            np.subtract(_INT64_MAX, dur, out=a_)  # no wrap where dur >= 0, which good_ needs
            np.less_equal(start, a_, out=test_)
            good_ &= test_
            np.right_shift(tag, layout.KIND_SHIFT, out=b_)
            np.bitwise_and(b_, 0b11, out=b_)
            out = codes[first : first + n]
            out[...] = b_
            if not good_.all():
                bad = np.flatnonzero(~good_)
                out[bad] = _classify_exactly(block[bad])
            counts += np.bincount(out, minlength=_CODES)
        return counts

    counts = np.sum(_run_blocks(work, records.shape[0]), axis=0, dtype=np.int64)
    return codes, counts


def screen_events(events: np.ndarray) -> tuple[np.ndarray, dict[str, int]]:
    """The time rules of :data:`INVALID_REASONS` for events that did not come from a buffer
    (a JSON trace read back): ``(mask of rows that pass, count per reason of the rest)``."""
    start, dur = events["start_ns"], events["dur_ns"]
    rules = [
        ("negative_start", start < 0),
        ("negative_duration", dur < 0),
        ("end_overflow", start > _INT64_MAX - np.maximum(dur, 0)),
    ]
    keep = np.ones(events.shape[0], dtype=bool)
    reasons = {}
    for reason, broken in rules:
        hit = broken & keep
        if hit.any():
            reasons[reason] = int(np.count_nonzero(hit))
            keep &= ~hit
    rows = np.flatnonzero(keep)
    outside = outside_launch(start[rows], events["launch"][rows])
    if outside is not None:
        reasons["outside_launch"] = int(np.count_nonzero(outside))
        keep[rows[outside]] = False
    return keep, reasons


def _clock_to_ns(end_word: np.ndarray, cycles: np.ndarray, clock_hz: float):
    """Clock spans: ``(start_ns, dur_ns, ok)``; ``ok`` is False where the conversion leaves
    int64 or would start before 0 (those are invalid: ``clock_overflow``)."""
    dur_float = np.rint(cycles.astype(np.float64) * (1e9 / clock_hz))
    ok = dur_float < _NS_LIMIT
    dur_ns = np.where(ok, dur_float, 0).astype(np.int64)
    ok &= dur_ns <= end_word
    return end_word - np.where(ok, dur_ns, 0), dur_ns, ok


def decode_buffer(
    buf,
    tag_table=None,
    *,
    metadata: dict[str, Any] | None = None,
    clock_hz: float | None = None,
    min_sync_span_ns: int = MIN_SYNC_SPAN_NS,
) -> Trace:
    """Decode a profile buffer into a columnar :class:`Trace` (events sorted by start_ns).

    ``tag_table``: a TagTable, a list of names, or None for ``default_tag_table()``.
    ``clock_hz``: SM clock for clock-mode records; by default it is fitted from the
    buffer's ``clock_sync`` pairs. ``metadata`` is merged into ``Trace.metadata``.
    Records that break a rule of :data:`INVALID_REASONS` are counted, never decoded.
    """
    words = host_words(buf)
    if words.shape[0] and int(words[0]) == layout.SLICES_MAGIC:  # per-warp slices format
        from .decode_slices import decode_slices

        return decode_slices(words, tag_table, metadata={**source_metadata(buf), **(metadata or {})})
    table = as_tag_table(tag_table)
    capacity = (words.shape[0] - layout.HEADER_WORDS) // layout.WORDS_PER_RECORD
    counter, counter_epoch = layout.split_counter_word(words[layout.COUNTER_INDEX])
    if counter < 0 or counter > layout.MAX_PLAUSIBLE_COUNTER:
        raise ProfileBufferError(
            f"record counter is {counter}, which no kernel can produce (valid: 0.."
            f"{layout.MAX_PLAUSIBLE_COUNTER}); the buffer was overwritten or is not a profile "
            "buffer. Re-allocate it (or call .reset()) before each launch"
        )
    claimed = min(counter, capacity)
    records = words[layout.HEADER_WORDS : layout.HEADER_WORDS + layout.WORDS_PER_RECORD * claimed]
    records = records.reshape(claimed, layout.WORDS_PER_RECORD)

    if jit.enabled() and claimed:
        codes = np.empty(claimed, dtype=np.uint8)
        counts = np.zeros(_CODES, dtype=np.int64)
        _classify_compiled(records, codes, counts)
    else:
        codes, counts = _classify(records)
    sync_slots = (np.flatnonzero(codes == layout.KIND_CLOCK_SYNC) if counts[layout.KIND_CLOCK_SYNC]
                  else np.zeros(0, np.int64))
    syncs = _clock_syncs(records, sync_slots)

    meta: dict[str, Any] = source_metadata(buf)
    fit = fit_clock_rate(syncs, min_span_ns=min_sync_span_ns) if syncs.shape[0] else None
    if fit is not None:
        meta.update(fit)
    if clock_hz is not None:
        if fit is not None and fit["clock_hz"] is not None:
            meta["clock_hz_fit"] = fit["clock_hz"]
        meta["clock_hz"] = _check_clock_hz(clock_hz)
        meta["clock_hz_source"] = "argument"
    rate = meta.get("clock_hz")
    if counts[layout.KIND_CLOCK_SPAN] and rate is None:
        raise ClockRateError(
            _no_clock_rate_message(int(counts[layout.KIND_CLOCK_SPAN]), fit, min_sync_span_ns)
        )
    meta["capacity"] = capacity
    if metadata:
        meta.update(metadata)
    decoded = (_decode_compiled(records, codes, counts, rate, counter_epoch)
               if jit.enabled() and claimed else None)
    if decoded is not None:
        events, launches = decoded
    else:
        events, launches = _decode_numpy(records, codes, counts, rate, counter_epoch)
    reasons = {r: int(counts[_INVALID_CODE[r]]) for r in INVALID_REASONS if counts[_INVALID_CODE[r]]}
    return drop_outside_launch(Trace(
        events=events,
        tag_names=table.names,
        capacity=capacity,
        attempted=counter,
        overflow=max(0, counter - capacity),
        incomplete=int(counts[_INCOMPLETE]),
        metadata=meta,
        invalid=sum(reasons.values()),
        clock_syncs=syncs,
        invalid_reasons=reasons,
        launches=launches,
    ))


def _decode_numpy(records, codes, counts, rate, counter_epoch):
    """Events and launches by numpy passes (the reference; ``counts`` is updated for
    clock spans whose conversion overflows)."""
    clock_slots = np.zeros(0, np.int64)
    if counts[layout.KIND_CLOCK_SPAN]:
        clock_slots = np.flatnonzero(codes == layout.KIND_CLOCK_SPAN)
        clock = records[clock_slots]
        clock_start, _, ok = _clock_to_ns(clock[:, layout.WORD_START], clock[:, layout.WORD_DUR], rate)
        del clock
        if not ok.all():
            overflow_code = _INVALID_CODE["clock_overflow"]
            codes[clock_slots[~ok]] = overflow_code
            counts[overflow_code] += np.count_nonzero(~ok)
            counts[layout.KIND_CLOCK_SPAN] -= np.count_nonzero(~ok)
            clock_slots, clock_start = clock_slots[ok], clock_start[ok]
    else:
        clock_start = np.zeros(0, np.int64)

    order = _sorted_event_slots(records, codes, counts, clock_slots, clock_start)
    del codes
    events = _gather_events(records, order, rate)
    del order
    events["launch"], launches = _launch_column(records, events, counter_epoch)
    return events, launches


def _launch_column(records: np.ndarray, events: np.ndarray, counter_epoch: int):
    """Launch index per event row and the launch dicts (``cute_prof.launches``).

    Launches are found in slot (claiming) order; when every record carries the same launch
    bits, which is every single-launch buffer, that needs no second sort."""
    slots = events["slot"]
    launch_bits = records[slots, layout.WORD_TID] & layout.LAUNCH_BITS_MASK
    if launch_bits.shape[0] and (launch_bits == launch_bits[0]).all():
        _, launches = launch_identity(records[slots[:1], layout.WORD_TID], events["start_ns"][:1],
                                      events["start_ns"][:1], slots[:1],
                                      counter_epoch=counter_epoch)
        launches[0].update(
            records=int(slots.shape[0]), first_slot=int(slots.min()), last_slot=int(slots.max()),
            first_ns=int(events["start_ns"].min()),
            last_ns=int((events["start_ns"] + events["dur_ns"]).max()),
        )
        return np.zeros(slots.shape[0], dtype=np.int32), launches
    by_slot = np.argsort(slots, kind="stable")
    ordered = events[by_slot]
    launch, launches = launch_identity(
        records[ordered["slot"], layout.WORD_TID], ordered["start_ns"],
        ordered["start_ns"] + ordered["dur_ns"], ordered["slot"], counter_epoch=counter_epoch,
    )
    column = np.empty(slots.shape[0], dtype=np.int32)
    column[by_slot] = launch
    return column, launches


def _sorted_event_slots(records, codes, counts, clock_slots, clock_start) -> np.ndarray:
    """Slots of the valid events in (start_ns, slot) order.

    Sorting is the cost that dominates decoding, so where the span of start times allows
    (range * count < 2**64, true for any real kernel) each start is packed with its rank
    into one uint64 and sorted by value: unique keys make it stable without a stable sort,
    and numpy's in-place SIMD sort does it several times faster than
    ``argsort(kind="stable")`` with no index array beside the keys."""
    n_events = int(counts[layout.KIND_SPAN] + counts[layout.KIND_INSTANT]
                   + counts[layout.KIND_CLOCK_SPAN])
    if n_events == 0:
        return np.zeros(0, dtype=np.int64)
    every_slot = n_events == records.shape[0]
    slots = None if every_slot else np.flatnonzero(codes <= layout.KIND_CLOCK_SPAN)
    clock_positions = clock_slots if every_slot else np.searchsorted(slots, clock_slots)
    key = np.empty(n_events, dtype=np.int64)

    def fill_key(lo: int, hi: int) -> tuple[int, int]:
        part = key[lo:hi]
        if slots is None:
            part[...] = records[lo:hi, layout.WORD_START]
        else:
            np.take(records[:, layout.WORD_START], slots[lo:hi], out=part)
        first, last = np.searchsorted(clock_positions, [lo, hi])
        key[clock_positions[first:last]] = clock_start[first:last]
        return int(part.min()), int(part.max())

    bounds = _run_blocks(fill_key, n_events)
    low = min(b[0] for b in bounds)
    high = max(b[1] for b in bounds)
    rank_bits = max(1, (n_events - 1).bit_length())
    if (high - low) >> (64 - rank_bits):  # start times too far apart to pack: plain sort
        order = np.argsort(key, kind="stable")
        del key
    else:
        packed = key.view(np.uint64)

        def pack(lo: int, hi: int) -> None:
            ranks = np.empty(min(_BLOCK, hi - lo), dtype=np.uint64)
            for first in range(lo, hi, _BLOCK):
                part = key[first : min(first + _BLOCK, hi)]
                np.subtract(part, low, out=part)
                view = packed[first : first + part.shape[0]]
                np.left_shift(view, np.uint64(rank_bits), out=view)
                ranks_part = ranks[: part.shape[0]]
                np.add(_RANK_BASE[: part.shape[0]], np.uint64(first), out=ranks_part)
                view |= ranks_part

        _run_blocks(pack, n_events)
        # One in-place SIMD sort: splitting it over threads and merging the runs gains
        # little on two cores and needs a merge buffer of half the keys.
        packed.sort()
        mask = np.uint64((1 << rank_bits) - 1)
        _run_blocks(lambda lo, hi: np.bitwise_and(packed[lo:hi], mask, out=packed[lo:hi]),
                    n_events)
        order = key  # the low bits now hold the ranks, in sorted order
    if slots is not None:
        def to_slots(lo: int, hi: int) -> None:
            part = order[lo:hi]
            np.take(slots, part, out=part)

        _run_blocks(to_slots, n_events)
    return order


def _gather_events(records: np.ndarray, order: np.ndarray, clock_hz: float | None) -> np.ndarray:
    """The EVENT_DTYPE table of the records at slots ``order`` (already in output order),
    built block by block in cache and copied into place once."""
    events = np.empty(order.shape[0], dtype=EVENT_DTYPE)
    # Whole rows move as raw bytes: assigning structured arrays copies field by field.
    raw_events = events.view(np.dtype((np.void, EVENT_DTYPE.itemsize)))
    # start_ns and dur_ns are adjacent in both the record and EVENT_DTYPE: copy them as one
    time_words = np.dtype((np.void, 16))
    assert EVENT_DTYPE.fields["dur_ns"][1] == EVENT_DTYPE.fields["start_ns"][1] + 8 == 8
    assert layout.WORD_DUR == layout.WORD_START + 1 == 1

    def work(lo: int, hi: int) -> None:
        size = min(_BLOCK, hi - lo)
        block_events = np.zeros(size, dtype=EVENT_DTYPE)  # launch stays 0: one launch
        block_events["dur_cycles"] = -1  # only clock rows change it (and are reset below)
        raw_block = block_events.view(raw_events.dtype)
        out_times = np.ndarray(size, time_words, block_events, 0, (EVENT_DTYPE.itemsize,))
        rows = np.empty((size, layout.WORDS_PER_RECORD), dtype=np.int64)
        scratch = np.empty(size, dtype=np.int64)
        for first in range(lo, hi, _BLOCK):
            slots = order[first : min(first + _BLOCK, hi)]
            n = slots.shape[0]
            out, rec, a = block_events[:n], rows[:n], scratch[:n]
            np.take(records, slots, axis=0, out=rec)
            tag, tid = rec[:, layout.WORD_TAG], rec[:, layout.WORD_TID]
            out_times[:n] = rec.view(time_words)[:, 0]  # start_ns and dur_ns in one copy
            np.bitwise_and(tag, layout.field_mask(layout.TAG_BITS), out=a)
            out["tag"] = a
            np.right_shift(tag, layout.PAYLOAD_SHIFT, out=a)
            out["payload"] = a.astype(np.uint32).view(np.int32)
            np.right_shift(tag, layout.KIND_SHIFT, out=a)
            np.bitwise_and(a, layout.field_mask(layout.KIND_BITS), out=a)
            out["kind"] = a
            is_clock = a == layout.KIND_CLOCK_SPAN
            out["tid"] = tid.astype(np.uint32).view(np.int32)
            np.right_shift(tid, layout.SM_SHIFT, out=a)
            np.bitwise_and(a, layout.field_mask(layout.SM_BITS), out=a)
            out["sm"] = a
            np.right_shift(tid, layout.WARP_SHIFT, out=a)
            np.bitwise_and(a, layout.field_mask(layout.WARP_BITS), out=a)
            out["warp"] = a
            out["slot"] = slots
            where = np.flatnonzero(is_clock)
            if where.shape[0]:
                start, dur, _ = _clock_to_ns(
                    rec[where, layout.WORD_START], rec[where, layout.WORD_DUR], clock_hz
                )
                out["dur_cycles"][where] = rec[where, layout.WORD_DUR]
                out["start_ns"][where] = start
                out["dur_ns"][where] = dur
            raw_events[first : first + n] = raw_block[:n]
            if where.shape[0]:
                out["dur_cycles"][where] = -1

    _run_blocks(work, order.shape[0])
    return events



# ------------------------------------------------------------------ compiled decode
# The same rules and the same output as the numpy passes above, in three compiled passes:
# classify (codes and counts), keys (start times, clock-span conversion, sortedness,
# launch bits), then one gather into the event columns after a sort of packed keys that
# is skipped when the records are already in start order. The tests compare both paths.

_MAGIC_MASK = layout.MAGIC_MASK
_MAGIC_FIELD = layout.MAGIC_FIELD
_TAG_RESERVED = layout.TAG_RESERVED_MASK
_TID_RESERVED = layout.TID_RESERVED_MASK
_LAUNCH_MASK = layout.LAUNCH_BITS_MASK
_I64_MAX = int(_INT64_MAX)
_I64_MIN = -_I64_MAX - 1
_C_RESERVED = _INVALID_CODE["reserved_bits"]
_C_UNKNOWN = _INVALID_CODE["unknown_kind"]
_C_NEG_START = _INVALID_CODE["negative_start"]
_C_NEG_DUR = _INVALID_CODE["negative_duration"]
_C_END_OVERFLOW = _INVALID_CODE["end_overflow"]
_C_CLOCK_OVERFLOW = _INVALID_CODE["clock_overflow"]


@jit.kernel
def _classify_compiled(records, codes, counts):
    """:func:`_classify_exactly` for every slot: the first rule that breaks wins."""
    for i in range(records.shape[0]):
        start = records[i, 0]
        dur = records[i, 1]
        tag = records[i, 2]
        kind = (tag >> 48) & 0xF
        if (tag & _MAGIC_MASK) != _MAGIC_FIELD:
            code = _INCOMPLETE
        elif (tag & _TAG_RESERVED) | (records[i, 3] & _TID_RESERVED):
            code = _C_RESERVED
        elif kind > 3:
            code = _C_UNKNOWN
        elif start < 0:
            code = _C_NEG_START
        elif dur < 0:
            code = _C_NEG_DUR
        elif kind <= 1 and start > _I64_MAX - dur:
            code = _C_END_OVERFLOW
        else:
            code = kind
        codes[i] = code
        counts[code] += 1


@jit.kernel
def _event_keys(records, codes, ns_per_cycle, keys, stats):
    """Start time of every event in slot order into ``keys`` (clock spans converted; one
    whose conversion overflows becomes ``clock_overflow`` in ``codes``). ``stats``: events
    written, overflowed clock spans, min start, max start, sorted (1/0), launch bits all
    equal (1/0), first event slot, last event slot, max end."""
    m = 0
    overflowed = 0
    low, high, high_end = _I64_MAX, _I64_MIN, _I64_MIN
    previous = _I64_MIN
    in_order = 1
    same_launch = 1
    launch_bits = 0
    first_slot, last_slot = -1, -1
    for i in range(records.shape[0]):
        code = codes[i]
        if code > 2:
            continue
        start = records[i, 0]
        dur = records[i, 1]
        if code == 2:  # clock span: end word and cycles (see _clock_to_ns)
            dur_float = np.rint(np.float64(dur) * ns_per_cycle)
            dur_ns = np.int64(dur_float) if dur_float < _NS_LIMIT else np.int64(0)
            if not (dur_float < _NS_LIMIT and dur_ns <= start):
                codes[i] = _C_CLOCK_OVERFLOW
                overflowed += 1
                continue
            start = start - dur_ns
            dur = dur_ns
        bits = records[i, 3] & _LAUNCH_MASK
        if m == 0:
            launch_bits = bits
            first_slot = i
        elif bits != launch_bits:
            same_launch = 0
        last_slot = i
        if start < previous:
            in_order = 0
        previous = start
        low = min(low, start)
        high = max(high, start)
        high_end = max(high_end, start + dur)
        keys[m] = start
        m += 1
    stats[0] = m
    stats[1] = overflowed
    stats[2] = low
    stats[3] = high
    stats[4] = in_order
    stats[5] = same_launch
    stats[6] = first_slot
    stats[7] = last_slot
    stats[8] = high_end


@jit.kernel
def _pack_keys(keys, low, rank_bits):
    """key -> (key - low) << rank_bits | rank: unique keys whose value order is the
    (start, slot) order."""
    for i in range(keys.shape[0]):
        keys[i] = ((keys[i] - low) << rank_bits) | i


@jit.kernel
def _gather_compiled(records, order, rank_mask, gaps, ns_per_cycle,
                     start_ns, dur_ns, tag, tid, payload, kind, sm, warp, dur_cycles, slot):
    """The event columns of the events at ranks ``order & rank_mask`` (output order).
    Rank -> slot: ``slot = rank + #(gaps <= rank)`` where ``gaps`` holds, for each
    non-event slot in order, the number of events before it."""
    n_gaps = gaps.shape[0]
    for i in range(order.shape[0]):
        rank = order[i] & rank_mask
        lo, hi = 0, n_gaps
        while lo < hi:  # searchsorted(gaps, rank, "right")
            mid = (lo + hi) >> 1
            if gaps[mid] <= rank:
                lo = mid + 1
            else:
                hi = mid
        s = rank + lo
        tag_word = records[s, 2]
        tid_word = records[s, 3]
        k = (tag_word >> 48) & 0xF
        start = records[s, 0]
        dur = records[s, 1]
        cycles = np.int64(-1)
        if k == 2:
            cycles = dur
            dur = np.int64(np.rint(np.float64(dur) * ns_per_cycle))
            start = start - dur
        start_ns[i] = start
        dur_ns[i] = dur
        tag[i] = np.int32(tag_word & 0xFFFF)
        payload[i] = np.int32(np.uint32((tag_word >> 16) & 0xFFFFFFFF))
        kind[i] = np.uint8(k)
        tid[i] = np.int32(np.uint32(tid_word & 0xFFFFFFFF))
        sm[i] = np.int16((tid_word >> 32) & 0xFFF)
        warp[i] = np.int8((tid_word >> 44) & 0x3F)
        dur_cycles[i] = cycles
        slot[i] = s


def _decode_compiled(records, codes, counts, rate, counter_epoch):
    """Events and launches by compiled passes (see above); None where the numpy path
    must run (start times too far apart to pack with their ranks)."""
    n_upper = int(counts[layout.KIND_SPAN] + counts[layout.KIND_INSTANT]
                  + counts[layout.KIND_CLOCK_SPAN])
    keys = np.empty(n_upper, dtype=np.int64)
    stats = np.zeros(9, dtype=np.int64)
    ns_per_cycle = 1e9 / rate if rate is not None else 0.0
    _event_keys(records, codes, ns_per_cycle, keys, stats)
    n_events, overflowed, low, high, in_order, same_launch, first_slot, last_slot, high_end = \
        stats.tolist()
    if overflowed:
        counts[_C_CLOCK_OVERFLOW] += overflowed
        counts[layout.KIND_CLOCK_SPAN] -= overflowed
    keys = keys[:n_events]
    rank_bits = max(1, (n_events - 1).bit_length())
    if n_events and (high - low) >> (64 - rank_bits):
        return None  # the numpy path sorts without packing
    if n_events:
        _pack_keys(keys, low, rank_bits)
        if not in_order:
            keys.view(np.uint64).sort()  # numpy's in-place SIMD sort; unique keys: stable
    # non-event slots, and the number of events before each
    if n_events == records.shape[0]:
        gaps = np.zeros(0, dtype=np.int64)
    else:
        others = np.flatnonzero(codes > layout.KIND_CLOCK_SPAN)
        gaps = others - np.arange(others.shape[0], dtype=np.int64)
    events = np.zeros(n_events, dtype=EVENT_DTYPE)
    columns = [events[name] for name in ("start_ns", "dur_ns", "tag", "tid", "payload", "kind",
                                         "sm", "warp", "dur_cycles", "slot")]
    # Threads split the rows: the first touch of the fresh table's pages is most of the
    # cost (see bench/results/host_speed/host_scale.md) and goes faster from both cores.
    _run_blocks(lambda lo, hi: _gather_compiled(
        records, keys[lo:hi], (1 << rank_bits) - 1, gaps, ns_per_cycle,
        *(column[lo:hi] for column in columns)), n_events)
    keys = None  # frees the sorted keys (a del here reads to pyflakes as unbound in the lambda)
    if not n_events:
        return events, []
    if not same_launch:
        events["launch"], launches = _launch_column(records, events, counter_epoch)
        return events, launches
    first = events[:1]
    _, launches = launch_identity(records[first["slot"], layout.WORD_TID], first["start_ns"],
                                  first["start_ns"], first["slot"], counter_epoch=counter_epoch)
    launches[0].update(records=n_events, first_slot=first_slot, last_slot=last_slot,
                       first_ns=low, last_ns=high_end)
    return events, launches


def _clock_syncs(records: np.ndarray, slots: np.ndarray) -> np.ndarray:
    rows = records[slots]
    tid_fields = layout.decode_tid_words(rows[:, layout.WORD_TID])
    syncs = np.empty(slots.shape[0], dtype=CLOCK_SYNC_DTYPE)
    syncs["globaltimer_ns"] = rows[:, layout.WORD_START]
    syncs["clock_cycles"] = rows[:, layout.WORD_DUR]
    syncs["sm"] = tid_fields["sm"]
    syncs["tid"] = tid_fields["tid"]
    syncs["slot"] = slots
    return syncs


def _no_clock_rate_message(count: int, fit: dict | None, min_span_ns: int) -> str:
    if fit is None:
        why = "the buffer holds no clock_sync records"
    elif fit["clock_sync_pairs"] < 2:
        why = "the buffer holds only one clock_sync record"
    else:
        why = (
            f"its {fit['clock_sync_pairs']} clock_sync records on {fit['clock_sync_sms']} SM(s) "
            f"give no usable fit (each SM needs >= 2 pairs spanning >= {min_span_ns} ns; "
            f"the longest span was {fit['clock_sync_max_span_ns']:.0f} ns)"
        )
    return (
        f"{count} clock-mode records need the SM clock rate to convert cycles to ns, but {why}. "
        "Call cute_prof.device.clock_sync at the start and at the end of the kernel, or pass "
        "clock_hz= (e.g. from nvidia-smi -q -d CLOCK) to the decoder"
    )


# ------------------------------------------------------------------- losses, compat
def warn_about_losses(trace: Trace, *, include_overflow: bool = True, stacklevel: int = 2) -> None:
    """Emit a ProfileWarning for each kind of lost record, with the exact counts."""
    if include_overflow and trace.overflow > 0:
        warnings.warn(
            f"profile buffer overflow: {trace.overflow} of {trace.attempted} records were "
            f"dropped (capacity {trace.capacity}); allocate max_events >= {trace.attempted}",
            ProfileWarning,
            stacklevel=stacklevel + 1,
        )
    if trace.incomplete > 0:
        warnings.warn(
            f"{trace.incomplete} of {trace.recorded} claimed slots were never completely "
            "written (the kernel trapped or was killed mid-record, or the buffer was read "
            "before the kernel finished); they were left out",
            ProfileWarning,
            stacklevel=stacklevel + 1,
        )
    if trace.invalid > 0:
        reasons = getattr(trace, "invalid_reasons", None) or {}
        named = ", ".join(f"{count} {reason.replace('_', ' ')}" for reason, count in reasons.items())
        warnings.warn(
            f"{trace.invalid} of {trace.recorded} records are invalid"
            + (f" ({named})" if named else "")
            + ": the buffer was corrupted or written by a newer cute_prof (see the validity "
            "rules in the README's layout section); they were left out",
            ProfileWarning,
            stacklevel=stacklevel + 1,
        )


def decode_events(buf, tag_table=None, *, clock_hz: float | None = None) -> tuple[list[Event], int]:
    """Reference-API decode: ``(events sorted by start_ns, overflow count)``.

    Built from :func:`decode_buffer`; warns (ProfileWarning) about incomplete or invalid
    slots. Overflow is returned, not warned about, as in the reference API."""
    trace = decode_buffer(buf, tag_table, clock_hz=clock_hz)
    warn_about_losses(trace, include_overflow=False, stacklevel=2)
    return trace.to_events(), trace.overflow
