"""The device side of the what-if experiments on a zero-edit recording: load-arrival probes
(the producer waits for a sampled TMA load and records when it arrived) and the consumer
delay (every consumer warp spins after its releases, slowing the kernel on every SM).

Owns the probe's PTX, which loads a CTA samples, and the delay. Both are experiments, turned
on only through :func:`cute_prof.experimental.autoprofile_probed` (the host reads the probed
loads with ``cute-prof analyze --arrivals``); :mod:`cute_prof.device.autoprof` calls in here
from its wrappers when the recording's config asks for them. This module wraps nothing and
may not import :mod:`cute_prof.device.autoprof` nor anything on the host side above
``device``.
"""

from __future__ import annotations

from typing import Any

from cutlass import Int32, Int64
from cutlass._mlir import ir
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import T

from .autoprof_state import (
    Tracing,
    cluster_linear_index,
    outermost,
    pipeline_info,
    span_end,
    span_start,
    tracing_here,
)
from .ptx import inline_asm, spin_ns

# A probed wait gives up after this long (ns): a kernel that commits a ring's item before it
# issues the item's copy would otherwise wait for a load it has not issued yet
LOAD_ARRIVAL_TIMEOUT_NS = 50_000
# the probe's PTX: poll the full barrier's phase (try_wait suspends the warp in hardware
# between polls, so the consumers on its SM sub-partition keep their issue slots) until it
# completes or the timeout passes; $0 = 1 when the load arrived, 0 when the probe gave up
ARRIVAL_PTX = f"""{{
.reg .pred arrived;
.reg .u64 t0, t;
mov.u64 t0, %globaltimer;
ARRIVAL_POLL:
mbarrier.try_wait.parity.shared::cta.b64 arrived, [$1], $2;
@arrived bra ARRIVAL_DONE;
mov.u64 t, %globaltimer;
sub.u64 t, t, t0;
setp.lt.u64 arrived, t, {LOAD_ARRIVAL_TIMEOUT_NS};
@arrived bra ARRIVAL_POLL;
ARRIVAL_DONE:
selp.u32 $0, 1, 0, arrived;
}}"""


def is_tma_load_ring(pipeline) -> bool:
    """A ring whose full barrier a TMA copy completes (the producer's acquire sets the bytes
    it expects): its load's arrival is an event of its own, later than the commit."""
    from cutlass import pipeline as pipelines

    loads = tuple(getattr(pipelines, name) for name in ("PipelineTmaAsync", "PipelineTmaUmma",
                                                           "PipelineTmaMultiConsumersAsync")
                  if hasattr(pipelines, name))
    return isinstance(pipeline, loads) and getattr(pipeline, "sync_object_full", None) is not None


def sampling_offset(period: int) -> Int32:
    """Where in each period of ``period`` loads this CTA samples: its cluster's linear index
    modulo the period. A sample that starts at each CTA's (or tile's) first load takes that
    load, the slowest (it meets the CTA's start burst), in every CTA, and so over-samples it.
    Spread over the clusters, every position of the loop is sampled as often as any
    other. The CTAs of one cluster sample the same loads: a probe stalls its producer, and a
    peer waiting for this CTA's multicast half would read that stall as its own load's
    latency."""
    return cluster_linear_index() % Int32(int(period))


def load_arrival_probe(pipeline, state, every: int) -> None:
    """After the commit of item ``state`` of a TMA-loaded ring, when ``state.count`` plus
    this CTA's :func:`sampling_offset` is a multiple of ``every``: the producer warp waits
    until the item's full barrier completes and records a region ``<ring>.load_arrival``
    from just after the commit to then (payload 1; 0 when it gave up after
    ``LOAD_ARRIVAL_TIMEOUT_NS``). A ring whose consumers seldom
    wait shows its loads' latency only as bounds; these sampled arrivals measure it, at the
    price of the producer's wait (a deep ring's slack absorbs it; measure it on your kernel).
    The producer state's phase is the flip of the consumer's, so the full barrier's phase of
    this item has parity ``phase ^ 1``; a wrong guess returns at once, never hangs."""
    tracing = tracing_here()
    count, index, phase = (getattr(state, name, None) for name in ("count", "index", "phase"))
    if tracing is None or not is_tma_load_ring(pipeline) or None in (count, index, phase):
        return
    sampled = (Int32(count) + sampling_offset(every)) % Int32(int(every)) == Int32(0)
    probe_arrival(tracing, pipeline, sampled, Int32(index), Int32(phase) ^ Int32(1))


