"""Experiments of the what-if research, kept apart from the user's API: they may change or go
without notice, and their traces are not a kernel's profile.

* :func:`autoprofile_probed`: :func:`cute_prof.autoprofile` with the load-arrival probes
  and/or the consumer delay on.

This package owns those experiments' host-side options and their checks; it may not change
what :func:`cute_prof.autoprofile` records without them, and no other module of ``cute_prof``
may import it (the user's API does not lead here).
"""

from .probes import autoprofile_probed

__all__ = ["autoprofile_probed"]
