"""Who fed whom: flow arrows from the producer region that issued k-tile k to every consumer
region that acquired it in the same group (CTA), for the exporters' ``flows=`` option.

It owns the arrows only; it may not import the exporters that draw them.
"""

from __future__ import annotations

import numpy as np

from ..errors import ProfileBufferError
from ..trace import Trace
from .roles import RoleSpec

__all__ = ["FLOW_DTYPE", "pipeline_flows"]

# row indices into Trace.events: an arrow from the end of ``src`` to the start of ``dst``
FLOW_DTYPE = np.dtype([("src", np.int64), ("dst", np.int64)])


def pipeline_flows(trace: Trace, spec: RoleSpec) -> np.ndarray:
    """One flow per consumer acquire whose k-tile its group's producer issued (first issue of
    that k-tile in the group); acquires with no matching issue get none."""
    if not {"issue", "acquire"} <= set(spec.pipeline):
        raise ProfileBufferError("flows need RoleSpec.pipeline 'issue' and 'acquire' tags")
    names = trace.tag_names
    missing = {spec.pipeline["issue"], spec.pipeline["acquire"]} - set(names)
    if missing:
        raise ProfileBufferError(f"pipeline tags {sorted(missing)} are not in the trace")
    ev = trace.events
    issue_rows = np.flatnonzero(ev["tag"] == names.index(spec.pipeline["issue"]))
    acquire_rows = np.flatnonzero(ev["tag"] == names.index(spec.pipeline["acquire"]))
    if issue_rows.shape[0] == 0 or acquire_rows.shape[0] == 0:
        return np.zeros(0, dtype=FLOW_DTYPE)
    payload = ev["payload"].astype(np.int64)
    k_span = int(payload[issue_rows].max() - min(payload[issue_rows].min(),
                                                 payload[acquire_rows].min())) + 2
    k0 = int(min(payload[issue_rows].min(), payload[acquire_rows].min()))

    def key(rows):
        return spec.group_of(ev["tid"][rows]) * k_span + (payload[rows] - k0)

    issue_key = key(issue_rows)
    order = np.lexsort((ev["start_ns"][issue_rows], issue_key))
    issue_key, issue_rows = issue_key[order], issue_rows[order]
    first = np.r_[True, issue_key[1:] != issue_key[:-1]]
    issue_key, issue_rows = issue_key[first], issue_rows[first]
    acquire_key = key(acquire_rows)
    where = np.minimum(np.searchsorted(issue_key, acquire_key), issue_key.shape[0] - 1)
    matched = issue_key[where] == acquire_key
    flows = np.zeros(int(np.count_nonzero(matched)), dtype=FLOW_DTYPE)
    flows["src"] = issue_rows[where[matched]]
    flows["dst"] = acquire_rows[matched]
    return flows
