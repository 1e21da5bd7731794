"""The ``cute-prof`` command, run as a subprocess on real files."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from matplotlib.image import imread
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from cute_prof import layout
from cute_prof.cli import main
from cute_prof.export.pftrace_reader import read_pftrace
from cute_prof.storage import save_buffer

NAMES = ["mainloop", "load", "mma", "epilogue", "tile_done"]
BASE = 1_800_000_000_000_000_000
REPO = Path(__file__).resolve().parents[1]


def run(*args, check_rc=None):
    result = subprocess.run([sys.executable, "-m", "cute_prof.cli", *map(str, args)],
                            capture_output=True, text=True, cwd=REPO, timeout=300)
    if check_rc is not None:
        assert result.returncode == check_rc, (result.stdout, result.stderr)
    return result


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A saved buffer: 6 tids on 3 SMs, nested regions, instants, 3 records overflowed."""
    directory = tmp_path_factory.mktemp("cli")
    capacity = 6 * (1 + 3 * 3 + 1)  # mainloop, 3 x (load, mma, instant), epilogue
    buf = np.zeros(layout.buffer_words(capacity), dtype=np.int64)
    for tid in range(6):
        t = BASE + 100 * tid
        layout.write_records(buf, t, 3 * 1000, 0, tid, sm=tid % 3)
        for i in range(3):
            layout.write_records(buf, [t + 1000 * i, t + 1000 * i + 400], [400, 500], [1, 2],
                                 tid, payload=i, sm=tid % 3)
            layout.write_records(buf, t + 1000 * i + 950, 0, 4, tid,
                                 kind=layout.KIND_INSTANT, sm=tid % 3)
        layout.write_records(buf, t + 3000, 300, 3, tid, sm=tid % 3)
    buf[0] += 3
    npz = save_buffer(directory / "run.npz", buf, NAMES, metadata={"device": "NVIDIA H100"})
    pt = save_buffer(directory / "run.pt", buf, NAMES, metadata={"device": "NVIDIA H100"})
    return {"npz": npz, "pt": pt, "dir": directory, "records": capacity}


@pytest.mark.parametrize("kind", ["npz", "pt"])
def test_summary(saved, kind):
    result = run("summary", saved[kind], check_rc=0)
    for name in ("mainloop", "load", "mma", "epilogue", "tile_done", "overflow 3"):
        assert name in result.stdout
    assert "WARNING" in result.stdout
    assert "loading" in result.stderr  # progress goes to stderr, not stdout
    assert "cute-prof:" not in result.stdout


def test_summary_json(saved):
    data = json.loads(run("-q", "summary", saved["npz"], "--json", check_rc=0).stdout)
    assert data["overflow"] == 3
    assert data["records"] == saved["records"]
    assert {row["name"]: row["count"] for row in data["tags"]}["load"] == 18
    assert len(data["tids"]) == 6 and len(data["sms"]) == 3


def test_export_pftrace(saved):
    out = saved["dir"] / "run.pftrace"
    result = run("export", saved["npz"], "-o", out, "--group-by", "sm", check_rc=0)
    assert result.stdout.strip() == str(out)
    slices, info = read_pftrace(out)
    assert len(slices) == saved["records"]
    assert info["overflow"] == 3 and info["group_by"] == "sm"
    assert {s.split("/")[0] for s in slices["track"].tolist()} == {"SM 0", "SM 1", "SM 2"}


def test_export_json_then_summarise_the_json(saved):
    out = saved["dir"] / "run.json"
    run("-q", "export", saved["pt"], "-o", out, check_rc=0)
    assert json.loads(out.read_text())["otherData"]["producer"] == "cute_prof"
    from_json = json.loads(run("-q", "summary", out, "--json", check_rc=0).stdout)
    from_npz = json.loads(run("-q", "summary", saved["npz"], "--json", check_rc=0).stdout)
    for key in ("tags", "tids", "sms", "gaps", "overflow", "incomplete", "kernel_span_ns"):
        assert from_json[key] == from_npz[key], key


def test_export_png_and_plot_svg(saved):
    png = saved["dir"] / "run.png"
    run("-q", "export", saved["npz"], "-o", png, check_rc=0)
    assert imread(png).shape[1] == 1600
    svg = saved["dir"] / "run.svg"
    run("plot", saved["npz"], "-o", svg, "--group-by", "sm", "--width", "900", check_rc=0)
    assert svg.read_text().lstrip().startswith("<?xml")
    small = saved["dir"] / "small.png"
    run("-q", "plot", saved["npz"], "-o", small, "--width", "700", "--height", "300",
        check_rc=0)
    assert imread(small).shape[:2] == (300, 700)


