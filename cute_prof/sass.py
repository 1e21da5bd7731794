"""Counting SASS instructions: what a record really costs in an issue-bound loop.

Per-record overhead in a kernel that issues an instruction every cycle is the number of
instructions a record adds to the loop around it, not its bytes. ``loop_instructions``
counts the body of a cubin's longest backward branch; ``disassemble`` runs ``nvdisasm``
(on ``PATH``, in the CUDA toolkit, or from the ``nvidia-cuda-nvdisasm`` wheel). Host only.

Owns the SASS counting (stage 0); it may import nothing else of cute_prof.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

__all__ = ["find_nvdisasm", "disassemble", "loop_instructions"]


def find_nvdisasm() -> str | None:
    """Path of an ``nvdisasm`` binary, or None."""
    found = shutil.which("nvdisasm")
    if found:
        return found
    try:
        import nvidia  # namespace package of NVIDIA's CUDA wheels
    except ImportError:
        nvidia = None
    roots = list(getattr(nvidia, "__path__", [])) if nvidia is not None else []
    candidates = [os.path.join(root, sub, "bin", "nvdisasm") for root in roots
                  for sub in ("cu13", "cu12", "cuda_nvdisasm")]
    candidates.append("/usr/local/cuda/bin/nvdisasm")
    for path in candidates:
        if os.path.isfile(path):
            if not os.access(path, os.X_OK):  # wheels unpacked by some tools lose the bit
                try:
                    os.chmod(path, 0o755)
                except OSError:
                    continue
            return path
    return None


def disassemble(cubin_path: str, *, nvdisasm: str | None = None) -> str:
    """The SASS text of a cubin (``nvdisasm -c``)."""
    tool = nvdisasm or find_nvdisasm()
    if tool is None:
        raise FileNotFoundError("nvdisasm not found: install the nvidia-cuda-nvdisasm wheel or a CUDA toolkit")
    done = subprocess.run([tool, "-c", cubin_path], capture_output=True, text=True, check=True)
    return done.stdout


def loop_instructions(sass: str) -> int:
    """Instructions in the main loop: the body of the longest backward branch."""
    addressed = []
    label_at: dict[str, int] = {}
    pending = None
    for line in sass.splitlines():
        label = re.match(r"\.(L_x_\d+):", line.strip())
        if label:
            pending = label.group(1)
            continue
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
        if m:
            address = int(m.group(1), 16)
            addressed.append((address, m.group(2)))
            if pending is not None:
                label_at[pending] = address
                pending = None
    best = 0
    for address, text in addressed:
        branch = re.search(r"BRA\s+(?:`\()?\.?(L_x_\d+)", text)
        if branch and branch.group(1) in label_at and label_at[branch.group(1)] < address:
            best = max(best, (address - label_at[branch.group(1)]) // 16 + 1)
    return best
