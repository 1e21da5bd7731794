"""``autoprofile_probed()``: a zero-edit recording with the what-if research's probes on.

Owns the experiments' options (``load_arrivals``, ``consumer_delay_ns``) and their checks;
the device code they turn on is :mod:`cute_prof.device.load_probes`, the block itself
:func:`cute_prof.autoprof.recording_block`. It may not add options a user's profile needs:
those are :func:`cute_prof.autoprofile`'s.
"""

from __future__ import annotations

from ..autoprof import autoprofile, recording_block
from ..errors import ProfileBufferError

__all__ = ["autoprofile_probed"]


def check_experiments(load_arrivals, consumer_delay_ns) -> None:
    """Refuse a probe period or a delay that is not an int >= 0 (bools too)."""
    for name, value, meaning in (("load_arrivals", load_arrivals, "0: off; N: probe one load in N"),
                                 ("consumer_delay_ns", consumer_delay_ns, "0: off")):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ProfileBufferError(f"{name} must be an int >= 0 ({meaning}), got {value!r}")


def autoprofile_probed(*, load_arrivals: int = 0, consumer_delay_ns: int = 0,
                       **autoprofile_options):
    """An experiment for the what-if research, not a user option: it may change. Returns the
    context manager :func:`cute_prof.autoprofile` returns for ``autoprofile_options`` (it
    yields the same :class:`~cute_prof.autoprof.AutoProfile`), with these on:

    ``load_arrivals``: N > 0 samples the load latency of every TMA-loaded ring: after one
    commit in N (each cluster at its own place in the period, so that every position of the
    loop is sampled alike), the producer waits for that load and records
    ``<ring>.load_arrival``. The probe delays the producer, so take the pipeline's timings
    from a run without it; the host reads the probed loads with ``cute-prof analyze
    --arrivals`` (``analysis.pipelines.load_arrival_sample``), where a what-if takes its load
    latencies from them.

    ``consumer_delay_ns``: D > 0 makes every consumer warp spin D ns after each release of a
    TMA-loaded ring: the same kernel at a slower pace on every SM, whose loads (with
    ``load_arrivals``) show the memory's latency at a lower throughput, every SM running.
    Its timings are not the kernel's.

    With both 0 it records what :func:`cute_prof.autoprofile` records."""
    check_experiments(load_arrivals, consumer_delay_ns)
    autoprofile(**autoprofile_options)  # an unknown or misspelt option: autoprofile's TypeError
    return recording_block(**autoprofile_options,
                           experiments={"load_arrivals": load_arrivals,
                                        "consumer_delay_ns": consumer_delay_ns})
