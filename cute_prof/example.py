"""``python -m cute_prof.example``: profile a real CuTe DSL kernel and write a Perfetto trace.

The kernel has several CTAs and warps, a CTA-wide region holding per-warp sibling regions
(load / compute / store), an instant, and a per-warp phase sequence. On a machine with a
GPU it runs there. Without one it still compiles the instrumented kernel for sm_90a (so you
see the instrumentation build) and then decodes a buffer recorded on an H100/H200 that ships
with the package, printing the same summary and writing the same trace, labelled as such.

Owns the demo only (stage 7); no module of the package may import it.
"""


import argparse
import os
import sys
import time
from pathlib import Path

TRACE_PATH = "profiler_example_trace.json"
RECORDING = Path(__file__).with_name("data") / "example_recording.npz"
CTAS = 8
WARPS = 4
ITERS = 6
WORK = 400  # FMA steps per phase per thread


def _gpu_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def _define_kernel():
    import cutlass
    import cutlass.cute as cute
    from cutlass import Float32, Int32

    import cute_prof.device as cp

    @cute.jit
    def churn(x: Float32, steps: Int32) -> Float32:
        for _ in cutlass.range(steps):
            x = x * 0.999 + 0.001
        return x

    @cute.kernel
    def example_kernel(buf: cute.Tensor, data: cute.Tensor, max_events: Int32, work: Int32):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        warp = cute.arch.warp_idx()
        cta_track = bidx * (WARPS + 1)  # per CTA: one CTA-wide track, then one per warp
        track = cta_track + 1 + warp
        gidx = bidx * (32 * WARPS) + tidx
        x = data[gidx]
        with cp.profile_region(buf, max_events, "cta", cta_track):  # thread 0 of the CTA
            with cp.profile_region(buf, max_events, "load", track, guard="lane0"):
                x = churn(x, work // 4)
            with cp.profile_region(buf, max_events, "compute", track, guard="lane0"):
                x = churn(x, work * (1 + warp))  # warps do uneven work on purpose
            cp.instant(buf, max_events, "computed", track, guard="lane0")
            seq = cp.PhaseSequence(buf, max_events, track, guard="lane0")
            for i in cutlass.range(ITERS):
                seq.next("phase_a", payload=i)
                x = churn(x, work // 2)
                seq.next("phase_b", payload=i)
                x = churn(x, work // 3)
            seq.end()
            with cp.profile_region(buf, max_events, "store", track, guard="lane0"):
                data[gidx] = x
            # without this the CTA region would end when thread 0's own warp is done
            cute.arch.sync_threads()

    @cute.jit
    def launch(buf: cute.Tensor, data: cute.Tensor, max_events: Int32, work: Int32):
        example_kernel(buf, data, max_events, work).launch(
            grid=(CTAS, 1, 1), block=(32 * WARPS, 1, 1)
        )

    return launch


# per CTA: one "cta" region; per warp: load, compute, instant, 2*ITERS phases, store
MAX_EVENTS = CTAS * (1 + WARPS * (4 + 2 * ITERS))


def _compile(launch, buf_tensor, data, *options):
    import cutlass.cute as cute
    from cutlass import Int32
    from cutlass.cute.runtime import from_dlpack

    from cute_prof.device import buffer_arg

    compile_fn = cute.compile[options] if options else cute.compile
    return compile_fn(launch, buffer_arg(buf_tensor), from_dlpack(data), Int32(MAX_EVENTS), Int32(WORK))


def run_on_gpu(trace_path, save_recording):
    import torch
    from cutlass import Int32
    from cutlass.cute.runtime import from_dlpack

    import cute_prof

    launch = _define_kernel()
    data = torch.rand(CTAS * 32 * WARPS, device="cuda")
    with cute_prof.profile_session(MAX_EVENTS, None, trace_path, device="cuda", export=True) as prof:
        compiled = _compile(launch, prof.tensor, data)
        compiled(cute_prof.buffer_arg(prof), from_dlpack(data), Int32(MAX_EVENTS), Int32(WORK))
    if save_recording:
        from cute_prof.storage import save_buffer

        save_buffer(save_recording, prof.tensor, cute_prof.default_tag_table(),
                    metadata={"device": torch.cuda.get_device_name(), "recorded": time.strftime("%Y-%m-%d"),
                              "source": "python -m cute_prof.example --save-recording"})
    return prof.trace


def compile_only() -> str:
    """Build the instrumented kernel for sm_90a without a GPU; returns a one-line report."""
    import tempfile

    import cutlass.cute as cute
    import torch
    from cutlass.base_dsl.compiler import DumpDir

    from cute_prof import layout

    launch = _define_kernel()
    buf = torch.zeros(layout.buffer_words(MAX_EVENTS), dtype=torch.int64)
    data = torch.zeros(CTAS * 32 * WARPS)
    with tempfile.TemporaryDirectory() as dump:
        compiled = _compile(launch, buf, data, cute.KeepPTX(), cute.GPUArch("sm_90a"), DumpDir(dump))
        ptx = compiled.__ptx__ or ""
        if os.path.exists(ptx[:512]):
            ptx = Path(ptx).read_text()
    return (f"compiled for sm_90a: {ptx.count('%globaltimer')} timer reads and "
            f"{ptx.count('atom.global.add.u64')} record atomics in the PTX")


def replay_recording(trace_path: str):
    import cute_prof
    from cute_prof.storage import load_trace

    trace = load_trace(RECORDING)
    trace.metadata["label"] = "RECORDING (decoded from cute_prof/data, not run on this machine)"
    cute_prof.events_to_perfetto(trace, trace_path)
    return trace


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cute_prof.example", description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", default=TRACE_PATH, help="trace path (default: %(default)s)")
    parser.add_argument("--save-recording", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    from cute_prof.analysis import summarize

    if _gpu_available():
        import torch

        print(f"GPU: {torch.cuda.get_device_name()}: running the example kernel there")
        trace = run_on_gpu(args.output, args.save_recording)
    else:
        print("No GPU here: compiling the kernel for sm_90a and replaying a buffer recorded on an H100/H200")
        try:
            print(compile_only())
        except Exception as exc:  # the replay below is still worth showing
            print(f"could not compile the kernel here ({type(exc).__name__}: {exc})")
        trace = replay_recording(args.output)
        print(f"RECORDING made on {trace.metadata.get('device', 'a GPU')} "
              f"({trace.metadata.get('recorded', 'date unknown')}); decoded here")
    print(summarize(trace))
    print(f"wrote {args.output}: open it at https://ui.perfetto.dev/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
