"""Grouping a trace's rows by warp, CTA or tag with as little sorting as the values allow.

A trace holds millions of records and few distinct warps, CTAs and tags: counting
(``np.bincount``) finds the distinct values of such a column in one pass where
``np.unique`` sorts it, a lookup table tells which rows carry a tag where ``np.isin``
sorts, and rows already in time order need a stable sort by warp alone where
``np.lexsort`` sorts by both. Each function returns exactly what the form it replaces
returns, and falls back to it where the values do not allow the shortcut (negative, too
spread out, not in time order).

It owns these grouping primitives; it may not import any other analysis module.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

__all__ = ["unique_ints", "tags_in", "rows_by_value", "in_time_order", "warp_order"]

# counting uses one slot per value in the column's range: up to this many slots per row
# (plus a fixed allowance for small columns), beyond it the column is sorted instead
COUNT_SLOTS_PER_ROW = 4
COUNT_SLOTS_MIN = 1 << 20


def _countable(values: np.ndarray) -> bool:
    if values.size == 0 or values.dtype.kind not in "iu":
        return False
    low, high = int(values.min()), int(values.max())
    return low >= 0 and high < COUNT_SLOTS_PER_ROW * values.size + COUNT_SLOTS_MIN


def unique_ints(values: np.ndarray, *, return_inverse: bool = False,
                return_counts: bool = False):
    """``np.unique(values, return_inverse=..., return_counts=...)`` of a 1-D integer array,
    by counting where its values are non-negative and not too spread out."""
    values = np.asarray(values)
    if values.ndim != 1 or not _countable(values):
        return np.unique(values, return_inverse=return_inverse, return_counts=return_counts)
    counts = np.bincount(values)
    present = counts > 0
    uniques = np.flatnonzero(present).astype(values.dtype, copy=False)
    out = [uniques]
    if return_inverse:
        index_of = np.cumsum(present) - 1
        out.append(index_of[values])
    if return_counts:
        out.append(counts[present])
    return out[0] if len(out) == 1 else tuple(out)


def tags_in(tag: np.ndarray, wanted: Iterable[int]) -> np.ndarray:
    """``np.isin(tag, wanted)`` for a column of integer tag ids, through a lookup table over
    the wanted ids (tags are few). Read as unsigned, a negative id is a huge one: every id
    past the table's end lands on its last entry, which no wanted id holds."""
    tag = np.asarray(tag)
    wanted = [int(t) for t in wanted]
    if tag.dtype.kind not in "iu" or min(wanted, default=0) < 0:
        return np.isin(tag, wanted)
    table = np.zeros(max(wanted, default=0) + 2, dtype=bool)
    table[wanted] = True
    index = tag.view(tag.dtype.str.replace("i", "u"))
    if index.dtype.itemsize >= np.dtype(np.intp).itemsize:  # would wrap round as an index
        index = np.minimum(index, table.size - 1)
    return np.take(table, index, mode="clip")


def rows_by_value(values: np.ndarray, n_values: int) -> list[np.ndarray]:
    """Per value ``v`` in ``range(n_values)`` (``values`` holds no other): the rows where
    ``values == v``, in row order. ``np.flatnonzero(values == v)`` for every ``v`` from
    one stable sort of small ints, where one pass per value would read every row each time."""
    values = np.asarray(values)
    small = values.astype(np.uint16) if n_values <= np.iinfo(np.uint16).max + 1 else values
    order = np.argsort(small, kind="stable")
    bounds = np.r_[0, np.cumsum(np.bincount(values, minlength=n_values)[:n_values])]
    return [order[bounds[v]:bounds[v + 1]] for v in range(n_values)]


def in_time_order(start: np.ndarray) -> bool:
    """Whether the rows are sorted by start time (a decoded trace's are), O(n)."""
    return start.size < 2 or bool(np.all(start[1:] >= start[:-1]))


def warp_order(tid: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Row indices by warp, then start time, ties in row order: ``np.lexsort((start,
    tid))``. Rows already in time order need only a stable sort by warp (a radix sort
    where the warp ids fit 16 bits); other rows are sorted by both."""
    tid = np.asarray(tid)
    if not in_time_order(start):
        return np.lexsort((start, tid))
    if tid.size and tid.dtype.kind in "iu" and int(tid.min()) >= 0 \
            and int(tid.max()) <= np.iinfo(np.uint16).max:
        tid = tid.astype(np.uint16)
    return np.argsort(tid, kind="stable")
