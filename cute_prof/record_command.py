"""``cute-prof record [options] -- PROGRAM ARGS...``: run a program unmodified and record every
CuTe DSL kernel it compiles, the way ``nsys profile`` runs one.

The program keeps its arguments, streams and exit status; cute-prof writes to stderr. It runs
with ``record_boot`` first on ``PYTHONPATH`` (whose ``sitecustomize`` starts the recording,
then runs the environment's own) and the on-disk compile caches off (CuTe DSL's, FA4's,
quack's), so every kernel compiles in the process. A ``PROGRAM`` ending in ``.py`` runs with
this Python. Ctrl-C reaches the program, which saves as it exits; one still running
``--grace`` seconds later (a hung kernel) is saved without waiting for the GPU, then killed.

Owns the ``record`` verb's options and the parent's side of a run (stage 7; the child's side
is :mod:`cute_prof.record_run`). It may not import the device ops: the parent never compiles.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .errors import ProfileBufferError
from .record_run import ENV_VAR, RUN_FILE

__all__ = ["add_record_parser", "run_record", "parse_size"]

DEFAULT_PER_WARP = 1024
DEFAULT_MAX_MEMORY = 1 << 30
DEFAULT_GRACE_S = 10.0
# on-disk compile caches turned off for the run (each package reads its variable at import)
CACHE_OFF = {"CUTE_DSL_DISABLE_FILE_CACHING": "1",
             "FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED": "0",
             "QUACK_CACHE_ENABLED": "0"}
BOOT_DIR = Path(__file__).resolve().parent / "record_boot"


def parse_size(text: str) -> int:
    """``512M``, ``2G``, ``1.5GiB``, ``1000000`` (bytes) -> bytes."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kKmMgGtT]?)(i?[bB])?\s*", text)
    if not match:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 512M, 2G)")
    scale = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}[match.group(2).lower()]
    value = int(float(match.group(1)) * scale)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"size must be positive, got {text!r}")
    return value


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text}")
    return value


def add_record_parser(commands) -> argparse.ArgumentParser:
    record = commands.add_parser(
        "record", help="run a program and record every CuTe DSL kernel it compiles",
        description="Run PROGRAM unmodified; every CuTe DSL kernel it compiles records "
                    "(zero-edit). Read OUT with cute-prof summary/report/export.",
        usage="cute-prof record [-o OUT] [-k PATTERN ...] [--launch-skip N] [--launch-count M] "
              "[options] -- PROGRAM [ARGS...]")
    record.add_argument("-o", "--output", help="output folder (default: cute-prof-run-N, the "
                        "first free N)")
    record.add_argument("-k", "--kernel", action="append", default=[], metavar="PATTERN",
                        help="record only kernels whose name contains PATTERN (repeatable)")
    record.add_argument("--launch-skip", type=_non_negative, default=0, metavar="N",
                        help="of each recorded kernel name, leave its first N launches plain")
    record.add_argument("--launch-count", type=_positive, default=None, metavar="M",
                        help="of each recorded kernel name, record M launches (after the "
                             "skipped ones); the rest run plain")
    record.add_argument("--per-warp", type=_positive, default=DEFAULT_PER_WARP,
                        help=f"records kept per warp and launch (default {DEFAULT_PER_WARP}); "
                             "the rest are counted as lost, exactly")
    record.add_argument("--max-memory", type=parse_size, default=DEFAULT_MAX_MEMORY,
                        metavar="SIZE", help="GPU memory for the records of the whole run "
                        "(default 1G); launches after it filled run plain and are counted")
    record.add_argument("--mode", choices=("full", "light"), default="light",
                        help="light (the default): the producers' waits alone, within 2%% of "
                             "the plain kernel on FA4 and the GEMMs measured; full: every "
                             "pipeline call and barrier, for the consumers' side, the derived "
                             "work and the what-if model (docs/record.md)")
    record.add_argument("--no-barriers", action="store_true",
                        help="record the pipelines only, not the named barriers")
    record.add_argument("--grace", type=float, default=DEFAULT_GRACE_S, metavar="S",
                        help="after Ctrl-C, seconds to wait for the program to exit before "
                             "saving without it and killing it (default 10)")
    record.add_argument("--force", action="store_true",
                        help="write into OUT even if it holds an earlier run")
    record.add_argument("program", nargs=argparse.REMAINDER, metavar="-- PROGRAM ARGS",
                        help="the program and its arguments")
    return record


