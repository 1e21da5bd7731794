"""Device ops: called inside ``@cute.kernel`` code, they append records to a profile buffer.

Importing this package imports the CUTLASS DSL. The files, from the bottom up:

* ``ptx.py``      the enable switch, timer reads, guard/cap/store PTX, ``emit_record``
* ``ops.py``      one-atomic record ops and the reference-compatible wrappers
* ``phases.py``   back-to-back phases and the sampling ``Profiler`` handle
* ``recorder.py`` the staged per-warp write path (``WarpRecorder``) and per-role recorders
* ``slices.py``   the per-warp slice write path (``SliceRecorder``, layout format 2)

Zero-edit recording (``cute_prof.autoprofile``), imported from its own modules:

* ``autoprof.py``         the wrapping of every pipeline and barrier call, ``recording()``;
  ``region`` / ``mark`` (defined in ``autoprof_regions.py``)
* ``autoprof_state.py``   the recording's trace-time state and the records of one call
* ``load_probes.py``      the what-if experiments' load-arrival probes and consumer delay
* ``scope.py``            trace-time checks and the kernel-end hook

Beside them, ``flight.py`` (the flight recorder's ops) and ``timer_probe.py`` (the
clock-pair kernel).

This package owns everything that runs inside a kernel or emits its PTX at trace time, and is
the only part of cute_prof that imports the CUTLASS DSL; it may import only ``layout``,
``tags``, ``errors`` and the other stages below it, never decode, analysis, export or the
session.
"""

from .ops import (
    buffer_arg,
    clock_sync,
    elected_start,
    elected_stop,
    instant,
    lane0_warp0_start,
    lane0_warp0_stop,
    profile_region,
    profile_start,
    profile_stop,
    warp_start,
    warp_stop,
)
from .phases import PhaseSequence, Profiler
from .ptx import GUARDS, is_enabled, read_clock64, read_globaltimer, set_enabled, spin_ns
from .recorder import WRITE_PATHS, RoleRecorder, WarpRecorder
from .slices import SliceRecorder, prefetch_header

__all__ = [
    "GUARDS",
    "PhaseSequence",
    "Profiler",
    "RoleRecorder",
    "SliceRecorder",
    "WRITE_PATHS",
    "WarpRecorder",
    "buffer_arg",
    "clock_sync",
    "elected_start",
    "elected_stop",
    "instant",
    "is_enabled",
    "lane0_warp0_start",
    "lane0_warp0_stop",
    "profile_region",
    "profile_start",
    "prefetch_header",
    "profile_stop",
    "read_clock64",
    "read_globaltimer",
    "set_enabled",
    "spin_ns",
    "warp_start",
    "warp_stop",
]
