"""Pipeline description of a warp-specialised kernel, declared on the host (no kernel change).

Roles come from :class:`~cute_prof.analysis.roles.RoleSpec` (tid rule); a *unit* is one
group of that rule (a CTA), split further into output tiles for persistent kernels
(``"tile_modulo"``: payload = tile * modulo + iteration). The tiles of one group share its
resources in tile order: a tile's first waits depend on the previous tile's last items. Resources are rings (``depth``
slots) or states (depth 1). Each role runs, per iteration, its regions in the listed order;
a region is a recorded tag and is either a ``wait`` (its end is gated by a resource event)
or ``work`` (its duration is its own). Relations, each with an iteration ``distance``:

* ``produces``  (work): item k of the resource becomes available at the region's start
  (plus a latency the analysis infers from the blocked waits);
* ``consumes``  (wait): waits until item k - distance was produced;
* ``acquires``  (wait): waits for a free slot: until item k - depth (- distance) was released;
* ``releases``  (work): item k - distance is released at the region's end, at its start
  with ``"at": "start"``, or right before the role's next region starts with ``"at": "next"``
  (the last iteration's region also releases the items still held).

``"async": true`` on a work region that follows a wait of its role: the work (wgmma) runs
while that wait waits, so its end is max(wait end + shortest measured duration, wait start +
wait cost + measured duration).

``shared_by`` on a resource: that many consecutive units (a cluster) share its slots, so
an acquire waits for the release by every one of them (multicast TMA into peer CTAs).

Loads from JSON (``load_pipeline``)::

    {"roles": {...RoleSpec...},
     "tile_modulo": null,
     "resources": [{"name": "smem", "kind": "ring", "depth": 4, "shared_by": 2}],
     "regions": [
       {"tag": "ws.wait_empty", "role": "producer", "kind": "wait", "acquires": {"resource": "smem"}},
       {"tag": "ws.tma_issue", "role": "producer", "kind": "work", "produces": {"resource": "smem"}},
       {"tag": "ws.wait_full", "role": "consumer", "kind": "wait", "consumes": {"resource": "smem"}},
       {"tag": "ws.mma_ktile", "role": "consumer", "kind": "work",
        "releases": {"resource": "smem", "distance": 1}}]}

This module owns the spec (its JSON form, checks and changes) and the layout of a
sampled load; it reads no trace and may not import any stage of the model.
"""

from __future__ import annotations

import graphlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..errors import ProfileBufferError
from .roles import RoleSpec, read_spec

__all__ = ["Relation", "Resource", "Region", "PipelineSpec", "load_pipeline",
           "ARRIVAL_SAMPLE_DTYPE", "arrival_latencies", "arrival_positions", "arrival_issue_times",
           "arrival_leader_gaps", "shifted_arrivals"]

# a sampled load of a ring (load_arrivals.load_arrival_sample): its latency, its place in the
# loop (the ordinal of its commit in its producer warp) and when it was issued (its commit's
# stamp, ns: the loads issued around one time share the memory's congestion)
# ``leader_gap_ns``: how long after the first CTA of its launch-order group (``group_ctas``
# CTAs; 0: no groups) issued the same place's load this one was: CTAs reading the same
# tile share one L2 miss, so the first pays the memory's latency and the next ones less
ARRIVAL_SAMPLE_DTYPE = np.dtype([("latency_ns", np.float64), ("position", np.int64),
                                 ("issued_ns", np.float64), ("leader_gap_ns", np.float64),
                                 ("group_ctas", np.int64)])


def arrival_latencies(sample) -> np.ndarray:
    """The latencies (ns) of a ring's sampled loads: an ``ARRIVAL_SAMPLE_DTYPE`` array's
    field, or the values of a plain sequence of latencies."""
    sample = np.asarray(sample)
    return sample["latency_ns"] if sample.dtype.names else sample.astype(np.float64)


def arrival_positions(sample) -> np.ndarray | None:
    """Where in the loop each sampled load was issued, None for a plain sequence."""
    sample = np.asarray(sample)
    return sample["position"] if sample.dtype.names else None


