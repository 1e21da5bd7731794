"""One self-contained HTML page about a trace: what was recorded and lost, the per-tag
statistics (regions, then instants), who waited on what (with a role spec, or from a zero-edit
trace's own roles with a verdict per ring), the timeline picture, per-tag duration histograms
and, given a second trace, the before/after comparison. A zero-edit trace's page shows the
work between its warps' pipeline calls as derived regions (``derived=False``: the records
alone). Pictures are embedded as base64 PNG, styles inline: the file opens anywhere, with no
network.

Owns the HTML page (stage 6): its numbers are the analysis's and its picture the exporter's; it
may not import the CLI.
"""

from __future__ import annotations

import base64
import html
import os
import tempfile
from pathlib import Path

import numpy as np

from .analysis.diff import diff_traces
from .analysis.light import format_light_verdicts, light_verdicts
from .analysis.waits import analyze_waits
from .analysis.roles import RoleSpec, apply_roles
from .analysis.summary import format_duration, span_mask, summarize
from .analysis.zero_edit import (format_wait_breakdown, is_zero_edit, wait_breakdown,
                                  zero_edit_roles)
from .analysis.zero_edit_work import (derived_tag_ids, ring_headline, ring_verdicts, ring_waits,
    with_work_regions)
from .export.picture import plot_timeline
from .files import atomic_open, check_output_path
from .trace import Trace

__all__ = ["report_sections", "write_report", "write_run_report"]

_STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 24px auto; max-width: 1200px; color: #222; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 28px; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 8px 0; } td, th { padding: 3px 10px; text-align: right; }
th { background: #f3f3f3; } td:first-child, th:first-child { text-align: left; }
tr:nth-child(even) td { background: #fafafa; } .flag { color: #b00; font-weight: bold; }
.verdict { background: #fff7e0; border-left: 4px solid #e0a000; padding: 8px 12px; }
.loss { color: #b00; } img { max-width: 100%; border: 1px solid #eee; }
"""


def _png(draw) -> str:
    """base64 PNG of what ``draw(path)`` writes."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "picture.png"
        draw(path)
        return base64.b64encode(path.read_bytes()).decode("ascii")


def _table(header: list[str], rows: list[list[str]], flags: list[bool] | None = None) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = []
    for i, row in enumerate(rows):
        cls = ' class="flag"' if flags and flags[i] else ""
        body.append(f"<tr{cls}>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row)
                    + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def _histograms(trace: Trace, *, max_tags: int = 12) -> str:
    from matplotlib.figure import Figure

    spans = trace.events[span_mask(trace.events)]
    tags, counts = np.unique(spans["tag"], return_counts=True)
    tags = tags[np.argsort(-counts)][:max_tags]
    if tags.shape[0] == 0:
        return "<p>No regions.</p>"
    columns = min(3, tags.shape[0])
    rows = -(-tags.shape[0] // columns)
    figure = Figure(figsize=(4.2 * columns, 2.6 * rows), dpi=90, layout="constrained")
    for i, tag in enumerate(tags.tolist()):
        axes = figure.add_subplot(rows, columns, i + 1)
        dur = spans["dur_ns"][spans["tag"] == tag].astype(np.float64)
        positive = dur[dur > 0]
        if positive.shape[0] and positive.max() / positive.min() > 100:
            bins = np.geomspace(positive.min(), positive.max(), 40)
            axes.set_xscale("log")
        else:
            bins = 40
        axes.hist(dur, bins=bins, color="#4c78a8")
        axes.set_title(trace.tag_name(tag)[:40], fontsize=9)
        axes.set_xlabel("duration (ns)", fontsize=8)
        axes.tick_params(labelsize=7)
    image = _png(lambda path: figure.savefig(path, format="png"))
    return f'<img alt="duration histograms" src="data:image/png;base64,{image}">'


def _tag_tables(summary, derived: np.ndarray) -> str:
    """The per-tag statistics: recorded regions, derived regions (each with its share of its
    own table's total), then the tags of instants alone, with their counts."""
    tags = summary.tags
    is_derived = np.isin(tags["tag"], derived)
    parts = []
    for label, rows_here in (("", tags[(tags["count"] > 0) & ~is_derived]),
                             ("Derived regions (not recorded: the work between each warp's "
                              "pipeline calls)", tags[(tags["count"] > 0) & is_derived])):
        if not rows_here.shape[0]:
            continue
        total = max(int(rows_here["total_ns"].sum()), 1)
        rows = [[summary.tag_name(row["tag"]), f"{row['count']:,}",
                 *(format_duration(row[k]) for k in ("total_ns", "mean_ns", "p50_ns", "p99_ns",
                                                     "max_ns")),
                 f"{row['total_ns'] / total:.1%}"]
                for row in rows_here[np.argsort(-rows_here["total_ns"], kind="stable")]]
        if label:
            parts.append(f"<p>{html.escape(label)}:</p>")
        parts.append(_table(["tag", "count", "total", "mean", "p50", "p99", "max", "share"],
                            rows))
    instants = tags[(tags["count"] == 0) & (tags["instants"] > 0)]
    if instants.shape[0]:
        parts.append("<p>Instants (signals: no duration):</p>")
        parts.append(_table(["tag", "count"], [
            [summary.tag_name(row["tag"]), f"{row['instants']:,}"]
            for row in instants[np.argsort(-instants["instants"], kind="stable")]]))
    return "".join(parts)


def _role_table(analysis) -> str:
    """Each role's work / wait / idle as shares of its tracks' windows."""
    rows = [[str(r["role"]), f"{r['tracks']:,}",
             *(f"{r[k] / max(int(r['window_ns']), 1):.1%}"
               for k in ("work_ns", "wait_ns", "idle_ns"))]
            for r in analysis.roles]
    return _table(["role", "tracks", "work", "wait", "idle"], rows)


def _zero_edit_waits(trace: Trace, shown: Trace) -> str:
    """Who waited on what in a zero-edit trace, from its own roles: a verdict per ring, each
    role's work / wait / idle (work: the derived regions where ``shown`` has them), and what
    each role waited on."""
    roles = zero_edit_roles(trace)
    rings = ring_waits(trace)
    parts = ["<h2>Who waited on what</h2>"]
    if rings:
        parts.append(f'<p class="verdict"><b>{html.escape(ring_headline(rings))}.</b></p>')
        parts += [f'<p class="verdict">{html.escape(v)}</p>' for v in ring_verdicts(rings)]
    elif light_verdicts(trace)["rings"]:  # a light recording: the producer's waits alone
        parts.append("<p>A light recording: the producer's waits alone.</p>")
        parts += [f'<p class="verdict">{html.escape(line)}</p>'
                  for line in format_light_verdicts(light_verdicts(trace)).splitlines()]
    else:
        parts.append('<p class="verdict">No ring has both a producer and a consumer in this '
                     "trace: no verdict.</p>")
    analysis = analyze_waits(shown, roles)
    derived_note = (" Work is the derived regions'." if derived_tag_ids(shown).size else
                    " Only waits were recorded: work shows as idle.")
    parts.append(f"<p>Time per role (shares of each warp's first-to-last record).{derived_note}"
                 "</p>")
    parts.append(_role_table(analysis))
    parts.append("<pre>" + html.escape(format_wait_breakdown(wait_breakdown(trace))) + "</pre>")
    return "".join(parts)


def write_report(
    trace: Trace,
    path: str | os.PathLike,
    *,
    spec: RoleSpec | None = None,
    compare: Trace | None = None,
    title: str | None = None,
    derived: bool = True,
) -> Path:
    """Write the report page for ``trace`` (and the comparison with ``compare``).

    A zero-edit trace gets its tracks named by its roles (where it has no names), who waited
    on what from those roles with a verdict per ring, and, with ``derived``, the work between
    its warps' pipeline calls as derived regions in the statistics and the timeline."""
    target = check_output_path(path)
    name = title or str(trace.metadata.get("source_file") or "cute_prof trace")
    parts = report_sections(trace, spec=spec, compare=compare, title=name, derived=derived)
    return _write_page(target, name, [f"<h1>{html.escape(name)}</h1>", *parts])


def write_run_report(sections: list[tuple[str, Trace]], path: str | os.PathLike, *,
                     title: str, overview: str = "", derived: bool = True) -> Path:
    """One page for several kernels (``cute-prof report`` of a recorded run): ``overview``
    (preformatted text) first, then a section per ``(heading, trace)``."""
    target = check_output_path(path)
    parts = [f"<h1>{html.escape(title)}</h1>"]
    if overview:
        parts.append(f"<pre>{html.escape(overview)}</pre>")
    for heading, trace in sections:
        parts.append(f'<h1 style="margin-top:40px">{html.escape(heading)}</h1>')
        parts.extend(report_sections(trace, title=heading, derived=derived))
    return _write_page(target, title, parts)


def _write_page(target: Path, name: str, parts: list[str]) -> Path:
    page = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(name)}"
            f"</title><style>{_STYLE}</style></head><body>{''.join(parts)}</body></html>")
    with atomic_open(target, "w") as handle:
        handle.write(page)
    return target


def report_sections(trace: Trace, *, spec: RoleSpec | None = None, compare: Trace | None = None,
                    title: str = "cute_prof trace", derived: bool = True) -> list[str]:
    """The report's HTML parts for one trace (below its heading)."""
    zero_edit = is_zero_edit(trace)
    if zero_edit and not trace.track_names:
        trace = apply_roles(trace, zero_edit_roles(trace))
    shown = with_work_regions(trace) if derived else trace
    summary = summarize(shown)
    name = title
    parts = []
    device = trace.metadata.get("device", "unknown device")
    parts.append(
        f"<p>{len(trace):,} records on {html.escape(str(device))}, "
        f"{len(trace.launches) or 1} launch(es), kernel span "
        f"{format_duration(summary.kernel_span_ns)}.</p>")
    losses = {"overflow": trace.overflow, "incomplete": trace.incomplete, **trace.invalid_reasons}
    lost = {k: v for k, v in losses.items() if v}
    parts.append('<p class="loss">Lost records: ' + ", ".join(f"{v:,} {k}" for k, v in lost.items())
                 + "</p>" if lost else "<p>No records were lost.</p>")

    parts.append("<h2>Per-tag statistics</h2>")
    parts.append(_tag_tables(summary, derived_tag_ids(shown)))

    if spec is not None:
        analysis = analyze_waits(shown, spec)
        parts.append("<h2>Who waited on what</h2>")
        parts.append(f'<p class="verdict">{html.escape(analysis.verdict)}</p>')
        parts.append(_role_table(analysis))
        parts.append("<pre>" + html.escape(analysis.format_text()) + "</pre>")
    elif zero_edit:
        parts.append(_zero_edit_waits(trace, shown))

    parts.append("<h2>Timeline</h2>")
    timeline = _png(lambda p: plot_timeline(shown, p, width_px=1150, title=name, derived=False))
    parts.append(f'<img alt="timeline" src="data:image/png;base64,{timeline}">')
    parts.append("<h2>Region durations</h2>")
    parts.append(_histograms(shown))

    if compare is not None:
        diff = diff_traces(trace, compare, spec=spec)
        parts.append("<h2>Before / after</h2>")
        parts.append("<p>A is this trace, B the compared one; flagged rows changed by more "
                     "than the run-to-run noise.</p>")
        diff_rows = [[str(r["name"]), f"{r['count_a']:,}", f"{r['count_b']:,}",
                      format_duration(r["mean_a"]), format_duration(r["mean_b"]),
                      f"{(r['mean_b'] / r['mean_a'] - 1):+.1%}" if r["mean_a"] else "n/a",
                      format_duration(r["noise"])] for r in diff.tags]
        parts.append(_table(["tag", "count A", "count B", "mean A", "mean B", "change", "noise"],
                            diff_rows, flags=[bool(r["flagged"]) for r in diff.tags]))
    return parts
