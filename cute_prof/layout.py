"""The one definition of the profile buffer format, shared by the device ops and the decoder.

Buffer: a flat int64 array of ``1 + 4 * max_events`` words.

* ``buf[0]`` is the record counter. Every recording thread bumps it atomically by one
  before it writes, and keeps bumping it after the buffer is full, so the host knows
  exactly how many records were attempted: ``overflow = max(0, counter - max_events)``.
  The count lives in bits 0..39; bits 40..62 hold the **launch epoch**, which the host
  bumps (``ProfileBuffer.next_launch()``: one ``add`` of ``1 << 40`` on the stream, so it
  is captured into CUDA graphs too) before a launch or graph replay. The atomic that claims
  a slot returns the whole word, so every record learns its epoch for free; the device
  masks the low 40 bits for the slot and stores the epoch's low 8 bits in the tid word.
* Record ``i`` occupies ``buf[1 + 4*i : 5 + 4*i]`` = ``start_ns, dur_ns, tag_word, tid_word``.

The tag word and the tid word carry metadata above the 16-bit tag id and the 32-bit tid,
so ``Event.tag_id`` and ``Event.tid`` still decode to exactly what the kernel passed.

Tag word (word 2)::

    bits  0..15  tag id (0..65535)
    bits 16..47  payload: the 32-bit pattern of a user int32 (loop index, tile id)
    bits 48..51  record kind (KIND_*)
    bits 52..55  reserved, zero (TAG_RESERVED_MASK)
    bits 56..62  COMPLETE_MAGIC: written in the same store as the rest of the record, so a
                 slot that was claimed but never written (kernel trapped, or was killed)
                 reads back as zero here and is reported as incomplete
    bit  63      zero: a valid tag word is never negative (also in TAG_RESERVED_MASK)

Tid word (word 3)::

    bits  0..31  tid: the 32-bit pattern of the user's int32 thread/track id
    bits 32..43  SM id (``%smid``)
    bits 44..49  warp index inside the CTA
    bits 50..57  launch epoch, low 8 bits (counter word bits 40..47 when the slot was claimed)
    bits 58..62  ``%gridid``, low 5 bits (tells apart direct launches and the kernels of one
                 graph replay, which share an epoch when the host bumps it once per replay)
    bit  63      zero (TID_RESERVED_MASK)

A record whose magic is present but whose reserved bits are not zero is *invalid*, not
incomplete (see the validity rules in ``cute_prof.decode``). So is a record that starts far
outside its launch's time window (``LAUNCH_GAP_LIMIT_NS``, reason ``outside_launch``), or
outside the trace's (``TRACE_WINDOW_NS``, the same reason). Giving reserved bits a meaning
means shrinking ``TAG_RESERVED_*`` / ``TID_RESERVED_*`` here; the decoder reads only these.

Old buffers (epoch 0, bits 50..62 zero) decode as one launch. The decoder groups records
by (epoch unwrapped in slot order, grid id bits): see ``cute_prof.launches``.

Kinds: ``KIND_SPAN`` (start_ns, dur_ns from ``%globaltimer``); ``KIND_INSTANT`` (dur_ns = 0);
``KIND_CLOCK_SPAN`` (dur word holds SM cycles from ``clock64``; start word holds the
``%globaltimer`` value at the *end* of the region, converted on the host with the SM clock
measured in the same launch); ``KIND_CLOCK_SYNC`` (a calibration pair: start word is
``%globaltimer``, dur word is ``clock64`` read back to back on the same SM).

Records start at byte offset 8 + 32*i. When the buffer's data pointer is 8 mod 16 (as
``allocate_profile_buffer`` arranges) every record is 16-byte aligned and the device writes
it with two 16-byte stores; otherwise it falls back to four 8-byte stores.

Owns the bit layout of both buffer formats: every encoder and decoder reads it from here, and
it may import nothing else of cute_prof.
"""

from __future__ import annotations

import numpy as np

WORDS_PER_RECORD = 4
HEADER_WORDS = 1
COUNTER_INDEX = 0
RECORD_BYTES = 8 * WORDS_PER_RECORD

# word indices inside one record
WORD_START = 0
WORD_DUR = 1
WORD_TAG = 2
WORD_TID = 3

