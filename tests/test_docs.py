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
    good = f"| a | 0.66 ns, 8192 | [r]({rel.as_posix()}) |"
    bad = f"| a | 0.6543 ns | [r]({rel.as_posix()}) |"
    assert figure_problems(page, good) == []
    assert len(figure_problems(page, bad)) == 1


# ---- every page opens with its task and a snippet that runs ----------------------------

GPU_ONLY = "<!-- gpu-only"  # an HTML comment right above a fence: compile-check it, don't run
OPENING_WITHIN = 14  # the opening snippet's fence starts within this many lines of the top
MAX_PAGE_LINES = 250


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def opening_snippet(text: str) -> tuple[int, str, bool]:
    """``(line, body, gpu_only)`` of the page's first fenced block, which must be Python."""
    blocks = code_blocks(text)
    assert blocks, "the page has no code block"
    line, lang, body = blocks[0]
    assert lang in PYTHON, f"line {line}: the page's first block is {lang or 'untyped'}, not Python"
    assert line <= OPENING_WITHIN, f"the opening snippet starts on line {line}, not near the top"
    above = text.splitlines()[line - 2].strip() if line > 1 else ""
    return line, body, above.startswith(GPU_ONLY)


def import_problems(body: str) -> list[str]:
    """A GPU-only snippet imports only real names: every ``cute_prof`` module, name and
    ``cute_prof.X`` attribute it uses exists (other packages: only where installed)."""
    import importlib
    import importlib.util

    problems = []
    tree = ast.parse(body)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules = [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            modules = [(node.module, [alias.name for alias in node.names])]
        else:
            continue
        for module, names in modules:
            top = module.split(".")[0]
            if top != "cute_prof":
                if importlib.util.find_spec(top) is None:
                    continue  # an optional package that is not installed here
                if top in {"flash_attn", "quack"}:
                    continue  # importing them needs what only a GPU machine has
            try:
                mod = importlib.import_module(module)
            except ImportError as error:
                problems.append(f"import {module}: {error}")
                continue
            for name in names:
                if not hasattr(mod, name):
                    try:
                        importlib.import_module(f"{module}.{name}")
                    except ImportError:
                        problems.append(f"{module} has no {name}")
    import cute_prof

    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id == "cute_prof" and not hasattr(cute_prof, node.attr)):
            problems.append(f"cute_prof has no {node.attr}")
    return problems


@pytest.mark.parametrize("path", pages(), ids=lambda p: p.name)
def test_page_is_short(path):
    assert len(path.read_text().splitlines()) <= MAX_PAGE_LINES


@pytest.mark.parametrize("path", pages(), ids=lambda p: p.name)
def test_opening_snippet_runs(path, tmp_path, monkeypatch, capsys):
    """The opening snippet runs as a reader would run it from the repository's root (the
    committed traces under examples/ and tests/), writing its outputs to a scratch folder;
    a GPU-only one (kernel code, a launch) is compile-checked instead."""
    line, body, gpu_only = opening_snippet(path.read_text())
    code = compile(body, f"{path.name}:{line + 1}", "exec")
    if gpu_only:
        assert import_problems(body) == []
        return
    for name in ("examples", "tests", "bench", "cute_prof"):
        (tmp_path / name).symlink_to(ROOT / name, target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    exec(code, {"__name__": "__snippet__"})
    assert capsys.readouterr().out.strip(), "the snippet prints nothing"


def test_opening_checks_catch_what_they_should():
    late = "# Page\n\n" + "text\n" * 20 + "```python\nx = 1\n```\n"
    with pytest.raises(AssertionError, match="not near the top"):
        opening_snippet(late)
    with pytest.raises(AssertionError, match="not Python"):
        opening_snippet("# Page\n\n```bash\nls\n```\n")
    assert opening_snippet("# P\n\n<!-- gpu-only -->\n```python\nx = 1\n```\n")[2]
    assert import_problems("from cute_prof.analysis import summarize\nimport cute_prof\n"
                           "cute_prof.load_trace") == []
    assert import_problems("from cute_prof.analysis import no_such_name\n"
                           "import cute_prof\ncute_prof.no_such_attr") == [
        "cute_prof.analysis has no no_such_name", "cute_prof has no no_such_attr"]
