"""Timeline pictures of a trace (PNG, SVG or PDF) with matplotlib, no display needed.

Rows are tids (or SMs), the x axis is time since the kernel started, one colour per tag.

* Few regions (``max_vector_regions``) and few rows: every region is drawn as a
  rectangle; nested regions are drawn thinner and on top of their parents, so the
  nesting stays visible.
* Anything larger is rasterised to what the picture can show: each row is binned into
  pixel columns, the time each tag is the *innermost* open region in every pixel is summed
  with numpy, and each pixel shows the tag with the most such time, faded by how busy the
  row was there (white: idle). A million regions take about a second.
* More tracks than ``max_tracks``: neighbouring tracks are merged into one row each
  (labelled with the range they hold), so the picture always has readable row heights.

Instants are drawn as small black ticks at the bottom of their row. Derived regions (a
zero-edit trace's work between its warps' pipeline calls, tags ending ``(derived)``) are
drawn lighter and hatched, and the legend and a note say so.

Owns the pictures (matplotlib is imported only when one is drawn); it may not import the
session, the CLI or the device code.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from .. import jit, layout
from ..analysis.summary import pick_unit
from ..analysis.zero_edit_work import derived_tag_ids, with_work_regions
from ..errors import ProfileBufferError
from ..files import atomic_write
from ..trace import Trace
from .regions import SPAN_KINDS, build_region_ops

__all__ = ["plot_timeline", "picture_format_of", "stack_tops", "GROUP_BY", "FORMATS"]

GROUP_BY = ("tid", "device", "sm")  # "device" is the JSON exporter's name for "tid"
FORMATS = ("png", "svg", "pdf")
_OTHER = "other tags"
# Fixed margins in pixels, so the plot area (and so the raster) has a known pixel size.
_LEFT_PX, _RIGHT_PX, _TOP_PX, _BOTTOM_PX = 120, 190, 50, 55
_UNIT_SCALE = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}
_UNIT_LABEL = {"ns": "ns", "us": "µs", "ms": "ms", "s": "s"}
# a derived region: its tag's colour this far towards white, hatched
_DERIVED_LIGHTEN = 0.5
_DERIVED_HATCH = "///"


def _palette(count: int) -> np.ndarray:
    """Distinct RGB colours: tab10 first, then the lighter tab20 shades."""
    from matplotlib import colormaps

    tab10 = colormaps["tab10"].colors
    tab20 = colormaps["tab20"].colors
    colours = list(tab10) + [tab20[i] for i in range(1, 20, 2)]
    return np.array([colours[i % len(colours)] for i in range(count)], dtype=np.float64)


def picture_format_of(path: Path, format: str | None) -> str:
    fmt = (format or path.suffix.lstrip(".")).lower()
    if fmt not in FORMATS:
        raise ProfileBufferError(
            f"cannot plot to {str(path)!r}: format {fmt or '(no suffix)'!r} is not one of "
            f"{', '.join(FORMATS)}"
        )
    return fmt


def _stack_view(track: np.ndarray, start: np.ndarray, end: np.ndarray):
    """What each track is doing at every moment: the innermost open region.

    Returns ``(level per region, segments)`` where ``level`` is the number of regions open
    on the track when the region begins (its nesting depth), and ``segments`` is
    ``(track, start, end, region)`` for every stretch of time with the same innermost
    region. Uses the same begin/end ordering as the Perfetto export; the region on top
    after an end is the last region begun one level up (a sorted-key lookup), so the
    whole computation is vectorised. Tracks whose regions overlap without nesting fall
    back to a small stack walk.
    """
    n = start.shape[0]
    empty = np.zeros(0, np.int64)
    if n == 0:
        return empty, (empty, empty, empty, empty)
    t0 = int(start.min())
    zeros = np.zeros(n, np.int64)
    ops = build_region_ops(track, start, end, zeros, zeros, empty, empty, empty, empty,
                     int(track.max()) + 1, t0, int(end.max()) - t0 + 1)
    m = ops.ts.shape[0]
    is_begin = ops.type == 1
    depth = np.cumsum(np.where(is_begin, 1, -1))
    begin_pos = np.flatnonzero(is_begin)
    end_pos = np.flatnonzero(~is_begin)
    levels = np.empty(n, np.int64)
    levels[ops.span[begin_pos]] = depth[begin_pos]
    closes_at = np.empty(n, np.int64)
    closes_at[ops.span[end_pos]] = end_pos

    # top of the stack after every op: the region itself after a begin; after an end, the
    # last region begun at the level that is now on top (if it is still open)
    top = np.full(m, -1, np.int64)
    top[begin_pos] = ops.span[begin_pos]
    max_level = int(depth.max()) + 1
    begin_key = (ops.track[begin_pos] * max_level + depth[begin_pos]) * m + begin_pos
    order = np.argsort(begin_key)
    sorted_keys, sorted_pos = begin_key[order], begin_pos[order]
    level_after = depth[end_pos]
    reopened = end_pos[level_after > 0]
    query = (ops.track[reopened] * max_level + depth[reopened]) * m + reopened
    found = np.searchsorted(sorted_keys, query) - 1
    candidate = sorted_pos[np.maximum(found, 0)]
    valid = (found >= 0) & (ops.track[candidate] == ops.track[reopened]) & (
        depth[candidate] == depth[reopened])
    candidate_span = ops.span[candidate]
    valid &= closes_at[candidate_span] > reopened
    top[reopened[valid]] = candidate_span[valid]
    misnested = np.unique(ops.track[reopened[~valid]])
    if misnested.size:  # tracks whose regions overlap without nesting: a stack walk
        mine = np.flatnonzero(np.isin(ops.track, misnested))
        top[mine] = stack_tops(ops.type[mine].astype(np.int64), ops.span[mine].astype(np.int64))

    same_track_next = np.r_[ops.track[1:] == ops.track[:-1], False]
    keep = same_track_next & (top >= 0)
    keep[:-1] &= ops.ts[1:] > ops.ts[:-1]
    index = np.flatnonzero(keep)
    segments = (ops.track[index], ops.ts[index], ops.ts[index + 1], top[index])
    return levels, segments


@jit.kernel
def stack_tops(kinds: np.ndarray, spans: np.ndarray) -> np.ndarray:
    """The region on top of its track's stack after each begin (kind 1) or end of
    ``spans``, in their order, each track's begins and ends together and balanced: the
    latest begun that is still open (-1: none). A compiled loop with numba (a zero-edit
    trace's derived regions overlap on every consumer warp), plain Python without."""
    top = np.full(kinds.shape[0], -1, np.int64)
    open_spans = np.empty(kinds.shape[0], np.int64)
    depth = 0
    for i in range(kinds.shape[0]):
        if kinds[i] == 1:
            open_spans[depth] = spans[i]
            depth += 1
        else:
            at = depth - 1
            while at > 0 and open_spans[at] != spans[i]:
                at -= 1
            for j in range(at, depth - 1):
                open_spans[j] = open_spans[j + 1]
            depth -= 1
        if depth > 0:
            top[i] = open_spans[depth - 1]
    return top


def _coverage(row, slot, a, b, n_rows: int, n_slots: int, n_cols: int) -> np.ndarray:
    """Pixel-widths of time each (row, slot) covers in each column, from intervals
    ``[a, b)`` given in column units: partial first/last columns are added directly,
    the full columns in between through a difference array and a cumulative sum."""
    a = np.clip(a, 0.0, n_cols)
    b = np.clip(b, a, n_cols)
    first = np.minimum(np.floor(a).astype(np.int64), n_cols - 1)
    last = np.minimum(np.floor(b).astype(np.int64), n_cols - 1)
    lane = row * n_slots + slot
    size = n_rows * n_slots * n_cols
    same = first == last
    partial = np.zeros(size, np.float64)
    partial += np.bincount(lane[same] * n_cols + first[same], weights=(b - a)[same],
                           minlength=size)
    split = ~same
    lane_s, first_s, last_s = lane[split], first[split], last[split]
    partial += np.bincount(lane_s * n_cols + first_s, weights=(first_s + 1 - a[split]),
                           minlength=size)
    partial += np.bincount(lane_s * n_cols + last_s, weights=(b[split] - last_s), minlength=size)
    inner = split & (last > first + 1)
    diff_cols = n_cols + 1
    diff_size = n_rows * n_slots * diff_cols
    lane_i = lane[inner]
    diff = np.bincount(lane_i * diff_cols + first[inner] + 1,
                       minlength=diff_size).astype(np.float64)
    diff -= np.bincount(lane_i * diff_cols + last[inner], minlength=diff_size)
    full = np.cumsum(diff.reshape(n_rows * n_slots, diff_cols), axis=1)[:, :n_cols]
    return (partial.reshape(n_rows * n_slots, n_cols) + full).reshape(n_rows, n_slots, n_cols)


def plot_timeline(
    trace: Trace,
    path: str | os.PathLike,
    *,
    group_by: str = "tid",
    width_px: int = 1600,
    height_px: int | None = None,
    dpi: int = 100,
    max_tracks: int = 64,
    max_vector_regions: int = 5_000,
    max_legend_tags: int = 12,
    title: str | None = None,
    format: str | None = None,
    derived: bool = True,
) -> Path:
    """Draw the trace as a timeline picture; the format comes from ``path``'s suffix
    (``.png``, ``.svg``, ``.pdf``) or ``format``. Returns the path written.

    ``group_by``: rows per ``"tid"`` (alias ``"device"``) or per ``"sm"``. ``width_px`` /
    ``height_px``: picture size in pixels (height defaults to fit the rows).
    ``max_tracks``: above this many tids/SMs, neighbours share a row. ``max_legend_tags``:
    tags beyond the busiest ones are drawn grey as "other tags". ``derived``: a zero-edit
    trace gets the work between its warps' pipeline calls drawn as derived regions, lighter
    and hatched (:func:`~cute_prof.analysis.zero_edit_work.with_work_regions`); False draws
    the recorded records alone.
    """
    from matplotlib.collections import PolyCollection
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch
    from matplotlib.lines import Line2D


    path = Path(path)
    fmt = picture_format_of(path, format)
    if group_by not in GROUP_BY:
        raise ProfileBufferError(f"group_by must be one of {GROUP_BY}, got {group_by!r}")
    if width_px < _LEFT_PX + _RIGHT_PX + 100 or max_tracks < 1 or dpi < 10:
        raise ProfileBufferError(
            f"picture too small: width_px must be >= {_LEFT_PX + _RIGHT_PX + 100}, "
            "max_tracks >= 1 and dpi >= 10"
        )

    if derived:
        trace = with_work_regions(trace)
    events = trace.events
    kind = events["kind"]
    is_span = (kind == SPAN_KINDS[0]) | (kind == SPAN_KINDS[1])
    is_instant = kind == layout.KIND_INSTANT
    keep = is_span | is_instant
    ev_start = events["start_ns"][keep].astype(np.int64)
    ev_end = ev_start + np.where(is_span[keep], np.maximum(events["dur_ns"][keep], 0), 0)
    track_field = "sm" if group_by == "sm" else "tid"
    label = "SM" if group_by == "sm" else "tid"
    track_values, track_index = np.unique(events[track_field][keep], return_inverse=True)
    track_index = track_index.reshape(-1).astype(np.int64)
    span_sel = is_span[keep]
    n_tracks = track_values.shape[0]

    # rows: one per track, or neighbouring tracks merged into max_tracks rows
    aggregated = n_tracks > max_tracks
    n_rows = max(1, min(n_tracks, max_tracks))
    row_of_track = (np.arange(n_tracks) * n_rows) // max(n_tracks, 1)
    tracks_in_row = np.bincount(row_of_track, minlength=n_rows).astype(np.float64)
    row = row_of_track[track_index]
    row_labels = []
    for r in range(n_rows):
        members = track_values[row_of_track == r]
        if members.shape[0] == 0:
            row_labels.append("")
        elif members.shape[0] == 1:
            row_labels.append(trace.track_name(members[0]) if track_field == "tid"
                              else f"{label} {members[0]}")
        else:
            row_labels.append(f"{label} {members[0]}–{members[-1]}")

    # time axis
    t0 = int(ev_start.min()) if ev_start.shape[0] else 0
    t1 = int(ev_end.max()) if ev_end.shape[0] else 1
    span_ns = max(t1 - t0, 1)
    unit = pick_unit(span_ns / 5)
    scale = _UNIT_SCALE[unit]

    # tags: colours for the busiest ones, the rest grey
    span_tag = events["tag"][keep][span_sel].astype(np.int64)
    span_dur = (ev_end - ev_start)[span_sel]
    tags, span_tag_index = np.unique(span_tag, return_inverse=True)  # instants are black
    span_tag_index = span_tag_index.reshape(-1)
    total = np.bincount(span_tag_index, weights=span_dur, minlength=tags.shape[0])
    by_total = np.argsort(-total, kind="stable")
    coloured = by_total[: max_legend_tags] if tags.shape[0] > max_legend_tags else by_total
    slot_of_tag = np.full(tags.shape[0], len(coloured), np.int64)  # grey slot by default
    slot_of_tag[coloured] = np.arange(len(coloured))
    has_other = tags.shape[0] > len(coloured)
    n_slots = len(coloured) + (1 if has_other else 0)
    colours = np.vstack([_palette(len(coloured)).reshape(-1, 3),
                         np.full((1 if has_other else 0, 3), 0.6)])
    slot_names = [trace.tag_name(int(t)) if hasattr(trace, "tag_name") else str(t)
                  for t in tags[coloured].tolist()] + ([_OTHER] if has_other else [])
    # derived tags: lighter colours (the raster's pixels too), hatched where drawn as shapes
    derived_slot = np.zeros(n_slots, dtype=bool)
    derived_slot[:len(coloured)] = np.isin(tags[coloured], derived_tag_ids(trace))
    colours[derived_slot] = colours[derived_slot] * (1 - _DERIVED_LIGHTEN) + _DERIVED_LIGHTEN

    # figure with fixed pixel margins
    if height_px is None:
        row_px = 22 if n_rows <= 16 else 14 if n_rows <= 40 else 10
        height_px = int(np.clip(n_rows * row_px + _TOP_PX + _BOTTOM_PX, 260, 2400))
    if height_px < _TOP_PX + _BOTTOM_PX + 40:
        raise ProfileBufferError(f"height_px must be >= {_TOP_PX + _BOTTOM_PX + 40}")
    fig = Figure(figsize=(width_px / dpi, height_px / dpi), dpi=dpi)
    # margins wide enough for the longest row label and legend entry (zero-edit track and
    # tag names run to ~27 characters), within a third of the picture each
    left_px = int(min(max(_LEFT_PX, 6.2 * max(map(len, row_labels), default=0) + 14),
                      width_px / 3))
    right_px = int(min(max(_RIGHT_PX, 7.0 * max(map(len, slot_names), default=0) + 45),
                       width_px / 3))
    plot_w = width_px - left_px - right_px
    plot_h = height_px - _TOP_PX - _BOTTOM_PX
    ax = fig.add_axes((left_px / width_px, _BOTTOM_PX / height_px, plot_w / width_px,
                       plot_h / height_px))
    x_max = span_ns / scale
    ax.set_xlim(0, x_max)
    ax.set_ylim(n_rows, 0)

    span_row = row[span_sel]
    span_slot = slot_of_tag[span_tag_index]
    rel_start = (ev_start[span_sel] - t0).astype(np.float64)
    rel_end = (ev_end[span_sel] - t0).astype(np.float64)
    levels, (seg_track, seg_start, seg_end, seg_span) = _stack_view(
        track_index[span_sel], ev_start[span_sel], ev_end[span_sel])
    vector = not aggregated and span_sel.sum() <= max_vector_regions
    if vector and rel_start.shape[0]:
        # deeper regions thinner and on top; bar heights in row units
        depth = np.minimum(levels, 4) - 1
        half = 0.42 * (1.0 - 0.22 * depth)
        order = np.lexsort((-(rel_end - rel_start), levels))
        x0, x1 = rel_start[order] / scale, rel_end[order] / scale
        x1 = np.maximum(x1, x0 + x_max / plot_w * 0.8)  # at least ~1 pixel wide
        yc = span_row[order] + 0.5
        h = half[order]
        verts = np.stack([np.stack([x0, yc - h], 1), np.stack([x0, yc + h], 1),
                          np.stack([x1, yc + h], 1), np.stack([x1, yc - h], 1)], axis=1)
        faces = colours[span_slot[order]]
        hatched = derived_slot[span_slot[order]]
        if not hatched.any():
            ax.add_collection(PolyCollection(verts, facecolors=faces, edgecolors="none",
                                             linewidths=0))
        else:  # a collection per nesting level and kind, outer first: nested ones on top
            level = levels[order]
            for at in np.unique(level).tolist():
                for derived_here in (False, True):
                    pick = np.flatnonzero((level == at) & (hatched == derived_here))
                    if pick.size:
                        ax.add_collection(PolyCollection(
                            verts[pick], facecolors=faces[pick], linewidths=0,
                            edgecolors="white" if derived_here else "none",
                            hatch=_DERIVED_HATCH if derived_here else None))
    elif rel_start.shape[0]:
        n_cols = plot_w
        col_scale = n_cols / span_ns
        # time each tag is the innermost open region, per row and pixel column
        cover = _coverage(row_of_track[seg_track], span_slot[seg_span],
                          (seg_start - t0) * col_scale, (seg_end - t0) * col_scale,
                          n_rows, n_slots, n_cols)
        winner = cover.argmax(axis=1)
        busy = np.clip(cover.sum(axis=1) / tracks_in_row[:, None], 0.0, 1.0)
        alpha = np.where(busy > 0, 0.3 + 0.7 * busy, 0.0)[..., None]
        rgb = colours[winner] * alpha + (1.0 - alpha)
        ax.imshow(rgb, extent=(0, x_max, n_rows, 0), aspect="auto", interpolation="nearest",
                  resample=False)

    # instants: ticks at the bottom of the row, one per pixel column at most
    inst_sel = ~span_sel
    if inst_sel.any():
        inst_x = (ev_start[inst_sel] - t0).astype(np.float64)
        inst_row = row[inst_sel]
        cols = np.minimum((inst_x / span_ns * plot_w).astype(np.int64), plot_w - 1)
        pairs = np.unique(inst_row * plot_w + cols)
        px, py = (pairs % plot_w + 0.5) * (x_max / plot_w), pairs // plot_w + 0.85
        dense = pairs.shape[0] > 0.2 * n_rows * plot_w  # a tick in most pixels: keep it faint
        ax.scatter(px, py, marker="|", s=(0.25 * plot_h / n_rows) ** 2 * 0.5 + 4,
                   c="black", linewidths=0.5 if dense else 0.8, alpha=0.25 if dense else 0.75)

    # axes, labels, legend
    step = max(1, int(np.ceil(n_rows / 40)))
    ticks = np.arange(0, n_rows, step)
    ax.set_yticks(ticks + 0.5)
    ax.set_yticklabels([row_labels[t] for t in ticks], fontsize=7 if n_rows > 24 else 8)
    ax.tick_params(axis="y", length=0)
    ax.set_xlabel(f"time since first record ({_UNIT_LABEL[unit]})")
    for spine in ("top", "right"):
        ax.spines[spine].set_visible(False)
    handles = [Patch(facecolor=c, label=n, hatch=_DERIVED_HATCH, edgecolor="white", linewidth=0)
               if d else Patch(facecolor=c, label=n)
               for c, n, d in zip(colours, slot_names, derived_slot)]
    if inst_sel.any():
        handles.append(Line2D([], [], color="black", marker="|", linestyle="none",
                              markersize=8, label="instant"))
    if handles:
        fig.legend(handles=handles, loc="upper left", frameon=False, fontsize=8,
                   bbox_to_anchor=((width_px - right_px + 10) / width_px, 1 - _TOP_PX / height_px))
    device = (trace.metadata or {}).get("device")
    n_regions = int(span_sel.sum())
    heading = title or (
        f"cute_prof timeline: {n_regions:,} regions, {int(inst_sel.sum()):,} instants on "
        f"{n_tracks:,} {label}s" + (f" ({device})" if device else "")
    )
    notes = []
    if aggregated:
        notes.append(f"each row merges ~{n_tracks / n_rows:.0f} {label}s; shade = share busy")
    elif not vector:
        notes.append("one pixel shows its dominant tag")
    if derived_slot.any():
        notes.append("hatched: derived from the pipeline calls (a wait's end to its item's "
                     "release or commit), not recorded")
    if trace.overflow:
        notes.append(f"{trace.overflow:,} records lost to overflow")
    fig.text(left_px / width_px, 1 - 12 / height_px, heading, fontsize=10, va="top")
    if notes:
        fig.text(left_px / width_px, 1 - 30 / height_px, "; ".join(notes), fontsize=8,
                 va="top", color="#aa3300" if trace.overflow else "#444444")

    with atomic_write(path) as handle:
        fig.savefig(handle, format=fmt, dpi=dpi)
    return path
