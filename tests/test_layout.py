"""The buffer format in cute_prof.layout: field packing, completeness, device-like writes."""

from __future__ import annotations

import numpy as np
import pytest

from cute_prof import layout

INT32_EDGES = np.array([0, 1, -1, 2**31 - 1, -(2**31), 12345, -777], dtype=np.int64)


def test_tag_word_fields_round_trip_including_negative_payloads():
    tags = np.array([0, 1, 65535, 300, 7, 42, 9], dtype=np.int64)
    kinds = np.array([0, 1, 2, 3, 0, 1, 2], dtype=np.int64)
    words = layout.encode_tag_words(tags, payload=INT32_EDGES, kind=kinds)
    fields = layout.decode_tag_words(words)
    np.testing.assert_array_equal(fields["tag"], tags)
    np.testing.assert_array_equal(fields["payload"], INT32_EDGES)
    np.testing.assert_array_equal(fields["kind"], kinds)
    assert fields["complete"].all()
    assert (words >= 0).all(), "bit 63 of a valid tag word must be zero"


def test_tid_word_fields_round_trip_including_negative_tids():
    sms = np.array([0, 1, layout.MAX_SM_ID, 131, 5, 77, 2], dtype=np.int64)
    warps = np.array([0, layout.MAX_WARP_ID, 31, 3, 16, 1, 0], dtype=np.int64)
    words = layout.encode_tid_words(INT32_EDGES, sm=sms, warp=warps)
    fields = layout.decode_tid_words(words)
    np.testing.assert_array_equal(fields["tid"], INT32_EDGES)
    np.testing.assert_array_equal(fields["sm"], sms)
    np.testing.assert_array_equal(fields["warp"], warps)
    assert (words >= 0).all()


def test_field_bit_ranges_do_not_overlap_and_fit_in_63_bits():
    def span(shift, bits):
        return ((1 << bits) - 1) << shift

    tag_fields = [
        (layout.TAG_SHIFT, layout.TAG_BITS),
        (layout.PAYLOAD_SHIFT, layout.PAYLOAD_BITS),
        (layout.KIND_SHIFT, layout.KIND_BITS),
        (layout.TAG_RESERVED_SHIFT, layout.TAG_RESERVED_BITS),
        (layout.MAGIC_SHIFT, layout.MAGIC_BITS),
    ]
    tid_fields = [
        (layout.TID_SHIFT, layout.TID_BITS),
        (layout.SM_SHIFT, layout.SM_BITS),
        (layout.WARP_SHIFT, layout.WARP_BITS),
    ]
    for fields in (tag_fields, tid_fields):
        seen = 0
        for shift, bits in fields:
            mask = span(shift, bits)
            assert seen & mask == 0
            seen |= mask
        assert seen < (1 << 63)
    # the tag word's fields tile bits 0..62 exactly
    assert sum(bits for _, bits in tag_fields) == 63


def test_zero_word_is_incomplete_and_magic_makes_it_complete():
    zero = np.zeros(1, dtype=np.int64)
    assert not layout.decode_tag_words(zero)["complete"][0]
    only_magic = np.array([layout.MAGIC_FIELD], dtype=np.int64)
    assert layout.decode_tag_words(only_magic)["complete"][0]


def test_flipped_magic_bit_makes_tag_word_incomplete():
    good = layout.encode_tag_words(5, payload=9, kind=layout.KIND_SPAN)
    bad = np.asarray(good ^ (1 << layout.MAGIC_SHIFT), dtype=np.int64)
    assert not bool(layout.decode_tag_words(bad)["complete"])


