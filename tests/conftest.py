"""Shared test set-up: GPU-test skipping, a Hypothesis profile for slow CI boxes, and a
clean global export switch for every test."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

# CI boxes have 2 cores; wall-clock deadlines would make property tests flaky there. In CI
# (CI set, as .ci/run does) the examples are derandomized: a red CI then means the code
# changed, not the dice; local runs keep exploring new inputs.
settings.register_profile(
    "cute_prof",
    deadline=None,
    max_examples=int(os.environ.get("CUTE_PROF_HYPOTHESIS_EXAMPLES", "200")),
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=bool(os.environ.get("CI")),
)
settings.load_profile("cute_prof")


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def pytest_collection_modifyitems(config, items):
    if _cuda_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs an NVIDIA GPU (torch.cuda.is_available() is False)")
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip_gpu)


@pytest.fixture(autouse=True)
def _default_export_switch(monkeypatch):
    """Every test starts with export following the (unset) environment variable."""
    from cute_prof import session

    monkeypatch.delenv(session.EXPORT_ENV_VAR, raising=False)
    session.set_export_enabled(None)
    yield
    session.set_export_enabled(None)