# tag word
TAG_SHIFT, TAG_BITS = 0, 16
PAYLOAD_SHIFT, PAYLOAD_BITS = 16, 32
KIND_SHIFT, KIND_BITS = 48, 4
TAG_RESERVED_SHIFT, TAG_RESERVED_BITS = 52, 4
MAGIC_SHIFT, MAGIC_BITS = 56, 7
COMPLETE_MAGIC = 0x5A

# tid word
TID_SHIFT, TID_BITS = 0, 32
SM_SHIFT, SM_BITS = 32, 12
WARP_SHIFT, WARP_BITS = 44, 6
EPOCH_SHIFT, EPOCH_BITS = 50, 8
GRID_SHIFT, GRID_BITS = 58, 5

# counter word: records attempted (low bits) | launch epoch (high bits)
COUNTER_BITS = 40
LAUNCH_EPOCH_SHIFT = COUNTER_BITS
LAUNCH_EPOCH_INCREMENT = 1 << LAUNCH_EPOCH_SHIFT
MAX_LAUNCH_EPOCH = (1 << (63 - LAUNCH_EPOCH_SHIFT)) - 1
TID_RESERVED_SHIFT, TID_RESERVED_BITS = 63, 1  # the sign bit only
# the tid-word bits that say which launch wrote a record (epoch and grid id)
LAUNCH_BITS_MASK = ((1 << EPOCH_BITS) - 1) << EPOCH_SHIFT | ((1 << GRID_BITS) - 1) << GRID_SHIFT

KIND_SPAN = 0
KIND_INSTANT = 1
KIND_CLOCK_SPAN = 2
KIND_CLOCK_SYNC = 3
KIND_NAMES = {
    KIND_SPAN: "span",
    KIND_INSTANT: "instant",
    KIND_CLOCK_SPAN: "clock_span",
    KIND_CLOCK_SYNC: "clock_sync",
}

MAX_TAG_ID = (1 << TAG_BITS) - 1
MAX_SM_ID = (1 << SM_BITS) - 1
MAX_WARP_ID = (1 << WARP_BITS) - 1
# Records of one launch lie together in time. Sorted by start, a launch's records are split
# wherever two consecutive starts are more than this apart (2**42 ns, about 73 minutes with
# no record of the launch at all); records outside the largest group (the earliest on a tie)
# are invalid, reason "outside_launch" (cute_prof.decode.INVALID_REASONS). So one corrupt
# start word (a flipped high bit, a kernel writing over the buffer) cannot move a trace's time
# origin by months, where microsecond doubles in a JSON trace no longer keep nanoseconds.
LAUNCH_GAP_LIMIT_NS = 1 << 42
# Records of one trace lie together in time too. Records outside the window of this width
# (2**51 ns, about 26 days) that holds the most starts (the earliest such window on a tie)
# are invalid, reason "outside_launch" as well; the rule above then judges the rest. A record
# whose tid word is corrupt as well as its start is a launch of its own, which the rule above
# cannot judge; this one keeps it from moving the time origin. The starts then span at most
# 2**51 ns, where the JSON's microsecond doubles still keep whole nanoseconds.
TRACE_WINDOW_NS = 1 << 51
# A counter above this cannot come from a real launch (2**40 records at 1.5 G/s is 12 minutes
# of nothing but recording); it means the buffer is not a profile buffer or was corrupted.
MAX_PLAUSIBLE_COUNTER = 1 << COUNTER_BITS
COUNTER_MASK = MAX_PLAUSIBLE_COUNTER - 1


def split_counter_word(word: int) -> tuple[int, int]:
    """``(records attempted, launch epoch)`` of a counter word. Old buffers: epoch 0."""
    word = int(word)
    if word < 0:
        return word, 0  # not a profile buffer; the decoder reports it
    return word & COUNTER_MASK, word >> LAUNCH_EPOCH_SHIFT


def field_mask(bits: int) -> int:
    return (1 << bits) - 1


def as_int64(value: int) -> int:
    """The int64 whose two's-complement bit pattern is the 64-bit ``value``."""
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >> 63 else value


MAGIC_FIELD = COMPLETE_MAGIC << MAGIC_SHIFT
MAGIC_MASK = field_mask(MAGIC_BITS) << MAGIC_SHIFT
# Bits that must be zero in a complete record (as int64 bit patterns, for ``words & MASK``).
TAG_RESERVED_MASK = as_int64((field_mask(TAG_RESERVED_BITS) << TAG_RESERVED_SHIFT) | (1 << 63))
TID_RESERVED_MASK = as_int64(field_mask(TID_RESERVED_BITS) << TID_RESERVED_SHIFT)


