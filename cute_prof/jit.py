"""Compiled kernels for the host's hot paths, with numpy as the reference and the fallback.

numba turns the few loops that numpy cannot express in one pass (segmented scans, varint
encoding, text formatting) into machine code. Where numba is missing or
``CUTE_PROF_NO_JIT=1`` is set, every caller runs its numpy path, which gives the same
result; the tests compare the two. Paths that must answer at once whatever the cache holds
(the flight recorder's hang and fault reports) run numpy under :func:`disabled`.

Owns the numba switch and the ``kernel`` decorator (stage 0); it may import nothing else of
cute_prof.
"""

from __future__ import annotations

import contextlib
import os
import threading

try:  # numba is a declared dependency, but host modules must import without it
    import numba
except ImportError:  # pragma: no cover - exercised on machines without numba
    numba = None

_state = threading.local()


def available() -> bool:
    """True when numba imported (compiled paths can exist at all)."""
    return numba is not None


def enabled() -> bool:
    """Whether callers should take their compiled path now (checked at call time)."""
    if numba is None or os.environ.get("CUTE_PROF_NO_JIT") == "1":
        return False
    return not getattr(_state, "disabled", False)


@contextlib.contextmanager
def disabled():
    """Run the block on the numpy paths (tests compare both; benches time both)."""
    previous = getattr(_state, "disabled", False)
    _state.disabled = True
    try:
        yield
    finally:
        _state.disabled = previous


def kernel(function=None, **options):
    """``numba.njit(cache=True, nogil=True, **options)``, or the plain function without numba.

    Without numba the decorated function is returned unchanged, so a caller that ignores
    ``enabled()`` still computes the right answer (slowly); callers branch on ``enabled()``.
    """
    settings = {"cache": True, "nogil": True, **options}

    def wrap(fn):
        if numba is None:
            return fn
        return numba.njit(**settings)(fn)

    return wrap(function) if function is not None else wrap
