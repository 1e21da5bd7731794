"""Several GPUs, one timeline: every rank of a ``torchrun`` program records into its own
buffer; :func:`gather_trace` sends each rank's compact records (only the claimed slots),
tag names, metadata and clock fit to one rank over ``torch.distributed``, which merges them
into one :class:`~cute_prof.trace.Trace` with the ranks' clocks aligned.

Clocks: ``%globaltimer`` is per GPU. :func:`measure_clock` reads it from a tiny kernel
between two host-clock reads (``time.time_ns``), many times; :func:`fit_clock_offset` fits
``globaltimer = host + offset (+ drift)`` on the tightest pairs, with the half round trip as
the uncertainty. On one host all ranks share the host clock, so ``offset_r - offset_base``
maps rank r's timer onto the base rank's; the merge applies it at decode time and records
offset, drift, residual and uncertainty per rank in ``metadata["distributed"]``. On several
hosts the same code path holds, with the hosts' clock agreement (NTP: ~0.1-1 ms, PTP:
~0.1-1 us) added to the uncertainty (README: "Several GPUs").

Rows keep their own tid inside the rank; the merged trace gives each rank a block of tids
(``rank * tid_stride + tid``), names every track ``"rank R <host> GPU G: <track>"``, and adds
one ``Trace.launches`` entry per rank launch with its ``rank``, so exporters can group rows
by rank (one process per rank).

Owns the gather of the ranks' records and their clock alignment (stage 6); it may not import
the CLI, and imports torch.distributed and the device's timer probe only inside its functions.
"""

from __future__ import annotations

import socket
import time
import warnings
from typing import Any

import numpy as np

from . import layout
from .buffer import host_words
from .decode import decode_buffer
from .errors import ProfileBufferError, ProfileWarning
from .tags import TagTable
from .trace import EVENT_DTYPE, Trace, stack_traces

__all__ = [
    "DistributedTraceError",
    "compact_words",
    "fit_clock_offset",
    "gather_trace",
    "measure_clock",
    "merge_rank_payloads",
    "rank_payload",
]

PAYLOAD_FORMAT = "cute_prof.rank_payload/1"


class DistributedTraceError(ProfileBufferError):
    """A rank's contribution is missing or unreadable; the message names the rank."""


# ------------------------------------------------------------------ clocks
def fit_clock_offset(host_before_ns, gpu_ns, host_after_ns, *, keep: float = 0.5) -> dict:
    """Fit ``gpu = host + offset + drift * (host - host_ref)`` from pairs where the GPU read
    lies between two host reads. Only the ``keep`` fraction of pairs with the shortest round
    trip is used (the others waited on the launch or the scheduler).

    Returns offset_ns (at the middle of the measurement), drift_ppm, residual_ns (RMS of the
    fit), uncertainty_ns (half the median kept round trip plus the residual) and the pair
    count."""
    before = np.asarray(host_before_ns, dtype=np.int64)
    after = np.asarray(host_after_ns, dtype=np.int64)
    gpu = np.asarray(gpu_ns, dtype=np.int64)
    if not (before.shape == after.shape == gpu.shape) or before.size == 0:
        raise ProfileBufferError("clock pairs: need equally many host and GPU reads, at least 1")
    if np.any(after < before):
        raise ProfileBufferError("clock pairs: a host read after the GPU read is earlier than "
                                 "the one before it")
    round_trip = after - before
    count = max(1, int(round(before.size * keep)))
    best = np.argsort(round_trip, kind="stable")[:count]
    ref = int(before[best].min())
    host_mid = (before[best] - ref) + round_trip[best] / 2.0  # float ns relative to ref
    diff = (gpu[best] - before[best]).astype(np.float64) - round_trip[best] / 2.0
    if count >= 3 and np.ptp(host_mid) > 0:
        slope, intercept = np.polyfit(host_mid, diff, 1)
    else:
        slope, intercept = 0.0, float(np.mean(diff))
    residual = float(np.sqrt(np.mean((diff - (intercept + slope * host_mid)) ** 2)))
    centre = float(np.mean(host_mid))
    return {
        "offset_ns": float(intercept + slope * centre),
        "reference_host_ns": int(ref + round(centre)),
        "drift_ppm": float(slope * 1e6),
        "residual_ns": residual,
        "uncertainty_ns": float(np.median(round_trip[best]) / 2.0 + residual),
        "pairs": int(count),
    }


_timer_kernel_cache: dict = {}


