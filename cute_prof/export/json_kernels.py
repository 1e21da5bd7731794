"""Compiled loops (numba through :mod:`cute_prof.jit`) of the Chrome JSON writer: the rows in
parents-first order, each track's nesting lanes, and each event's text formatted straight into
a chunk buffer.

Owns those loops only; :mod:`cute_prof.export.chrome_json` decides when they run (only
when ``jit.enabled()``) and streams their chunks; the loops both writers share (region
order, lanes, streaming) are :mod:`cute_prof.export.kernels`'s. It may not import the
writers nor anything above ``export``.
"""

from __future__ import annotations

import numpy as np

from .. import jit
from .kernels import nest_lane, sort_regions

__all__ = ["encode_json_events", "lanes_by_row", "parents_first_order"]


@jit.kernel
def parents_first_order(start, dur):
    """Row order for the JSON file: by start, equal starts longer first, then row order
    (importers nest by file order). Returns an empty array when the rows are in that
    order already."""
    n = start.shape[0]
    ordered = True
    by_start = True
    for i in range(1, n):
        if start[i] < start[i - 1]:
            ordered = False
            by_start = False
            break
        if start[i] == start[i - 1] and dur[i] > dur[i - 1]:
            ordered = False
    if ordered:
        return np.empty(0, np.int64)
    if by_start:  # decoded traces: only runs of equal start need reordering
        order = np.arange(n)
    else:
        order = np.argsort(start, kind="mergesort")
    i = 0
    while i < n:  # runs of equal start: longer first, stable (insertion sort, runs are short)
        j = i + 1
        while j < n and start[order[j]] == start[order[i]]:
            j += 1
        for a in range(i + 1, j):
            row = order[a]
            b = a
            while b > i and dur[order[b - 1]] < dur[row]:
                order[b] = order[b - 1]
                b -= 1
            order[b] = row
        i = j
    return order


@jit.kernel
def lanes_by_row(offsets, rows, kind, start, dur, instant):
    """First-fit nesting lane of every region row (0 for instants), its track's regions
    taken by (start, longer first, row). ``offsets``/``rows``: rows grouped by track in
    row order (:func:`count_sort_tracks`)."""
    n_tracks = offsets.shape[0] - 1
    lane = np.zeros(kind.shape[0], np.int32)
    longest = 0
    for t in range(n_tracks):
        longest = max(longest, offsets[t + 1] - offsets[t])
    ts = np.empty(longest, np.int64)
    end = np.empty(longest, np.int64)
    iid = np.zeros(longest, np.int32)
    pay = np.zeros(longest, np.int32)
    own = np.empty(longest, np.int64)
    perm = np.empty(longest, np.int64)
    scratch = np.empty(longest, np.int64)
    values = np.empty(longest, np.int64)
    lane_top = np.empty(longest + 1, np.int64)
    below = np.empty(longest, np.int64)
    no_override = np.empty(0, np.int32)
    lanes_of = np.ones(n_tracks, np.int64)
    for t in range(n_tracks):
        m = 0
        for p in range(offsets[t], offsets[t + 1]):
            r = rows[p]
            if kind[r] == instant:
                continue
            s = np.int64(start[r])
            d = np.int64(dur[r])
            ts[m] = s
            end[m] = s + (d if d > 0 else 0)
            pay[m] = m  # original position, carried through the sort
            own[m] = r
            m += 1
        sort_regions(0, m, ts, end, iid, pay, no_override, perm, scratch, values)
        n_lanes = 0
        for j in range(m):
            s = ts[j]
            placed, n_lanes = nest_lane(j, s, end[j], end, lane_top, below, n_lanes)
            lane[own[pay[j]]] = placed
        lanes_of[t] = max(n_lanes, 1)
    return lane, lanes_of


_INT64_MIN_TEXT = np.frombuffer(b"-9223372036854775808", np.uint8).copy()
_TWO_DIGITS = np.frombuffer(b"".join(b"%02d" % k for k in range(100)), np.uint8).copy()


@jit.kernel
def _put_digits(out, at, m):
    """Decimal digits of an int64 >= 0, two at a time from the right (int64 arithmetic
    throughout: numba turns mixed uint64/int64 arithmetic into floating point)."""
    digits = 1
    probe = m
    if probe >= 10000000000000000:
        digits += 16
        probe //= 10000000000000000
    if probe >= 100000000:
        digits += 8
        probe //= 100000000
    if probe >= 10000:
        digits += 4
        probe //= 10000
    if probe >= 100:
        digits += 2
        probe //= 100
    if probe >= 10:
        digits += 1
    pos = at + digits
    while m >= 100:
        q = m // 100
        r = m - q * 100
        pos -= 2
        out[pos] = _TWO_DIGITS[2 * r]
        out[pos + 1] = _TWO_DIGITS[2 * r + 1]
        m = q
    if m >= 10:
        out[pos - 2] = _TWO_DIGITS[2 * m]
        out[pos - 1] = _TWO_DIGITS[2 * m + 1]
    else:
        out[pos - 1] = np.uint8(48 + m)
    return at + digits


@jit.kernel
def _put_int(out, at, value):
    v = np.int64(value)
    if v < 0:
        if v == -9223372036854775807 - 1:
            for b in range(_INT64_MIN_TEXT.shape[0]):
                out[at + b] = _INT64_MIN_TEXT[b]
            return at + _INT64_MIN_TEXT.shape[0]
        out[at] = 45  # '-'
        return _put_digits(out, at + 1, -v)
    return _put_digits(out, at, v)


