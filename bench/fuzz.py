"""Fuzz the host pipeline: mutated buffers and saved files through load -> decode -> summary ->
every exporter, in-process, with a time limit per case; corrupted files through the CLI.

    python bench/fuzz.py                         # 100,000 cases on every core; writes results
    python bench/fuzz.py --cases 2000 --no-write # a quick look
    python bench/fuzz.py --case 1234             # re-run one case, with its traceback

Every case is reproducible from its number. Families: ``buffer`` (a window of the shipped
recording or of a synthetic clock-mode buffer, mutated in memory: bit flips, truncation,
extreme words and counters, reserved bits, unknown kinds, shuffles, other dtypes and shapes),
``npz`` / ``pt`` (such a buffer saved, then corrupted as bytes), ``json`` (a decoded buffer
exported, then corrupted as bytes or as JSON) and ``cli`` (a saved case through
``cute_prof.cli.main``: exit 0 or 2 and one error line, never a traceback). A case that
loads runs ``summarize``, the JSON and pftrace exporters and, every ``--picture-every``-th
case, the picture. Outcomes: ``ok``, ``rejected:<Error>`` (``ProfileBufferError``,
``FileNotFoundError``), ``crash:<where>:<Error>``, ``timeout``; a negative or overflowing
event, misnested JSON or a changed input file is a problem, and any problem fails the run.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import datetime
import hashlib
import io
import json
import multiprocessing
import os
import platform
import shutil
import signal
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))
from tools.machine import cpu_model  # noqa: E402

from cute_prof import ProfileBufferError, decode_buffer, layout  # noqa: E402
from cute_prof.analysis import summarize  # noqa: E402
from cute_prof.export import export_trace  # noqa: E402
from cute_prof.storage import load_buffer, load_trace, save_buffer  # noqa: E402
from trace_checks import json_nesting_violations  # noqa: E402

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
DOCUMENTED = (ProfileBufferError, FileNotFoundError)
FAMILIES = ["buffer"] * 40 + ["npz"] * 20 + ["pt"] * 15 + ["json"] * 20 + ["cli"] * 5


class CaseTimeout(Exception):
    pass


def _alarm(signum, frame):
    raise CaseTimeout()


# --------------------------------------------------------------------------- seeds
def _synthetic_clock_buffer() -> tuple[np.ndarray, list[str]]:
    rng = np.random.default_rng(7)
    buf = np.zeros(layout.buffer_words(96), dtype=np.int64)
    base = 1_760_000_000_000_000_000
    layout.write_records(buf, [base, base + 50_000], [10**11, 10**11 + 75_000], 0, 0,
                         kind=layout.KIND_CLOCK_SYNC)
    n = 80
    start = base + np.sort(rng.integers(1000, 40_000, n))
    dur = rng.integers(0, 5000, n)
    kind = rng.choice([layout.KIND_SPAN, layout.KIND_INSTANT, layout.KIND_CLOCK_SPAN], n)
    words0 = np.where(kind == layout.KIND_CLOCK_SPAN, start + dur, start)
    words1 = np.where(kind == layout.KIND_CLOCK_SPAN, dur * 3 // 2, dur)
    layout.write_records(buf, words0, words1, rng.integers(0, 4, n), rng.integers(0, 8, n),
                         kind=kind, payload=rng.integers(-5, 5, n), sm=rng.integers(0, 4, n))
    return buf, ["load", "mma", "epilogue", "store"]


def seeds() -> list[tuple[np.ndarray, list[str]]]:
    words, table, _ = load_buffer(ROOT / "cute_prof" / "data" / "example_recording.npz")
    return [(words, list(table.names)), _synthetic_clock_buffer()]


# ------------------------------------------------------------------------ mutations
def window(rng, words: np.ndarray) -> np.ndarray:
    """The whole buffer (1 in 5) or a window of up to 64 records, as its own buffer."""
    records = (words.shape[0] - 1) // 4
    if rng.random() < 0.2:
        return words.copy()
    count = int(rng.integers(1, min(64, records) + 1))
    first = int(rng.integers(0, records - count + 1))
    out = np.empty(1 + 4 * count, dtype=np.int64)
    out[0] = count
    out[1:] = words[1 + 4 * first : 1 + 4 * (first + count)]
    return out


def mutate_buffer(rng, buf: np.ndarray):
    """One to three mutations; returns the (possibly non-int64) array and their names."""
    names = []
    for _ in range(int(rng.integers(1, 4))):
        if not isinstance(buf, np.ndarray) or buf.dtype != np.int64 or buf.ndim != 1 or buf.shape[0] == 0:
            break
        n = buf.shape[0]
        choice = int(rng.integers(0, 13))
        index = int(rng.integers(0, n))
        records = max(1, (n - 1) // 4)
        if choice == 0:
            for _ in range(int(rng.integers(1, 21))):
                i, bit = int(rng.integers(0, n)), int(rng.integers(0, 64))
                buf[i : i + 1].view(np.uint64)[0] ^= np.uint64(1) << np.uint64(bit)
            names.append("bit_flips")
        elif choice == 1:
            buf = buf[: int(rng.integers(0, n))].copy()
            names.append("truncate")
        elif choice == 2:
            buf[0] = rng.choice([-1, 0, 1, n, 10 * n, layout.MAX_PLAUSIBLE_COUNTER,
                                 layout.MAX_PLAUSIBLE_COUNTER + 1, INT64_MAX, INT64_MIN])
            names.append("counter")
        elif choice == 3:
            buf[index] = rng.choice([-1, 0, INT64_MAX, INT64_MIN, 1, INT64_MAX - 1])
            names.append("extreme_word")
        elif choice == 4:
            buf[index] = rng.integers(INT64_MIN, INT64_MAX, dtype=np.int64, endpoint=True)
            names.append("random_word")
        elif choice == 5 and n >= 5:
            buf[1 + 4 * int(rng.integers(0, records)) + layout.WORD_DUR] = rng.choice(
                [-5, -1, INT64_MAX, INT64_MAX // 2, INT64_MIN, 2**40])
            names.append("extreme_duration")
        elif choice == 6 and n >= 5:
            buf[1 + 4 * int(rng.integers(0, records)) + layout.WORD_START] = rng.choice(
                [-1000, -1, 0, INT64_MAX, INT64_MAX - 10, INT64_MIN, 2**62])
            names.append("extreme_start")
        elif choice == 7 and n >= 5:
            i = 1 + 4 * int(rng.integers(0, records)) + (layout.WORD_TAG if rng.random() < 0.5 else layout.WORD_TID)
            bit = int(rng.integers(48, 64))
            buf[i : i + 1].view(np.uint64)[0] |= np.uint64(1) << np.uint64(bit)
            names.append("high_bits")
        elif choice == 8 and n >= 5:
            i = 1 + 4 * int(rng.integers(0, records)) + layout.WORD_TAG
            kind = int(rng.integers(0, 16))
            buf[i] = (int(buf[i]) & ~(0xF << layout.KIND_SHIFT)) | (kind << layout.KIND_SHIFT)
            names.append("kind")
        elif choice == 9 and n >= 9:
            rng.shuffle(buf[1 : 1 + 4 * ((n - 1) // 4)].reshape(-1, 4))
            names.append("shuffle")
        elif choice == 10:
            target = rng.choice(["int32", "uint64", "float64", "2d", "empty", "bool", "list"])
            names.append(f"dtype_{target}")
            if target == "int32":
                return buf.astype(np.int32), names
            if target == "uint64":
                return buf.view(np.uint64), names
            if target == "float64":
                return buf.astype(np.float64), names
            if target == "2d":
                return buf[: n - n % 2].reshape(2, -1) if n >= 2 else buf.reshape(1, -1), names
            if target == "empty":
                return np.zeros(0, dtype=np.int64), names
            if target == "bool":
                return buf.astype(bool), names
            return buf.tolist(), names
        elif choice == 11 and n >= 5:
            i = 1 + 4 * int(rng.integers(0, records))
            buf[i : i + 4] = 0  # a claimed slot never written
            names.append("unwritten_slot")
        else:
            names.append("none")
    return buf, names


def corrupt_bytes(rng, data: bytes) -> tuple[bytes, str]:
    choice = int(rng.integers(0, 6))
    if choice == 0 or not data:
        return data, "intact"
    if choice == 1:
        return data[: int(rng.integers(0, len(data)))], "truncated"
    if choice == 2:
        head = bytearray(data)
        for _ in range(int(rng.integers(1, 4))):
            i = int(rng.integers(0, min(64, len(head))))
            head[i] ^= int(rng.integers(1, 256))
        return bytes(head), "header_flipped"
    if choice == 3:
        body = bytearray(data)
        for _ in range(int(rng.integers(1, 9))):
            i = int(rng.integers(0, len(body)))
            body[i] ^= int(rng.integers(1, 256))
        return bytes(body), "bytes_flipped"
    if choice == 4:
        body = bytearray(data)
        i = int(rng.integers(0, len(body)))
        body[i : i + int(rng.integers(1, 512))] = b"\0" * len(body[i : i + 512])
        return bytes(body[: len(data)]), "zeroed_range"
    return data + bytes(rng.integers(0, 256, int(rng.integers(1, 64)), dtype=np.uint8)), "appended"


def corrupt_json(rng, text: str) -> tuple[bytes, str]:
    """Corrupt the JSON as JSON (a value of the wrong type or size) or as bytes."""
    if rng.random() < 0.4:
        return corrupt_bytes(rng, text.encode())
    doc = json.loads(text)
    wrong = [None, True, -1, 2**63, -(2**63) - 1, 1.5, "x", [], {}, [1, [2]], "<unknown tag 99999999>",
             float("nan"), "é" * 1000]
    pick = lambda: wrong[int(rng.integers(0, len(wrong)))]  # noqa: E731
    choice = int(rng.integers(0, 7))
    events = doc.get("traceEvents", [])
    if choice == 0:
        doc = pick() if rng.random() < 0.5 else [doc]
        what = "top_level"
    elif choice == 1:
        key = rng.choice(["otherData", "traceEvents"])
        doc[key] = pick()
        what = f"{key}_value"
    elif choice == 2:
        other = doc["otherData"]
        key = rng.choice(list(other) + ["tag_names", "capacity", "invalid_reasons"])
        other[key] = pick()
        what = f"otherData.{key}"
    elif choice == 3 and events:
        event = events[int(rng.integers(0, len(events)))]
        key = rng.choice(list(event) or ["ph"])
        event[key] = pick()
        what = f"event.{key}"
    elif choice == 4 and events:
        event = events[int(rng.integers(0, len(events)))]
        args = event.get("args")
        if isinstance(args, dict) and args:
            key = rng.choice(list(args))
            extremes = [-1, -(2**40), INT64_MAX, INT64_MIN, 2**31, 0]
            args[key] = extremes[int(rng.integers(0, len(extremes)))] \
                if rng.random() < 0.7 else pick()
            what = f"args.{key}"
        else:
            what = "args_missing"
    elif choice == 5 and events:
        del events[int(rng.integers(0, len(events)))][rng.choice(["args", "name", "ph", "ts"])]
        what = "key_removed"
    else:
        events.extend(events[: int(rng.integers(0, 5))])
        what = "duplicated_events"
    return json.dumps(doc, allow_nan=True).encode(), f"json_{what}"


# ---------------------------------------------------------------------------- checks
def check_trace(trace, problems: collections.Counter) -> None:
    events = trace.events
    start, dur = events["start_ns"], events["dur_ns"]
    problems["negative_start_events"] += int(np.count_nonzero(start < 0))
    problems["negative_duration_events"] += int(np.count_nonzero(dur < 0))
    problems["end_beyond_int64_events"] += int(
        np.count_nonzero((dur >= 0) & (start > INT64_MAX - np.maximum(dur, 0))))
    if sum(trace.invalid_reasons.values()) != trace.invalid and trace.metadata.get("source_file", "").endswith((".npz", ".pt")):
        problems["invalid_reasons_mismatch"] += 1


def consume(trace, directory: Path, case: int, picture: bool, problems) -> str | None:
    """Run every consumer; return where it crashed (None: all fine)."""
    stage = "summary"
    try:
        summary = summarize(trace)
        summary.format_table()
        json.dumps(summary.to_dict())
        stage = "json_export"
        json_path = export_trace(trace, directory / f"{case}.json")
        stage = "json_nesting_check"
        if json_nesting_violations(json_path):
            problems["json_traces_misnested"] += 1
        # as a viewer reads it: microseconds parsed as doubles, which keep whole ns only
        # while the trace spans less than ~2**53 ns (104 days)
        if json_nesting_violations(json.loads(json_path.read_text())):
            problems["json_traces_misnested_as_doubles"] += 1
        stage = "pftrace_export"
        export_trace(trace, directory / f"{case}.pftrace")
        if picture:
            stage = "picture"
            export_trace(trace, directory / f"{case}.png", width_px=800, height_px=300)
    except CaseTimeout:
        raise
    except DOCUMENTED as error:
        return f"rejected_in_{stage}:{type(error).__name__}"
    except Exception as error:  # noqa: BLE001 - counting crashes is the point
        return f"crash:{stage}:{type(error).__name__}:{str(error)[:120]}"
    return None


def run_case(case: int, base_seed: int, picture_every: int, directory: Path):
    """``(outcome, mutation label, problems Counter)`` for one case."""
    rng = np.random.default_rng([base_seed, case])
    problems: collections.Counter = collections.Counter()
    family = FAMILIES[int(rng.integers(0, len(FAMILIES)))]
    seed_words, names = SEEDS[int(rng.integers(0, len(SEEDS)))]
    buf, mutations = mutate_buffer(rng, window(rng, seed_words))
    label = f"{family}:" + "+".join(mutations)
    picture = picture_every > 0 and case % picture_every == 0
    stage = "prepare"
    path = None
    try:
        # half the cases know the SM clock (as a saved run's metadata does), half must fit it
        clock = {"clock_hz": 1.5e9} if rng.random() < 0.5 else {}
        if family == "buffer":
            stage = "decode"
            trace = decode_buffer(buf, names, **clock)
        else:
            suffix = {"npz": ".npz", "pt": ".pt", "json": ".json"}.get(family)
            if family == "cli":
                suffix = [".npz", ".pt", ".json"][int(rng.integers(0, 3))]
            path = directory / f"{case}_in{suffix}"
            stage = "save"
            if suffix == ".json":
                try:
                    source = decode_buffer(buf, names, clock_hz=1.5e9)
                except ProfileBufferError:  # not decodable: corrupt the seed's JSON instead
                    source = decode_buffer(window(rng, seed_words), names, clock_hz=1.5e9)
                export_trace(source, path)
                data, how = corrupt_json(rng, path.read_text())
            else:
                try:
                    save_buffer(path, buf, names, metadata=clock)
                except ProfileBufferError:  # not int64 / 1-D: nothing to save; save the seed
                    save_buffer(path, window(rng, seed_words), names, metadata=clock)
                data, how = corrupt_bytes(rng, path.read_bytes())
            path.write_bytes(data)
            label += f"+{how}"
            digest = hashlib.sha256(data).digest()
            if family == "cli":
                stage = "cli"
                outcome = run_cli(path, directory, case)
                if hashlib.sha256(path.read_bytes()).digest() != digest:
                    problems["input_files_modified"] += 1
                return outcome, label, problems
            stage = "load"
            trace = load_trace(path)
            if hashlib.sha256(path.read_bytes()).digest() != digest:
                problems["input_files_modified"] += 1
    except CaseTimeout:
        return "timeout", label, problems
    except DOCUMENTED as error:
        return f"rejected:{type(error).__name__}", label, problems
    except Exception as error:  # noqa: BLE001
        return f"crash:{stage}:{type(error).__name__}:{str(error)[:120]}", label, problems
    check_trace(trace, problems)
    try:
        crashed = consume(trace, directory, case, picture, problems)
    except CaseTimeout:
        return "timeout", label, problems
    if path is not None and hashlib.sha256(path.read_bytes()).digest() != digest:
        problems["input_files_modified"] += 1
    return crashed or "ok", label, problems


def run_cli(path: Path, directory: Path, case: int) -> str:
    from cute_prof.cli import main

    verbs = [["summary", str(path)], ["summary", "--json", str(path)],
             ["export", str(path), "-o", str(directory / f"{case}_cli.pftrace")],
             ["export", str(path), "-o", str(directory / f"{case}_cli.json")]]
    outcome = "ok"
    for verb in verbs:
        err, out = io.StringIO(), io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            rc = main(["-q", *verb])
        text = err.getvalue()
        error_lines = [line for line in text.splitlines() if line.startswith("cute-prof:")]
        if rc not in (0, 2) or "Traceback" in text or len(error_lines) > 1 or (
                rc == 2 and len(text.strip().splitlines()) != 1):
            return f"crash:cli:{verb[0]}:rc={rc}:{text.strip()[:120]}"
        if rc == 2:
            outcome = "rejected:cli_error_line"
    return outcome


# ---------------------------------------------------------------------------- driver
SEEDS: list = []
_STATE: dict = {}


def _init(base_seed: int, picture_every: int, time_limit: float, directory: str) -> None:
    SEEDS.extend(seeds())
    _STATE.update(base_seed=base_seed, picture_every=picture_every, time_limit=time_limit,
                  directory=Path(directory))
    warnings.simplefilter("ignore")  # loss warnings are expected on mutated buffers
    signal.signal(signal.SIGALRM, _alarm)
    import matplotlib

    matplotlib.use("Agg")


def _work(cases: range) -> tuple[collections.Counter, collections.Counter, dict, float]:
    outcomes: collections.Counter = collections.Counter()
    problems: collections.Counter = collections.Counter()
    examples: dict[str, list] = {}
    slowest = 0.0
    directory = _STATE["directory"]
    for case in cases:
        started = time.perf_counter()
        case_directory = directory / f"case{case}"
        case_directory.mkdir()
        signal.setitimer(signal.ITIMER_REAL, _STATE["time_limit"])
        try:
            outcome, label, found = run_case(case, _STATE["base_seed"], _STATE["picture_every"],
                                             case_directory)
        except CaseTimeout:
            outcome, label, found = "timeout", "?", collections.Counter()
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        slowest = max(slowest, time.perf_counter() - started)
        key = outcome if outcome.startswith("crash") else outcome.split(":")[0] + (
            ":" + outcome.split(":")[1] if ":" in outcome else "")
        outcomes[key] += 1
        problems.update(found)
        if outcome.startswith("crash") or outcome == "timeout" or any(found.values()):
            examples.setdefault(key if not any(found.values()) else "+".join(k for k, v in found.items() if v), []).append(
                (case, label))
        shutil.rmtree(case_directory)
    return outcomes, problems, examples, slowest


def _commit() -> str:
    import subprocess

    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, check=True,
                              capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def markdown(result: dict) -> str:
    """The committed summary of a run (``bench/results/fuzz/fuzz.md``)."""
    lines = [
        "# Fuzzing the host pipeline (`bench/fuzz.py`)",
        "",
        f"{result['date']}, {result['machine']}, code at commit {result.get('commit', '?')}; "
        f"`{result['command'].strip()}`: "
        f"{result['cases']:,} cases in {result['seconds']:,.0f} s (slowest case "
        f"{result['slowest_case_s']} s, limit {result['time_limit_s']} s per case).",
        "",
        "| outcome | cases |",
        "|---|---:|",
    ]
    lines += [f"| `{k}` | {v:,} |" for k, v in result["outcomes"].items()]
    lines += [
        "",
        f"Exceptions other than the documented types, and timeouts: "
        f"**{result['undocumented_exceptions_and_timeouts']}**.",
        "",
        "| check over every trace that loaded | count |",
        "|---|---:|",
    ]
    lines += [f"| {k.replace('_', ' ')} | {v:,} |" for k, v in result["problems"].items()]
    lines += [
        "",
        "`ok`: loaded, decoded, summarised and exported (JSON, pftrace; PNG for every 20th "
        "case). `rejected:*`: a documented error with a one-line message "
        "(`ClockRateError` is a `ProfileBufferError`: clock spans without a clock rate); "
        "`rejected:cli_error_line`: the CLI ended with status 2 and one `cute-prof: error` "
        "line. `json traces misnested` counts written JSON files whose slices on one track "
        "overlap without nesting (must be 0: the JSON writer gives overlaps extra lanes); "
        "`as doubles` reads the microseconds as a viewer does, as doubles (must be 0: a record "
        "far outside the trace's or its launch's time window is invalid, `outside_launch`, so "
        "the trace's time origin stays near its records).",
        "",
    ]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=16)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--time-limit", type=float, default=20.0, help="seconds per case")
    parser.add_argument("--picture-every", type=int, default=20,
                        help="draw the PNG picture for every N-th case (matplotlib is slow)")
    parser.add_argument("--case", type=int, help="run one case and show its traceback")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(dir="/dev/shm" if os.path.isdir("/dev/shm") else None) as scratch:
        if args.case is not None:
            _init(args.seed, 1, 1e9, scratch)
            import cute_prof.cli as cli_module

            os.environ[cli_module.TRACEBACK_ENV_VAR] = "1"
            outcome, label, found = run_case(args.case, args.seed, 1, Path(scratch))
            print(outcome, label, dict(found))
            return 0
        started = time.perf_counter()
        step = 250
        chunks = [range(i, min(i + step, args.cases)) for i in range(0, args.cases, step)]
        outcomes: collections.Counter = collections.Counter()
        problems: collections.Counter = collections.Counter()
        examples: dict[str, list] = {}
        slowest = 0.0
        with multiprocessing.get_context("fork").Pool(
            args.workers, _init, (args.seed, args.picture_every, args.time_limit, scratch)
        ) as pool:
            for done, (o, p, e, s) in enumerate(pool.imap_unordered(_work, chunks), 1):
                outcomes.update(o)
                problems.update(p)
                for key, cases in e.items():
                    examples.setdefault(key, []).extend(cases)
                slowest = max(slowest, s)
                if done % 40 == 0 or done == len(chunks):
                    print(f"{sum(outcomes.values()):>7,} cases, {time.perf_counter() - started:6.0f} s: "
                          + ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items()) if not k.startswith("crash"))
                          + f", crashes {sum(v for k, v in outcomes.items() if k.startswith('crash'))}",
                          flush=True)
        seconds = time.perf_counter() - started
    crashes = {k: v for k, v in outcomes.items() if k.startswith("crash") or k == "timeout"}
    result = {
        "command": "python bench/fuzz.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{cpu_model()}, {os.cpu_count()} cores, "
                   f"Python {platform.python_version()}, numpy {np.__version__}",
        "commit": _commit(),
        "cases": sum(outcomes.values()),
        "seconds": round(seconds, 1),
        "slowest_case_s": round(slowest, 2),
        "time_limit_s": args.time_limit,
        "outcomes": dict(sorted(outcomes.items())),
        "undocumented_exceptions_and_timeouts": sum(crashes.values()),
        "problems": {k: problems.get(k, 0) for k in (
            "negative_start_events", "negative_duration_events", "end_beyond_int64_events",
            "input_files_modified", "invalid_reasons_mismatch", "json_traces_misnested",
            "json_traces_misnested_as_doubles")},
        "examples": {k: sorted(v)[:5] for k, v in sorted(examples.items())},
    }
    print(json.dumps({k: result[k] for k in ("cases", "seconds", "outcomes", "problems", "examples",
                                             "undocumented_exceptions_and_timeouts")}, indent=1))
    if not args.no_write:
        out = ROOT / "bench" / "results" / "fuzz"
        (out / "fuzz.json").write_text(json.dumps(result, indent=1) + "\n")
        md = out / "fuzz.md"
        # the hand-kept history of earlier runs stays below the new run's summary
        previous = md.read_text() if md.exists() else ""
        history = previous[previous.find("## History"):] if "## History" in previous else ""
        md.write_text(markdown(result) + ("\n" + history if history else ""))
    failed = result["undocumented_exceptions_and_timeouts"] or any(result["problems"].values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