def buffer_words(max_events: int) -> int:
    """Number of int64 words a buffer for ``max_events`` records needs."""
    return HEADER_WORDS + WORDS_PER_RECORD * int(max_events)


def record_word_index(slot, word: int = 0):
    """Index into the flat buffer of ``word`` of record ``slot`` (scalar or array)."""
    return HEADER_WORDS + WORDS_PER_RECORD * slot + word


def tag_word_constant(tag: int, *, kind: int = KIND_SPAN, payload: int = 0) -> int:
    """The tag word as a Python int, for tags known when the kernel is traced."""
    return (
        ((int(tag) & field_mask(TAG_BITS)) << TAG_SHIFT)
        | ((int(payload) & field_mask(PAYLOAD_BITS)) << PAYLOAD_SHIFT)
        | ((int(kind) & field_mask(KIND_BITS)) << KIND_SHIFT)
        | MAGIC_FIELD
    )


def encode_tag_words(tag, *, payload=0, kind=KIND_SPAN) -> np.ndarray:
    """Vectorised tag-word encoder (the host mirror of what the device ops emit)."""
    tag = np.asarray(tag, dtype=np.int64) & field_mask(TAG_BITS)
    payload = np.asarray(payload, dtype=np.int64) & field_mask(PAYLOAD_BITS)
    kind = np.asarray(kind, dtype=np.int64) & field_mask(KIND_BITS)
    return (tag << TAG_SHIFT) | (payload << PAYLOAD_SHIFT) | (kind << KIND_SHIFT) | MAGIC_FIELD


def encode_tid_words(tid, *, sm=0, warp=0, epoch=0, grid=0) -> np.ndarray:
    """Vectorised tid-word encoder (the host mirror of what the device ops emit)."""
    tid = np.asarray(tid, dtype=np.int64) & field_mask(TID_BITS)
    sm = np.asarray(sm, dtype=np.int64) & field_mask(SM_BITS)
    warp = np.asarray(warp, dtype=np.int64) & field_mask(WARP_BITS)
    epoch = np.asarray(epoch, dtype=np.int64) & field_mask(EPOCH_BITS)
    grid = np.asarray(grid, dtype=np.int64) & field_mask(GRID_BITS)
    return ((tid << TID_SHIFT) | (sm << SM_SHIFT) | (warp << WARP_SHIFT)
            | (epoch << EPOCH_SHIFT) | (grid << GRID_SHIFT))


def _field(words: np.ndarray, shift: int, bits: int) -> np.ndarray:
    return (words >> shift) & field_mask(bits)


def _as_int32(values: np.ndarray) -> np.ndarray:
    return values.astype(np.uint32).view(np.int32)


def decode_tag_words(words: np.ndarray) -> dict:
    """Split tag words into fields: tag, payload (int32), kind, complete (bool: the magic
    is there, so the record was written), reserved_ok (bool: the must-be-zero bits are)."""
    words = np.asarray(words, dtype=np.int64)
    return {
        "tag": _field(words, TAG_SHIFT, TAG_BITS).astype(np.int32),
        "payload": _as_int32(_field(words, PAYLOAD_SHIFT, PAYLOAD_BITS)),
        "kind": _field(words, KIND_SHIFT, KIND_BITS).astype(np.uint8),
        "complete": _field(words, MAGIC_SHIFT, MAGIC_BITS) == COMPLETE_MAGIC,
        "reserved_ok": (words & TAG_RESERVED_MASK) == 0,
    }


def decode_tid_words(words: np.ndarray) -> dict:
    """Split tid words into fields: tid (int32), sm, warp, reserved_ok (bool)."""
    words = np.asarray(words, dtype=np.int64)
    return {
        "tid": _as_int32(_field(words, TID_SHIFT, TID_BITS)),
        "sm": _field(words, SM_SHIFT, SM_BITS).astype(np.int16),
        "warp": _field(words, WARP_SHIFT, WARP_BITS).astype(np.int8),
        "reserved_ok": (words & TID_RESERVED_MASK) == 0,
    }