@jit.kernel
def _put_micros(out, at, value):
    """ns as µs with three decimals, plus a fourth decimal 1 where Perfetto's importer
    would read the text 1 ns short (see chrome_json's module docstring)."""
    v = np.int64(value)
    if v < 0:
        out[at] = 45
        at += 1
        if v == -9223372036854775807 - 1:  # |v| does not fit: 9223372036854775.808
            whole = np.int64(9223372036854775)
            remainder = np.int64(808)
            exact = 9223372036854775808.0
        else:
            whole = (-v) // 1000
            remainder = (-v) - whole * 1000
            exact = np.float64(-v)
    else:
        whole = v // 1000
        remainder = v - whole * 1000
        exact = np.float64(v)
    at = _put_digits(out, at, whole)
    out[at] = 46
    out[at + 1] = np.uint8(48 + remainder // 100)
    out[at + 2] = _TWO_DIGITS[2 * (remainder % 100)]
    out[at + 3] = _TWO_DIGITS[2 * (remainder % 100) + 1]
    at += 4
    as_read = np.float64(whole) + np.float64(remainder) / 1000.0
    if np.floor(as_read * 1000.0) != exact:
        out[at] = 49
        at += 1
    return at


@jit.kernel
def _put_bytes(out, at, table, table_at, index):
    for b in range(table_at[index], table_at[index + 1]):
        out[at] = table[b]
        at += 1
    return at


# The constant texts of a JSON event, as tuples of bytes: numba compiles a copy of a tuple
# constant into constant stores, much faster than a loop over a byte table.
_OPEN = tuple(b'{"name":')
_TS = tuple(b',"ts":')
_DUR = tuple(b',"dur":')
_INSTANT_SCOPE = tuple(b',"s":"t"')
_PID = tuple(b',"pid":')
_TID = tuple(b',"tid":')
_ARGS_START = tuple(b',"args":{"start_ns":')
_ARGS_DUR = tuple(b',"dur_ns":')
_ARGS_TID = tuple(b',"tid":')
_ARGS_PAYLOAD = tuple(b',"payload":')
_ARGS_SM = tuple(b',"sm":')
_ARGS_WARP = tuple(b',"warp":')
_ARGS_CYCLES = tuple(b',"dur_cycles":')
_CLOSE = tuple(b'}},\n')
_CLOSE_LAST = tuple(b'}}\n')
_SPAN_KIND = tuple(b',"cat":"span","ph":"X"')
_INSTANT_KIND = tuple(b',"cat":"instant","ph":"i"')
_CLOCK_SPAN_KIND = tuple(b',"cat":"clock_span","ph":"X"')


@jit.kernel(inline="always")
def _put_text(out, at, text):
    for k in range(len(text)):
        out[at + k] = text[k]
    return at + len(text)


@jit.kernel
def encode_json_events(out, k_lo, k_hi, count, row_of, start, dur, tag, tid, payload, kind, sm,
                       warp, dur_cycles, origin, name_of_tag, tag_min, names, name_at, kinds,
                       kind_at, span, instant, clock_span, with_cycles, pid, track, lane,
                       first_lane, tid_base):
    """Chrome JSON events ``k_lo .. k_hi - 1`` (file order; ``row_of`` maps it to rows,
    empty for the identity) into ``out`` (sized by the caller). Each event ends with
    ``,\n`` except the last of all ``count``. ``names``/``kinds``: the name text per tag
    and the category/phase text per kind code, as byte tables. Returns the bytes used."""
    at = 0
    k = k_lo
    identity = row_of.shape[0] == 0
    while k < k_hi:
        r = k if identity else row_of[k]
        code = kind[r]
        at = _put_text(out, at, _OPEN)
        at = _put_bytes(out, at, names, name_at, name_of_tag[np.int64(tag[r]) - tag_min])
        if code == span:
            at = _put_text(out, at, _SPAN_KIND)
        elif code == instant:
            at = _put_text(out, at, _INSTANT_KIND)
        elif code == clock_span:
            at = _put_text(out, at, _CLOCK_SPAN_KIND)
        else:
            at = _put_bytes(out, at, kinds, kind_at, code)
        at = _put_text(out, at, _TS)
        at = _put_micros(out, at, np.int64(start[r]) - origin)
        if code == instant:
            at = _put_text(out, at, _INSTANT_SCOPE)
        else:
            at = _put_text(out, at, _DUR)
            at = _put_micros(out, at, dur[r])
        at = _put_text(out, at, _PID)
        at = _put_int(out, at, pid[r] if pid.shape[0] else 1)
        at = _put_text(out, at, _TID)
        at = _put_int(out, at, first_lane[track[r]] + lane[r] + tid_base)
        at = _put_text(out, at, _ARGS_START)
        at = _put_int(out, at, start[r])
        at = _put_text(out, at, _ARGS_DUR)
        at = _put_int(out, at, dur[r])
        at = _put_text(out, at, _ARGS_TID)
        at = _put_int(out, at, tid[r])
        at = _put_text(out, at, _ARGS_PAYLOAD)
        at = _put_int(out, at, payload[r])
        at = _put_text(out, at, _ARGS_SM)
        at = _put_int(out, at, sm[r])
        at = _put_text(out, at, _ARGS_WARP)
        at = _put_int(out, at, warp[r])
        if with_cycles and code == clock_span:
            at = _put_text(out, at, _ARGS_CYCLES)
            at = _put_int(out, at, dur_cycles[r])
        k += 1
        if k < count:
            at = _put_text(out, at, _CLOSE)
        else:
            at = _put_text(out, at, _CLOSE_LAST)
    return at
