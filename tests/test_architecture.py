"""The package's import graph: no cycles, no private names imported across modules, and the
stages of the pipeline only import downwards (layout -> device/decode -> analysis -> export ->
session/CLI). Every import counts, also those inside functions."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import cute_prof

PACKAGE_DIR = Path(cute_prof.__file__).parent

# stage of each module or subpackage: a module may import only from stages <= its own
STAGES = {
    "errors": 0, "layout": 0, "files": 0, "jit": 0, "sass": 0,
    "tags": 1, "trace": 1, "buffer": 1, "launches": 1,
    "device": 2, "decode": 2, "decode_slices": 2, "calibration": 3,
    "readers": 3, "storage": 3, "views": 3,
    "analysis": 4,
    "export": 5,
    "merge": 6, "loops": 6, "distributed": 6, "flight": 6, "session": 6, "report": 6,
    "autoprof": 6, "experimental": 6, "record_run": 6, "recorded_run": 6,
    "cli": 7, "example": 7, "record_command": 7, "record_boot": 7, "__init__": 8, "__main__": 8,
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def resolve(current: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = current.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(path: Path) -> list[tuple[str, str | None]]:
    """(imported module, imported name or None) for every import statement in the file."""
    current = module_name(path)
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((alias.name, None) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            target = resolve(current, path.name == "__init__.py", node)
            found.extend((target, alias.name) for alias in node.names)
    return found


def package_modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE_DIR.rglob("*.py")}


def internal_edges() -> dict[str, set[str]]:
    modules = package_modules()
    edges: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for target, imported in imports_of(path):
            if not target.startswith("cute_prof"):
                continue
            full = f"{target}.{imported}" if imported else target
            dest = full if full in modules else target
            while dest not in modules and "." in dest:
                dest = dest.rsplit(".", 1)[0]
            if dest != name and dest in modules:
                edges[name].add(dest)
    return edges


def stage_of(module: str) -> int:
    parts = module.split(".")
    key = parts[1] if len(parts) > 1 else "__init__"
    assert key in STAGES, f"{module}: add its stage to STAGES in this test"
    return STAGES[key]


def test_no_private_name_is_imported_across_modules():
    offenders = []
    for name, path in package_modules().items():
        for target, imported in imports_of(path):
            if target.startswith("cute_prof") and imported and imported.startswith("_"):
                if imported != "__version__":
                    offenders.append(f"{name} imports {imported} from {target}")
    assert not offenders, "\n".join(offenders)


def test_no_import_cycles():
    edges = internal_edges()
    # a package's __init__ may re-export its own files; those arrows are not cycles
    def arrows(module):
        return {d for d in edges[module] if not d.startswith(module + ".")}

    state: dict[str, int] = {}
    cycles = []

    def visit(module, trail):
        state[module] = 1
        for dest in sorted(arrows(module)):
            if state.get(dest) == 1:
                cycles.append(" -> ".join(trail[trail.index(dest):] + [dest]))
            elif dest not in state:
                visit(dest, trail + [dest])
        state[module] = 2

    for module in sorted(edges):
        if module not in state:
            visit(module, [module])
    assert not cycles, "\n".join(cycles)


def test_stages_only_import_downwards():
    upward = []
    for module, dests in internal_edges().items():
        if module == "cute_prof":
            continue
        for dest in dests:
            if dest == "cute_prof" or dest.startswith(module + "."):
                continue
            if stage_of(dest) > stage_of(module):
                upward.append(f"{module} (stage {stage_of(module)}) imports {dest} "
                              f"(stage {stage_of(dest)})")
    assert not upward, "\n".join(upward)


def test_checker_sees_a_planted_cycle_and_private_import(tmp_path, monkeypatch):
    """The scanners above would fail on a real violation (so their silence means something)."""
    pkg = tmp_path / "cute_prof"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .b import thing\n")
    (pkg / "b.py").write_text("def f():\n    from .a import _hidden\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE_DIR", pkg)
    with pytest.raises(AssertionError, match="_hidden"):
        test_no_private_name_is_imported_across_modules()
    with pytest.raises(AssertionError, match="cute_prof.a -> cute_prof.b -> cute_prof.a"):
        test_no_import_cycles()


@pytest.mark.parametrize("name", cute_prof.__all__)
def test_public_api_resolves_from_the_package(name):
    if name in ("layout",):
        assert getattr(cute_prof, name) is not None
        return
    try:
        value = getattr(cute_prof, name)
    except ImportError as err:  # device ops need the CUTLASS DSL
        pytest.skip(f"{name}: {err}")
    assert value is not None


def test_import_cute_prof_imports_no_cutlass_and_no_torch_profiler():
    code = ("import sys, cute_prof; "
            "bad = [m for m in ('cutlass', 'matplotlib', 'perfetto') if m in sys.modules]; "
            "print(','.join(bad))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_every_host_module_imports_without_cutlass():
    """Host modules (everything but device/) must not import the CUTLASS DSL. One fresh
    process imports them one by one and names the first after whose import the DSL is
    loaded: that module pulled it in (none before it did), so one process tells as much as
    a process per module."""
    names = [name for name in package_modules()
             if not (name.startswith("cute_prof.device") or name == "cute_prof.example")]
    code = ("import importlib, sys\n"
            f"for name in {names!r}:\n"
            "    importlib.import_module(name)\n"
            "    if 'cutlass' in sys.modules:\n"
            "        print(name)\n"
            "        break\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", f"{out.stdout.strip()} imports the CUTLASS DSL"
    assert len(names) > 40  # every host module, not an empty list


def test_module_names_listed_in_stages():
    for name in package_modules():
        stage_of(name)
        importlib.util.find_spec(name)


MAX_MODULE_LINES = 800


def checked_modules() -> dict[str, Path]:
    return package_modules()


def test_no_module_is_over_800_lines():
    long = [f"{name}: {n} lines" for name, path in checked_modules().items()
            if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES]
    assert not long, "split by responsibility:\n" + "\n".join(long)


def test_every_module_says_what_it_owns_and_may_not_touch():
    import re

    missing = []
    for name, path in checked_modules().items():
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        if not (re.search(r"\b[Oo]wns\b", doc) and re.search(r"\bmay\s+(not|import)\b", doc)):
            missing.append(name)
    assert not missing, "open with what the module owns and what it may not touch:\n" + \
        "\n".join(missing)