def decode_launch_bits(words: np.ndarray) -> dict:
    """The launch-identity fields of tid words: epoch (low 8 bits), grid (low 5 bits)."""
    words = np.asarray(words, dtype=np.int64)
    return {
        "epoch": _field(words, EPOCH_SHIFT, EPOCH_BITS).astype(np.int64),
        "grid": _field(words, GRID_SHIFT, GRID_BITS).astype(np.int64),
    }


def write_records(
    buf: np.ndarray,
    start_ns,
    dur_ns,
    tag,
    tid,
    *,
    payload=0,
    kind=KIND_SPAN,
    sm=0,
    warp=0,
    first_slot: int | None = None,
    grid=0,
) -> None:
    """Append records to a host int64 buffer exactly as the device does: bump the counter
    by the number attempted, store only the ones that fit, stamp the counter word's launch
    epoch and ``grid`` (the ``%gridid``) into the tid words. Used by tests and the CPU demo."""
    start_ns = np.atleast_1d(np.asarray(start_ns, dtype=np.int64))
    n = start_ns.shape[0]
    max_events = (buf.shape[0] - HEADER_WORDS) // WORDS_PER_RECORD
    count, epoch = split_counter_word(buf[COUNTER_INDEX])
    first = count if first_slot is None else int(first_slot)
    slots = first + np.arange(n)
    fits = slots < max_events
    words = np.empty((n, WORDS_PER_RECORD), dtype=np.int64)
    words[:, WORD_START] = start_ns
    words[:, WORD_DUR] = np.broadcast_to(np.asarray(dur_ns, dtype=np.int64), (n,))
    words[:, WORD_TAG] = np.broadcast_to(encode_tag_words(tag, payload=payload, kind=kind), (n,))
    tid_words = encode_tid_words(tid, sm=sm, warp=warp, epoch=epoch, grid=grid)
    words[:, WORD_TID] = np.broadcast_to(tid_words, (n,))
    records = buf[HEADER_WORDS:HEADER_WORDS + WORDS_PER_RECORD * max_events].reshape(
        max_events, WORDS_PER_RECORD
    )
    records[slots[fits]] = words[fits]
    if first_slot is None:
        buf[COUNTER_INDEX] += n


# ----------------------------------------------------------------------------------------
# Flight-recorder region (a separate buffer; the record format above is unchanged)
#
# A flat int64 array in pinned, device-mapped host memory that the host can read while a
# kernel runs and after its context has faulted. It holds, per recording warp, one
# "position" slot per nesting depth (FLIGHT_DEPTH of them):
#
#   words 0..1        header, written by the host: FLIGHT_MAGIC, then the slot count
#   slot s            words FLIGHT_HEADER_WORDS + 4*s .. +3, 16-byte aligned:
#       word 0  enter_ns   %globaltimer when the region was entered (0: never entered)
#       word 1  leave_ns   %globaltimer when it was left; 0 while the region is open
#       word 2  tag word   exactly the record tag word (tag, payload, kind, COMPLETE_MAGIC)
#       word 3  where word bits 0..31 CTA linear id (x + nx*(y + ny*z)),
#                          bits 32..43 SM id, bits 44..49 warp index in the CTA,
#                          bits 50..63 zero
#   s = (cta_linear * warps_per_cta + warp) * FLIGHT_DEPTH + depth
#
# Enter stores words 2..3 then words 0..1 (leave_ns = 0), leave stores word 1; both with
# st.volatile (system scope) so the host sees them without the kernel finishing.

FLIGHT_MAGIC = 0x0C0FFEE_F119470  # "flight" marker in word 0 of the region
FLIGHT_HEADER_WORDS = 2
FLIGHT_SLOT_WORDS = 4
FLIGHT_DEPTH = 4
FLIGHT_WORD_ENTER = 0
FLIGHT_WORD_LEAVE = 1
FLIGHT_WORD_TAG = 2
FLIGHT_WORD_WHERE = 3
FLIGHT_CTA_SHIFT, FLIGHT_CTA_BITS = 0, 32
# SM and warp fields of the where word sit where they sit in the record tid word
FLIGHT_SM_SHIFT, FLIGHT_WARP_SHIFT = SM_SHIFT, WARP_SHIFT


def flight_words(total_warps: int) -> int:
    """Number of int64 words a flight region for ``total_warps`` warps needs."""
    return FLIGHT_HEADER_WORDS + FLIGHT_SLOT_WORDS * FLIGHT_DEPTH * int(total_warps)