@pytest.mark.parametrize(
    "bit", [layout.TAG_RESERVED_SHIFT, layout.TAG_RESERVED_SHIFT + layout.TAG_RESERVED_BITS - 1, 63]
)
def test_reserved_tag_bits_leave_the_record_complete_but_not_reserved_ok(bit):
    good = int(layout.encode_tag_words(5, payload=9, kind=layout.KIND_SPAN))
    bad = np.array([good | (1 << bit)], dtype=np.uint64).view(np.int64)
    fields = layout.decode_tag_words(bad)
    assert fields["complete"][0] and not fields["reserved_ok"][0]
    assert layout.decode_tag_words(np.array([good]))["reserved_ok"][0]


@pytest.mark.parametrize("bit", [layout.TID_RESERVED_SHIFT, 63])
def test_reserved_tid_bits_are_flagged(bit):
    good = int(layout.encode_tid_words(-1, sm=layout.MAX_SM_ID, warp=layout.MAX_WARP_ID))
    assert layout.decode_tid_words(np.array([good]))["reserved_ok"][0]
    bad = np.array([good | (1 << bit)], dtype=np.uint64).view(np.int64)
    assert not layout.decode_tid_words(bad)["reserved_ok"][0]


def test_reserved_masks_cover_exactly_the_bits_no_field_uses():
    tag_used = (
        (layout.field_mask(layout.TAG_BITS) << layout.TAG_SHIFT)
        | (layout.field_mask(layout.PAYLOAD_BITS) << layout.PAYLOAD_SHIFT)
        | (layout.field_mask(layout.KIND_BITS) << layout.KIND_SHIFT)
        | layout.MAGIC_MASK
    )
    assert tag_used | (layout.TAG_RESERVED_MASK & (2**64 - 1)) == 2**64 - 1
    assert tag_used & layout.TAG_RESERVED_MASK == 0
    tid_used = (
        (layout.field_mask(layout.TID_BITS) << layout.TID_SHIFT)
        | (layout.field_mask(layout.SM_BITS) << layout.SM_SHIFT)
        | (layout.field_mask(layout.WARP_BITS) << layout.WARP_SHIFT)
        | (layout.field_mask(layout.EPOCH_BITS) << layout.EPOCH_SHIFT)
        | (layout.field_mask(layout.GRID_BITS) << layout.GRID_SHIFT)
    )
    assert tid_used | (layout.TID_RESERVED_MASK & (2**64 - 1)) == 2**64 - 1
    assert tid_used & layout.TID_RESERVED_MASK == 0


def test_scalar_constant_matches_vectorised_encoder():
    for tag, kind, payload in [(0, 0, 0), (65535, 3, -1), (17, 1, 2**31 - 1), (3, 2, -(2**31))]:
        assert layout.tag_word_constant(tag, kind=kind, payload=payload) == int(
            layout.encode_tag_words(tag, payload=payload, kind=kind)
        )


def test_buffer_words_and_record_indices():
    assert layout.buffer_words(1) == 5
    assert layout.buffer_words(10) == 41
    assert layout.record_word_index(0) == 1
    assert layout.record_word_index(3, layout.WORD_TID) == 1 + 12 + 3
    slots = np.arange(4)
    np.testing.assert_array_equal(layout.record_word_index(slots, 2), 1 + 4 * slots + 2)


def test_write_records_counts_attempts_and_stores_only_what_fits():
    capacity = 3
    buf = np.zeros(layout.buffer_words(capacity), dtype=np.int64)
    layout.write_records(buf, [10, 20], 5, tag=1, tid=0)
    layout.write_records(buf, [30, 40, 50], 5, tag=2, tid=1)
    assert buf[layout.COUNTER_INDEX] == 5
    starts = buf[1:].reshape(capacity, 4)[:, layout.WORD_START]
    np.testing.assert_array_equal(starts, [10, 20, 30])


def test_write_records_with_first_slot_leaves_counter_alone():
    buf = np.zeros(layout.buffer_words(4), dtype=np.int64)
    layout.write_records(buf, [7], 1, tag=0, tid=0, first_slot=2)
    assert buf[0] == 0
    assert buf[layout.record_word_index(2, layout.WORD_START)] == 7
