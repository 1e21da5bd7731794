"""One self-contained HTML page about a trace: what was recorded and lost, the per-tag
statistics, who waited on what (with a role spec), the timeline picture, per-tag duration
histograms and, given a second trace, the before/after comparison. Pictures are embedded
as base64 PNG, styles inline: the file opens anywhere, with no network.

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
from .analysis.waits import analyze_waits
from .analysis.roles import RoleSpec
from .analysis.summary import format_duration, span_mask, summarize
from .export.picture import plot_timeline
from .files import atomic_open, check_output_path
from .trace import Trace

__all__ = ["write_report"]

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


def write_report(
    trace: Trace,
    path: str | os.PathLike,
    *,
    spec: RoleSpec | None = None,
    compare: Trace | None = None,
    title: str | None = None,
) -> Path:
    """Write the report page for ``trace`` (and the comparison with ``compare``)."""
    target = check_output_path(path)
    summary = summarize(trace)
    name = title or str(trace.metadata.get("source_file") or "cute_prof trace")
    parts = [f"<h1>{html.escape(name)}</h1>"]
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
    rows = []
    for row in summary.tags[np.argsort(-summary.tags["total_ns"])]:
        rows.append([summary.tag_name(row["tag"]), f"{row['count']:,}",
                     format_duration(row["total_ns"]), format_duration(row["mean_ns"]),
                     format_duration(row["p50_ns"]), format_duration(row["p99_ns"]),
                     format_duration(row["max_ns"]), f"{row['share']:.1%}"])
    parts.append(_table(["tag", "count", "total", "mean", "p50", "p99", "max", "share"], rows))

    if spec is not None:
        analysis = analyze_waits(trace, spec)
        parts.append("<h2>Who waited on what</h2>")
        parts.append(f'<p class="verdict">{html.escape(analysis.verdict)}</p>')
        role_rows = [[str(r["role"]), f"{r['tracks']:,}",
                      *(f"{r[k] / max(int(r['window_ns']), 1):.1%}"
                        for k in ("work_ns", "wait_ns", "idle_ns"))] for r in analysis.roles]
        parts.append(_table(["role", "tracks", "work", "wait", "idle"], role_rows))
        parts.append("<pre>" + html.escape(analysis.format_text()) + "</pre>")

    parts.append("<h2>Timeline</h2>")
    timeline = _png(lambda p: plot_timeline(trace, p, width_px=1150, title=name))
    parts.append(f'<img alt="timeline" src="data:image/png;base64,{timeline}">')
    parts.append("<h2>Region durations</h2>")
    parts.append(_histograms(trace))

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

    page = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(name)}"
            f"</title><style>{_STYLE}</style></head><body>{''.join(parts)}</body></html>")
    with atomic_open(target, "w") as handle:
        handle.write(page)
    return target