def encode_where_words(cta, *, sm=0, warp=0) -> np.ndarray:
    """Vectorised where-word encoder (the host mirror of the device's flight ops)."""
    cta = np.asarray(cta, dtype=np.int64) & field_mask(FLIGHT_CTA_BITS)
    sm = np.asarray(sm, dtype=np.int64) & field_mask(SM_BITS)
    warp = np.asarray(warp, dtype=np.int64) & field_mask(WARP_BITS)
    return (cta << FLIGHT_CTA_SHIFT) | (sm << FLIGHT_SM_SHIFT) | (warp << FLIGHT_WARP_SHIFT)


def decode_where_words(words: np.ndarray) -> dict:
    """Split where words into fields: cta, sm, warp."""
    words = np.asarray(words, dtype=np.int64)
    return {
        "cta": _field(words, FLIGHT_CTA_SHIFT, FLIGHT_CTA_BITS),
        "sm": _field(words, FLIGHT_SM_SHIFT, SM_BITS).astype(np.int16),
        "warp": _field(words, FLIGHT_WARP_SHIFT, WARP_BITS).astype(np.int8),
    }

# ======================================================================================
# Per-warp slices (format 2): 8-byte records, one slice of the buffer per warp.
#
# Word 0 is SLICES_MAGIC, a negative int64 (bit 63 set). The flat format's counter is never
# negative (bits 40..62 may carry a launch epoch, bit 63 never does), so the two formats can
# never be mistaken for each other. Header words::
#
#     word 0  SLICES_MAGIC
#     word 1  bits 0..31 records per slice (capacity per warp), bits 32..62 number of slices
#     word 2  records attempted by warps that found no slice (warp index >= slices): all lost
#     word 3  zero (reserved)
#
# Slice ``s`` (global warp index: linear CTA index * warps per CTA + warp in the CTA) starts
# at word ``SLICES_HEADER_WORDS + s * (SLICE_HEADER_WORDS + per_warp)``::
#
#     word 0  full 64-bit %globaltimer when the warp opened its recorder (0: never opened)
#     word 1  bits 0..31 tid, 32..43 SM id, 44..49 warp in CTA, 56..62 SLICE_OPEN_MAGIC
#     word 2  bits 0..31 records attempted by the warp (modulo 2**29), 56..62 SLICE_CLOSED_MAGIC,
#             bit 55 (SLICE_DIVERGED_BIT) set when the lanes' counts disagreed at close():
#             the warp recorded from divergent code, and lane 0, which stores, missed records
#             (zero: the warp never called close(); its written records still decode)
#             bit 54 (SLICE_LONG_OPEN_BIT) set when the recorder stayed open 2**29 ns (0.54 s)
#             or longer (possibly from 2**28 ns: close() compares the timer in 2**28 ns
#             units): the count is kept modulo 2**SLICE_COUNT_BITS, and only a warp open
#             that long can have attempted that many records
#     word 3  bits 0..31 records that fit the slice where it lies, 56..62 SLICE_OPEN_MAGIC
#             (written at the open): per_warp, or fewer when the slice crosses a 4 GiB
#             boundary of the address space (the device keeps only the low 32 bits of a
#             record's address in its cursor, so a slice ends before such a boundary).
#             Zero in buffers from before this word existed: per_warp
#     then ``per_warp`` records of one word each:
#             bits  0..31 %globaltimer_lo when the record was written (the end of a span)
#             bits 32..47 tag id, 48..60 payload (13 bits, unsigned), 61..62 slice kind,
#             bit 63 one (a written record is never zero; the host zeroes the buffer)
#
# Slice kinds: SLICE_KIND_MARK (a boundary: starts the next span, no event of its own),
# SLICE_KIND_SPAN (a span from the previous record's time, or the open time, to this one),
# SLICE_KIND_INSTANT, and SLICE_KIND_START (an explicit start for the span right after it:
# its time is a timestamp the warp read earlier, so it may precede the record before it;
# bits 32..50 hold bits 13..31 of that span's payload, 51..60 are zero). A region written
# with an explicit start and end (``SliceRecorder.span``, the regions of a warp-specialised
# kernel that overlap) is the pair START, SPAN: two words, stored together, and its payload
# has the flat format's 32 bits. The host rebuilds the high timer bits from the open time by
# summing the differences between consecutive records of a warp, modulo 2**32 (exact while
# consecutive records of one warp are under 2**32 ns = 4.29 s apart); the difference into a
# START record is taken as signed (exact while the start is under 2**31 ns = 2.1 s before
# the record stored ahead of it).
#
# Pooled slices (the same format, for a run that keeps every launch: ``cute-prof record``).
# Header word 1 bit 62 (SLICES_POOL_BIT) set: the slices are a pool that every launch of
# every recording kernel of the run draws from, instead of one slice per warp index::
#
#     header word 2  zero (a pool counts the records of warps without a slice per launch)
#     header word 3  slices claimed: each warp's open adds one atomically and takes the slice
#                    the add returned (a claim >= the slice count finds no slice)
#     slice word 3   bits 32..41 kernel id (the run's number of the recording kernel, compiled
#                    into it), bits 42..55 the kernel's launch epoch at the open, low 14 bits
#     lost table     POOL_LOST_WORDS words after the last slice: word
#                    ``kernel * POOL_LOST_EPOCHS + epoch % POOL_LOST_EPOCHS`` counts the
#                    records attempted by warps of that launch that found no slice
#     epoch table    MAX_POOL_KERNELS words after it: word ``kernel`` is that kernel's launch
#                    epoch, which the host bumps by one on the launch's stream before each
#                    recorded launch (a CUDA graph captures the bump, so every replay of a
#                    captured launch gets an epoch of its own); a warp loads it at its open
#
# The host numbers a kernel's recorded launches by epoch: consecutive claims of one kernel are
# fewer than 2**13 epochs apart, so the low 14 bits unwrap in claim order. Slices are claimed
# in order, so the claimed slices are the pool's first ones; a pool saved after a run keeps
# only those (header word 1 rewritten to their count) and its two tables.
SLICES_MAGIC = as_int64(0xC511_CE50_0000_0002)  # "slices", format 2; negative
SLICES_HEADER_WORDS = 4
SLICE_HEADER_WORDS = 4
SLICE_OPEN_MAGIC = 0x5B
SLICE_CLOSED_MAGIC = 0x5C
SLICE_MAGIC_SHIFT = 56
SLICE_DIVERGED_BIT = 55
SLICE_LONG_OPEN_BIT = 54
# the device counts in bytes of record address (8 a record) in 32 bits: counts wrap at 2**29
SLICE_COUNT_BITS = 29
# close() flags a recorder open at least 2**SLICE_LONG_OPEN_SHIFT ns; a warp cannot store
# 2**SLICE_COUNT_BITS records in less (a record is 4 instructions of one warp, >= 2 ns at 2 GHz)
SLICE_LONG_OPEN_SHIFT = 28
# records of a slice start below this offset within a 4 GiB window of the address space (word 3)
SLICE_WINDOW_END = (1 << 32) - 8
SLICE_TAG_SHIFT, SLICE_TAG_BITS = 32, 16
SLICE_PAYLOAD_SHIFT, SLICE_PAYLOAD_BITS = 48, 13
SLICE_KIND_SHIFT, SLICE_KIND_BITS = 61, 2
SLICE_WRITTEN_BIT = 63
SLICE_KIND_MARK, SLICE_KIND_SPAN, SLICE_KIND_INSTANT, SLICE_KIND_START = 0, 1, 2, 3
MAX_SLICE_PAYLOAD = (1 << SLICE_PAYLOAD_BITS) - 1
# a START record carries the high payload bits of the span it starts
SLICE_START_PAYLOAD_SHIFT, SLICE_START_PAYLOAD_BITS = 32, PAYLOAD_BITS - SLICE_PAYLOAD_BITS
MAX_SLICE_REGION_PAYLOAD = (1 << PAYLOAD_BITS) - 1
MAX_SLICES = (1 << 30) - 1  # bit 62 of header word 1 is SLICES_POOL_BIT
SLICES_POOL_BIT = 62
SLICES_COUNT_MASK = MAX_SLICES
SLICE_KERNEL_SHIFT, SLICE_KERNEL_BITS = 32, 10
SLICE_EPOCH_SHIFT, SLICE_EPOCH_BITS = 42, 14
MAX_POOL_KERNELS = 1 << SLICE_KERNEL_BITS
POOL_LOST_EPOCHS = 16
POOL_LOST_WORDS = MAX_POOL_KERNELS * POOL_LOST_EPOCHS


