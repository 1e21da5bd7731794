"""The guard every GPU test module starts with: on a machine without a CUDA GPU, without the
packages the module drives, or (``hopper``) without an sm_90 GPU, the module is skipped, not
failed (CI runs the suite on a CPU box)."""

from __future__ import annotations

import pytest


def require_gpu(*packages: str, hopper: bool = False):
    """torch, once the machine has a CUDA GPU and every one of ``packages`` imports (and,
    with ``hopper``, the GPU is an sm_90); else the calling module is skipped."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU", allow_module_level=True)
    for name in packages:
        pytest.importorskip(name)
    if hopper and torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("the kernels here need an sm_90 (Hopper) GPU", allow_module_level=True)
    return torch
