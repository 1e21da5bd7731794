"""Flight recorder on real broken kernels. Hanging and trapping kernels run in a child
process (tests/gpu/flight_kernels.py) that is killed: a hung kernel never outlives a test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from gpu_required import require_gpu  # noqa: E402

torch = require_gpu("cutlass")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import flight_kernels as F  # noqa: E402

CHILD_LIMIT_S = 90  # compile + run; the child is killed after this whatever it does


def figure(text: str) -> None:
    path = os.environ.get("CUTE_PROF_FIGURES")
    if path:
        with open(path, "a") as fh:
            fh.write(text + "\n")


def run_child(*args):
    """Start the child, read its one FLIGHT line, then kill it (a hung kernel keeps it alive)."""
    proc = subprocess.Popen([sys.executable, os.path.join(HERE, "flight_kernels.py"), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + CHILD_LIMIT_S
    result = None
    try:
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            if line.startswith("FLIGHT "):
                result = json.loads(line[len("FLIGHT "):])
                break
        if result is not None and not result["hung"]:
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))  # a finished child exits itself
    except subprocess.TimeoutExpired:
        pass
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
        err = proc.stderr.read()
    assert result is not None, f"child gave no report (rc={proc.returncode}); stderr:\n{err[-3000:]}"
    result["returncode"] = proc.returncode
    return result


@pytest.mark.parametrize("fence", [False, True])
def test_hang_watchdog_names_stuck_warps(fence):
    ctas, k_tiles, stop_k, timeout = 64, 64, 37, 2.0
    out = run_child("hang", "--ctas", str(ctas), "--k-tiles", str(k_tiles), "--stop-k", str(stop_k),
                    "--timeout", str(timeout), *(["--fence"] if fence else []))
    print(out["report"])
    figure(f"flight hang (fence={fence}): report {out['elapsed_s']:.2f} s after the watchdog began (timeout "
           f"{timeout} s; waited {out['waited_s']:.2f} s, report built in {out['report_s']:.2f} s; "
           f"{out['total_s']:.2f} s after the launch call)\n{out['report']}")
    assert out["hung"] is True
    assert out["elapsed_s"] <= timeout + 1.0
    groups = {(g["open"], g["name"], g["payload"]): g for g in out["groups"]}
    wait = groups[(True, "wait_full", stop_k)]
    assert wait["warps"] == ctas * F.CONSUMER_WARPS and wait["ctas"] == ctas and wait["depth"] == 1
    assert wait["since_min_ns"] > 0.5e9  # open since (about) the launch, measured in seconds
    left = groups[(False, "issue_tma", stop_k - 1)]
    assert left["warps"] == ctas and "entered nothing" in left["text"]
    assert len(out["groups"]) == 2
    # normal records of every finished k-tile reached the mapped buffer
    expected = ctas * stop_k * (1 + F.CONSUMER_WARPS)
    assert out["records"] == expected and out["incomplete"] == 0


@pytest.mark.parametrize("fence", [False, True])
def test_trap_decodes_every_record_and_names_open_region(fence):
    ctas = 1
    out = run_child("trap", "--ctas", str(ctas), *(["--fence"] if fence else []))
    print(out["report"])
    figure(f"flight trap (fence={fence}): {out['records']} records decoded, error {out['error']}\n{out['report']}")
    assert out["error"] is not None and "rror" in out["error"]  # the CUDA error was re-raised
    assert out["records"] == ctas * F.WARPS_PER_CTA * F.TRAP_RECORDS_PER_WARP
    assert out["incomplete"] == 0
    doomed = [g for g in out["groups"] if g["open"]]
    assert len(doomed) == 1 and doomed[0]["name"] == "doomed" and doomed[0]["payload"] == 7
    assert doomed[0]["warps"] == ctas * F.WARPS_PER_CTA


def test_healthy_pipeline_finishes_with_every_position_closed():
    out = run_child("ok", "--ctas", "132", "--k-tiles", "64", "--timeout", "20")
    print(out["report"])
    assert out["hung"] is False and out["returncode"] == 0
    assert out["records"] == 132 * 64 * (1 + F.CONSUMER_WARPS) and out["incomplete"] == 0
    assert all(not g["open"] for g in out["groups"])
    names = {(g["name"], g["payload"]) for g in out["groups"]}
    assert names == {("issue_tma", 63), ("mainloop", 0)}


def test_illegal_address_decodes_every_record_and_names_open_region():
    ctas = 2
    out = run_child("illegal", "--ctas", str(ctas))
    print(out["report"])
    figure(f"flight illegal address: {out['records']} records decoded, error {out['error']}\n{out['report']}")
    assert out["error"] is not None and "illegal" in out["error"].lower()
    assert out["records"] == ctas * F.WARPS_PER_CTA * F.TRAP_RECORDS_PER_WARP and out["incomplete"] == 0
    doomed = [g for g in out["groups"] if g["open"]]
    assert len(doomed) == 1 and doomed[0]["name"] == "doomed" and doomed[0]["payload"] == 7
    assert doomed[0]["warps"] == ctas * F.WARPS_PER_CTA


def test_profile_session_watchdog_reports_hang_within_timeout(tmp_path):
    ctas, k_tiles, stop_k, timeout = 32, 64, 21, 2.0
    trace = tmp_path / "hang_partial.json"
    out = run_child("session-hang", "--ctas", str(ctas), "--k-tiles", str(k_tiles), "--stop-k", str(stop_k),
                    "--timeout", str(timeout), "--trace", str(trace))
    print(out["report"])
    figure(f"profile_session(watchdog={timeout}): report {out['elapsed_s']:.2f} s after the block ended, KernelHangError "
           f"(partial trace written) after {out['total_s']:.2f} s\n{out['report']}")
    assert out["hung"] is True and "os._exit" in out["message"]
    assert out["elapsed_s"] <= timeout + 1.0
    groups = {(g["open"], g["name"], g["payload"]): g for g in out["groups"]}
    wait = groups[(True, "wait_full", stop_k)]
    assert wait["warps"] == ctas * F.CONSUMER_WARPS and wait["ctas"] == ctas
    assert groups[(False, "issue_tma", stop_k - 1)]["warps"] == ctas
    assert out["records"] == ctas * stop_k * (1 + F.CONSUMER_WARPS) and out["incomplete"] == 0
    assert out["trace_written"] and json.load(open(trace))  # the partial trace parses


def test_profile_session_fault_reports_then_reraises(tmp_path):
    ctas = 4
    trace = tmp_path / "fault_partial.json"
    out = run_child("session-illegal", "--ctas", str(ctas), "--trace", str(trace))
    print(out["report"])
    assert out["error"] is not None and "illegal" in out["error"].lower()
    assert out["records"] == ctas * F.WARPS_PER_CTA * F.TRAP_RECORDS_PER_WARP
    assert any("'doomed' payload=7" in note for note in out["notes"])
    assert out["trace_written"]
