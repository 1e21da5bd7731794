"""Roles of tracks and meanings of tags, declared on the host (no kernel change).

A warp-specialised kernel records one track per warp (its ``tid``); what a track *is* (the
producer of CTA 3, consumer warp 5) follows from a rule over the tid that the kernel author
knows. :class:`RoleSpec` holds those rules and what each tag means (``work``, ``wait`` on a
barrier or pipeline stage, or ``phase``, an enclosing region), so the analysis knows what
waiting means and every export can name tracks.

A spec is plain data and loads from JSON (``RoleSpec.from_dict``)::

    {"tid_stride": 16,                       # tid = group * stride + slot (e.g. CTA * 16 + warp)
     "group_name": "cta",                    # what a group is called in track names
     "roles": {"producer": [0], "consumer": [1, 2, 3, 4, 5, 6, 7, 8]},   # slots
     "tags": {"ws.wait_empty": "wait", "ws.tma_issue": "work", "ws.producer_mainloop": "phase"}}

Without ``tid_stride`` the role lists hold tids themselves.

It owns the role spec and applying it to a trace; it may not import any other analysis
module.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ProfileBufferError
from ..trace import Trace

__all__ = ["TAG_KINDS", "RoleSpec", "apply_roles", "load_role_spec", "read_spec"]

TAG_KINDS = ("work", "wait", "phase")
PIPELINE_KEYS = ("producer", "consumer", "issue", "acquire")
UNASSIGNED = -1


@dataclass(frozen=True)
class RoleSpec:
    """Which tracks play which role, and what each tag means."""

    roles: Mapping[str, Sequence[int]]  # role name -> slots (or tids without tid_stride)
    tid_stride: int | None = None
    group_name: str = "cta"
    tags: Mapping[str, str] = field(default_factory=dict)  # tag name -> one of TAG_KINDS
    # producer/consumer pipeline: {"producer": role, "consumer": role, "issue": tag whose
    # payload is the k-tile the producer issued, "acquire": the consumer's wait for it}
    pipeline: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self):
        if self.tid_stride is not None and (not isinstance(self.tid_stride, int)
                                            or self.tid_stride < 1):
            raise ProfileBufferError(f"tid_stride must be a positive int, got {self.tid_stride!r}")
        seen: dict[int, str] = {}
        for role, members in self.roles.items():
            if not isinstance(role, str) or not role:
                raise ProfileBufferError(f"role names must be non-empty strings, got {role!r}")
            for member in members:
                if not isinstance(member, (int, np.integer)) or isinstance(member, bool):
                    raise ProfileBufferError(f"role {role!r}: members must be ints, got {member!r}")
                if self.tid_stride is not None and not 0 <= member < self.tid_stride:
                    raise ProfileBufferError(
                        f"role {role!r}: slot {member} is outside 0..{self.tid_stride - 1}"
                    )
                if int(member) in seen:
                    raise ProfileBufferError(
                        f"slot {member} is in both {seen[int(member)]!r} and {role!r}"
                    )
                seen[int(member)] = role
        unknown = set(self.pipeline) - set(PIPELINE_KEYS)
        if unknown:
            raise ProfileBufferError(f"unknown pipeline keys {sorted(unknown)}; use {PIPELINE_KEYS}")
        for key in ("producer", "consumer"):
            if key in self.pipeline and self.pipeline[key] not in self.roles:
                raise ProfileBufferError(
                    f"pipeline {key} {self.pipeline[key]!r} is not a role ({list(self.roles)})")
        if ("issue" in self.pipeline) != ("acquire" in self.pipeline):
            raise ProfileBufferError("a pipeline needs both 'issue' and 'acquire' tags")
        for tag, kind in self.tags.items():
            if kind not in TAG_KINDS:
                raise ProfileBufferError(
                    f"tag {tag!r}: kind must be one of {TAG_KINDS}, got {kind!r}"
                )

    @property
    def role_names(self) -> list[str]:
        return list(self.roles)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "RoleSpec":
        unknown = set(data) - {"roles", "tid_stride", "group_name", "tags", "pipeline"}
        if unknown:
            raise ProfileBufferError(f"unknown role-spec keys {sorted(unknown)}")
        if "roles" not in data or not isinstance(data["roles"], Mapping):
            raise ProfileBufferError("a role spec needs 'roles': {name: [slots or tids]}")
        return cls(
            roles={str(k): [int(m) for m in v] for k, v in data["roles"].items()},
            tid_stride=data.get("tid_stride"),
            group_name=str(data.get("group_name", "cta")),
            tags=dict(data.get("tags", {})),
            pipeline=dict(data.get("pipeline", {})),
        )

    def to_dict(self) -> dict[str, Any]:
        return {"roles": {k: list(map(int, v)) for k, v in self.roles.items()},
                "tid_stride": self.tid_stride, "group_name": self.group_name,
                "tags": dict(self.tags), "pipeline": dict(self.pipeline)}

    # ------------------------------------------------------------------ per tid
    def slot_of(self, tids: np.ndarray) -> np.ndarray:
        tids = np.asarray(tids, dtype=np.int64)
        return tids % self.tid_stride if self.tid_stride else tids

    def group_of(self, tids: np.ndarray) -> np.ndarray:
        tids = np.asarray(tids, dtype=np.int64)
        return tids // self.tid_stride if self.tid_stride else np.zeros_like(tids)

    def role_of(self, tids: np.ndarray) -> np.ndarray:
        """Role index (into :attr:`role_names`) per tid; -1 where no role claims it."""
        slots = self.slot_of(tids)
        if self.tid_stride:  # slots lie in 0..stride-1: one lookup per tid, no search
            table = np.full(self.tid_stride, UNASSIGNED, dtype=np.int32)
            for index, members in enumerate(self.roles.values()):
                table[np.asarray(list(members), dtype=np.int64)] = index
            return table[slots]
        out = np.full(slots.shape, UNASSIGNED, dtype=np.int32)
        for index, members in enumerate(self.roles.values()):
            out[np.isin(slots, np.asarray(list(members), dtype=np.int64))] = index
        return out

    def track_names(self, tids: np.ndarray) -> dict[int, str]:
        """Display names: ``"<role> <group> G slot S"`` (or ``"<role> tid T"``)."""
        tids = np.unique(np.asarray(tids, dtype=np.int64))
        roles = self.role_of(tids)
        names = self.role_names
        out = {}
        for tid, role, group, slot in zip(tids.tolist(), roles.tolist(),
                                          self.group_of(tids).tolist(),
                                          self.slot_of(tids).tolist()):
            label = names[role] if role >= 0 else "tid"
            if self.tid_stride:
                out[tid] = f"{label} {self.group_name} {group} slot {slot}"
            else:
                out[tid] = f"{label} {tid}" if role >= 0 else f"tid {tid}"
        return out

    # ------------------------------------------------------------------ per tag
    def named_tags(self) -> set[str]:
        """Every tag name the spec refers to."""
        return set(self.tags) | {self.pipeline[k] for k in ("issue", "acquire")
                                 if k in self.pipeline}

    def applies_to(self, trace: Trace) -> bool:
        """Whether ``trace`` has every tag the spec names."""
        return self.named_tags() <= set(trace.tag_names)

    def tag_kinds(self, trace: Trace) -> np.ndarray:
        """Kind index (into :data:`TAG_KINDS`) per tag id of ``trace``; tags the spec does not
        name count as ``work``."""
        names = trace.tag_names
        missing = self.named_tags() - set(names)
        if missing:
            raise ProfileBufferError(
                f"role spec names tags the trace does not have: {sorted(missing)}"
            )
        kinds = np.zeros(max(len(names), 1), dtype=np.int8)
        for tag_id, name in enumerate(names):
            kinds[tag_id] = TAG_KINDS.index(self.tags.get(name, "work"))
        return kinds


def read_spec(source: str | os.PathLike | Mapping[str, Any], what: str) -> Mapping[str, Any]:
    """The JSON object of a spec file (or ``source`` itself when it is a dict)."""
    if isinstance(source, Mapping):
        return source
    path = Path(source)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ProfileBufferError(f"cannot read {what} {str(path)!r}: {err}") from None
    if not isinstance(data, Mapping):
        raise ProfileBufferError(f"{what} {str(path)!r} must be a JSON object")
    return data


def load_role_spec(source: str | os.PathLike | Mapping[str, Any]) -> RoleSpec:
    """A :class:`RoleSpec` from a dict or a JSON file."""
    return RoleSpec.from_dict(read_spec(source, "role spec"))

def apply_roles(trace: Trace, spec: RoleSpec) -> Trace:
    """``trace`` with its tracks named by ``spec`` and the spec kept in its metadata (the
    events are shared, not copied)."""
    from dataclasses import replace

    names = dict(trace.track_names)
    names.update(spec.track_names(trace.events["tid"]))
    return replace(trace, track_names=names,
                   metadata={**trace.metadata, "roles": spec.to_dict()})
