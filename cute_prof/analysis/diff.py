"""Before/after: the same statistics of two traces side by side, with the change and whether it
is larger than run-to-run noise.

Tags are matched by name, so traces with different tag tables compare. A change is
*flagged* when the difference of the means exceeds three standard errors of that
difference; where a trace holds several launches, the spread of its per-launch means is
used instead of the per-region spread when it is larger (launch-to-launch noise).

It owns the comparison and its text; it may not import the pipeline model or exporters.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..trace import Trace
from .waits import analyze_waits
from .roles import RoleSpec
from .summary import format_duration, span_mask

__all__ = ["DIFF_DTYPE", "TraceDiff", "diff_traces"]

DIFF_DTYPE = np.dtype([
    ("name", "U128"),
    ("count_a", np.int64), ("count_b", np.int64),
    ("total_a", np.int64), ("total_b", np.int64),
    ("mean_a", np.float64), ("mean_b", np.float64),
    ("p50_a", np.float64), ("p50_b", np.float64),
    ("p99_a", np.float64), ("p99_b", np.float64),
    ("delta_mean", np.float64), ("noise", np.float64), ("flagged", np.bool_),
])


@dataclass
class TraceDiff:
    tags: np.ndarray  # DIFF_DTYPE, one row per tag name present in either trace
    roles: list[dict[str, Any]]  # per role: wait/work/idle shares in A and B

    def to_dict(self) -> dict[str, Any]:
        return {"tags": [{k: (row[k].item() if k != "name" else str(row[k]))
                          for k in DIFF_DTYPE.names} for row in self.tags],
                "roles": self.roles}

    def format_text(self) -> str:
        lines = [f"  {'tag':<28} {'count A':>9} {'count B':>9} {'mean A':>10} {'mean B':>10} "
                 f"{'change':>8} {'p99 A':>10} {'p99 B':>10}  noise"]
        for row in self.tags:
            change = (row["mean_b"] / row["mean_a"] - 1) if row["mean_a"] else float("nan")
            mark = " *" if row["flagged"] else ""
            lines.append(
                f"  {row['name'][:28]:<28} {row['count_a']:>9,} {row['count_b']:>9,} "
                f"{format_duration(row['mean_a']):>10} {format_duration(row['mean_b']):>10} "
                f"{change:>+8.1%} {format_duration(row['p99_a']):>10} "
                f"{format_duration(row['p99_b']):>10}  ±{format_duration(row['noise'])}{mark}")
        lines.append("  * change of the mean beyond 3 standard errors (or the launch-to-launch "
                     "spread)")
        if self.roles:
            lines += ["", f"  {'role':<12} {'wait A':>8} {'wait B':>8} {'work A':>8} {'work B':>8}"]
            for role in self.roles:
                lines.append(f"  {role['role']:<12} {role['wait_a']:>8.1%} {role['wait_b']:>8.1%} "
                             f"{role['work_a']:>8.1%} {role['work_b']:>8.1%}")
        return "\n".join(lines)


def _by_name(trace: Trace) -> dict[str, np.ndarray]:
    """Per tag name: (durations, launch of each) of the trace's regions."""
    spans = trace.events[span_mask(trace.events)]
    out = {}
    tags, index = np.unique(spans["tag"], return_inverse=True)
    index = index.reshape(-1)
    order = np.argsort(index, kind="stable")
    bounds = np.searchsorted(index[order], np.arange(tags.shape[0] + 1))
    for i, tag in enumerate(tags.tolist()):
        rows = spans[order[bounds[i]:bounds[i + 1]]]
        out[trace.tag_name(tag)] = rows
    return out


def _noise(rows: np.ndarray) -> tuple[float, float]:
    """(mean, squared standard error of the mean) of the durations, launch-aware."""
    dur = rows["dur_ns"].astype(np.float64)
    if dur.shape[0] == 0:
        return 0.0, 0.0
    var = dur.var(ddof=1) / dur.shape[0] if dur.shape[0] > 1 else 0.0
    launches, index = np.unique(rows["launch"], return_inverse=True)
    if launches.shape[0] > 1:
        means = np.bincount(index.reshape(-1), weights=dur) / np.bincount(index.reshape(-1))
        var = max(var, means.var(ddof=1) / launches.shape[0])
    return float(dur.mean()), float(var)


def diff_traces(a: Trace, b: Trace, *, spec: RoleSpec | None = None) -> TraceDiff:
    """Per tag (by name) and per role (with ``spec``, where both traces have its tags): A and
    B side by side."""
    tags_a, tags_b = _by_name(a), _by_name(b)
    names = sorted(set(tags_a) | set(tags_b))
    empty = np.zeros(0, dtype=a.events.dtype)
    out = np.zeros(len(names), dtype=DIFF_DTYPE)
    for row, name in zip(out, names):
        ra, rb = tags_a.get(name, empty), tags_b.get(name, empty)
        mean_a, var_a = _noise(ra)
        mean_b, var_b = _noise(rb)
        row["name"] = name
        for suffix, rows, mean in (("a", ra, mean_a), ("b", rb, mean_b)):
            dur = rows["dur_ns"]
            row[f"count_{suffix}"] = dur.shape[0]
            row[f"total_{suffix}"] = int(dur.sum())
            row[f"mean_{suffix}"] = mean
            if dur.shape[0]:
                row[f"p50_{suffix}"], row[f"p99_{suffix}"] = np.percentile(dur, [50, 99])
        row["delta_mean"] = mean_b - mean_a
        row["noise"] = 3.0 * np.sqrt(var_a + var_b)
        row["flagged"] = bool(ra.shape[0] and rb.shape[0]
                              and abs(mean_b - mean_a) > row["noise"])
    roles = []
    if spec is not None and all(spec.applies_to(t) for t in (a, b)):
        split_a = analyze_waits(a, spec).roles
        split_b = analyze_waits(b, spec).roles
        for name in [str(r) for r in split_a["role"] if r in split_b["role"]]:
            ra = split_a[split_a["role"] == name][0]
            rb = split_b[split_b["role"] == name][0]
            roles.append({"role": name,
                          **{f"{what}_{s}": float(r[f"{what}_ns"]) / max(int(r["window_ns"]), 1)
                             for what in ("wait", "work", "idle") for s, r in (("a", ra), ("b", rb))}})
    return TraceDiff(tags=out, roles=roles)
