"""Who waited on what: per-role work / wait / idle, the producer-to-consumer latency of each
k-tile, how far producers run ahead, where the kernel's tail comes from, and a verdict.

Definitions (every number is a union over a track, so nested regions count once):

* A track's *window* runs from its first record's start to its last record's end.
* *wait* is the union of its ``wait`` regions; *work* is the union of ``work`` and ``wait``
  regions minus *wait* (time in a work region while not waiting); *idle* is the window
  minus both. ``phase`` regions (a mainloop around everything) only widen the window.
* With ``RoleSpec.pipeline = {"issue": TAG, "acquire": TAG}`` and the k-tile in the payload:
  the *latency* of k-tile k in a group (CTA) is the end of a consumer's ``acquire`` region
  of k minus the end of the producer's ``issue`` region of k; the *run-ahead* at an acquire
  is how many k-tiles the group's producer had issued by then, minus k + 1; a *stall* is an
  acquire wait longer than ``stall_ns``.
* The *tail* of an SM is the kernel's last end minus the SM's last end.

It owns the role split and its verdict; it may not import the pipeline model or exporters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ProfileBufferError
from ..trace import Trace
from .roles import TAG_KINDS, RoleSpec
from .summary import busy_union, format_duration, span_mask

__all__ = ["ROLE_SPLIT_DTYPE", "WaitAnalysis", "analyze_waits", "bound_kind", "bound_verdict",
           "BOUND_KINDS"]

ROLE_SPLIT_DTYPE = np.dtype([
    ("role", "U64"), ("tracks", np.int64), ("window_ns", np.int64), ("work_ns", np.int64),
    ("wait_ns", np.int64), ("idle_ns", np.int64),
])
WORK, WAIT, PHASE = (TAG_KINDS.index(k) for k in ("work", "wait", "phase"))


@dataclass
class WaitAnalysis:
    """The numbers behind the verdict; ``to_dict`` for JSON, ``format_text`` for people."""

    roles: np.ndarray  # ROLE_SPLIT_DTYPE, one row per role that recorded
    latency_ns: np.ndarray  # per (group, k-tile, consumer track) acquire: issue end -> acquire end
    run_ahead: np.ndarray  # per acquire: k-tiles issued beyond the one acquired
    stalls: int  # acquires whose wait exceeded stall_ns
    acquires: int
    stall_ns: int
    unmatched_acquires: int  # acquires whose k-tile the group's producer never issued
    sm_tail_ns: np.ndarray  # per SM: kernel end - the SM's last end
    group_tail_ns: np.ndarray  # per group (CTA): kernel end - the group's last end
    kernel_ns: int
    verdict: str
    facts: dict[str, Any] = field(default_factory=dict)

    def share(self, role: str, what: str) -> float:
        row = self.roles[self.roles["role"] == role]
        if row.shape[0] == 0:
            raise ProfileBufferError(f"no role {role!r} recorded; roles: {list(self.roles['role'])}")
        window = int(row["window_ns"][0])
        return float(row[f"{what}_ns"][0]) / window if window else 0.0

    def to_dict(self) -> dict[str, Any]:
        def dist(values):
            if values.shape[0] == 0:
                return None
            p50, p90, p99 = np.percentile(values, [50, 90, 99])
            return {"count": int(values.shape[0]), "mean": float(values.mean()),
                    "p50": float(p50), "p90": float(p90), "p99": float(p99),
                    "max": float(values.max()), "min": float(values.min())}

        return {
            "roles": [{name: (row[name].item() if name != "role" else str(row[name]))
                       for name in ROLE_SPLIT_DTYPE.names} for row in self.roles],
            "latency_ns": dist(self.latency_ns), "run_ahead": dist(self.run_ahead),
            "stalls": self.stalls, "acquires": self.acquires, "stall_ns": self.stall_ns,
            "unmatched_acquires": self.unmatched_acquires,
            "sm_tail_ns": dist(self.sm_tail_ns), "group_tail_ns": dist(self.group_tail_ns),
            "kernel_ns": self.kernel_ns, "verdict": self.verdict, "facts": self.facts,
        }

    def format_text(self) -> str:
        lines = ["Time per role (union over each track's window; shares of the window)",
                 f"  {'role':<12} {'tracks':>7} {'work':>7} {'wait':>7} {'idle':>7}  window total"]
        for row in self.roles:
            window = max(int(row["window_ns"]), 1)
            lines.append(
                f"  {row['role']:<12} {row['tracks']:>7,} {row['work_ns'] / window:>7.1%} "
                f"{row['wait_ns'] / window:>7.1%} {row['idle_ns'] / window:>7.1%}  "
                f"{format_duration(row['window_ns'])}")
        if self.acquires:
            p50, p99 = np.percentile(self.latency_ns, [50, 99]) if self.latency_ns.size else (0, 0)
            lines += [
                "",
                f"Pipeline: {self.acquires:,} acquires; issue -> acquire latency p50 "
                f"{format_duration(p50)}, p99 {format_duration(p99)}; {self.stalls:,} stalls "
                f"(wait > {format_duration(self.stall_ns)}); producer run-ahead at acquire: "
                + ", ".join(f"{k} ahead {np.count_nonzero(self.run_ahead == k) / max(1, self.run_ahead.size):.0%}"
                            for k in np.unique(np.clip(self.run_ahead, -1, 8)).tolist()),
            ]
            if self.unmatched_acquires:
                lines.append(f"  {self.unmatched_acquires:,} acquires have no issue of their "
                             "k-tile in their group (records lost or payloads differ)")
        if self.sm_tail_ns.size:
            lines += ["", f"Tail: SMs finish {format_duration(np.median(self.sm_tail_ns))} "
                      f"(median), up to {format_duration(self.sm_tail_ns.max())} before the "
                      f"kernel's last record; kernel {format_duration(self.kernel_ns)}"]
        lines += ["", "Verdict: " + self.verdict]
        return "\n".join(lines)


def _dense_groups(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(values, return_inverse=True)`` by a lookup table where the values span a
    small range (track and SM ids always do), so no sort of every record is needed."""
    values = np.asarray(values, dtype=np.int64)
    if values.shape[0] == 0:
        return values, values
    low = int(values.min())
    size = int(values.max()) - low + 1
    if size > 4 * values.shape[0] + (1 << 16):
        keys, index = np.unique(values, return_inverse=True)
        return keys, index.reshape(-1)
    present = np.zeros(size, dtype=bool)
    present[values - low] = True
    rank = np.cumsum(present) - 1
    return np.flatnonzero(present) + low, rank[values - low]