def arrival_leader_gaps(sample) -> tuple[np.ndarray, int] | None:
    """(each sampled load's gap behind its group's first, the group's CTAs), None where the
    sample has no groups."""
    sample = np.asarray(sample)
    if not sample.dtype.names or "group_ctas" not in sample.dtype.names or not sample.size:
        return None
    group = int(sample["group_ctas"].max())
    return (sample["leader_gap_ns"], group) if group > 1 else None


def arrival_issue_times(sample) -> np.ndarray | None:
    """When each sampled load was issued (ns), None for a plain sequence."""
    sample = np.asarray(sample)
    return sample["issued_ns"] if sample.dtype.names else None


def shifted_arrivals(arrivals: dict, ns: float) -> dict:
    """Each ring's sampled loads (``ARRIVAL_SAMPLE_DTYPE`` arrays or plain sequences of
    latencies) with every latency ``ns`` longer (shorter where negative): how far a
    prediction stands on the loads' latency."""
    shifted = {}
    for ring, sample in arrivals.items():
        sample = np.asarray(sample)
        if sample.dtype.names:
            sample = sample.copy()
            sample["latency_ns"] = sample["latency_ns"] + ns
        else:
            sample = sample.astype(np.float64) + ns
        shifted[ring] = sample
    return shifted


RESOURCE_KINDS = ("ring", "state")
REGION_KINDS = ("wait", "work")
RELEASE_POINTS = ("end", "start", "next")
RELATIONS = {"produces": "work", "releases": "work", "consumes": "wait", "acquires": "wait"}


@dataclass(frozen=True)
class Relation:
    resource: str
    distance: int = 0
    # where the release happens: "end" (default) or "start" of the region, or "next": just
    # before the role's next region starts (ws_gemm: the consumer releases stage k-1 after
    # issuing k-tile k and ``wait_group(1)``, i.e. once wgmma k-1 completed, right before
    # ``wait_full(k+1)`` starts; its recorded mma_ktile(k) ends later, at issue k+1)
    at: str = "end"


@dataclass(frozen=True)
class Resource:
    name: str
    kind: str = "ring"
    depth: int = 1
    shared_by: int = 1
    # items the kernel issues before its loop (a derived trace's ``@prologue`` calls: the
    # GEMMs' consumer waits for k-tile 0 before the loop): they hold slots that the loop's
    # first releases (a ``releases`` distance > 0) free
    prologue_items: int = 0

    def __post_init__(self):
        if self.kind not in RESOURCE_KINDS:
            raise ProfileBufferError(f"resource {self.name!r}: kind must be one of "
                                     f"{RESOURCE_KINDS}, got {self.kind!r}")
        if not isinstance(self.depth, int) or self.depth < 1:
            raise ProfileBufferError(f"resource {self.name!r}: depth must be an int >= 1, "
                                     f"got {self.depth!r}")
        if self.kind == "state" and self.depth != 1:
            raise ProfileBufferError(f"resource {self.name!r}: a state has depth 1")
        if not isinstance(self.shared_by, int) or self.shared_by < 1:
            raise ProfileBufferError(f"resource {self.name!r}: shared_by must be an int >= 1")
        if not isinstance(self.prologue_items, int) or self.prologue_items < 0:
            raise ProfileBufferError(f"resource {self.name!r}: prologue_items must be an int "
                                     f">= 0, got {self.prologue_items!r}")


@dataclass(frozen=True)
class Region:
    tag: str
    role: str
    kind: str
    relations: Mapping[str, Relation] = field(default_factory=dict)  # relation name -> Relation
    # work issued asynchronously (wgmma): it keeps running while the role's next wait waits,
    # so a longer wait before it shortens the work that is left after the wait
    asynchronous: bool = False

    def __post_init__(self):
        if self.asynchronous and self.kind != "work":
            raise ProfileBufferError(f"region {self.tag!r}: only work can be asynchronous")
        if self.kind not in REGION_KINDS:
            raise ProfileBufferError(f"region {self.tag!r}: kind must be one of {REGION_KINDS}")
        for name in self.relations:
            if name not in RELATIONS:
                raise ProfileBufferError(f"region {self.tag!r}: unknown relation {name!r} "
                                         f"(one of {sorted(RELATIONS)})")
            if RELATIONS[name] != self.kind:
                raise ProfileBufferError(f"region {self.tag!r}: {name!r} belongs to a "
                                         f"{RELATIONS[name]} region, this one is {self.kind}")
            distance = self.relations[name].distance
            at = self.relations[name].at
            if at not in RELEASE_POINTS or (name != "releases" and at != "end"):
                raise ProfileBufferError(f"region {self.tag!r}: {name} 'at' must be one of "
                                         f"{RELEASE_POINTS} (only 'releases' takes another than 'end'), "
                                         f"got {at!r}")
            if not isinstance(distance, int) or distance < 0:
                raise ProfileBufferError(f"region {self.tag!r}: {name} distance must be an "
                                         f"int >= 0, got {distance!r}")
        if self.kind == "wait" and len(self.relations) != 1:
            raise ProfileBufferError(f"wait region {self.tag!r} needs exactly one of "
                                     f"'consumes' or 'acquires'")


