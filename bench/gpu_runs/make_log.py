"""Turn one GPU pass ($OUT of bench/gpu_runs/run_gpu.sh) into the committed markdown log."""
import os
import sys
import xml.etree.ElementTree as ET

out = sys.argv[1]
command = sys.argv[2] if len(sys.argv) > 2 else "bash bench/gpu_runs/run_gpu.sh"


def read(name, tail=None):
    path = os.path.join(out, name)
    if not os.path.exists(path):
        return None
    with open(path, errors="replace") as fh:
        lines = fh.read().splitlines()
    return "\n".join(lines[-tail:] if tail else lines)


parts = ["# GPU run log", "", f"Command: `source .gpu/setup.sh && {command}`", ""]
info = read("info.log")
if info:
    parts += ["## Machine", "", "```", info, "```", ""]
junit = os.path.join(out, "junit.xml")
if os.path.exists(junit):
    root = ET.parse(junit).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    parts += ["## GPU test suite (`python -m pytest -v tests/gpu tests/test_seed_compat.py`)", "",
              f"tests {suite.get('tests')}, failures {suite.get('failures')}, errors {suite.get('errors')}, "
              f"skipped {suite.get('skipped')}, time {float(suite.get('time')):.1f} s", "",
              "| test | result | seconds |", "|---|---|---|"]
    for case in suite.iter("testcase"):
        result = "FAIL" if case.find("failure") is not None or case.find("error") is not None else (
            "skip" if case.find("skipped") is not None else "pass")
        parts.append(f"| {case.get('classname').split('.')[-1]}::{case.get('name')} | {result} | "
                     f"{float(case.get('time')):.2f} |")
    parts.append("")
for name, title in [("figures.txt", "Figures measured by the GPU tests"),
                    ("sanitize.log", "compute-sanitizer memcheck on the overflow cases"),
                    ("example.log", "python -m cute_prof.example"),
                    ("overhead.log", "python bench/overhead.py, three times in a row"),
                    ("gemm.log", "python bench/ws_gemm_bench.py"),
                    ("gemmprof.log", "python examples/ws_gemm_profile.py (2048x2048x8192, level 2)"),
                    ("gemmbig.log", "python examples/ws_gemm_profile.py --mnk 8192,8192,8192"),
                    ("gemm128.log", "python examples/ws_gemm_profile.py --tile-n 128 (6 stages)"),
                    ("gemmsmall.log", "python examples/ws_gemm_profile.py (small run, committed trace)")]:
    text = read(name, tail=80)
    if text is not None:
        parts += [f"## {title}", "", "```", text, "```", ""]
summary = read("summary.txt")
if summary:
    parts += ["## Steps", "", "```", summary, "```", ""]
with open(os.path.join(out, "GPU_LOG.md"), "w") as fh:
    fh.write("\n".join(parts))
