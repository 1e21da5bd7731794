"""``cute-prof record`` without a GPU: hand-built pools split into launches and decoded, the run
folder and its verbs, and the command's handling of the program and its output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cute_prof import layout as L
from cute_prof.cli import main as cli_main
from cute_prof.decode_slices import decode_slices, pool_slices
from cute_prof.errors import ProfileBufferError
from cute_prof.record_run import POOL_FILE, RUN_FILE, RUN_FORMAT, RUN_VERSION
from cute_prof.recorded_run import RecordedRun, short_kernel_name

ROOT = Path(__file__).resolve().parents[1]
PER_WARP = 16
T0 = 1_700_000_000_000_000_000

# one ring: the producer (warp 0) acquires and commits, the consumer (warp 4) waits, releases
SITES = [{"tag": 0, "name": "ab.producer_acquire", "op": "producer_acquire", "kind": "wait", "pipeline": 0},
         {"tag": 1, "name": "ab.producer_commit", "op": "producer_commit", "kind": "signal", "pipeline": 0},
         {"tag": 2, "name": "ab.consumer_wait", "op": "consumer_wait", "kind": "wait", "pipeline": 0},
         {"tag": 3, "name": "ab.consumer_release", "op": "consumer_release", "kind": "signal", "pipeline": 0}]
PIPELINES = [{"index": 0, "name": "ab", "cls": "PipelineTmaAsync", "stages": 2,
              "created_at": "k.py:1", "commit_arms_copies": False}]


def word(t, tag, kind):
    return L.as_int64((L.slice_record_high(tag, kind=kind) << 32) | (t & 0xFFFFFFFF))


def warp_records(start, role, iterations):
    """A warp's records: per iteration a wait region (START, SPAN) and a signal (INSTANT)."""
    out, t = [], start
    wait, signal = (0, 1) if role == "producer" else (2, 3)
    for _ in range(iterations):
        out += [word(t + 10, 0, L.SLICE_KIND_START), word(t + 50, wait, L.SLICE_KIND_SPAN),
                word(t + 90, signal, L.SLICE_KIND_INSTANT)]
        t += 100
    return out


class Pool:
    """A pooled buffer filled the way the device fills it: slices claimed in order."""

    def __init__(self, n_slices):
        self.words = np.zeros(L.pool_buffer_words(n_slices, PER_WARP), dtype=np.int64)
        self.words[:4] = L.slices_header(n_slices, PER_WARP, pooled=True)
        self.n = n_slices
        self.lost, _ = L.pool_tables(self.words, n_slices, PER_WARP)

    def claim(self, *, kernel, epoch, cta, warp, start, records, closed=True, attempted=None):
        index = int(self.words[3])
        self.words[3] += 1
        if index >= self.n:  # no slice: the close counts the warp's records as lost
            self.lost[kernel, epoch % L.POOL_LOST_EPOCHS] += attempted or len(records)
            return
        first = L.SLICES_HEADER_WORDS + index * (L.SLICE_HEADER_WORDS + PER_WARP)
        sl = self.words[first:first + L.SLICE_HEADER_WORDS + PER_WARP]
        sl[0] = start
        sl[1] = cta | (5 << L.SM_SHIFT) | (warp << L.WARP_SHIFT) | (L.SLICE_OPEN_MAGIC << L.SLICE_MAGIC_SHIFT)
        count = attempted if attempted is not None else len(records)
        if closed:
            sl[2] = count | (L.SLICE_CLOSED_MAGIC << L.SLICE_MAGIC_SHIFT)
        sl[3] = L.pool_slice_word(PER_WARP, kernel=kernel, epoch=epoch)
        stored = records[:PER_WARP]
        sl[L.SLICE_HEADER_WORDS:L.SLICE_HEADER_WORDS + len(stored)] = stored

    def launch(self, *, kernel, epoch, ctas, start, iterations=2, **claim):
        for cta in range(ctas):
            for warp, role in ((0, "producer"), (4, "consumer")):
                self.claim(kernel=kernel, epoch=epoch, cta=cta, warp=warp, start=start + cta,
                           records=warp_records(start + cta, role, iterations), **claim)


def write_run(folder: Path, pool: Pool, launches: list[dict], **extra) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / POOL_FILE, pool.words)
    kernels = [{"id": k, "name": f"kernel_cutlass_kernel_demo{k}_object_at__x", "tags": [s["name"] for s in SITES],
                "metadata": {"kernel": f"demo{k}", "sites": SITES, "pipelines": PIPELINES,
                             "barriers_recorded": True, "pool_kernel": k}} for k in (0, 1)]
    info = {"format": RUN_FORMAT, "version": RUN_VERSION, "program": ["python", "train.py"],
            "exit_reason": "exit", "cutlass_imported": True, "kernels": kernels,
            "launches": launches, "notes": [], "selection": {"kernels": []},
            "counts": {}, "unknown_launches": {}, "skipped_kernels": [], **extra}
    (folder / RUN_FILE).write_text(json.dumps(info))
    return folder


