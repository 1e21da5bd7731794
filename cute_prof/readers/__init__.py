"""Readers of other profilers' captures: each turns a foreign file into a :class:`Trace`, so
every analysis, export and CLI verb works on it unchanged.

* :mod:`cute_prof.readers.iket` -- NVIDIA IKET decoded JSON (``run-iket profile
  --postprocess json``), plain or gzip-compressed.

This package owns the foreign formats' reading (stage 3); it may not import analysis, export or
anything above.
"""

from __future__ import annotations

__all__ = ["iket"]
