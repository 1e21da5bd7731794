"""Conclusions drawn from a decoded :class:`~cute_prof.trace.Trace`.

* ``summary.py``  per-tag statistics, busy fractions, gaps and losses (``summarize``)
"""

from .summary import (
    PERCENTILES,
    TAG_STATS_DTYPE,
    TRACK_STATS_DTYPE,
    Summary,
    busy_union,
    format_duration,
    instant_mask,
    pick_unit,
    span_mask,
    summarize,
)

__all__ = [
    "PERCENTILES",
    "TAG_STATS_DTYPE",
    "TRACK_STATS_DTYPE",
    "Summary",
    "busy_union",
    "format_duration",
    "instant_mask",
    "pick_unit",
    "span_mask",
    "summarize",
]