def error_line(result):
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("cute-prof: error: ")
    assert result.stdout == ""
    return lines[0]


def test_truncated_npz(saved, tmp_path):
    bad = tmp_path / "cut.npz"
    bad.write_bytes(saved["npz"].read_bytes()[:200])
    assert "not a cute_prof buffer file" in error_line(run("-q", "summary", bad))


def test_random_bytes(tmp_path):
    for name in ("junk.npz", "junk.pt", "junk.json"):
        bad = tmp_path / name
        bad.write_bytes(np.random.default_rng(1).bytes(2000))
        error_line(run("-q", "summary", bad))


def test_json_that_is_not_ours(tmp_path):
    foreign = tmp_path / "chrome.json"
    foreign.write_text(json.dumps({"traceEvents": [{"ph": "X", "name": "x", "ts": 1}]}))
    assert "not a cute_prof JSON trace" in error_line(run("-q", "export", foreign, "-o",
                                                          tmp_path / "o.pftrace"))
    assert not (tmp_path / "o.pftrace").exists()


def test_missing_unknown_and_bad_output(saved, tmp_path):
    assert "no such file" in error_line(run("-q", "summary", tmp_path / "none.npz"))
    other = tmp_path / "trace.csv"
    other.write_text("a,b\n")
    assert "cannot read .csv" in error_line(run("-q", "summary", other))
    assert "suffix" in error_line(run("-q", "export", saved["npz"], "-o", tmp_path / "o.txt"))
    assert "format" in error_line(run("-q", "plot", saved["npz"], "-o", tmp_path / "o.gif"))
    assert "does not exist" in error_line(
        run("-q", "export", saved["npz"], "-o", tmp_path / "nodir" / "o.json"))


def test_usage_errors_exit_2():
    with pytest.raises(SystemExit) as exit_info:
        main([])
    assert exit_info.value.code == 2
    with pytest.raises(SystemExit) as exit_info:
        main(["export", "x.npz"])  # -o is required
    assert exit_info.value.code == 2


def test_main_in_process(saved, capsys):
    assert main(["-q", "summary", str(saved["npz"]), "--unit", "ns"]) == 0
    assert "mainloop" in capsys.readouterr().out