def host_launch(kernel, epoch, launch, **more):
    return {"kernel_id": kernel, "kernel": f"kernel_cutlass_kernel_demo{kernel}_object_at__x",
            "launch": launch, "epoch": epoch, "stream": 7, "host_ns": 0, "captured": False, **more}


@pytest.fixture
def run_folder(tmp_path):
    pool = Pool(12)
    pool.launch(kernel=0, epoch=1, ctas=2, start=T0)
    pool.launch(kernel=1, epoch=1, ctas=1, start=T0 + 1000)
    pool.launch(kernel=0, epoch=2, ctas=2, start=T0 + 2000, iterations=7)  # overflows its slices
    pool.launch(kernel=1, epoch=2, ctas=3, start=T0 + 3000)  # 6 warps, 2 slices left
    launches = [host_launch(0, 1, 0), host_launch(1, 1, 0), host_launch(0, 2, 1), host_launch(1, 2, 1)]
    return write_run(tmp_path / "run", pool, launches)


def test_pooled_header_round_trips_and_keeps_old_buffers_per_warp():
    assert L.split_slices_dims(L.slices_header(7, 33, pooled=True)[1]) == (7, 33, True)
    assert L.split_slices_dims(L.slices_header(7, 33)[1]) == (7, 33, False)
    assert L.MAX_SLICES < (1 << L.SLICES_POOL_BIT - 32)


def test_pool_slices_unwrap_each_kernels_epochs_in_claim_order():
    pool = Pool(8)
    for epoch in (L.field_mask(L.SLICE_EPOCH_BITS) - 1, L.field_mask(L.SLICE_EPOCH_BITS),
                  L.field_mask(L.SLICE_EPOCH_BITS) + 1, L.field_mask(L.SLICE_EPOCH_BITS) + 2):
        pool.claim(kernel=3, epoch=epoch, cta=0, warp=0, start=T0, records=warp_records(T0, "producer", 1))
    pool.claim(kernel=1, epoch=5, cta=0, warp=0, start=T0, records=warp_records(T0, "producer", 1))
    found = pool_slices(pool.words)
    top = L.field_mask(L.SLICE_EPOCH_BITS)
    assert found["epoch"].tolist() == [top - 1, top, top + 1, top + 2, 5]
    assert found["kernel"].tolist() == [3, 3, 3, 3, 1]


def test_decode_of_a_whole_pool_counts_the_lost_table(run_folder):
    words = np.load(run_folder / POOL_FILE)
    trace = decode_slices(words, [s["name"] for s in SITES])
    overflow = 4 * (7 * 3 - PER_WARP)  # kernel 0's second launch: 4 warps, 21 records each
    no_slice = 4 * 6  # 2 slices left for kernel 1's last launch: its other 4 warps found none
    assert trace.overflow == overflow + no_slice
    assert trace.metadata["slices_opened"] == 12


def test_launch_table_from_the_headers(run_folder):
    run = RecordedRun(run_folder)
    rows = run.launches
    assert [(r.kernel_id, r.epoch, r.launch) for r in rows] == [(0, 1, 0), (1, 1, 0), (0, 2, 1), (1, 2, 1)]
    first, _, third, last = rows
    assert (first.slices, first.ctas, first.records, first.lost) == (4, 2, 24, 0)
    assert first.start_ns == T0 and first.end_ns == T0 + 1 + 190
    assert (third.records, third.lost) == (4 * PER_WARP, 4 * (21 - PER_WARP))
    assert (last.slices, last.ctas, last.lost, last.attempted) == (2, 1, 24, 36)
    assert all(not r.replay and r.stream == 7 for r in rows)


def test_a_launch_decodes_alone_named_like_autoprofile(run_folder):
    run = RecordedRun(run_folder)
    row = run.select(kernel="demo0", launch=1)[0]
    trace = run.trace(row)
    assert trace.attempted == row.attempted and trace.overflow == row.lost
    assert trace.metadata["run_launch"]["launch"] == 1
    names = {trace.tag_names[t] for t in np.unique(trace.events["tag"])}
    assert names == {s["name"] for s in SITES}
    assert trace.metadata["autoprof"]["warps_per_cta"] == 5