def measure_clock(*, samples: int = 64, device=None, keep: float = 0.5) -> dict:
    """Measure this GPU's ``%globaltimer`` against the host clock with a one-thread CuTe DSL
    kernel (``read_globaltimer``) launched ``samples`` times between two ``time.time_ns()``.
    Needs a GPU and the CUTLASS DSL."""
    import torch

    import cutlass.cute as cute
    from cutlass.cute.runtime import from_dlpack

    from .device.timer_probe import launch_timer_probe

    dev = torch.device("cuda", torch.cuda.current_device()) if device is None else device
    out = torch.zeros(1, dtype=torch.int64, device=dev)
    key = str(dev)
    if key not in _timer_kernel_cache:
        _timer_kernel_cache[key] = cute.compile(launch_timer_probe, from_dlpack(out))
    kernel = _timer_kernel_cache[key]
    arg = from_dlpack(out)
    for _ in range(3):  # warm up the launch path
        kernel(arg)
    torch.cuda.synchronize(dev)
    before = np.empty(samples, dtype=np.int64)
    after = np.empty(samples, dtype=np.int64)
    gpu = np.empty(samples, dtype=np.int64)
    for i in range(samples):  # a handful of samples, not a hot path
        before[i] = time.time_ns()
        kernel(arg)
        torch.cuda.synchronize(dev)
        after[i] = time.time_ns()
        gpu[i] = int(out.item())
    return fit_clock_offset(before, gpu, after, keep=keep)


# ----------------------------------------------------------------- payloads
def compact_words(buf) -> np.ndarray:
    """The header and the claimed slots of a buffer (the rest never holds a record)."""
    words = host_words(buf)
    counter = int(words[layout.COUNTER_INDEX])
    capacity = (words.shape[0] - layout.HEADER_WORDS) // layout.WORDS_PER_RECORD
    claimed = min(max(counter, 0), capacity)
    return np.array(words[: layout.buffer_words(max(claimed, 1))], dtype=np.int64)


def rank_payload(buf, tag_table, *, rank: int, clock: dict | None = None,
                 metadata: dict[str, Any] | None = None, gpu: str | None = None) -> dict:
    """What one rank sends: its compact records, buffer capacity, tag names, clock fit and
    metadata (host name, GPU)."""
    words = host_words(buf)
    capacity = (words.shape[0] - layout.HEADER_WORDS) // layout.WORDS_PER_RECORD
    names = list(getattr(tag_table, "names", tag_table) or [])
    return {
        "format": PAYLOAD_FORMAT,
        "rank": int(rank),
        "host": socket.gethostname(),
        "gpu": gpu,
        "capacity": int(capacity),
        "words": compact_words(words),
        "tag_names": [str(n) for n in names],
        "clock": dict(clock) if clock else None,
        "metadata": dict(metadata or {}),
    }


# -------------------------------------------------------------------- merge
def _decode_rank(payload: dict, rank: int) -> Trace:
    if not isinstance(payload, dict) or payload.get("format") != PAYLOAD_FORMAT:
        raise DistributedTraceError(f"rank {rank}: its contribution is not a cute_prof rank "
                                    "payload (corrupted or from another program)")
    if payload.get("rank") != rank:
        raise DistributedTraceError(f"rank {rank}: the payload in its place says rank "
                                    f"{payload.get('rank')!r}")
    try:
        trace = decode_buffer(payload["words"], TagTable(payload["tag_names"]),
                              metadata=payload.get("metadata"))
    except (ProfileBufferError, KeyError, TypeError, ValueError) as err:
        raise DistributedTraceError(f"rank {rank}: its buffer cannot be decoded ({err})") \
            from None
    trace.capacity = int(payload["capacity"])
    trace.overflow = max(0, trace.attempted - trace.capacity)
    return trace


