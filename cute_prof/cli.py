"""``cute-prof``: look at a saved trace from the command line, no GPU needed.

::

    cute-prof summary TRACE [--json] [--max-rows N] [--unit ns|us|ms]
    cute-prof export  TRACE -o OUT.pftrace|OUT.json|OUT.png|OUT.svg [--group-by G]
    cute-prof plot    TRACE -o OUT.png|OUT.svg [--group-by tid|sm] [--width PX] ...

TRACE is a file cute_prof wrote: a saved buffer (``.npz`` / ``.pt`` from
``cute_prof.storage.save_buffer``) or a Chrome JSON trace (``.json`` from
``events_to_perfetto``), or an NVIDIA IKET capture (``run-iket --postprocess json``
output, ``.json`` or ``.json.gz``). Progress goes to stderr (``--quiet`` silences it);
results go to stdout. Unreadable or foreign files end with exit status 2 and one line on
stderr; an input file is only ever read (an output path naming it is refused). A bug in
cute_prof ends with exit status 1 and one line too (``CUTE_PROF_TRACEBACK=1`` shows the
traceback).
Also runs as ``python -m cute_prof.cli``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Sequence

from .errors import ProfileBufferError

__all__ = ["main", "load_any"]

EXIT_OK = 0
EXIT_INTERNAL_ERROR = 1
EXIT_BAD_INPUT = 2
TRACEBACK_ENV_VAR = "CUTE_PROF_TRACEBACK"
TRACE_SUFFIXES = (".npz", ".pt", ".json", ".gz")  # .gz: a gzip-compressed IKET capture


class _Progress:
    """Stage lines on stderr: ``cute-prof: loading t.npz ...`` then the time it took."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.started = time.perf_counter()
        self._stage_started = self.started

    def __call__(self, message: str) -> None:
        if self.enabled:
            now = time.perf_counter()
            print(f"cute-prof: [{now - self.started:6.2f}s] {message}", file=sys.stderr,
                  flush=True)
            self._stage_started = now


def load_any(path: str | Path):
    """A Trace from any trace file this CLI accepts (see the module docstring)."""
    from .storage import load_trace

    path = Path(path)
    if path.is_dir():
        raise ProfileBufferError(f"{str(path)!r} is a directory, not a trace file")
    if not path.exists():
        raise FileNotFoundError(f"no such file: {str(path)!r}")
    suffix = path.suffix.lower()
    if suffix not in TRACE_SUFFIXES:
        raise ProfileBufferError(
            f"{str(path)!r}: cannot read {suffix or 'files without a suffix'}; TRACE must be a "
            f"saved buffer (.npz, .pt), a cute_prof Chrome trace (.json) or an NVIDIA IKET "
            "capture (.json, .json.gz)"
        )
    return load_trace(path)


def _load(args, progress: _Progress):
    path = Path(args.trace)
    if path.suffix.lower() == ".json" and path.is_file():
        size_mb = path.stat().st_size / 1e6
        progress(f"loading {args.trace}: parsing {size_mb:,.0f} MB of JSON"
                 + (" (about 25 MB/s; a saved .npz loads far faster)" if size_mb > 25 else ""))
    else:
        progress(f"loading {args.trace}")
    trace = load_any(args.trace)
    progress(f"loaded {len(trace.events):,} records")
    view = _view_options(args)
    if view:
        from .views import select

        trace = select(trace, **view)
        progress(f"view {view}: {len(trace.events):,} records")
    return trace


