"""``cute-prof``: look at a saved trace from the command line, no GPU needed.

::

    cute-prof summary TRACE [--json] [--max-rows N] [--unit ns|us|ms]
    cute-prof export  TRACE -o OUT.pftrace|OUT.json|OUT.png|OUT.svg [--group-by G]
    cute-prof export  TRACE -o OVERVIEW.pftrace --aggregate sm|role|cta [--bins N]
    cute-prof plot    TRACE -o OUT.png|OUT.svg [--group-by tid|sm] [--width PX] ...
    cute-prof merge   TORCH_TRACE.json TRACE -o MERGED.json [--kernel REGEX]
    cute-prof analyze TRACE [--roles SPEC.json] [--json]          who waited on what
    cute-prof analyze TRACE --pipeline SPEC.json [--depth RES=N[,RES=N]] [--faster TAG=PCT] [--json]
    cute-prof analyze ZERO_EDIT_TRACE [--depth RES=N[,RES=N]]    the model from the kernel's pipelines
    cute-prof diff    A B [--roles SPEC.json] [--json]
    cute-prof report  TRACE -o REPORT.html [--roles SPEC.json] [--compare B]
    cute-prof flight  DUMP [-o PARTIAL.json]   (where every warp was: a flight-recorder dump)
    cute-prof record  [-o OUT] [-k PATTERN] [--launch-skip N] [--launch-count M] -- PROGRAM ARGS

``record`` runs a program and writes a folder (:mod:`cute_prof.record_command`); every verb
that reads a TRACE also reads such a folder, narrowed with ``--kernel`` / ``--launch``.

TRACE is a file cute_prof wrote: a saved buffer (``.npz`` / ``.pt`` from
``cute_prof.storage.save_buffer``) or a Chrome JSON trace (``.json`` from
``events_to_perfetto``), or an NVIDIA IKET capture (``run-iket --postprocess json``
output, ``.json`` or ``.json.gz``). Progress goes to stderr: on a terminal tqdm bars (the
stage with its elapsed time, and the records an export has written), otherwise one line
per stage; ``--quiet`` silences it. Results go to stdout. Unreadable or foreign files end
with exit status 2 and one line on stderr; an input file is only ever read (an output path naming it is refused). A bug in
cute_prof ends with exit status 1 and one line too (``CUTE_PROF_TRACEBACK=1`` shows the
traceback).
Also runs as ``python -m cute_prof.cli``.

Owns the ``cute-prof`` verbs, their options and help texts (stage 7): it computes nothing
itself (analysis, export, storage and report do), and no module of the package may import it.
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
    """Progress on stderr. On a terminal: a tqdm line naming the current stage with its
    elapsed time, and a bar of records for the exporters; otherwise (a log, a pipe) the
    stage lines with their times, ``cute-prof: [  0.12s] loading t.npz``. ``-q``: nothing."""

    def __init__(self, enabled: bool, *, interactive: bool | None = None):
        self.enabled = enabled
        if interactive is None:
            interactive = sys.stderr.isatty()
        self.interactive = enabled and interactive
        self.started = time.perf_counter()
        self._stage = None
        self._bars: list = []

    def __call__(self, message: str) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        if self.interactive:
            from tqdm import tqdm

            if self._stage is None:
                self._stage = tqdm(file=sys.stderr, bar_format="{desc} [{elapsed}]",
                                   leave=False)
            self._stage.set_description_str(f"cute-prof: {message}")
            return
        print(f"cute-prof: [{now - self.started:6.2f}s] {message}", file=sys.stderr,
              flush=True)

    def records(self, what: str):
        """A ``chunk_progress(done, total)`` callback drawing a bar of records (None when
        no bar is shown)."""
        if not self.interactive:
            return None
        from tqdm import tqdm

        bar = tqdm(file=sys.stderr, desc=f"cute-prof: {what}", unit=" records",
                   unit_scale=True, leave=False)
        self._bars.append(bar)

        def advance(done: int, total: int) -> None:
            bar.total = total
            bar.update(done - bar.n)
            if done >= total:  # updates are rate-limited: always draw the end
                bar.refresh()

        return advance

    def close(self) -> None:
        for bar in [*self._bars, self._stage]:
            if bar is not None:
                bar.close()
        self._bars, self._stage = [], None


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


def _recorded_run(args):
    """The run folder ``args.trace`` names, or None where it is a trace file."""
    from .recorded_run import RecordedRun, is_run_folder

    return RecordedRun(args.trace) if is_run_folder(args.trace) else None


def _run_rows(run, args):
    # merge's --kernel is a regex for the profiler's kernel names, not a choice of launches
    kernel = None if args.command == "merge" else getattr(args, "kernel", None)
    return run.select(kernel=kernel, launch=getattr(args, "launch", None))


def _load(args, progress: _Progress):
    path = Path(args.trace)
    run = _recorded_run(args)
    if run is not None:
        rows = _run_rows(run, args)
        progress(f"decoding {len(rows)} launch(es) of {args.trace}")
        trace = run.combined_trace(rows)
        progress(f"decoded {len(trace.events):,} records")
        args = argparse.Namespace(**{**vars(args), "launch": None})  # --launch chose the rows
        return _view(trace, args, progress)
    if getattr(args, "kernel", None) is not None:
        raise ProfileBufferError("--kernel selects kernels of a cute-prof record folder; "
                                 f"{args.trace} is a trace file")
    if path.suffix.lower() == ".json" and path.is_file():
        size_mb = path.stat().st_size / 1e6
        progress(f"loading {args.trace}: parsing {size_mb:,.0f} MB of JSON"
                 + (" (slow: a saved .npz loads far faster)" if size_mb > 25 else ""))
    else:
        progress(f"loading {args.trace}")
    trace = load_any(args.trace)
    progress(f"loaded {len(trace.events):,} records")
    return _view(trace, args, progress)


def _view(trace, args, progress: _Progress):
    spec = _role_spec(args)
    if spec is not None:  # names tracks in every output, and gives --ctas its CTAs
        from .analysis.roles import apply_roles

        trace = apply_roles(trace, spec)
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
    group.add_argument("--roles", metavar="SPEC.json",
                       help="role spec: names the tracks, and says what a CTA is for --ctas")
    group.add_argument("--ctas", help="CTA indices, e.g. 0,3 (needs --roles with a tid_stride)")
    group.add_argument("--sms", help="SM ids, e.g. 0,1,2")
    group.add_argument("--warps", help="warp indices inside the CTA")
    group.add_argument("--tags", help="tag names or ids")
    group.add_argument("--time-window", help="FROM_NS:TO_NS since the first record")
    group.add_argument("--launch", help="launch indices (a record folder: of each kernel "
                       "name, e.g. 3, 2:5, 1,4)")
    group.add_argument("--kernel", help="a record folder: kernels whose name contains this")
    group.add_argument("--every-nth-cta", type=int, help="keep CTAs whose index is a multiple of N")


def _cmd_summary(args, progress: _Progress) -> int:
    from .analysis import summarize

    run = _recorded_run(args)
    if run is not None:  # a record folder: its kernels and launches, from the headers alone
        rows = _run_rows(run, args)
        if args.json:
            json.dump(run.summary(rows), sys.stdout, indent=1)
            sys.stdout.write("\n")
        else:
            print(run.format_summary(rows, max_rows=max(args.max_rows, 20)))
        return EXIT_OK
    trace = _load(args, progress)
    progress("computing statistics")
    summary = summarize(trace)
    if args.json:
        json.dump(summary.to_dict(), sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(summary.format_table(max_rows=args.max_rows, unit=args.unit))
    return EXIT_OK


def _role_spec(args):
    from .analysis.roles import load_role_spec

    return load_role_spec(args.roles) if getattr(args, "roles", None) else None


def _cmd_analyze(args, progress: _Progress) -> int:
    from .analysis.waits import analyze_waits
    from .analysis.roles import RoleSpec

    if args.sensitivity and not args.arrivals:
        raise ProfileBufferError("--sensitivity needs --arrivals: the loads' latency it moves "
                                 "is the sampled loads'")
    if args.pipeline:
        return _cmd_analyze_pipeline(args, progress)
    spec = _role_spec(args)
    trace = _load(args, progress)
    from .analysis.zero_edit import is_zero_edit

    if spec is None and is_zero_edit(trace):
        from .analysis.zero_edit import zero_edit_roles

        try:  # a zero-edit trace: the pipeline model from the kernel's own pipelines
            return _cmd_analyze_pipeline(args, progress, trace=trace)
        except ProfileBufferError as err:
            if args.depth or args.faster:
                raise
            # a schedule the derived model does not cover: still who waited on what
            print(f"no derived pipeline model: {err}", file=sys.stderr)
            spec = zero_edit_roles(trace)
    if args.depth or args.faster:
        raise ProfileBufferError("--depth and --faster are what-ifs of a pipeline model: "
                                 "pass --pipeline SPEC.json (or a zero-edit trace)")
    if spec is None:  # no roles declared: one "unassigned" role, still the split and the tail
        spec = RoleSpec(roles={})
    progress("analysing roles and pipeline")
    result = analyze_waits(trace, spec, stall_ns=args.stall_ns)
    if args.json:
        json.dump(result.to_dict(), sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(result.format_text())
    return EXIT_OK


def _cmd_diff(args, progress: _Progress) -> int:
    from .analysis.diff import diff_traces

    spec = _role_spec(args)
    progress(f"loading {args.before}")
    a = load_any(args.before)
    progress(f"loading {args.after}")
    b = load_any(args.after)
    progress("comparing")
    result = diff_traces(a, b, spec=spec)
    if args.json:
        json.dump(result.to_dict(), sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(f"A = {args.before}\nB = {args.after}")
        print(result.format_text())
    return EXIT_OK


def _cmd_report(args, progress: _Progress) -> int:
    from .report import write_report

    _check_output_is_not_input(args)
    run = _recorded_run(args)
    if run is not None:
        return _report_run(run, args, progress)
    spec = _role_spec(args)
    trace = _load(args, progress)
    if args.compare:
        progress(f"loading {args.compare}")
    compare = load_any(args.compare) if args.compare else None
    progress("drawing the report")
    output = write_report(trace, args.output, spec=spec, compare=compare, title=args.title,
                          derived=not args.no_derived)
    print(output)
    return EXIT_OK


def _report_run(run, args, progress: _Progress) -> int:
    """A record folder's page: its summary, then each kernel's last selected launch."""
    from .report import write_run_report

    if args.roles or args.compare:
        raise ProfileBufferError("--roles and --compare read one trace; a record folder's "
                                 "report uses each kernel's own roles")
    rows = _run_rows(run, args)
    last = {}
    for row in rows:
        if row.slices:
            last[row.kernel] = row
    sections = []
    for row in last.values():
        progress(f"decoding {row.label()}")
        sections.append((row.label(), run.trace(row)))
    output = write_run_report(sections, args.output, title=args.title or f"cute-prof run {args.trace}",
                              overview=run.format_summary(rows), derived=not args.no_derived)
    print(output)
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
    run = _recorded_run(args)
    torch_trace = args.torch or (run.torch_trace() if run is not None and fmt == "json" else None)
    if torch_trace is not None:  # inside the program's torch.profiler trace: Chrome JSON
        if fmt != "json":
            raise ProfileBufferError("--torch merges into the torch.profiler trace: write .json")
        from .merge import merge_torch_trace

        report = merge_torch_trace(torch_trace, _load(args, progress), output)
        progress(report.describe())
        print(output)
        return EXIT_OK
    trace = _load(args, progress)
    options = {}
    if args.group_by:
        options["group_by"] = args.group_by
    if fmt == "pftrace":
        options["progress"] = progress
    if fmt in ("json", "pftrace"):
        options["chunk_progress"] = progress.records(f"writing {fmt}")
    if args.aggregate:
        options["aggregate"] = args.aggregate
        options["bins"] = args.bins
        if args.wait_tags:
            options["wait_tags"] = [t.strip() for t in args.wait_tags.split(",") if t.strip()]
        progress(f"summing busy/wait per {args.aggregate} over {args.bins:,} bins")
    elif args.bins is not None or args.wait_tags:
        raise ProfileBufferError("--bins and --wait-tags go with --aggregate")
    if args.flows:
        from .analysis.flows import pipeline_flows

        spec = _role_spec(args)
        if spec is None:
            raise ProfileBufferError("--flows needs --roles SPEC.json with pipeline tags")
        options["flows"] = pipeline_flows(trace, spec)
        progress(f"{options['flows'].shape[0]:,} producer -> consumer flow arrows")
    progress(f"writing {fmt} to {output}")
    export_trace(trace, output, format=fmt, derived=not args.no_derived, **options)
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
        derived=not args.no_derived,
    )
    progress(f"wrote {output} ({output.stat().st_size:,} bytes)")
    print(output)
    return EXIT_OK


def _cmd_merge(args, progress: _Progress) -> int:
    from .merge import merge_torch_trace

    output = Path(args.output)
    trace = _load(args, progress)
    progress(f"aligning {len(trace.launches)} launches with {args.torch_trace}")
    report = merge_torch_trace(args.torch_trace, trace, output,
                               kernel_pattern=args.kernel)
    progress(report.describe())
    print(output)
    return EXIT_OK


def _cmd_flight(args, progress: _Progress) -> int:
    from .export import export_trace, format_of
    from .flight import load_dump

    progress(f"reading flight-recorder dump {args.dump}")
    report = load_dump(args.dump)
    print(report.format())
    print(f"{len(report.trace.events)} records decoded ({report.trace.incomplete} incomplete)")
    if args.output:
        options = {}
        if format_of(Path(args.output), None) in ("json", "pftrace"):
            options["chunk_progress"] = progress.records("writing")
        export_trace(report.trace, args.output, **options)
        print(args.output)
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

    analyze = commands.add_parser(
        "analyze", help="who waited on what: per-role work/wait/idle, k-tile latency, verdict")
    analyze.add_argument("trace", metavar="TRACE")
    analyze.add_argument("--roles", metavar="SPEC.json",
                         help="role spec (tid rule, tag meanings, pipeline tags); see "
                         "examples/ws_gemm_roles.json")
    analyze.add_argument("--stall-ns", type=int, default=64,
                         help="an acquire wait longer than this is a stall (64)")
    analyze.add_argument("--json", action="store_true", help="print the analysis as JSON")
    _add_pipeline_options(analyze)
    analyze.set_defaults(run=_cmd_analyze)

    diff = commands.add_parser("diff", help="two traces side by side: per tag and per role")
    diff.add_argument("before", metavar="A")
    diff.add_argument("after", metavar="B")
    diff.add_argument("--roles", metavar="SPEC.json", help="role spec for the per-role shares")
    diff.add_argument("--json", action="store_true", help="print the comparison as JSON")
    diff.set_defaults(run=_cmd_diff)

    report = commands.add_parser("report", help="one self-contained HTML page about a trace")
    report.add_argument("trace", metavar="TRACE")
    report.add_argument("-o", "--output", required=True, help="the .html file to write")
    report.add_argument("--roles", metavar="SPEC.json", help="role spec: adds who waited on what")
    report.add_argument("--compare", metavar="B", help="a second trace: adds before/after")
    report.add_argument("--title", help="page title (default: the trace's file)")
    report.add_argument("--kernel", help="a record folder: kernels whose name contains this")
    report.add_argument("--launch", help="a record folder: launch indices of each kernel name")
    _add_derived_option(report)
    report.set_defaults(run=_cmd_report)

    export = commands.add_parser("export", help="write .pftrace, .json, .png or .svg")
    export.add_argument("trace", metavar="TRACE")
    _add_view_options(export)
    export.add_argument("-o", "--output", required=True, help="output file; suffix picks format")
    export.add_argument("--format", help="pftrace, json, png, svg or pdf (overrides the suffix)")
    export.add_argument("--group-by", help="track grouping: tid (or device), sm; pftrace: warp")
    export.add_argument("--aggregate", choices=("sm", "role", "cta"),
                        help="a whole-kernel overview: per SM, role or CTA, busy and wait "
                        "counters over time instead of every region (role, cta: need --roles)")
    export.add_argument("--bins", type=int, help="time bins of --aggregate (1000)")
    export.add_argument("--wait-tags", help="tags that mean waiting for --aggregate, e.g. "
                        "acquire,barrier (default: the role spec's wait tags)")
    export.add_argument("--torch", metavar="TORCH_TRACE",
                        help="merge into this torch.profiler trace (.json output; a record "
                             "folder whose program exported one is merged into it)")
    export.add_argument("--flows", action="store_true",
                        help="arrows from each k-tile's producer region to its consumers "
                        "(needs --roles with pipeline tags)")
    _add_derived_option(export)
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
    _add_derived_option(plot)
    plot.set_defaults(run=_cmd_plot)

    merge = commands.add_parser(
        "merge", help="put our tracks inside a torch.profiler trace (one Chrome JSON file)")
    merge.add_argument("torch_trace", metavar="TORCH_TRACE",
                       help="torch.profiler export_chrome_trace output (.json)")
    merge.add_argument("trace", metavar="TRACE",
                       help="our saved buffer (.npz/.pt) or an IKET capture (.json/.json.gz)")
    merge.add_argument("-o", "--output", required=True, help="merged Chrome JSON file")
    merge.add_argument("--kernel", help="regex for the instrumented kernels' CUPTI names "
                       "(default: the trace's kernel names where it knows them, as IKET "
                       "captures do, else ^kernel_cutlass)")
    merge.set_defaults(run=_cmd_merge)

    flight = commands.add_parser("flight", help="where every warp was: a flight-recorder dump")
    flight.add_argument("dump", metavar="DUMP", help=".npz from cute_prof.flight.save_dump")
    flight.add_argument("-o", "--output", help="also write the partial trace (.json/.pftrace)")
    flight.set_defaults(run=_cmd_flight)

    from .record_command import add_record_parser

    add_record_parser(commands).set_defaults(run=_cmd_record)
    return parser


def _cmd_record(args, progress: _Progress) -> int:
    from .record_command import run_record

    return run_record(args)


def _add_derived_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-derived", action="store_true",
                        help="a zero-edit trace: leave out the work between each warp's pipeline "
                        "calls, drawn by default as regions marked (derived)")


def _add_pipeline_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pipeline", metavar="SPEC",
                        help="pipeline model (JSON; see cute_prof.analysis.model): critical path, "
                        "blockers, ring occupancy and what-ifs instead of the role split")
    parser.add_argument("--depth", action="append", default=[], metavar="RESOURCE=N",
                        help="what-if: that ring with depth N; RES=N,RES2=M changes both in "
                        "one what-if (repeatable)")
    parser.add_argument("--faster", action="append", default=[], metavar="TAG=PCT",
                        help="what-if: that work region PCT%% faster (repeatable)")
    parser.add_argument("--arrivals", metavar="TRACE", nargs="+",
                        help="a zero-edit trace of the same kernel recorded with "
                             "cute_prof.experimental.autoprofile_probed(load_arrivals=N), an "
                             "experiment: the what-ifs take their load "
                             "latencies from its sampled loads; given several launches, "
                             "from those that ran like the base (the nearest in span and any "
                             "within the probes' own cost spread of it, "
                             "load_arrivals.PROBED_SPAN_TIE: one that ran much longer met a slower "
                             "memory system), each what-if the median of their predictions")
    parser.add_argument("--sensitivity", action="store_true",
                        help="with --arrivals: each what-if also says how far it moves per "
                             "timer tick of load latency (two more replays each): a change "
                             "that starves a ring is only as close as its loads are known")
    parser.add_argument("--record-chain-ns", type=float, metavar="NS",
                        help="what one record adds to a dependency chain on the GPU the trace "
                             "ran on (bench/record_cost.py's chain measures it; figures in "
                             "docs/performance.md): the time "
                             "the what-ifs remove per record to predict the unrecorded kernel "
                             "(default: the figure measured on the trace's GPU, "
                             "zero_edit.RECORD_CHAIN_NS; for a GPU not measured, the trace's "
                             "own gap between back-to-back stamps, which holds the kernel's "
                             "code between them too)")
    parser.add_argument("--recorder-cost", type=float, metavar="PCT",
                        help="how much longer the recording kernel ran than the plain one, "
                             "in percent (time both on the GPU, e.g. with torch.profiler): "
                             "what the records' own time does not account for, the what-ifs "
                             "take off the warps' work as the compiler's slower schedule "
                             "(figures in docs/performance.md)")


def _what_ifs(args) -> list[dict]:
    """One what-if per option; ``--depth A=1,B=1`` changes both rings in one what-if."""
    what_ifs = []
    for item, key in [(d, "depth") for d in args.depth] + [(f, "scale") for f in args.faster]:
        change = {}
        for part in item.split(","):
            name, _, value = part.partition("=")
            try:
                change[name] = int(value) if key == "depth" else 1.0 - float(value) / 100.0
            except ValueError:
                raise ProfileBufferError(f"--{'depth' if key == 'depth' else 'faster'} wants "
                                         f"NAME=NUMBER[,NAME=NUMBER], got {item!r}") from None
        what_ifs.append({key: change})
    return what_ifs


def _cmd_analyze_pipeline(args, progress: _Progress, *, trace=None) -> int:
    """With ``--pipeline``: the hand-written model; on a zero-edit trace without one: the
    model derived from the kernel's own pipeline objects."""
    from .analysis.pipeline_report import analyze_pipeline, format_pipeline_report
    from .analysis.model import load_pipeline

    spec = load_pipeline(args.pipeline) if args.pipeline else None  # fails before loading
    what_ifs = _what_ifs(args)
    derived = None
    if trace is None:
        trace = _load(args, progress)
    if spec is None:
        from .analysis.derived_pipeline import derive_pipeline

        progress("deriving the pipeline model from the kernel's pipeline objects")
        derived = derive_pipeline(trace)
        trace, spec = derived.trace, derived.spec
    progress("analysing the pipeline")
    # a derived model's what-ifs as bench/whatif_check.py checks them (the unrecorded kernel)
    probed, alike = None, []
    if getattr(args, "arrivals", None):
        if derived is None:
            raise ProfileBufferError("--arrivals needs a zero-edit trace analysed without "
                                     "--pipeline (the derived model reads the probes' rings)")
        from .analysis.load_arrivals import probed_launches_like

        launches = [load_any(path) for path in args.arrivals]
        chosen = probed_launches_like(trace, launches)
        progress("reading the sampled loads of "
                 + ", ".join(args.arrivals[k] for k in chosen)
                 + (f" (of {len(launches)} probed launches, those that ran like the base: "
                    "the nearest in span and any within the probes' own spread of it)"
                    if len(launches) > 1 else ""))
        probed, alike = launches[chosen[0]], [launches[k] for k in chosen[1:]]
    chain_ns = getattr(args, "record_chain_ns", None)
    cost_pct = getattr(args, "recorder_cost", None)
    for given, option in ((chain_ns, "--record-chain-ns"), (cost_pct, "--recorder-cost")):
        if given is not None and derived is None:
            raise ProfileBufferError(f"{option} needs a zero-edit trace analysed without "
                                     "--pipeline (a hand-written model's records are its own)")
    if cost_pct is not None and not -100 < cost_pct < 1000:
        raise ProfileBufferError(f"--recorder-cost wants a percentage (15 for a recording "
                                 f"kernel 15% slower than the plain one), got {cost_pct!r}")
    try:
        terms = (derived.what_if_terms(
            arrivals_from=probed, record_chain_ns=chain_ns,
            recorder_cost=None if cost_pct is None else cost_pct / 100.0)
            if derived is not None else {})
    except ValueError as err:
        raise ProfileBufferError(f"--record-chain-ns: {err}") from None
    # the other probed launches that ran like the base: each what-if pools their draws
    report = analyze_pipeline(trace, spec, what_ifs=what_ifs,
                              alike=[derived.probed_terms(other) for other in alike],
                              sensitivity=args.sensitivity, **terms)
    if derived is not None:
        report["derived"] = derived.describe()
    if args.json:
        json.dump(report, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        if derived is not None:
            print(derived.format_text())
        print(format_pipeline_report(report))
    return EXIT_OK


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return text


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``cute-prof`` console script; returns the exit status."""
    args = _parser().parse_args(argv)
    progress = _Progress(enabled=not args.quiet)
    try:
        return _run_guarded(args, progress)
    finally:
        progress.close()


def _run_guarded(args, progress: _Progress) -> int:
    """Run the verb; errors end as one line on stderr and an exit status."""
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