@dataclass(frozen=True)
class PipelineSpec:
    roles: RoleSpec
    resources: Sequence[Resource]
    regions: Sequence[Region]  # per role in program order
    tile_modulo: int | None = None
    # tracks that act as one, in groups of this many consecutive slots (tid % tid_stride //
    # track_group: a warpgroup, whose collective wgmma waits for its last warp). A role
    # needs an item when its first group waits for it (FA4's second consumer warpgroup
    # trails the first), a group when its last track does. None: one group per role
    track_group: int | None = None

    def __post_init__(self):
        if self.roles.tid_stride is None:
            raise ProfileBufferError("a pipeline needs roles with a tid_stride (units are groups)")
        if self.track_group is not None and (not isinstance(self.track_group, int)
                                             or self.track_group < 1):
            raise ProfileBufferError(f"track_group must be an int >= 1, got {self.track_group!r}")
        names = [r.name for r in self.resources]
        if len(set(names)) != len(names):
            raise ProfileBufferError(f"duplicate resource names in {names}")
        tags = [r.tag for r in self.regions]
        if len(set(tags)) != len(tags):
            raise ProfileBufferError(f"a tag may be one region only: {tags}")
        if self.tile_modulo is not None and (not isinstance(self.tile_modulo, int)
                                             or self.tile_modulo < 1):
            raise ProfileBufferError(f"tile_modulo must be an int >= 1, got {self.tile_modulo!r}")
        by_relation: dict[tuple[str, str], list[str]] = {}
        for region in self.regions:
            if region.role not in self.roles.roles:
                raise ProfileBufferError(f"region {region.tag!r}: unknown role {region.role!r} "
                                         f"(roles: {self.roles.role_names})")
            for rel_name, rel in region.relations.items():
                if rel.resource not in names:
                    raise ProfileBufferError(f"region {region.tag!r}: unknown resource "
                                             f"{rel.resource!r}")
                by_relation.setdefault((rel_name, rel.resource), []).append(region.tag)
        for resource in names:
            producers = by_relation.get(("produces", resource), [])
            releasers = by_relation.get(("releases", resource), [])
            if by_relation.get(("consumes", resource)) and not producers:
                raise ProfileBufferError(f"resource {resource!r} is consumed by "
                                         f"{by_relation[('consumes', resource)]} but no region "
                                         f"produces it")
            if by_relation.get(("acquires", resource)) and not releasers:
                raise ProfileBufferError(f"resource {resource!r} is acquired by "
                                         f"{by_relation[('acquires', resource)]} but no region "
                                         f"releases it")
            for rel in ("produces", "releases"):
                if len(by_relation.get((rel, resource), [])) > 1:
                    raise ProfileBufferError(f"resource {resource!r}: more than one region "
                                             f"{rel} it: {by_relation[(rel, resource)]}")
        self.step_order()  # raises on a cycle inside one iteration

    # ------------------------------------------------------------------ derived
    def resource(self, name: str) -> Resource:
        return next(r for r in self.resources if r.name == name)

    def source_region(self, relation: str, resource: str) -> int:
        """Index of the region that ``produces``/``releases`` ``resource``."""
        return next(i for i, r in enumerate(self.regions)
                    if relation in r.relations and r.relations[relation].resource == resource)

    def dependency(self, index: int) -> tuple[int, int] | None:
        """For a wait region: (index of the region it waits on, iteration distance)."""
        region = self.regions[index]
        if "consumes" in region.relations:
            rel = region.relations["consumes"]
            return self.source_region("produces", rel.resource), rel.distance
        if "acquires" in region.relations:
            rel = region.relations["acquires"]
            src = self.source_region("releases", rel.resource)
            return src, self.resource(rel.resource).depth + rel.distance
        return None

    def step_order(self) -> list[int]:
        """Regions in an order that respects program order and every distance-0 dependency
        of one iteration (a cycle among them can never run, and is an error)."""
        graph: dict[int, set[int]] = {i: set() for i in range(len(self.regions))}
        last_of_role: dict[str, int] = {}
        for i, region in enumerate(self.regions):
            if region.role in last_of_role:
                graph[i].add(last_of_role[region.role])
            last_of_role[region.role] = i
        for i, region in enumerate(self.regions):
            dep = self.dependency(i)
            if dep is not None and dep[1] == 0:
                graph[i].add(dep[0])
        try:
            return list(graphlib.TopologicalSorter(graph).static_order())
        except graphlib.CycleError as err:
            cycle = [self.regions[i].tag for i in err.args[1]]
            raise ProfileBufferError(f"cycle inside one iteration: {' -> '.join(cycle)}") from None

    def with_changes(self, *, depth: Mapping[str, int] | None = None,
                     shared_by: Mapping[str, int] | None = None) -> "PipelineSpec":
        """The same pipeline with other ring depths or sharing (what-if scenarios)."""
        resources = []
        for r in self.resources:
            r = replace(r, depth=int((depth or {}).get(r.name, r.depth)))
            r = replace(r, shared_by=int((shared_by or {}).get(r.name, r.shared_by)))
            resources.append(r)
        return replace(self, resources=resources)

    # ------------------------------------------------------------------ JSON
    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "PipelineSpec":
        unknown = set(data) - {"roles", "resources", "regions", "tile_modulo", "track_group"}
        if unknown:
            raise ProfileBufferError(f"unknown pipeline keys {sorted(unknown)}")
        for key in ("roles", "resources", "regions"):
            if key not in data:
                raise ProfileBufferError(f"a pipeline spec needs {key!r}")
        resources = []
        for r in data["resources"]:
            extra = set(r) - {"name", "kind", "depth", "shared_by", "prologue_items"}
            if extra or "name" not in r:
                raise ProfileBufferError(f"resource {r!r}: needs 'name'; unknown keys "
                                         f"{sorted(extra)}")
            resources.append(Resource(name=str(r["name"]), kind=r.get("kind", "ring"),
                                      depth=r.get("depth", 1), shared_by=r.get("shared_by", 1),
                                      prologue_items=r.get("prologue_items", 0)))
        regions = []
        for r in data["regions"]:
            extra = set(r) - {"tag", "role", "kind", "async", *RELATIONS}
            if extra or not {"tag", "role", "kind"} <= set(r):
                raise ProfileBufferError(f"region {r!r}: needs 'tag', 'role', 'kind'; unknown "
                                         f"keys {sorted(extra)}")
            relations = {}
            for name in RELATIONS:
                if name in r:
                    rel = r[name]
                    if isinstance(rel, str):
                        rel = {"resource": rel}
                    extra_rel = set(rel) - {"resource", "distance", "at"}
                    if extra_rel or "resource" not in rel:
                        raise ProfileBufferError(f"region {r.get('tag')!r}: {name} needs "
                                                 f"'resource'; unknown keys {sorted(extra_rel)}")
                    relations[name] = Relation(resource=str(rel["resource"]),
                                               distance=rel.get("distance", 0),
                                               at=rel.get("at", "end"))
            regions.append(Region(tag=str(r["tag"]), role=str(r["role"]), kind=r["kind"],
                                  relations=relations, asynchronous=bool(r.get("async", False))))
        return cls(roles=RoleSpec.from_dict(data["roles"]), resources=resources,
                   regions=regions, tile_modulo=data.get("tile_modulo"),
                   track_group=data.get("track_group"))


def load_pipeline(source: str | os.PathLike | Mapping[str, Any]) -> PipelineSpec:
    """A :class:`PipelineSpec` from a dict or a JSON file."""
    return PipelineSpec.from_dict(read_spec(source, "pipeline spec"))