def armed_slot(tracing: Tracing, pipeline) -> Any:
    """The stack slot saying whether ``pipeline``'s latest full-barrier arm is still
    unprobed (0 at the kernel's entry; the compiler keeps it in a register)."""
    index = pipeline_info(pipeline).index
    slot = tracing.armed_slots.get(index)
    if slot is None:
        entry = tracing.kernel_op.regions[0].blocks[0]
        with ir.InsertionPoint.at_block_begin(entry):
            slot = llvm.alloca(llvm.PointerType.get(), Int32(1).ir_value(), T.i32(), alignment=4)
            llvm.store(Int32(0).ir_value(), slot)
        tracing.armed_slots[index] = slot
    return slot


def note_full_barrier_armed(pipeline) -> None:
    """A producer armed the full barrier of ``pipeline``'s next item (``sync_object_full.
    arrive``): the next acquire may probe that item's arrival."""
    tracing = tracing_here()
    if tracing is None or not is_tma_load_ring(pipeline):
        return
    llvm.store(Int32(1).ir_value(), armed_slot(tracing, pipeline))


def previous_load_arrival_probe(pipeline, index, phase) -> None:
    """A producer that drives the ring's barriers itself (``sync_object_empty.wait`` to
    acquire, ``sync_object_full.arrive`` to arm the full barrier before its copies) has no
    call after its copies but the next acquire: before the acquire of slot ``index``, the
    previous item's arrival is probed, when that item sat in this CTA's sampled slot with
    its sampled full-barrier parity (one load in two turns of the ring, at the CTA's
    :func:`sampling_offset`) and its full barrier was armed since the previous acquire (a
    drain of the ring before the producer exits loads nothing: its acquires probe
    nothing)."""
    stages = int(getattr(pipeline, "num_stages", 0) or 0)
    tracing = tracing_here()
    if stages < 1 or tracing is None or not is_tma_load_ring(pipeline):
        return
    slot = armed_slot(tracing, pipeline)
    armed = Int32(llvm.load(T.i32(), slot)) == Int32(1)
    # the previous item: slot (index - 1) mod stages; its full barrier's parity is the
    # producer phase's flip, and the producer phase flips where the slot index wraps
    not_wrapped = (Int32(index) + Int32(stages - 1)) // Int32(stages)
    previous = (Int32(index) + Int32(stages - 1)) % Int32(stages)
    parity = Int32(phase) ^ not_wrapped
    # the sampled turn: a slot and a parity, one of the 2 x stages a load can sit at
    turn = sampling_offset(2 * stages)
    sampled = armed & (previous == turn % Int32(stages)) & (parity == turn // Int32(stages))
    probe_arrival(tracing, pipeline, sampled, previous, parity)
    llvm.store(Int32(0).ir_value(), slot)


def probe_arrival(tracing: Tracing, pipeline, sampled, index: Int32, parity: Int32) -> None:
    """Where ``sampled`` holds: wait for item ``index``'s full barrier phase of ``parity``
    and record the wait as ``<ring>.load_arrival`` (payload: arrived)."""
    from cutlass.cutlass_dsl import if_generate

    info = pipeline_info(pipeline)
    tag = tracing.recording.site(f"{info.name}.load_arrival", "load_arrival", "wait", info.index)

    def probe():
        with outermost():
            start = span_start(tracing)
            barrier = pipeline.sync_object_full.get_barrier(index)
            address = llvm.ptrtoint(T.i32(), barrier.to_llvm_ptr())
            arrived = Int32(inline_asm(T.i32(), [address, parity.ir_value()], ARRIVAL_PTX,
                                       "=r,r,r,~{memory}"))
            span_end(tracing, start, tag, arrived)

    if_generate(sampled, probe)


def consumer_delay(pipeline, delay_ns: int) -> None:
    """After a consumer's release of a TMA-loaded ring: spin ``delay_ns`` (> 0) so that the
    whole kernel runs at a slower pace on every SM, and its loads meet a lower memory
    throughput. An experiment, not a profile: the delayed kernel's timings are not its own."""
    if tracing_here() is not None and is_tma_load_ring(pipeline):
        spin_ns(Int64(delay_ns))