def merge_rank_payloads(payloads: list, *, world_size: int | None = None, base_rank: int = 0,
                        align: bool = True) -> Trace:
    """One Trace from every rank's payload (index = rank). Tag tables are merged by name,
    times are moved onto ``base_rank``'s ``%globaltimer`` with each rank's clock fit (when
    ``align`` and every rank has one), empty and overflowing ranks are reported in the
    metadata and warned about. A missing or unreadable rank raises
    :class:`DistributedTraceError` naming it."""
    world = len(payloads) if world_size is None else int(world_size)
    if len(payloads) < world:
        raise DistributedTraceError(f"rank {len(payloads)}: no contribution ({len(payloads)} "
                                    f"of {world} ranks arrived)")
    missing = [r for r in range(world) if payloads[r] is None]
    if missing:
        raise DistributedTraceError(f"rank {missing[0]}: no contribution (missing ranks: "
                                    f"{missing})")
    traces = [_decode_rank(payloads[r], r) for r in range(world)]
    clocks = [payloads[r].get("clock") for r in range(world)]
    aligned = align and all(c and "offset_ns" in c for c in clocks)
    if align and not aligned:
        warnings.warn("not every rank measured its clock: ranks' times are left unaligned",
                      ProfileWarning, stacklevel=2)

    stacked, names, tid_stride = stack_traces(traces)
    if tid_stride * world >= 2**31:
        raise DistributedTraceError(f"rank tids up to {tid_stride - 1} times {world} ranks "
                                    "overflow the int32 track id")

    parts, launches, track_names, ranks = [], [], {}, []
    base = clocks[base_rank] if aligned else None
    for rank, (trace, payload, ev) in enumerate(zip(traces, payloads, stacked)):
        shift = 0
        clock = clocks[rank]
        if aligned:
            shift = int(round(clock["offset_ns"] - base["offset_ns"]))
            ev["start_ns"] -= shift
        rank_launches = trace.launches or [{"index": 0}]
        first = len(launches)
        for launch in rank_launches:
            entry = {**launch, "index": len(launches), "rank": rank}
            for key in ("start_ns", "end_ns"):
                if entry.get(key) is not None:
                    entry[key] = int(entry[key]) - shift
            launches.append(entry)
        ev["launch"] += first
        label = f"rank {rank} {payload.get('host', '?')} GPU {payload.get('gpu', '?')}"
        for tid in np.unique(trace.events["tid"]).tolist():
            track_names[rank * tid_stride + tid] = f"{label}: {trace.track_name(tid)}"
        status = "ok"
        if trace.attempted == 0:
            status = "empty"
        elif trace.overflow:
            status = "overflow"
        ranks.append({
            "rank": rank, "host": payload.get("host"), "gpu": payload.get("gpu"),
            "records": int(len(ev)), "attempted": int(trace.attempted),
            "capacity": int(trace.capacity), "overflow": int(trace.overflow),
            "incomplete": int(trace.incomplete), "status": status,
            "tid_base": rank * tid_stride, "shift_ns": shift,
            "clock": clock,
            "alignment_uncertainty_ns": (float(clock["uncertainty_ns"] + base["uncertainty_ns"])
                                         if aligned and rank != base_rank else 0.0
                                         if aligned else None),
            "metadata": payload.get("metadata", {}),
        })
        parts.append(ev)
    trouble = [f"rank {r['rank']} {r['status']}" for r in ranks if r["status"] != "ok"]
    if trouble:
        warnings.warn("gathered trace: " + ", ".join(trouble), ProfileWarning, stacklevel=2)
    events = np.concatenate(parts) if parts else np.zeros(0, dtype=EVENT_DTYPE)
    events = events[np.argsort(events["start_ns"], kind="stable")]
    return Trace(
        events=events,
        tag_names=names,
        capacity=sum(t.capacity for t in traces),
        attempted=sum(t.attempted for t in traces),
        overflow=sum(t.overflow for t in traces),
        incomplete=sum(t.incomplete for t in traces),
        invalid=sum(t.invalid for t in traces),
        metadata={"distributed": {"world_size": world, "base_rank": base_rank,
                                  "aligned": aligned, "tid_stride": tid_stride,
                                  "ranks": ranks}},
        launches=launches,
        track_names=track_names,
    )


# ------------------------------------------------------------------- gather
def gather_trace(buf, tag_table, *, clock: dict | None = None, group=None, dst: int = 0,
                 metadata: dict[str, Any] | None = None, gpu: str | None = None,
                 align: bool = True) -> Trace | None:
    """Collective: every rank calls it with its own buffer (synchronise the device first);
    rank ``dst`` gets the merged Trace, the others None. ``clock``: this rank's
    :func:`measure_clock` result (measured once, before or after the work)."""
    import torch.distributed as dist

    rank = dist.get_rank(group)
    world = dist.get_world_size(group)
    if gpu is None:
        try:
            import torch

            if torch.cuda.is_available():
                index = torch.cuda.current_device()
                gpu = f"{index} ({torch.cuda.get_device_name(index)})"
        except Exception:  # no GPU name is no reason to lose the trace
            gpu = None
    payload = rank_payload(buf, tag_table, rank=rank, clock=clock, metadata=metadata, gpu=gpu)
    received = [None] * world if rank == dst else None
    dist.gather_object(payload, received, dst=dst, group=group)
    if rank != dst:
        return None
    return merge_rank_payloads(received, world_size=world, align=align)