def _max_per_group(values: np.ndarray, keys: np.ndarray) -> np.ndarray:
    groups, index = _dense_groups(keys)
    out = np.full(groups.shape[0], np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(out, index, values)
    return out


def _role_split(trace: Trace, spec: RoleSpec, kinds: np.ndarray) -> np.ndarray:
    ev = trace.events
    spans = ev[span_mask(ev)]
    tid = spans["tid"].astype(np.int64)
    start = spans["start_ns"]
    end = start + spans["dur_ns"]
    kind = kinds[np.minimum(spans["tag"], kinds.shape[0] - 1)]
    tracks, track_of = _dense_groups(tid)
    first = np.full(tracks.shape[0], np.iinfo(np.int64).max, dtype=np.int64)
    last = np.full(tracks.shape[0], np.iinfo(np.int64).min, dtype=np.int64)
    np.minimum.at(first, track_of, start)
    np.maximum.at(last, track_of, end)
    track_window = last - first
    active = kind != PHASE
    both = busy_union(tid[active], start[active], end[active])
    waits = kind == WAIT
    wait = busy_union(tid[waits], start[waits], end[waits])
    all_ns = np.zeros(tracks.shape[0], np.int64)
    all_ns[np.searchsorted(tracks, both.tracks)] = both.busy_ns
    wait_ns = np.zeros(tracks.shape[0], np.int64)
    wait_ns[np.searchsorted(tracks, wait.tracks)] = wait.busy_ns
    role = spec.role_of(tracks)
    names = spec.role_names + ["unassigned"]
    role = np.where(role < 0, len(names) - 1, role)
    counts = np.bincount(role, minlength=len(names))
    out = np.zeros(int(np.count_nonzero(counts)), dtype=ROLE_SPLIT_DTYPE)
    for row, index in enumerate(np.flatnonzero(counts).tolist()):
        mine = role == index
        out[row] = (names[index], counts[index], track_window[mine].sum(),
                    (all_ns - wait_ns)[mine].sum(), wait_ns[mine].sum(),
                    (track_window - all_ns)[mine].sum())
    return out


def _tag_id(trace: Trace, name: str) -> int:
    try:
        return trace.tag_names.index(name)
    except ValueError:
        raise ProfileBufferError(f"pipeline tag {name!r} is not in the trace's tag table") from None


def _pipeline(trace: Trace, spec: RoleSpec, stall_ns: int):
    ev = trace.events[span_mask(trace.events)]
    issue = ev[ev["tag"] == _tag_id(trace, spec.pipeline["issue"])]
    acquire = ev[ev["tag"] == _tag_id(trace, spec.pipeline["acquire"])]
    if issue.shape[0] == 0 or acquire.shape[0] == 0:
        empty = np.zeros(0, np.int64)
        return empty, empty, 0, int(acquire.shape[0]), int(acquire.shape[0])
    k_span = int(max(issue["payload"].max(), acquire["payload"].max())) + 2
    issue_group = spec.group_of(issue["tid"])
    acquire_group = spec.group_of(acquire["tid"])
    # issue end per (group, k): first issue of that k-tile in the group
    issue_key = issue_group * k_span + issue["payload"].astype(np.int64)
    issue_end = issue["start_ns"] + issue["dur_ns"]
    order = np.lexsort((issue_end, issue_key))
    issue_key, issue_end = issue_key[order], issue_end[order]
    first = np.r_[True, issue_key[1:] != issue_key[:-1]]
    issue_key, issue_end = issue_key[first], issue_end[first]
    acquire_key = acquire_group * k_span + acquire["payload"].astype(np.int64)
    acquire_end = acquire["start_ns"] + acquire["dur_ns"]
    where = np.searchsorted(issue_key, acquire_key)
    where = np.minimum(where, issue_key.shape[0] - 1)
    matched = issue_key[where] == acquire_key
    latency = (acquire_end - issue_end[where])[matched]
    # run-ahead: issues of the group ended by the acquire's end, minus (k + 1)
    t0 = int(min(issue_end.min(), acquire_end.min()))
    stride = int(max(issue_end.max(), acquire_end.max())) - t0 + 1
    groups_of_issues = issue_key // k_span
    timeline = groups_of_issues * stride + (issue_end - t0)
    timeline_order = np.argsort(timeline, kind="stable")
    timeline = timeline[timeline_order]
    issued = (np.searchsorted(timeline, acquire_group * stride + (acquire_end - t0), side="right")
              - np.searchsorted(timeline, acquire_group * stride))
    run_ahead = (issued - (acquire["payload"].astype(np.int64) + 1))[matched]
    stalls = int(np.count_nonzero(acquire["dur_ns"] > stall_ns))
    return latency, run_ahead, stalls, int(acquire.shape[0]), int(np.count_nonzero(~matched))


def _verdict(roles: np.ndarray, spec: RoleSpec, facts: dict[str, Any]) -> str:
    shares = {str(r["role"]): (r["wait_ns"] / max(int(r["window_ns"]), 1),
                               r["work_ns"] / max(int(r["window_ns"]), 1)) for r in roles}
    producer, consumer = spec.pipeline.get("producer"), spec.pipeline.get("consumer")
    if producer not in shares or consumer not in shares:
        busiest = max(shares, key=lambda r: shares[r][1]) if shares else None
        return (f"no producer/consumer roles declared; the busiest role is {busiest!r}"
                if busiest else "nothing recorded")
    p_wait, _ = shares[producer]
    c_wait, c_work = shares[consumer]
    facts.update(producer_wait=p_wait, consumer_wait=c_wait, consumer_work=c_work)
    return bound_verdict(producer, consumer, p_wait, c_wait)


# what bound_kind finds a pipeline (or ring) bound by
BOUND_KINDS = ("consumers", "producer", "both", "balanced")


def bound_kind(p_wait: float, c_wait: float, rings: tuple[int, int] = (1, 1)) -> str:
    """What a pipeline (or one ring) is bound by (one of ``BOUND_KINDS``), from the share of
    time the producer waits for empty stages and the consumers wait for full ones.
    ``rings``: on how many rings (producer, consumer) wait in turn: such a side can spend
    about 1/n of its time on each, so a ring's shares are judged against the thresholds
    over n."""
    p_judged, c_judged = p_wait * max(rings[0], 1), c_wait * max(rings[1], 1)
    if p_judged >= 0.5 and c_judged < 0.5 * p_judged:
        return "consumers"
    if c_judged >= 0.3 and p_judged < 0.3:
        return "producer"
    if c_judged >= 0.3 and p_judged >= 0.3:
        return "both"
    return "balanced"


def bound_verdict(producer: str, consumer: str, p_wait: float, c_wait: float, *,
                  subject: str = "the pipeline", rings: tuple[int, int] = (1, 1)) -> str:
    """The verdict in words: what ``subject`` (the pipeline, or one ring) is bound by
    (:func:`bound_kind`), the shares it is judged on, and what would help."""
    said = (f"{consumer} tracks wait {c_wait:.0%} of their time for full stages while the "
            f"{producer} waits {p_wait:.0%} for empty ones")
    kind = bound_kind(p_wait, c_wait, rings)
    if kind == "consumers":
        return (f"{said}: {subject} is bound by the {consumer}s (the ring stays full and "
                f"the {producer} waits for stages to be released). Faster {consumer} work "
                "(fewer instructions per k-tile, more math per stage) would help; more stages "
                f"would not. The {consumer}s' own {c_wait:.0%} wait is load latency after a "
                "release: releasing a stage earlier, or one more stage, hides part of it.")
    if kind == "producer":
        return (f"{said}: {subject} is bound by the {producer} (loads arrive late and the "
                f"{consumer}s starve). More stages in flight, larger loads, multicast or a "
                f"faster {producer} loop would help; faster math would not.")
    if kind == "both":
        return (f"{said}: both sides wait on each other, so the ring is too shallow for the "
                "load latency: one more stage (or releasing stages earlier) would help.")
    return f"{said}: neither side waits much; {subject} is balanced."


def analyze_waits(trace: Trace, spec: RoleSpec, *, stall_ns: int = 64) -> WaitAnalysis:
    """Per-role time split, k-tile latency, run-ahead, tail and a verdict (vectorised)."""
    kinds = spec.tag_kinds(trace)
    roles = _role_split(trace, spec, kinds)
    if spec.pipeline:
        latency, run_ahead, stalls, acquires, unmatched = _pipeline(trace, spec, stall_ns)
    else:
        latency = run_ahead = np.zeros(0, np.int64)
        stalls = acquires = unmatched = 0
    ev = trace.events
    if ev.shape[0]:
        end = ev["start_ns"] + ev["dur_ns"]
        kernel_end, kernel_start = int(end.max()), int(ev["start_ns"].min())
        sm_last = _max_per_group(end, ev["sm"])
        group_last = _max_per_group(end, spec.group_of(ev["tid"]))
        sm_tail, group_tail = kernel_end - sm_last, kernel_end - group_last
        kernel_ns = kernel_end - kernel_start
    else:
        sm_tail = group_tail = np.zeros(0, np.int64)
        kernel_ns = 0
    facts: dict[str, Any] = {}
    verdict = _verdict(roles, spec, facts)
    return WaitAnalysis(roles=roles, latency_ns=latency, run_ahead=run_ahead, stalls=stalls,
                        acquires=acquires, stall_ns=stall_ns, unmatched_acquires=unmatched,
                        sm_tail_ns=sm_tail, group_tail_ns=group_tail, kernel_ns=kernel_ns,
                        verdict=verdict, facts=facts)
