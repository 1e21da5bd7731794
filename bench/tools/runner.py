"""One runner per question: ``python bench/<runner>.py PART [ARGS...]`` runs
``bench/parts/<file>.py ARGS...`` as if it had been started directly."""

from __future__ import annotations

import argparse
import runpy
import sys
from dataclasses import dataclass
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1]
ROOT = BENCH.parent


@dataclass(frozen=True)
class Part:
    name: str  # the sub-command
    script: str  # path from the repository root
    does: str  # one line: what it measures
    device: str  # "GPU" or "CPU"
    result: str  # where its latest result lives, from the repository root


def run(question: str, parts: list[Part], argv: list[str] | None = None) -> int:
    """Parse ``PART [ARGS...]`` and run that part with ``ARGS``; ``--help`` lists the parts.
    ``PART --help`` is the part's own help."""
    argv = list(sys.argv[1:] if argv is None else argv)
    by_name = {p.name: p for p in parts}
    lines = [f"  {p.name:<12} [{p.device}] {p.does}\n{'':17}script {p.script}; latest result {p.result}"
             for p in parts]
    parser = argparse.ArgumentParser(
        prog=Path(sys.argv[0]).name if argv is None else None,
        description=question,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="parts:\n" + "\n".join(lines) + "\n\n'PART --help' shows the part's own options.",
    )
    parser.add_argument("part", choices=list(by_name), metavar="PART", help="what to run (listed below)")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="passed to the part")
    if not argv or argv[0] in ("-h", "--help"):
        parser.print_help()
        return 0 if argv else 2
    ns = parser.parse_args(argv[:1])
    part = by_name[ns.part]
    script = ROOT / part.script
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [str(script), *argv[1:]]
    sys.path[:0] = [str(script.parent)]  # what running the script directly puts first
    try:
        runpy.run_path(str(script), run_name="__main__")
    except SystemExit as done:
        code = done.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
    return 0