def test_selection_errors_name_what_is_there(run_folder):
    run = RecordedRun(run_folder)
    with pytest.raises(ProfileBufferError, match="demo0"):
        run.select(kernel="nope")
    with pytest.raises(ProfileBufferError, match="matches no recorded launch"):
        run.select(launch="9")
    with pytest.raises(ProfileBufferError, match="N, A:B or N,M"):
        run.select(launch="x")
    assert [r.launch for r in run.select(kernel="demo1", launch="0:5")] == [0, 1]
    assert [r.launch for r in run.select(launch="1")] == [1, 1]


def test_graph_replays_are_numbered_by_epoch(tmp_path):
    pool = Pool(8)
    pool.launch(kernel=0, epoch=1, ctas=1, start=T0)
    pool.launch(kernel=0, epoch=2, ctas=1, start=T0 + 1000)  # a replay the host never saw
    run = RecordedRun(write_run(tmp_path / "g", pool, [host_launch(0, 1, 0, captured=True)]))
    assert [r.replay for r in run.launches] == [True, True]
    assert "replay epoch 2" in run.launches[1].label()


def test_summary_verb_lists_kernels_and_launches(run_folder, capsys):
    assert cli_main(["-q", "summary", str(run_folder)]) == 0
    text = capsys.readouterr().out
    assert "demo0" in text and "demo1" in text and "launch 1" in text
    assert cli_main(["-q", "summary", str(run_folder), "--json", "--kernel", "demo1"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [k["launches"] for k in data["kernels"]] == [2]
    assert sum(r["lost"] for r in data["launches"]) == 24


def test_export_and_report_read_the_folder(run_folder, tmp_path, capsys):
    from cute_prof.export.pftrace_reader import read_pftrace_slices

    out = tmp_path / "run.pftrace"
    assert cli_main(["-q", "export", str(run_folder), "-o", str(out), "--no-derived"]) == 0
    slices = read_pftrace_slices(out)
    # every wait and signal of every launch; kernel 0's second launch keeps 16 of 21 words
    # a warp: 5 iterations and a START
    waits = (4 * 2) + (2 * 2) + (4 * 5) + (2 * 2)
    assert (~slices["instant"]).sum() == waits and slices["instant"].sum() == waits
    assert len({t.split("/")[0] for t in slices["track"]}) == 4  # a group per launch
    page = tmp_path / "run.html"
    assert cli_main(["-q", "report", str(run_folder), "-o", str(page)]) == 0
    html = page.read_text()
    assert html.count("Per-tag statistics") == 2 and "demo1 launch 1" in html
    assert cli_main(["-q", "export", "nonexistent_dir_or_file.npz", "-o", str(out)]) == 2
    assert cli_main(["-q", "export", str(run_folder), "--kernel", "zzz", "-o", str(out)]) == 2
    assert "matches no recorded kernel" in capsys.readouterr().err


def test_short_kernel_name_drops_the_dsl_mangling():
    name = ("kernel_cutlass_kernel_flash_attncuteflash_fwd_sm90FlashAttentionForwardSm90_object"
            "_at__Tensorgmemoi64i64i641_0")
    assert short_kernel_name(name) == "flash_attncuteflash_fwd_sm90FlashAttentionForwardSm90"


# ------------------------------------------------------------------ the command
def test_the_program_runs_untouched_and_keeps_its_exit_status(tmp_path):
    proc = _cli(tmp_path, "-o", "out", "--", "prog.py", "3", "a b", stdin="hello\n")
    assert proc.returncode == 3
    assert proc.stdout == "out ['3', 'a b']\nin hello\n"
    assert proc.stderr.startswith("err\n")
    assert "nothing recorded: the program never imported cutlass" in proc.stderr
    assert json.loads((tmp_path / "out" / RUN_FILE).read_text())["program"][-2:] == ["3", "a b"]


def _write_prog(tmp_path: Path) -> None:
    (tmp_path / "prog.py").write_text(
        "import sys, pathlib\n"
        "pathlib.Path('ran').write_text('yes')\n"
        "print('out', sys.argv[1:]); print('err', file=sys.stderr, flush=True)\n"
        "print('in', sys.stdin.read().strip())\n"
        "sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 0)\n")


def _cli(tmp_path, *args, stdin=""):
    _write_prog(tmp_path)
    return subprocess.run([sys.executable, "-m", "cute_prof", "record", *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, input=stdin,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_bad_output_is_refused_before_the_program_starts(tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("earlier")
    (tmp_path / "file").write_text("a file")
    for output, message in (("full", "not empty"), ("file", "not a folder"),
                            ("/proc/no/such", "cannot write")):
        proc = _cli(tmp_path, "-o", output, "--", "prog.py")
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr
        assert not (tmp_path / "ran").exists()
    assert _cli(tmp_path, "-o", "full", "--force", "--", "prog.py").returncode == 0
    assert (tmp_path / "ran").exists()


def test_options_are_checked(tmp_path):
    assert _cli(tmp_path, "--").returncode == 2
    assert _cli(tmp_path, "--launch-count", "0", "--", "prog.py").returncode == 2
    assert _cli(tmp_path, "--max-memory", "lots", "--", "prog.py").returncode == 2
    proc = _cli(tmp_path, "--", "no_such_program_here")
    assert proc.returncode == 2 and "cannot run" in proc.stderr


def test_a_default_output_folder_is_never_reused(tmp_path):
    for n in (1, 2):
        assert _cli(tmp_path, "--", "prog.py").returncode == 0
        assert (tmp_path / f"cute-prof-run-{n}" / RUN_FILE).exists()


STUCK = """
import pathlib, signal, sys, time
if "--stuck" in sys.argv:  # a program that ignores Ctrl-C, as one waiting on a hung kernel does
    signal.signal(signal.SIGINT, signal.SIG_IGN)
pathlib.Path("ready").write_text("1")
time.sleep(120)
"""


@pytest.mark.parametrize("stuck", [False, True])
def test_ctrl_c_saves_the_run(tmp_path, stuck):
    """Ctrl-C (to the whole group, as a terminal sends it): a program that exits saves as it
    exits; one that does not is saved by its watchdog, then killed."""
    import signal
    import time

    (tmp_path / "prog.py").write_text(STUCK)
    proc = subprocess.Popen([sys.executable, "-m", "cute_prof", "record", "-o", "out",
                             "--grace", "1", "--", "prog.py", *(["--stuck"] if stuck else [])],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    deadline = time.monotonic() + 60
    while not (tmp_path / "ready").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    info = json.loads((tmp_path / "out" / RUN_FILE).read_text())
    expected = "interrupted while the program was stuck" if stuck else "uncaught KeyboardInterrupt"
    assert info["exit_reason"] == expected
    assert ("did not exit 1 s after the interrupt" in err) == stuck


def test_merge_puts_a_launch_range_inside_the_torch_trace(run_folder, tmp_path):
    """The profiler also saw launches left plain: each recorded launch lands on its own
    kernel's slice (profiler time = %globaltimer - T0 + 1 ms)."""
    run = RecordedRun(run_folder)
    offset = 1_000_000 - T0
    slices, plain = [], 0
    for row in run.launches:  # a plain launch of the same kernel before each recorded one
        for start, end in ((row.start_ns - 700, row.start_ns - 500), (row.start_ns - 5, row.end_ns + 5)):
            slices.append({"ph": "X", "cat": "kernel", "name": row.kernel,
                           "ts": (start + offset) / 1000, "dur": (end - start) / 1000})
        plain += 1
    (tmp_path / "torch.json").write_text(json.dumps({"traceEvents": slices}))
    out = tmp_path / "merged.json"
    assert cli_main(["-q", "export", str(run_folder), "--torch", str(tmp_path / "torch.json"),
                     "-o", str(out)]) == 0
    merged = json.loads(out.read_text())
    # (the file keeps the offset as a JSON number: a double, exact to 256 ns at this size)
    assert abs(merged["cute_prof_merge"]["offset_ns"] - offset) <= 256 and plain == len(run.launches)
    launch_of = [e["args"]["cute_prof_launch"] for e in merged["traceEvents"]
                 if e.get("cat") == "kernel" and "cute_prof_launch" in e.get("args", {})]
    assert len(launch_of) == len(run.launches)  # the recorded slices, not the plain ones


def test_the_programs_torch_profiler_trace_is_noted(tmp_path):
    (tmp_path / "t.py").write_text("import torch\nfrom torch.profiler import profile\n"
                                   "with profile() as p:\n    torch.ones(2)\n"
                                   "p.export_chrome_trace('torch.json')\n")
    assert _cli(tmp_path, "-o", "o", "--", "t.py").returncode == 0
    assert RecordedRun(tmp_path / "o").torch_trace() == tmp_path / "torch.json"


def test_an_unclosed_slice_keeps_what_it_wrote(tmp_path):
    pool = Pool(4)
    pool.launch(kernel=0, epoch=1, ctas=1, start=T0, closed=False)  # no close: a crash
    (row,) = RecordedRun(write_run(tmp_path / "u", pool, [host_launch(0, 1, 0)])).launches
    assert row.records == row.attempted == 2 * 6 and row.lost == 0
