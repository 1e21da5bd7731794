"""Compile in a child process for sm_90a (or another ``arch``, e.g. sm_100a) on a CPU box,
with the PTX kept: zero-edit mode's tests compile the same kernel inside and outside
``autoprofile()`` in a fresh interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def compile_in_child(out: Path, child: str, *, timeout: int = 900,
                     python_flags: tuple[str, ...] = (), path: tuple[Path, ...] = (),
                     arch: str = "sm_90a") -> dict:
    """Run ``child`` (Python source that writes JSON to ``sys.argv[1]``) and return that JSON;
    a failed compile fails the test with the child's output. ``python_flags``: options for
    the child's interpreter; ``path``: more folders for its PYTHONPATH (after the repo);
    ``arch``: the target the DSL compiles for (``CUTE_DSL_ARCH``)."""
    env = dict(os.environ, CUTE_DSL_ARCH=arch, CUTE_DSL_KEEP="ptx", CUTE_DSL_DUMP_DIR=str(out))
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(ROOT), *map(str, path),
                                                    env.get("PYTHONPATH", "")] if p)
    result = out / "result.json"
    proc = subprocess.run([sys.executable, *python_flags, "-c", child, str(result)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        pytest.fail(f"compile failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
    return json.loads(result.read_text())


# Child code shared by the FA4 compile tests: ``fa4_ptx(causal, arch, suffix)`` clears FA4's
# compile cache and the dump folder, compiles the forward once (the launch after it fails:
# there is no GPU) and returns the PTX written. The child defines ``fa``, ``q``, ``k``, ``v``
# and ``dump`` before it.
FA4_PTX = r"""
def fa4_ptx(causal, arch, suffix):
    # one fresh compile and its PTX (the kernel keeps one file name, written anew)
    for name in os.listdir(dump):
        os.remove(os.path.join(dump, name))
    fa._flash_attn_fwd.compile_cache.clear()
    try:
        fa._flash_attn_fwd(q, k, v, causal=causal, _arch=arch)
    except Exception:  # the launch, after the compile: there is no GPU here
        pass
    written = [f for f in os.listdir(dump) if f.endswith(suffix)]
    if len(written) != 1:
        raise SystemExit(f"expected one {suffix} file from the compile, found {written}")
    return open(os.path.join(dump, written[0])).read()
"""