def _output_folder(args) -> Path:
    if args.output is None:
        n = 1
        while Path(f"cute-prof-run-{n}").exists():
            n += 1
        return Path(f"cute-prof-run-{n}").resolve()
    out = Path(args.output).resolve()
    if out.exists() and not out.is_dir():
        raise ProfileBufferError(f"output {out} exists and is not a folder")
    if out.is_dir() and any(out.iterdir()) and not args.force:
        raise ProfileBufferError(f"output folder {out} is not empty (pass --force to write "
                                 f"into it, or another -o)")
    return out


def _check_writable(out: Path) -> None:
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".probe-"):
            pass
    except OSError as error:
        raise ProfileBufferError(f"cannot write the output folder {out}: {error.strerror or error}")


def _command(program: list[str]) -> list[str]:
    if program and program[0] == "--":
        program = program[1:]
    if not program:
        raise ProfileBufferError("no program to run: cute-prof record [options] -- PROGRAM ARGS")
    if program[0].endswith(".py"):
        return [sys.executable, *program]
    return program


def _say(message: str) -> None:
    print(f"cute-prof: {message}", file=sys.stderr, flush=True)


def run_record(args) -> int:
    """Run the program; returns its exit status (128 + N when a signal N ended it)."""
    command = _command(args.program)
    out = _output_folder(args)
    _check_writable(out)
    if (out / RUN_FILE).exists():
        (out / RUN_FILE).unlink()
    watch_read, watch_write = os.pipe()
    done_file = out / ".saved"
    options = {"out": str(out), "program": command, "kernels": list(args.kernel),
               "launch_skip": args.launch_skip, "launch_count": args.launch_count,
               "per_warp": args.per_warp, "max_memory": args.max_memory,
               "barriers": not args.no_barriers, "mode": args.mode, "watchdog_fd": watch_read}
    env = dict(os.environ)
    env.update(CACHE_OFF)
    env[ENV_VAR] = json.dumps(options)
    env["CUTE_PROF_RECORD_DONE"] = str(done_file)
    env["PYTHONPATH"] = os.pathsep.join([str(BOOT_DIR)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    try:
        child = subprocess.Popen(command, env=env, pass_fds=(watch_read,))
    except OSError as error:
        raise ProfileBufferError(f"cannot run {command[0]}: {error.strerror or error}")
    os.close(watch_read)
    interrupted_at = None

    def on_interrupt(signum, frame):
        nonlocal interrupted_at
        if interrupted_at is None:
            interrupted_at = time.monotonic()
        if signum == signal.SIGTERM:
            child.send_signal(signal.SIGTERM)

    previous = {s: signal.signal(s, on_interrupt) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        status = _wait(child, lambda: interrupted_at, args.grace, watch_write, done_file)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        os.close(watch_write)
    if done_file.exists():
        done_file.unlink()
    _report(out, status)
    return status


def _wait(child, interrupted_at, grace: float, watch_write: int, done_file: Path) -> int:
    while True:
        try:
            code = child.wait(timeout=0.2)
            return 128 - code if code < 0 else code
        except subprocess.TimeoutExpired:
            pass
        since = interrupted_at()
        if since is not None and time.monotonic() - since > grace:
            _say(f"the program did not exit {grace:g} s after the interrupt (a hung kernel?): "
                 f"saving what was recorded without waiting for the GPU, then killing it")
            try:
                os.write(watch_write, b"s")
                deadline = time.monotonic() + 60
                while not done_file.exists() and time.monotonic() < deadline and child.poll() is None:
                    time.sleep(0.1)
            except OSError:
                pass
            child.kill()
            child.wait()
            return 128 + signal.SIGINT


def _report(out: Path, status: int) -> None:
    from .recorded_run import RecordedRun

    if not (out / RUN_FILE).exists():
        _say(f"nothing recorded: the program never started a cute-prof run (a program that "
             f"is not Python, or a Python without cute_prof); exit status {status}")
        return
    try:
        run = RecordedRun(out)
        print(run.format_summary(max_rows=10), file=sys.stderr)
    except ProfileBufferError as error:
        _say(f"the run in {out} could not be read: {error}")
        return
    _say(f"wrote {out} (cute-prof summary|report|export {out})")
