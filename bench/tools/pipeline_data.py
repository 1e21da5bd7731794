"""A zero-edit trace as the what-if tools read it: the model derived from the kernel's own
pipelines and its records matched into per-unit arrays."""

from __future__ import annotations

from cute_prof.analysis.critical_path import PipelineData, match_records
from cute_prof.analysis.pipelines import DerivedPipeline, derive_pipeline
from cute_prof.trace import Trace


def matched(trace: Trace) -> tuple[DerivedPipeline, PipelineData]:
    """``derive_pipeline(trace)`` and its records matched to the derived spec."""
    derived = derive_pipeline(trace)
    return derived, match_records(derived.trace, derived.spec)
