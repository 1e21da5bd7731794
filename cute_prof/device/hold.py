"""Hold some of the GPU's SMs while a kernel runs, so that the same launch of the same kernel
runs on the rest: a lighter load on the memory system with nothing else changed (the what-if
model's second point on its loads' latency, ``critical_path.queued_under_load(lighter=)``).

A persistent kernel takes its grid from the SMs it may use (quack's ``max_active_clusters``,
ws_gemm's ``persistent_ctas``), so half its grid is half its load. A non-persistent kernel
launches one CTA per tile: its load halves only where half the SMs are taken. Each call of
:meth:`HeldSMs.run` does, in stream order:

1. on a side stream, after the caller's stream: ``held`` CTAs, each taking all the shared
   memory one CTA may have (no other kernel's CTA that needs shared memory fits beside it);
   each adds one to an arrival counter and spins, sleeping, until released;
2. on the caller's stream: one thread waits until all of them arrived (they are resident);
3. the caller's launch, which now finds only the other SMs free;
4. one thread releases the held CTAs.

The held CTAs spin on one flag (``nanosleep`` between reads) and touch no other memory.

Owns the holder kernel and the held launch; it records nothing, and may not import the
recorders nor anything on the host side above ``device``.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Int64

from .ptx import Asm

# the holding CTAs sleep this long between reads of the release flag
HOLD_SLEEP_NS = 512
# no CTA holds, and no launch waits for the holders, longer than this: a launch that never
# comes (or holders that never all fit) cannot hang the GPU (``HeldSMs.check`` tells)
HOLD_LIMIT_NS = 50_000_000
# the shared memory each holder takes: with the 1 KB the SM keeps per CTA, 27 KB of an
# H100's 228 KB stay free, less than any TMA / wgmma kernel's CTA asks for
HOLD_SMEM_BYTES = 200 * 1024
# arrival counter, release flag: two int64 words of one device tensor
ARRIVED, RELEASED = 0, 1


def _state_address(state: cute.Tensor):
    return state.iterator.toint()


def _bounded_wait_lines(label: str, base: str, word: int, target: str,
                        sleep_ns: int = 0) -> list[str]:
    """PTX polling the int64 ``word`` of the state at ``base`` (acquire loads) until it
    reaches ``target`` or ``HOLD_LIMIT_NS`` have passed since the timer read ``t0``,
    sleeping ``sleep_ns`` between reads (none: 0)."""
    return [f"{label}:",
            f"ld.acquire.gpu.global.u64 v, [{base}+{8 * word}];",
            f"setp.lt.s64 p, v, {target};",
            "mov.u64 t, %globaltimer;",
            "sub.s64 t, t, t0;",
            f"setp.lt.s64.and p, t, {HOLD_LIMIT_NS}, p;",
            *([f"@p nanosleep.u32 {sleep_ns};"] if sleep_ns else []),
            f"@p bra {label};"]


# a bounded wait's registers and its start time (``_bounded_wait_lines`` reads them)
_WAIT_PROLOGUE = [".reg .pred p;", ".reg .b64 v, t0, t;", "mov.u64 t0, %globaltimer;"]


def _hold_lines(base: str, target: str) -> list[str]:
    return [*_WAIT_PROLOGUE, f"red.release.gpu.global.add.u64 [{base}+{8 * ARRIVED}], 1;",
            *_bounded_wait_lines("HOLD_WAIT", base, RELEASED, target, HOLD_SLEEP_NS)]


def _arrived_lines(base: str, target: str) -> list[str]:
    return [*_WAIT_PROLOGUE, *_bounded_wait_lines("ARRIVED_WAIT", base, ARRIVED, target)]


def _release_lines(base: str, value: str) -> list[str]:
    return [f"st.release.gpu.global.u64 [{base}+{8 * RELEASED}], {value};"]


def _state_asm(state: cute.Tensor, value: Int64, lines) -> None:
    """One inline-PTX block of ``lines(base, value)``: the state's address and ``value`` as
    its 64-bit operands."""
    asm = Asm()
    base = asm.operand(_state_address(state), 64)
    asm.emit(*lines(base, asm.operand(value, 64)))
    asm.build()


# what thread 0 of each kernel does: hold its SM, wait for every holder, release them
STATE_LINES = {"hold": _hold_lines, "arrived": _arrived_lines, "release": _release_lines}


@cute.kernel
def state_kernel(state: cute.Tensor, value: Int64, role: cutlass.Constexpr):
    """Thread 0 runs ``role``'s PTX (``STATE_LINES``) on the state: ``hold`` arrives, then
    holds the SM until the release flag reaches ``value``; ``arrived`` returns once the
    arrival counter reaches ``value``; ``release`` sets the release flag to ``value``."""
    tidx, _, _ = cute.arch.thread_idx()
    if tidx == 0:
        _state_asm(state, value, STATE_LINES[role])


@cute.jit
def launch_hold(state: cute.Tensor, launch: Int64, ctas: cutlass.Constexpr,
                smem: cutlass.Constexpr, stream, cluster: cutlass.Constexpr = 1):
    if cutlass.const_expr(cluster > 1):
        state_kernel(state, launch, "hold").launch(
            grid=(ctas, 1, 1), block=(32, 1, 1), cluster=(cluster, 1, 1), smem=smem,
            stream=stream)
    else:
        state_kernel(state, launch, "hold").launch(grid=(ctas, 1, 1), block=(32, 1, 1),
                                                   smem=smem, stream=stream)


@cute.jit
def launch_one_thread(state: cute.Tensor, value: Int64, role: cutlass.Constexpr, stream):
    """``arrived`` or ``release`` (``state_kernel``), one CTA."""
    state_kernel(state, value, role).launch(grid=(1, 1, 1), block=(32, 1, 1), stream=stream)


class HeldSMs:
    """``run(launch)`` calls ``launch()`` (one launch of a kernel on the current torch
    stream) while ``held`` of the GPU's SMs are held: the kernel runs on the others.
    ``held`` must leave two SMs or more free; ``cluster=2`` launches the holders in
    clusters of two, which the block scheduler places on SM pairs (one SM of each TPC is
    held by single holders on an H100, both by pairs). Only a kernel whose CTAs need
    shared memory (``HOLD_SMEM_BYTES`` leaves 27 KB on an H100) is kept off the held SMs. Every call
    holds them afresh (not for CUDA graphs: the counter's target moves each call); the
    holders run on a stream of their own that never waits on the default stream; ``close()``
    (or leaving a ``with HeldSMs(...)`` block) destroys it."""

    def __init__(self, held: int, *, cluster: int = 1, device=None):
        import torch
        from cuda.bindings import driver
        from cutlass.cute.runtime import from_dlpack

        device = torch.device("cuda", torch.cuda.current_device() if device is None
                              else torch.device(device).index or 0)
        sms = torch.cuda.get_device_properties(device).multi_processor_count
        if isinstance(held, bool) or not isinstance(held, int) or not 1 <= held <= sms - 2:
            raise ValueError(f"held must be an int in [1, {sms - 2}] (the SMs to hold, two "
                             f"or more left free), got {held!r}")
        if cluster not in (1, 2) or held % cluster:
            raise ValueError(f"cluster must be 1 or 2 dividing held ({held}), got {cluster!r}")
        self.held, self.cluster = held, cluster
        self.state = torch.zeros(2, dtype=torch.int64, device=device)
        self._cute_state = from_dlpack(self.state)
        with torch.cuda.device(device):
            err, handle = driver.cuStreamCreate(driver.CUstream_flags.CU_STREAM_NON_BLOCKING)
        if err != driver.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"cuStreamCreate failed: {err}")
        self._handle = handle
        self.side = torch.cuda.ExternalStream(int(handle), device=device)
        self.launches = 0
        self._compiled = None

    @staticmethod
    def _stream(stream):
        from cuda.bindings.driver import CUstream

        return CUstream(stream.cuda_stream)

    def _compile(self, current):
        hold = cute.compile(launch_hold, self._cute_state, Int64(0), self.held,
                            HOLD_SMEM_BYTES, self._stream(self.side), self.cluster)
        arrived, release = (cute.compile(launch_one_thread, self._cute_state, Int64(0), role,
                                         self._stream(current))
                            for role in ("arrived", "release"))
        return hold, arrived, release

    def run(self, launch):
        """One call of ``launch()`` on the SMs left free; returns what it returns."""
        import torch

        if self._handle is None:
            raise RuntimeError("HeldSMs.run after close(): make a new HeldSMs")
        current = torch.cuda.current_stream(self.state.device)
        if self._compiled is None:
            self._compiled = self._compile(current)
        hold, arrived, release = self._compiled
        self.launches += 1
        n = Int64(self.launches)
        self.side.wait_stream(current)  # the last call's kernel and release come first
        hold(self._cute_state, n, self._stream(self.side))
        arrived(self._cute_state, Int64(self.launches * self.held), self._stream(current))
        try:
            return launch()
        finally:
            release(self._cute_state, n, self._stream(current))

    def wrap(self, launch):
        """``launch`` as a callable that runs it with the SMs held (``run``)."""
        return lambda: self.run(launch)

    def check(self) -> None:
        """Wait for the GPU and raise where some launch did not find every holder in place
        (they never all fitted beside other work within ``HOLD_LIMIT_NS``: that launch ran
        on more SMs than asked) or some release is missing."""
        import torch

        torch.cuda.synchronize(self.state.device)
        arrived, released = self.state.tolist()
        if arrived != self.launches * self.held or released != self.launches:
            raise RuntimeError(
                f"held SMs: {arrived} holder arrivals and release {released} after "
                f"{self.launches} launches of {self.held} holders each")

    def close(self) -> None:
        """Wait for the GPU, then destroy the holders' stream (a second call does nothing)."""
        if self._handle is None:
            return
        import torch
        from cuda.bindings import driver

        torch.cuda.synchronize(self.state.device)
        (err,) = driver.cuStreamDestroy(self._handle)
        self._handle, self.side = None, None
        if err != driver.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"cuStreamDestroy failed: {err}")

    def __enter__(self) -> "HeldSMs":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
