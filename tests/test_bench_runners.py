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
    """The bench script ``name``: a runner in bench/ or a part in bench/parts/."""
    sys.path.insert(0, str(ROOT / "bench"))
    path = next(p for p in (ROOT / "bench" / f"{name}.py", ROOT / "bench" / "parts" / f"{name}.py")
                if p.is_file())
    try:
        spec = importlib.util.spec_from_file_location(f"bench_{name}", path)
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
                                         ("analysis_speed", "scale"), ("analysis_speed", "whatif"),
                                         ("whatif", "check"), ("whatif", "cluster-gap")])
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


def test_bench_stays_within_its_budget():
    """Issue #64: at most 12 runners at bench/'s top level, at most 4,000 lines of Python; 125
    more for the record command's run-folder bench (#65's bound on a 50 M-record run) and 45
    for the light-cost part (#66's table), which replaced the zero-edit cost part."""
    runners = [p for p in (ROOT / "bench").iterdir() if p.suffix in (".py", ".sh")]
    assert len(runners) <= 12, sorted(p.name for p in runners)
    lines = sum(len(p.read_text().splitlines()) for p in (ROOT / "bench").rglob("*.py"))
    assert lines <= 4170


def test_the_one_command_what_if_check_runs_every_part_the_check_reads():
    """`bash bench/gpu.sh` is the check in one command (issue #27): by default it runs a
    part for every entry of the check, the record chain the model takes its record time
    from and the cluster launch's gap, then the host half on them."""
    path = ROOT / "bench" / "gpu.sh"
    script = path.read_text()
    assert subprocess.run(["bash", "-n", str(path)]).returncode == 0
    default = re.search(r'^RUN_PARTS=\$\{PARTS:-([^}]*)\}', script, re.M).group(1).split()
    branches = set(re.findall(r"^\s+(\w+)\) part (\w+) ", script, re.M))
    assert all(name == folder for name, folder in branches)  # each part writes its own folder
    check_module = load("whatif_check")
    entries = {e.folder for e in check_module.ENTRIES}
    # and the GPU's own measurements the model reads: one record's cost, a cluster's launch
    measured = {Path(f).parts[0] for f in (check_module.CHAIN_FILE, check_module.CLUSTER_GAP_FILE)}
    assert entries | measured == set(default)
    assert set(default) <= {name for name, _ in branches}
    check = re.search(r'^if \[ "\$\{CHECK:-1\}" = 1 \]; then.*\n(.*)\nfi', script, re.M).group(1)
    assert 'bench/whatif.py check "$PARTS_DIR" --only $RUN_PARTS' in check
