"""Conclusions drawn from a decoded :class:`~cute_prof.trace.Trace`.

Statistics and roles:

* ``summary.py``, ``summary_tables.py``  per-tag statistics, busy fractions, gaps, losses
* ``roles.py``    track roles and tag meanings declared on the host (``RoleSpec``)
* ``waits.py``    who waited on what: per-role work/wait/idle, k-tile latency, verdict
* ``flows.py``    producer -> consumer arrows for the exporters
* ``diff.py``     two traces side by side
* ``zero_edit.py``  a zero-edit trace's roles, tracks, waits and record cost
* ``zero_edit_work.py``  a zero-edit trace's work between its pipeline calls, derived as
  regions, and its verdict per ring

The pipeline model, stage by stage (each imports only the stages above it):

* ``model.py``          the spec: roles, rings, regions and their relations
* ``derived_pipeline.py``  the spec derived from a zero-edit trace's own pipeline calls
* ``pipeline_data.py``  records matched to the spec (unit x iteration x region arrays)
* ``dispatch.py``       CTAs onto SMs, a change per unit carried to the kernel's time
* ``replay_terms.py``   what the replay reads from the measurements (latencies, jobs)
* ``loads.py``          load latencies: the sample and each replayed item's draw
* ``replay.py``         the replay itself
* ``critical_path.py``  critical path, blockers, ring occupancy, initiation interval
* ``what_if.py``        a changed pipeline's predicted kernel time
* ``pipeline_report.py``  all of it for one trace, as JSON and text
* ``load_arrivals.py``  sampled load latencies from an experiment's probed launches

The package owns the analysis stage: its modules may import the trace, decode and device
layers below them, and may not import the exporters, the session or the CLI above.
"""

from .derived_pipeline import DerivedPipeline, derive_pipeline
from .model import PipelineSpec, load_pipeline
from .pipeline_report import analyze_pipeline, format_pipeline_report
from .roles import TAG_KINDS, RoleSpec, apply_roles, load_role_spec
from .summary import (
    Summary,
    busy_union,
    format_duration,
    instant_mask,
    pick_unit,
    span_mask,
    summarize,
)
from .summary_tables import PERCENTILES, TAG_STATS_DTYPE, TRACK_STATS_DTYPE
from .what_if import predict_what_if, what_if

__all__ = [
    "TAG_KINDS",
    "RoleSpec",
    "apply_roles",
    "load_role_spec",
    "PERCENTILES",
    "TAG_STATS_DTYPE",
    "TRACK_STATS_DTYPE",
    "Summary",
    "busy_union",
    "format_duration",
    "instant_mask",
    "pick_unit",
    "span_mask",
    "summarize",
    "PipelineSpec",
    "load_pipeline",
    "DerivedPipeline",
    "derive_pipeline",
    "analyze_pipeline",
    "format_pipeline_report",
    "what_if",
    "predict_what_if",
]
