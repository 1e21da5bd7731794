"""Conclusions drawn from a decoded :class:`~cute_prof.trace.Trace`.

* ``summary.py``  per-tag statistics, busy fractions, gaps and losses (``summarize``)
* ``roles.py``    track roles and tag meanings declared on the host (``RoleSpec``)
* ``waits.py``    who waited on what: per-role work/wait/idle, k-tile latency, verdict
* ``flows.py``    producer -> consumer arrows for the exporters
* ``diff.py``     two traces side by side
"""

from .roles import TAG_KINDS, RoleSpec, apply_roles, load_role_spec
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
    "TAG_KINDS",
    "RoleSpec",
    "apply_roles",
    "load_role_spec",
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
