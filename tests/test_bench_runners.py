"""bench/ explains itself: one runner per question, each with --help listing its parts, every
part's script and latest result committed, and a part's own options reachable through it."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUNNERS = ["record_cost", "kernel_cost", "host_speed", "analysis_speed", "whatif"]


def load(name):
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "bench" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # a dataclass looks its module up
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(ROOT / "bench"))


def bench(*args):
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("name", RUNNERS)
def test_runner_help_lists_parts_that_exist(name):
    parts = load(name).PARTS
    assert parts
    result = bench(f"bench/{name}.py", "--help")
    assert result.returncode == 0, result.stderr
    for part in parts:
        assert (ROOT / part.script).is_file(), part.script
        assert (ROOT / part.result).exists(), part.result
        assert part.name in result.stdout and part.script in result.stdout
    readme = (ROOT / "bench" / "README.md").read_text()
    assert f"bench/{name}.py" in readme or f"`{name}.py`" in readme


def test_runner_without_a_part_fails_and_an_unknown_part_is_refused():
    assert bench("bench/host_speed.py").returncode == 2
    result = bench("bench/host_speed.py", "nothing")
    assert result.returncode == 2 and "invalid choice" in result.stderr


@pytest.mark.parametrize("runner,part", [("host_speed", "decode"), ("host_speed", "ranks"),
                                         ("analysis_speed", "scale"), ("analysis_speed", "whatif")])
def test_a_cpu_part_gets_its_own_options(runner, part):
    result = bench(f"bench/{runner}.py", part, "--help")
    assert result.returncode == 0, result.stderr
    assert "usage:" in result.stdout and "--" in result.stdout


def test_a_cpu_part_runs_through_its_runner(tmp_path):
    result = bench("bench/analysis_speed.py", "whatif", "tests/data/gemm_traces/whatif_base.npz",
                   "--copies", "2")
    assert result.returncode == 0, result.stderr
    assert "18,704 records" in result.stdout  # two copies of the 9,352-record fixture
    assert "16 units" in result.stdout  # 8 CTAs, twice


def _whatif_table(rows):
    """A table in whatif_check.py's layout with these (kernel, what-if, error) rows."""
    head = ("| kernel | base trace | what-if | predicted | interval | measured | error (pp) |\n"
            "|---|---|---|---:|---|---:|---:|\n")
    body = "".join(f"| {k} | zero-edit | {w} {{\"depth\": 2}} | +1% | [0, 2] | +1% | {e} |\n"
                   for k, w, e in rows)
    return "# title\n\n" + head + body + "\nSpearman ...\n"


def test_whatif_runs_sorts_rows_into_within_biased_and_noisy(tmp_path, capsys):
    runs = [[("k", "a", "+0.50"), ("k", "b", "-8.00"), ("k", "c", "+6.00"), ("k", "d", "-"),
             ("k", "e", "+4.00")],
            [("k", "a", "-1.00"), ("k", "b", "-7.50"), ("k", "c", "-5.00"), ("k", "d", "-")]]
    paths = []
    for i, rows in enumerate(runs):
        paths.append(tmp_path / f"run{i}.md")
        paths[-1].write_text(_whatif_table(rows))
    module = load("whatif_runs")
    assert module.table_errors(paths[0]) == {("k", "zero-edit", "a"): 0.5,
                                             ("k", "zero-edit", "b"): -8.0,
                                             ("k", "zero-edit", "c"): 6.0,
                                             ("k", "zero-edit", "e"): 4.0}
    assert module.main([str(p) for p in paths] + ["--labels", "r0,r1"]) == 0
    out = capsys.readouterr().out
    verdicts = {line.split("|")[3].strip(): line.split("|")[-2].strip()
                for line in out.splitlines() if line.startswith("| k |")}
    # a row one run lacks (e: a part that run skipped) shows "-" there, judged on the rest
    assert verdicts == {"a": "within every run", "b": "biased: under-predicts every run",
                        "c": "noisy: moves run to run", "e": "biased: over-predicts every run"}
    assert "| k | zero-edit | e | +4.00 | - |" in out
    assert ("4 rows; per run, within 3 pp of its rows: r0 1 of 4, r1 1 of 3; mean absolute "
            "error: r0 4.62 pp, r1 4.50 pp; all runs: 2 of 7 within, 4.57 pp") in out


def test_the_one_command_what_if_check_runs_every_part_the_check_reads():
    """`bash bench/whatif_all_gpu.sh` is the check in one command (issue #27): by default it
    runs a part for every zero-edit entry of the check, the record chain the model takes
    its record time from and the cluster launch's gap, then the host half on them."""
    path = ROOT / "bench" / "whatif_all_gpu.sh"
    script = path.read_text()
    assert subprocess.run(["bash", "-n", str(path)]).returncode == 0
    default = re.search(r'^RUN_PARTS=\$\{PARTS:-([^}]*)\}', script, re.M).group(1).split()
    branches = set(re.findall(r"^\s+(\w+)\) part (\w+) ", script, re.M))
    assert all(name == folder for name, folder in branches)  # each part writes its own folder
    check_module = load("whatif_check")
    entries = {e.folder for e in check_module.ENTRIES if e.base_trace == "zero-edit"}
    # and the GPU's own measurements the model reads: one record's cost, a cluster's launch
    measured = {Path(f).parts[0] for f in (check_module.CHAIN_FILE, check_module.CLUSTER_GAP_FILE)}
    assert entries | measured == set(default)
    assert set(default) <= {name for name, _ in branches}
    check = re.search(r'^if \[ "\$\{CHECK:-1\}" = 1 \]; then.*\n(.*)\nfi', script, re.M).group(1)
    assert 'bench/whatif_check.py "$PARTS_DIR" --only $RUN_PARTS' in check
