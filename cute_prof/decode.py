"""Decoding a raw profile buffer into a :class:`~cute_prof.trace.Trace`.

Everything here is vectorised numpy: a million records decode in a few tens of
milliseconds, so decoding is never the reason to profile fewer events.

What the decoder guarantees (and the fuzz tests check):

* ``counter`` is the record count in the low 40 bits of word 0 (the bits above are the
  launch epoch, see ``cute_prof.launches``); only a negative word 0 is rejected.
* Only ``min(counter, capacity)`` slots are read; slots at or above the counter are ignored.
* ``overflow == max(0, counter - capacity)`` exactly.
* A claimed slot whose tag word lacks the completion magic is counted in ``incomplete`` and
  never decoded (a zero slot would otherwise look like tag 0 at time 0).
* A complete slot with a record kind this decoder does not know is counted in ``invalid``.
* ``len(events) + len(clock_syncs) + incomplete + invalid == min(counter, capacity)``.
* Anything that is not a profile buffer raises :class:`ProfileBufferError`, nothing else.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np

from . import layout
from .buffer import host_words, source_metadata
from .errors import ClockRateError, ProfileBufferError, ProfileWarning
from .launches import launch_identity
from .tags import as_tag_table
from .trace import CLOCK_SYNC_DTYPE, EVENT_DTYPE, Event, Trace

__all__ = [
    "decode_buffer",
    "decode_events",
    "fit_clock_rate",
    "warn_about_losses",
    "MIN_SYNC_SPAN_NS",
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
    """
    table = as_tag_table(tag_table)
    words = host_words(buf)
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

    tag_fields = layout.decode_tag_words(records[:, layout.WORD_TAG])
    complete = tag_fields["complete"]
    kind = tag_fields["kind"]
    is_event = complete & np.isin(kind, _EVENT_KINDS)
    is_sync = complete & (kind == layout.KIND_CLOCK_SYNC)
    incomplete = claimed - int(np.count_nonzero(complete))
    invalid = int(np.count_nonzero(complete)) - int(np.count_nonzero(is_event | is_sync))

    tid_fields = layout.decode_tid_words(records[:, layout.WORD_TID])
    syncs = _clock_syncs(records, tid_fields, np.flatnonzero(is_sync))

    meta: dict[str, Any] = source_metadata(buf)
    slots = np.flatnonzero(is_event)
    start_ns = records[:, layout.WORD_START][slots]
    dur_ns = records[:, layout.WORD_DUR][slots]
    event_kind = kind[slots]
    clock_span = event_kind == layout.KIND_CLOCK_SPAN
    fit = fit_clock_rate(syncs, min_span_ns=min_sync_span_ns) if syncs.shape[0] else None
    if fit is not None:
        meta.update(fit)
    if clock_hz is not None:
        if fit is not None and fit["clock_hz"] is not None:
            meta["clock_hz_fit"] = fit["clock_hz"]
        meta["clock_hz"] = _check_clock_hz(clock_hz)
        meta["clock_hz_source"] = "argument"
    dur_cycles = None
    if clock_span.any():
        rate = meta.get("clock_hz")
        if rate is None:
            count = int(np.count_nonzero(clock_span))
            raise ClockRateError(_no_clock_rate_message(count, fit, min_sync_span_ns))
        start_ns, dur_ns, dur_cycles = _convert_clock_spans(start_ns, dur_ns, clock_span, rate)

    # Sort once, then gather every column straight into place (no structured-array shuffle).
    order = np.argsort(start_ns, kind="stable")
    source_slots = slots[order]
    events = np.empty(slots.shape[0], dtype=EVENT_DTYPE)
    events["start_ns"] = start_ns[order]
    events["dur_ns"] = dur_ns[order]
    events["tag"] = tag_fields["tag"][source_slots]
    events["payload"] = tag_fields["payload"][source_slots]
    events["kind"] = event_kind[order]
    events["tid"] = tid_fields["tid"][source_slots]
    events["sm"] = tid_fields["sm"][source_slots]
    events["warp"] = tid_fields["warp"][source_slots]
    events["dur_cycles"] = -1 if dur_cycles is None else dur_cycles[order]
    events["slot"] = source_slots
    # which launch (epoch, grid id) wrote each row; slots are in claiming order here
    launch, launches = launch_identity(
        records[slots, layout.WORD_TID], start_ns, start_ns + dur_ns, slots,
        counter_epoch=counter_epoch,
    )
    events["launch"] = launch[order]
    meta["capacity"] = capacity
    if metadata:
        meta.update(metadata)
    return Trace(
        events=events,
        tag_names=table.names,
        capacity=capacity,
        attempted=counter,
        overflow=max(0, counter - capacity),
        incomplete=incomplete,
        metadata=meta,
        invalid=invalid,
        clock_syncs=syncs,
        launches=launches,
    )


def _clock_syncs(records: np.ndarray, tid_fields: dict, slots: np.ndarray) -> np.ndarray:
    syncs = np.empty(slots.shape[0], dtype=CLOCK_SYNC_DTYPE)
    syncs["globaltimer_ns"] = records[slots, layout.WORD_START]
    syncs["clock_cycles"] = records[slots, layout.WORD_DUR]
    syncs["sm"] = tid_fields["sm"][slots]
    syncs["tid"] = tid_fields["tid"][slots]
    syncs["slot"] = slots
    return syncs


def _convert_clock_spans(start_ns, dur_word, mask, clock_hz: float):
    """Clock spans: dur word = cycles, start word = END %globaltimer. Make them ordinary.

    Returns new (start_ns, dur_ns, dur_cycles) columns; dur_cycles is -1 for other kinds."""
    cycles = dur_word[mask]
    dur_ns = np.rint(cycles.astype(np.float64) * 1e9 / clock_hz)
    dur_ns = np.clip(dur_ns, -_NS_LIMIT, _NS_LIMIT).astype(np.int64)
    dur_cycles = np.full(dur_word.shape[0], -1, dtype=np.int64)
    dur_cycles[mask] = cycles
    new_dur = dur_word.copy()
    new_dur[mask] = dur_ns
    new_start = start_ns.copy()
    new_start[mask] = start_ns[mask] - dur_ns
    return new_start, new_dur, dur_cycles


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
        warnings.warn(
            f"{trace.invalid} of {trace.recorded} records have a record kind this version of "
            "cute_prof does not know (corrupted buffer, or written by a newer cute_prof); "
            "they were left out",
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
