"""The report page: self-contained HTML with every section, checked in headless Chromium."""

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cute_prof.analysis.roles import load_role_spec
from cute_prof.report import write_report
from cute_prof.storage import load_trace

ROOT = Path(__file__).parent.parent
GEMM = ROOT / "examples" / "traces" / "ws_gemm_256x1024x4096_h200.json.gz"
SPEC = ROOT / "examples" / "ws_gemm_roles.json"


def browser():
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    out = tmp_path_factory.mktemp("report") / "report.html"
    trace = load_trace(GEMM)
    other = load_trace(ROOT / "cute_prof" / "data" / "example_recording.npz")
    write_report(trace, out, spec=load_role_spec(SPEC), compare=other, title="ws_gemm H200")
    return out


def test_report_has_every_section_and_needs_no_network(page):
    text = page.read_text()
    for section in ("Per-tag statistics", "Who waited on what", "Timeline", "Region durations",
                    "Before / after", "bound by the consumers", "ws.wait_full"):
        assert section in text, section
    assert text.count("data:image/png;base64,") == 2
    assert "http://" not in text and "https://" not in text and "<script" not in text


def test_cli_report(tmp_path):
    out = tmp_path / "r.html"
    done = subprocess.run([sys.executable, "-m", "cute_prof.cli", "-q", "report", str(GEMM),
                           "-o", str(out), "--roles", str(SPEC)], capture_output=True, text=True,
                          timeout=180)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(out) and "Who waited on what" in out.read_text()


@pytest.mark.skipif(browser() is None, reason="no Chromium here (CI installs Debian's)")
def test_report_renders_in_headless_chromium(page, tmp_path):
    shot = tmp_path / "shot.png"
    common = [browser(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
    dom = subprocess.run(common + ["--dump-dom", page.as_uri()], capture_output=True, text=True,
                         timeout=120)
    assert "<title>ws_gemm H200</title>" in dom.stdout and "Before / after" in dom.stdout
    subprocess.run(common + [f"--screenshot={shot}", "--window-size=1280,2400", page.as_uri()],
                   capture_output=True, timeout=120)
    import matplotlib.image

    pixels = matplotlib.image.imread(shot)
    assert pixels.shape[0] >= 2000 and pixels.shape[1] >= 1200
    assert np.std(pixels[..., :3]) > 0.05, "the screenshot is blank"
    if (ROOT / "docs").is_dir() and "CUTE_PROF_SAVE_SCREENSHOT" in __import__("os").environ:
        shutil.copy(shot, ROOT / "docs" / "report_screenshot.png")