def slices_buffer_words(n_slices: int, per_warp: int) -> int:
    """int64 words of a slices buffer with ``n_slices`` slices of ``per_warp`` records."""
    return SLICES_HEADER_WORDS + int(n_slices) * (SLICE_HEADER_WORDS + int(per_warp))


def slices_header(n_slices: int, per_warp: int, *, pooled: bool = False) -> list[int]:
    """The host-written header words (the rest of the buffer starts zeroed)."""
    pool = (1 << SLICES_POOL_BIT) if pooled else 0
    return [SLICES_MAGIC, pool | (int(n_slices) << 32) | int(per_warp), 0, 0]


def split_slices_dims(word: int) -> tuple[int, int, bool]:
    """``(slices, records per slice, pooled)`` of header word 1."""
    word = int(word)
    return ((word >> 32) & SLICES_COUNT_MASK, word & 0xFFFFFFFF,
            bool((word >> SLICES_POOL_BIT) & 1))


def pool_buffer_words(n_slices: int, per_warp: int) -> int:
    """int64 words of a pooled slices buffer: its slices, its lost table, its epoch table."""
    return slices_buffer_words(n_slices, per_warp) + POOL_LOST_WORDS + MAX_POOL_KERNELS


def pool_tables(words: np.ndarray, n_slices: int, per_warp: int) -> tuple[np.ndarray, np.ndarray]:
    """``(lost table as kernels x POOL_LOST_EPOCHS, epoch table)`` views of a pooled buffer."""
    first = slices_buffer_words(n_slices, per_warp)
    lost = words[first:first + POOL_LOST_WORDS].reshape(MAX_POOL_KERNELS, POOL_LOST_EPOCHS)
    return lost, words[first + POOL_LOST_WORDS:first + POOL_LOST_WORDS + MAX_POOL_KERNELS]


