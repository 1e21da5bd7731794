"""cute_prof: intra-kernel profiling for NVIDIA CuTe DSL kernels.

Device ops (``profile_region``, ``lane0_warp0_start``, ...) record timestamped regions into
a flat int64 buffer from inside a kernel; the host side here allocates that buffer, decodes
it into a columnar :class:`Trace` and exports Perfetto-compatible traces.

``import cute_prof`` needs neither a GPU nor the CUTLASS DSL: the host API is imported
eagerly, the device ops (which import ``cutlass``) and the analysis/plot/storage helpers
are imported on first attribute access.

This module owns the package's public names (``__all__``) and their lazy import; it defines no
behaviour of its own, and ``import cute_prof`` may not import the CUTLASS DSL, matplotlib or
perfetto.
"""

from __future__ import annotations

import importlib

from . import layout
from .buffer import MAX_EVENTS_LIMIT, ProfileBuffer, allocate_profile_buffer
from .decode import decode_buffer, decode_events, fit_clock_rate, warn_about_losses
from .errors import ClockRateError, ProfileBufferError, ProfileWarning
from .export.chrome_json import events_to_perfetto
from .loops import profile_loop
from .merge import merge_torch_trace
from .session import (
    export_enabled,
    profile_session,
    set_export_enabled,
    set_export_trace_off,
    set_export_trace_on,
    write_trace,
)
from .tags import TagTable, default_tag_table
from .trace import CLOCK_SYNC_DTYPE, EVENT_DTYPE, Event, Trace

__version__ = "0.1.0"

# name -> module that defines it; imported on first access (see __getattr__).
_LAZY_ATTRIBUTES = {
    **{
        name: "cute_prof.device"
        for name in (
            "profile_region",
            "lane0_warp0_start",
            "lane0_warp0_stop",
            "warp_start",
            "warp_stop",
            "elected_start",
            "elected_stop",
            "profile_start",
            "profile_stop",
            "read_globaltimer",
            "read_clock64",
            "instant",
            "clock_sync",
            "PhaseSequence",
            "Profiler",
            "WarpRecorder",
            "RoleRecorder",
            "buffer_arg",
            "set_enabled",
        )
    },
    "autoprofile": "cute_prof.autoprof",
    "summarize": "cute_prof.analysis",
    "write_pftrace": "cute_prof.export.pftrace_writer",
    "export_trace": "cute_prof.export",
    "plot_timeline": "cute_prof.export.picture",
    "save_trace": "cute_prof.storage",
    "load_trace": "cute_prof.storage",
}

__all__ = [
    "CLOCK_SYNC_DTYPE",
    "ClockRateError",
    "EVENT_DTYPE",
    "Event",
    "MAX_EVENTS_LIMIT",
    "ProfileBuffer",
    "ProfileBufferError",
    "ProfileWarning",
    "TagTable",
    "Trace",
    "allocate_profile_buffer",
    "decode_buffer",
    "decode_events",
    "default_tag_table",
    "events_to_perfetto",
    "export_enabled",
    "fit_clock_rate",
    "layout",
    "profile_session",
    "profile_loop",
    "merge_torch_trace",
    "set_export_enabled",
    "set_export_trace_off",
    "set_export_trace_on",
    "warn_about_losses",
    "write_trace",
    *_LAZY_ATTRIBUTES,
]


def __getattr__(name: str):
    module_name = _LAZY_ATTRIBUTES.get(name)
    if module_name is None:
        raise AttributeError(f"module 'cute_prof' has no attribute {name!r}")
    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY_ATTRIBUTES))
