"""Exporters, one file per format, and :func:`export_trace`, the one entry point that
picks the format from a path's suffix.

* ``regions.py``        begin/end ordering and overlap lanes shared by the exporters
* ``chrome_json.py``    Chrome trace-event JSON (``events_to_perfetto``)
* ``pftrace_writer.py`` native Perfetto protobuf (``write_pftrace``)
* ``pftrace_reader.py`` reading a ``.pftrace`` back
* ``picture.py``        timeline pictures with matplotlib (``plot_timeline``)
* ``aggregate.py``      busy/wait counters per SM, role or CTA instead of every region
* ``kernels.py``        compiled loops (numba) both writers share: chunked streaming, grouping
                        by track; ``pftrace_kernels.py`` and ``json_kernels.py`` each writer's own

This package owns the files a trace becomes; it reads a :class:`Trace` (and the analysis's
results) and may not import the session, the CLI or the device code.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

from ..errors import ProfileBufferError
from ..trace import Trace

__all__ = ["EXPORT_FORMATS", "UI_COMFORTABLE_RECORDS", "export_trace", "format_of"]

# About what the Perfetto UI loads in a browser tab (issue 20; see docs/performance.md); past
# it, export still works but the user should export a view.
UI_COMFORTABLE_RECORDS = 5_000_000

EXPORT_FORMATS = {
    ".json": "json",
    ".pftrace": "pftrace",
    ".perfetto-trace": "pftrace",
    ".pb": "pftrace",
    ".png": "png",
    ".svg": "svg",
    ".pdf": "pdf",
}

def format_of(path: Path, format: str | None) -> str:
    if format is not None:
        fmt = format.lower().lstrip(".")
        fmt = {"perfetto-trace": "pftrace", "perfetto": "pftrace", "chrome": "json"}.get(fmt, fmt)
        if fmt not in set(EXPORT_FORMATS.values()):
            raise ProfileBufferError(
                f"unknown export format {format!r}; use one of "
                f"{sorted(set(EXPORT_FORMATS.values()))}"
            )
        return fmt
    name = path.name.lower()
    for suffix, fmt in sorted(EXPORT_FORMATS.items(), key=lambda item: -len(item[0])):
        if name.endswith(suffix):
            return fmt
    raise ProfileBufferError(
        f"cannot tell the export format of {str(path)!r} from its suffix; use one of "
        f"{', '.join(EXPORT_FORMATS)} or pass format="
    )


def export_trace(trace: Trace, path: str | os.PathLike, *, format: str | None = None,
                 aggregate: str | None = None, bins: int | None = None,
                 wait_tags: list[str] | None = None, derived: bool = True, **options) -> Path:
    """Export ``trace`` in the format named by ``path``'s suffix (or ``format``):

    ``.json`` -> Chrome JSON (:func:`~cute_prof.export.chrome_json.events_to_perfetto`),
    ``.pftrace`` / ``.perfetto-trace`` -> native Perfetto (:func:`write_pftrace`),
    ``.png`` / ``.svg`` / ``.pdf`` -> timeline picture (:func:`~cute_prof.export.picture.plot_timeline`).
    ``options`` go to that function (e.g. ``group_by=``, ``chunk_progress=``).

    ``aggregate``: ``"sm"``, ``"role"`` or ``"cta"``: instead of every region, per group
    busy and wait counters over ``bins`` time bins (default 1000; see
    :mod:`cute_prof.export.aggregate`), a whole-kernel overview of any size; ``wait_tags``
    names the tags that mean waiting (default: the role spec's). JSON and pftrace only.

    ``derived``: a zero-edit trace (``cute_prof.autoprofile``) records its warps' waits and
    signals, not their work: by default the work between each warp's pipeline calls is added
    as regions named ``<ring>.<side>_work (derived)``
    (:func:`~cute_prof.analysis.zero_edit_work.with_work_regions`), after the recorded rows,
    whose row numbers (``flows=``) stay. False writes the recorded records alone. Other
    traces are written as they are.
    Returns the path written.
    """
    path = Path(path)
    fmt = format_of(path, format)
    if derived:
        from ..analysis.zero_edit_work import with_work_regions

        trace = with_work_regions(trace)
    if aggregate is not None:
        if fmt not in ("json", "pftrace"):
            raise ProfileBufferError(f"aggregate= makes counter tracks: export .json or "
                                     f".pftrace, not {fmt}")
        from .aggregate import DEFAULT_BINS, aggregated_trace

        trace, counters = aggregated_trace(trace, by=aggregate, bins=bins or DEFAULT_BINS,
                                           wait_tags=wait_tags)
        options["counters"] = list(options.get("counters") or []) + counters
    elif bins is not None or wait_tags is not None:
        raise ProfileBufferError("bins= and wait_tags= go with aggregate=")
    if fmt in ("json", "pftrace") and len(trace.events) > UI_COMFORTABLE_RECORDS:
        warnings.warn(
            f"{len(trace.events):,} records is more than the Perfetto UI loads comfortably "
            f"(~{UI_COMFORTABLE_RECORDS:,}); export a smaller view with "
            "cute_prof.views.select(trace, ctas=, sms=, warps=, tags=, time_window=, "
            "launch=, every_nth_cta=), or an overview with aggregate=\"sm\"|\"role\"|\"cta\" "
            "(CLI: --aggregate)", stacklevel=2)
    if fmt == "pftrace":
        from .pftrace_writer import write_pftrace

        return write_pftrace(trace, path, **options)
    if fmt == "json":
        from .chrome_json import events_to_perfetto

        events_to_perfetto(trace, str(path), **options)
        return path
    from .picture import plot_timeline

    return plot_timeline(trace, path, format=fmt, derived=False, **options)  # added above