def _int_list(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError as err:
        raise ProfileBufferError(f"expected comma-separated integers, got {text!r}") from err


def _view_options(args) -> dict:
    """The ``cute_prof.views.select`` options given on the command line."""
    view: dict = {}
    for name in ("ctas", "sms", "warps", "launch"):
        if getattr(args, name, None) is not None:
            view[name] = _int_list(getattr(args, name))
    if getattr(args, "tags", None) is not None:
        view["tags"] = [int(t) if t.strip().isdigit() else t.strip()
                        for t in args.tags.split(",") if t.strip()]
    if getattr(args, "time_window", None) is not None:
        parts = _int_list(args.time_window.replace(":", ","))
        if len(parts) != 2:
            raise ProfileBufferError(f"--time-window is FROM_NS:TO_NS, got {args.time_window!r}")
        view["time_window"] = tuple(parts)
    if getattr(args, "every_nth_cta", None) is not None:
        view["every_nth_cta"] = args.every_nth_cta
    return view


def _add_view_options(command) -> None:
    group = command.add_argument_group("view (a subset of the records)")
    group.add_argument("--ctas", help="CTA indices, e.g. 0,3 (needs a role spec's tid_stride)")
    group.add_argument("--sms", help="SM ids, e.g. 0,1,2")
    group.add_argument("--warps", help="warp indices inside the CTA")
    group.add_argument("--tags", help="tag names or ids")
    group.add_argument("--time-window", help="FROM_NS:TO_NS since the first record")
    group.add_argument("--launch", help="launch indices")
    group.add_argument("--every-nth-cta", type=int, help="keep CTAs whose index is a multiple of N")


def _cmd_summary(args, progress: _Progress) -> int:
    from .analysis import summarize

    trace = _load(args, progress)
    progress("computing statistics")
    summary = summarize(trace)
    if args.json:
        json.dump(summary.to_dict(), sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(summary.format_table(max_rows=args.max_rows, unit=args.unit))
    return EXIT_OK


def _check_output_is_not_input(args) -> None:
    """Writing the output over the input file would destroy the only copy of the trace."""
    output, source = Path(args.output), Path(args.trace)
    if output.exists() and source.exists() and os.path.samefile(output, source):
        raise ProfileBufferError(
            f"output {args.output!r} is the input trace; pick another file name (the input is "
            "never overwritten)"
        )


def _cmd_export(args, progress: _Progress) -> int:
    from .export import export_trace, format_of

    _check_output_is_not_input(args)
    output = Path(args.output)
    fmt = format_of(output, args.format)  # fail on a bad suffix before loading anything
    trace = _load(args, progress)
    options = {}
    if args.group_by:
        options["group_by"] = args.group_by
    if fmt == "pftrace":
        options["progress"] = progress
    progress(f"writing {fmt} to {output}")
    export_trace(trace, output, format=fmt, **options)
    progress(f"wrote {output} ({output.stat().st_size:,} bytes)")
    print(output)
    return EXIT_OK


def _cmd_plot(args, progress: _Progress) -> int:
    from .export.picture import picture_format_of, plot_timeline

    _check_output_is_not_input(args)
    output = Path(args.output)
    fmt = picture_format_of(output, args.format)
    trace = _load(args, progress)
    progress(f"drawing {fmt} timeline")
    plot_timeline(
        trace, output, format=fmt, group_by=args.group_by or "tid", width_px=args.width,
        height_px=args.height, max_tracks=args.max_tracks, title=args.title,
    )
    progress(f"wrote {output} ({output.stat().st_size:,} bytes)")
    print(output)
    return EXIT_OK


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cute-prof",
        description="Summarise, convert or draw a cute_prof trace (.npz/.pt buffer or .json).",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    summary = commands.add_parser("summary", help="per-tag statistics, busy fractions, gaps")
    summary.add_argument("trace", metavar="TRACE")
    _add_view_options(summary)
    summary.add_argument("--json", action="store_true", help="print the statistics as JSON")
    summary.add_argument("--max-rows", type=int, default=8,
                         help="SM / tid rows listed (least and most busy); default 8")
    summary.add_argument("--unit", choices=("ns", "us", "ms", "s"),
                         help="time unit of the tables (default: picked from the data)")
    summary.set_defaults(run=_cmd_summary)

    export = commands.add_parser("export", help="write .pftrace, .json, .png or .svg")
    export.add_argument("trace", metavar="TRACE")
    _add_view_options(export)
    export.add_argument("-o", "--output", required=True, help="output file; suffix picks format")
    export.add_argument("--format", help="pftrace, json, png, svg or pdf (overrides the suffix)")
    export.add_argument("--group-by", help="track grouping: tid (or device), sm; pftrace: warp")
    export.set_defaults(run=_cmd_export)

    plot = commands.add_parser("plot", help="draw a timeline picture")
    plot.add_argument("trace", metavar="TRACE")
    _add_view_options(plot)
    plot.add_argument("-o", "--output", required=True, help="output .png, .svg or .pdf")
    plot.add_argument("--format", help="png, svg or pdf (overrides the suffix)")
    plot.add_argument("--group-by", choices=("tid", "device", "sm"), help="rows per tid or SM")
    plot.add_argument("--width", type=int, default=1600, help="width in pixels (1600)")
    plot.add_argument("--height", type=int, help="height in pixels (default: fits the rows)")
    plot.add_argument("--max-tracks", type=int, default=64,
                      help="rows drawn; more tids/SMs share rows (64)")
    plot.add_argument("--title", help="picture title")
    plot.set_defaults(run=_cmd_plot)
    return parser


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return text


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``cute-prof`` console script; returns the exit status."""
    args = _parser().parse_args(argv)
    progress = _Progress(enabled=not args.quiet)
    try:
        return args.run(args, progress)
    except BrokenPipeError:  # the reader stopped early (``| head``): not our error
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except (ProfileBufferError, OSError) as error:
        print(f"cute-prof: error: {_one_line(error)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except MemoryError:
        print("cute-prof: error: not enough memory for this trace; export a smaller part of it "
              "or use a machine with more memory", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("cute-prof: interrupted", file=sys.stderr)
        return 130
    except Exception as error:  # a bug: still one line, the traceback only on request
        if os.environ.get(TRACEBACK_ENV_VAR):
            raise
        print(f"cute-prof: internal error: {type(error).__name__}: {_one_line(error)} (a bug "
              f"in cute_prof; please report it, with the traceback {TRACEBACK_ENV_VAR}=1 shows)",
              file=sys.stderr)
        return EXIT_INTERNAL_ERROR


if __name__ == "__main__":
    sys.exit(main())
