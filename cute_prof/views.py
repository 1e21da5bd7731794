"""Smaller views of a big trace: select records by CTA, SM, warp, tag, time, launch.

A 5 M-slice trace is near what the Perfetto UI loads in a browser tab; past that the user
needs a view, not a bigger file. :func:`select` returns a ``Trace`` holding only the chosen
rows (one boolean mask, no second decode); every exporter and the summary take it as is.

Owns the selections (stage 3); it may not import analysis, export or anything above.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

import numpy as np

from .errors import ProfileBufferError
from .trace import Trace

__all__ = ["VIEW_OPTIONS", "cta_of", "select"]

VIEW_OPTIONS = ("ctas", "sms", "warps", "tags", "time_window", "launch", "every_nth_cta")


def cta_of(trace: Trace, tids: np.ndarray) -> np.ndarray:
    """CTA index of each tid, from the role spec's ``tid_stride`` (tid = cta * stride +
    slot, kept in ``trace.metadata["roles"]`` by ``apply_roles``)."""
    stride = (trace.metadata.get("roles") or {}).get("tid_stride")
    if not stride:
        raise ProfileBufferError(
            "selecting CTAs needs to know how tids map to CTAs: apply a role spec with "
            "'tid_stride' first (cute_prof.analysis.roles.apply_roles)")
    return np.asarray(tids, dtype=np.int64) // int(stride)


def _ids(values: Any, what: str) -> np.ndarray:
    if isinstance(values, (int, np.integer)):
        values = [values]
    try:
        return np.asarray(list(values), dtype=np.int64)
    except (TypeError, ValueError) as err:
        raise ProfileBufferError(f"{what} must be integers, got {values!r}") from err


def _tag_ids(trace: Trace, tags: Iterable[int | str] | int | str) -> np.ndarray:
    if isinstance(tags, (str, int, np.integer)):
        tags = [tags]
    index = {name: i for i, name in enumerate(trace.tag_names)}
    ids = []
    for tag in tags:
        if isinstance(tag, str):
            if tag not in index:
                raise ProfileBufferError(f"unknown tag {tag!r}; the trace has "
                                         f"{list(trace.tag_names)}")
            ids.append(index[tag])
        else:
            ids.append(int(tag))
    return np.asarray(ids, dtype=np.int64)


def select(
    trace: Trace,
    *,
    ctas: Iterable[int] | int | None = None,
    sms: Iterable[int] | int | None = None,
    warps: Iterable[int] | int | None = None,
    tags: Iterable[int | str] | int | str | None = None,
    time_window: tuple[int, int] | None = None,
    launch: Iterable[int] | int | None = None,
    every_nth_cta: int | None = None,
) -> Trace:
    """The records of ``trace`` that pass every given option (None: no condition).

    ``ctas``: CTA indices (tid // ``tid_stride`` of the applied role spec); ``sms``: SM ids;
    ``warps``: warp index inside the CTA; ``tags``: tag names or ids; ``time_window``:
    ``(from_ns, to_ns)`` relative to the trace's first record, keeping records that
    overlap ``[from_ns, to_ns)`` (instants inside it); ``launch``: indices into
    ``trace.launches``; ``every_nth_cta``: keep CTAs whose index is a multiple of n.
    The loss counts and metadata stay; ``metadata["view"]`` records the options."""
    events = trace.events
    keep = np.ones(events.shape[0], bool)
    options: dict[str, Any] = {}
    if ctas is not None or every_nth_cta is not None:
        cta = cta_of(trace, events["tid"])
        if ctas is not None:
            keep &= np.isin(cta, _ids(ctas, "ctas"))
            options["ctas"] = _ids(ctas, "ctas").tolist()
        if every_nth_cta is not None:
            if int(every_nth_cta) < 1:
                raise ProfileBufferError(f"every_nth_cta must be >= 1, got {every_nth_cta}")
            keep &= cta % int(every_nth_cta) == 0
            options["every_nth_cta"] = int(every_nth_cta)
    for name, values, column in (("sms", sms, "sm"), ("warps", warps, "warp"),
                                 ("launch", launch, "launch")):
        if values is not None:
            keep &= np.isin(events[column].astype(np.int64), _ids(values, name))
            options[name] = _ids(values, name).tolist()
    if tags is not None:
        ids = _tag_ids(trace, tags)
        keep &= np.isin(events["tag"].astype(np.int64), ids)
        options["tags"] = ids.tolist()
    if time_window is not None:
        try:
            lo, hi = (int(v) for v in time_window)
        except (TypeError, ValueError) as err:
            raise ProfileBufferError("time_window is (from_ns, to_ns) relative to the "
                                     "first record") from err
        t0 = int(events["start_ns"].min()) if events.shape[0] else 0
        start = events["start_ns"] - t0
        end = start + np.maximum(events["dur_ns"], 0)
        keep &= (start < hi) & ((end > lo) | ((end == start) & (start >= lo)))
        options["time_window"] = [lo, hi]
    return replace(trace, events=events[keep],
                   metadata={**trace.metadata, "view": options})
