"""The README and the guide in docs/ stay usable: every Python block parses, every relative
link (and anchor) resolves, and every figure in a table row that links to a committed result
appears in that result file."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PYTHON = {"python", "py", "python3", "pycon"}
# fence languages whose blocks are not Python: shell, output, data
NOT_PYTHON = {"bash", "sh", "shell", "console", "text", "txt", "json", "output", "diff"}
FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([\w+-]*)[^\n]*$")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FIGURE = re.compile(r"(?<![\w.])(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+\.\d+)(?![\w.])")


def markdown_files() -> list[Path]:
    return [ROOT / "README.md", ROOT / "bench" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def code_blocks(text: str) -> list[tuple[int, str, str]]:
    """``(first line number, fence language, body)`` of every fenced block."""
    blocks, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = m.group(1), m.group(2), m.group(3).lower()
        body, j = [], i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence):
            body.append(lines[j][len(indent):] if lines[j].startswith(indent) else lines[j])
            j += 1
        if j == len(lines):
            raise AssertionError(f"line {i + 1}: code fence never closed")
        blocks.append((i + 1, lang, "\n".join(body)))
        i = j + 1
    return blocks


def prose(text: str, *, keep_code: bool = False) -> str:
    """The text without fenced blocks, and without inline code unless ``keep_code`` (links
    inside code are not links)."""
    out, inside = [], None
    for line in text.splitlines():
        m = FENCE.match(line)
        if m and inside is None:
            inside = m.group(2)
            continue
        if inside is not None:
            if line.strip().startswith(inside):
                inside = None
            continue
        out.append(line if keep_code else re.sub(r"`[^`]*`", "", line))
    return "\n".join(out)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[`*_]|<[^>]+>", "", heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in prose(path.read_text(), keep_code=True).splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def python_problems(text: str) -> list[str]:
    problems = []
    for line, lang, body in code_blocks(text):
        if not lang:
            problems.append(f"line {line}: code block without a language")
        elif lang in PYTHON:
            try:
                ast.parse(body)
            except SyntaxError as error:
                problems.append(f"line {line}: Python block does not parse: {error}")
        elif lang not in NOT_PYTHON:
            problems.append(f"line {line}: unknown fence language {lang!r}")
    return problems


def link_problems(path: Path, text: str | None = None) -> list[str]:
    problems = []
    text = path.read_text() if text is None else text
    for target in LINK.findall(prose(text)):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            problems.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            problems.append(f"{target}: no heading with that anchor in {dest.name}")
    return problems


def figure_problems(path: Path, text: str | None = None) -> list[str]:
    """In every table row that links to files under bench/, each figure (a decimal number, or
    an integer written with thousands separators) must appear in one of the linked files."""
    problems = []
    text = path.read_text() if text is None else text
    for line in prose(text).splitlines():
        if not line.lstrip().startswith("|"):
            continue
        targets = [t.partition("#")[0] for t in LINK.findall(line)]
        files = [(path.parent / t).resolve() for t in targets if t and ":" not in t]
        files = [f for f in files if f.is_file() and "bench" in f.relative_to(ROOT).parts[:1]]
        if not files:
            continue
        contents = " ".join(f.read_text(errors="replace") for f in files)
        cells = LINK.sub("", line)  # the figures, without the link targets
        for figure in FIGURE.findall(cells):
            if figure not in contents and figure.replace(",", "") not in contents:
                problems.append(f"{figure!r} is not in {', '.join(str(f.name) for f in files)}: {line.strip()}")
    return problems


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: p.name)
def test_python_blocks_parse(path):
    assert python_problems(path.read_text()) == []


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: p.name)
def test_relative_links_resolve(path):
    assert link_problems(path) == []


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: p.name)
def test_figures_are_in_the_linked_results(path):
    assert figure_problems(path) == []


def test_the_guide_has_its_pages():
    names = {p.name for p in (ROOT / "docs").glob("*.md")}
    for page in ("device-ops.md", "host-api.md", "formats.md", "timelines.md", "analysis.md",
                 "flight-recorder.md", "performance.md", "architecture.md"):
        assert page in names
    assert len((ROOT / "README.md").read_text().splitlines()) <= 250


def test_the_checks_catch_what_they_should(tmp_path):
    page = tmp_path / "page.md"
    (tmp_path / "there.md").write_text("# A heading\n\n## Second `one`\n")
    text = "\n".join([
        "```python", "def f(:", "```",
        "```bash", "def f(:", "```",
        "```", "x = 1", "```",
        "[ok](there.md) [ok](there.md#a-heading) [ok](there.md#second-one) [web](https://x.org)",
        "[bad](missing.md) [bad anchor](there.md#nowhere) `[in code](missing2.md)`",
    ])
    page.write_text(text)
    problems = python_problems(text)
    assert len(problems) == 2
    assert "does not parse" in problems[0] and "without a language" in problems[1]
    assert link_problems(page) == ["missing.md: no such file",
                                   "there.md#nowhere: no heading with that anchor in there.md"]


def test_figure_check_reads_the_linked_file(tmp_path):
    bench = ROOT / "bench" / "results" / "record_cost" / "README.md"
    rel = Path("..") / bench.relative_to(ROOT)
    page = ROOT / "docs" / "x.md"  # not written: the check takes the text
    good = f"| a | 0.66 ns, 1,081,344 | [r]({rel.as_posix()}) |"
    bad = f"| a | 0.6543 ns | [r]({rel.as_posix()}) |"
    assert figure_problems(page, good) == []
    assert len(figure_problems(page, bad)) == 1