def pool_slice_word(fit: int, *, kernel: int = 0, epoch: int = 0) -> int:
    """Slice word 3 of a pooled slice, as the device's open writes it (host mirror)."""
    return (int(fit) | ((int(kernel) & field_mask(SLICE_KERNEL_BITS)) << SLICE_KERNEL_SHIFT)
            | ((int(epoch) & field_mask(SLICE_EPOCH_BITS)) << SLICE_EPOCH_SHIFT)
            | (SLICE_OPEN_MAGIC << SLICE_MAGIC_SHIFT))


def slice_record_high(tag: int, *, kind: int = SLICE_KIND_SPAN, payload: int = 0) -> int:
    """Bits 32..63 of a slice record (as an unsigned 32-bit value), for trace-time tags."""
    return (
        (int(tag) & field_mask(SLICE_TAG_BITS))
        | ((int(payload) & MAX_SLICE_PAYLOAD) << (SLICE_PAYLOAD_SHIFT - 32))
        | ((int(kind) & field_mask(SLICE_KIND_BITS)) << (SLICE_KIND_SHIFT - 32))
        | (1 << (SLICE_WRITTEN_BIT - 32))
    )


def slice_start_high(payload: int = 0) -> int:
    """Bits 32..63 of a START record (unsigned 32-bit) for a region whose payload is known
    while tracing: kind START and the payload's bits above the span record's 13."""
    high = (int(payload) >> SLICE_PAYLOAD_BITS) & field_mask(SLICE_START_PAYLOAD_BITS)
    return (
        (high << (SLICE_START_PAYLOAD_SHIFT - 32))
        | (SLICE_KIND_START << (SLICE_KIND_SHIFT - 32))
        | (1 << (SLICE_WRITTEN_BIT - 32))
    )


def slice_records_that_fit(buffer_address: int, n_slices: int, per_warp: int) -> np.ndarray:
    """Records each slice holds where the buffer lies (what the device writes in slice word
    3): ``per_warp``, or fewer for the slice whose records would reach SLICE_WINDOW_END of a
    4 GiB window. The host model of the open's computation, for allocators and tests."""
    slice_bytes = 8 * (SLICE_HEADER_WORDS + int(per_warp))
    first = (int(buffer_address) + 8 * (SLICES_HEADER_WORDS + SLICE_HEADER_WORDS)
             + slice_bytes * np.arange(int(n_slices), dtype=np.int64))
    low = first & 0xFFFFFFFF
    end = np.clip(low + 8 * int(per_warp), None, SLICE_WINDOW_END)
    return (np.maximum(end, low) - low) >> 3
