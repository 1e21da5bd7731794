"""Opt-in records in a zero-edit recording: ``with region("softmax"):`` and ``mark("epilogue")``
inside a ``@cute.kernel`` add the user's own region or instant to the warp's slice, beside the
pipeline and barrier records.

Owns those two calls only (import them from :mod:`cute_prof.device.autoprof`); they emit
through :mod:`cute_prof.device.autoprof_state` and nothing outside ``cute_prof.autoprofile()``.
It may not wrap ``cutlass`` calls nor import anything on the host side above ``device``.
"""

from __future__ import annotations

from ..errors import ProfileBufferError
from .autoprof_state import instant, span_end, span_start, tracing_here


class region:
    """``with region("softmax"):`` inside a ``@cute.kernel``: one line that records the body
    as a region of the warp's zero-edit trace (tag ``softmax``, kind work), with no recorder
    passed anywhere. Outside ``cute_prof.autoprofile()`` it emits nothing, so the kernel's
    PTX stays what it was. A region costs what ``SliceRecorder.now()`` + ``span()`` cost (the
    same PTX: a timer read, then two words), on the same slice as the pipeline records. Every
    lane of a converged warp must reach both ends, as for any slice record; the payload (an
    iteration, a stage) may be a DSL value."""

    def __init__(self, tag: str, *, payload=0):
        if not isinstance(tag, str) or not tag:
            raise ProfileBufferError(f"region tag must be a non-empty string, got {tag!r}")
        self.tag, self.payload = tag, payload
        self._state = self._start = None

    def __enter__(self):
        self._state = tracing_here()
        if self._state is not None:
            self._start = span_start(self._state)
        return self

    def __exit__(self, *exc):
        state = self._state
        if state is None or exc[0] is not None:
            return False
        span_end(state, self._start, state.recording.site(self.tag, "region", "work", None),
                 self.payload)
        return False


def mark(tag: str, *, payload=0) -> None:
    """An instant in the warp's zero-edit trace (``mark("epilogue")``); nothing outside
    ``cute_prof.autoprofile()``."""
    if not isinstance(tag, str) or not tag:
        raise ProfileBufferError(f"mark tag must be a non-empty string, got {tag!r}")
    state = tracing_here()
    if state is None:
        return
    instant(state, state.recording.site(tag, "mark", "signal", None), payload)