@pytest.mark.skipif(shutil.which("cute-prof") is None, reason="package not installed")
def test_console_script(saved):
    result = subprocess.run(["cute-prof", "-q", "summary", str(saved["npz"])],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and "mainloop" in result.stdout


def corrupted_files(directory: Path, saved: dict) -> dict[str, Path]:
    """Files a user might hand the CLI by mistake, each broken in a different way."""
    good = saved["npz"].read_bytes()
    files = {
        "truncated.npz": good[: len(good) // 2],
        "flipped_header.npz": bytes([good[0] ^ 0xFF]) + good[1:],
        "flipped_middle.npz": good[:200] + bytes([good[200] ^ 0x55]) + good[201:],
        "empty.pt": b"",
        "garbage.pt": b"\x80\x02not a pickle at all",
        "list.json": b"[1, 2, 3]",
        "wrong_shape.json": json.dumps({"otherData": {"producer": "cute_prof", "tag_names": 5},
                                        "traceEvents": []}).encode(),
        "bad_args.json": json.dumps({"otherData": {"producer": "cute_prof"}, "traceEvents": [
            {"ph": "X", "name": 3, "args": {"start_ns": "x"}}]}).encode(),
        "deep.json": b"[" * 100_000 + b"]" * 100_000,
        "not_utf8.json": b"\xff\xfe\x00garbage",
    }
    paths = {}
    for name, data in files.items():
        path = directory / name
        path.write_bytes(data)
        paths[name] = path
    return paths


@pytest.mark.parametrize("verb", [["summary"], ["export", "-o", "{out}.json"],
                                  ["plot", "-o", "{out}.png"]])
def test_corrupted_files_give_one_line_and_stay_unchanged(saved, tmp_path, verb):
    for name, path in corrupted_files(tmp_path, saved).items():
        before = path.read_bytes()
        args = [part.format(out=tmp_path / "out") for part in verb]
        result = run(args[0], path, *args[1:])
        assert result.returncode == 2, (name, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert lines[-1].startswith("cute-prof: error: "), (name, result.stderr)
        assert "Traceback" not in result.stderr, name
        assert len([l for l in lines if "error" in l]) == 1, (name, result.stderr)
        assert path.read_bytes() == before, f"{name} was modified"


def test_output_over_the_input_is_refused(saved, tmp_path, capsys):
    copy = tmp_path / "t.json"
    assert main(["-q", "export", str(saved["npz"]), "-o", str(copy)]) == 0
    before = copy.read_bytes()
    assert main(["-q", "export", str(copy), "-o", str(copy)]) == 2
    assert "is the input trace" in capsys.readouterr().err
    assert copy.read_bytes() == before


def test_a_bug_still_ends_with_one_line(saved, monkeypatch, capsys):
    import cute_prof.analysis as analysis

    def broken(trace):
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(analysis, "summarize", broken)
    assert main(["-q", "summary", str(saved["npz"])]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "internal error: RuntimeError: boom second line" in err
    monkeypatch.setenv("CUTE_PROF_TRACEBACK", "1")
    with pytest.raises(RuntimeError):
        main(["-q", "summary", str(saved["npz"])])


def test_view_options_on_every_verb(saved):
    # SM 1 holds tids 1 and 4: their share of the records, on every verb
    data = json.loads(run("-q", "summary", saved["npz"], "--json", "--sms", "1",
                          check_rc=0).stdout)
    assert sorted(row["track"] for row in data["tids"]) == [1, 4]
    assert all(row["track"] == 1 for row in data["sms"])
    out = saved["dir"] / "sm1.pftrace"
    run("-q", "export", saved["npz"], "-o", out, "--sms", "1", "--tags", "load", check_rc=0)
    slices, _ = read_pftrace(out)
    assert set(slices["track"].tolist()) == {"tid 1", "tid 4"}
    assert set(slices["name"].tolist()) == {"load"}
    picture = saved["dir"] / "sm1.svg"
    run("-q", "plot", saved["npz"], "-o", picture, "--sms", "1", check_rc=0)
    assert picture.stat().st_size > 0
    bad = run("-q", "export", saved["npz"], "-o", out, "--time-window", "5", check_rc=2)
    assert "FROM_NS:TO_NS" in bad.stderr


class _Terminal(io.StringIO):
    """A stderr that says it is a terminal (tqdm draws bars only on one)."""

    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("quiet", [False, True])
def test_progress_bars_on_a_terminal_and_quiet_silences_them(saved, monkeypatch, quiet):
    from cute_prof.cli import main

    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    out = saved["dir"] / f"bars_{quiet}.pftrace"
    argv = (["-q"] if quiet else []) + ["export", str(saved["npz"]), "-o", str(out)]
    assert main(argv) == 0
    text = terminal.getvalue()
    if quiet:
        assert text == ""
    else:
        assert "cute-prof: writing pftrace" in text  # the records bar
        assert "100%" in text and f"{saved['records']}.0/{saved['records']}.0" in text
        assert "cute-prof: loading" in text  # the stage line
    assert len(read_pftrace(out)[0]) == saved["records"]


def test_quiet_prints_nothing_on_stderr_without_a_terminal(saved):
    out = saved["dir"] / "quiet.json"
    result = run("-q", "export", saved["npz"], "-o", out, check_rc=0)
    assert result.stderr == ""
    loud = run("export", saved["npz"], "-o", out, check_rc=0)
    assert "cute-prof: [" in loud.stderr and "\r" not in loud.stderr  # lines, no bars


def test_export_aggregate(saved):
    out = saved["dir"] / "overview.pftrace"
    run("-q", "export", saved["npz"], "-o", out, "--aggregate", "sm", "--bins", "10",
        "--wait-tags", "load", check_rc=0)
    slices, info = read_pftrace(out)
    assert len(slices) == 0
    parsed = pb.Trace()
    parsed.ParseFromString(out.read_bytes())
    names = sorted(p.track_descriptor.name for p in parsed.packet
                   if p.HasField("track_descriptor") and p.track_descriptor.HasField("counter"))
    assert names == [f"SM {s} {k}" for s in range(3) for k in ("busy", "wait")]
    bad = run("export", saved["npz"], "-o", out, "--bins", "10", check_rc=2)
    assert "--aggregate" in bad.stderr
