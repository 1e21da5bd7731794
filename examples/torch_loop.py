"""A PyTorch module that calls two instrumented CuTe DSL kernels in a loop, eagerly and from a
CUDA graph, under ``torch.profiler``; one profile buffer collects every launch, and
``cute_prof.merge`` puts the warps' regions inside the kernel slices of the profiler's trace.

    python examples/torch_loop.py --out-dir /tmp/loop      # needs a GPU

Writes ``torch_trace.json`` (the profiler's own export), ``recording.npz`` (our buffer),
``merged_trace.json`` (open it at https://ui.perfetto.dev/) and prints the alignment.

Two rules make CUDA graphs work:
* launch the CuTe DSL kernel on the stream that is being captured: the ``@cute.jit`` launcher
  takes a ``cuda.CUstream`` and passes ``stream=`` to ``.launch``; the caller hands it
  ``cuda.CUstream(torch.cuda.current_stream().cuda_stream)``. (On the default stream the
  capture records nothing: "The CUDA Graph is empty".)
* call ``buffer.next_launch()`` inside the capture before the kernels: it is a tiny torch
  kernel on the counter word, so every replay starts a new launch epoch and the decoder tells
  replays apart (the kernels of one replay differ by ``%gridid``).
"""


import argparse
import sys
import time
from pathlib import Path

CTAS = 4
WARPS = 4
STAGED_ITERS = 12  # staged kernel: records per warp
WORK = 600  # FMA steps per region per thread
EAGER_STEPS = 5
GRAPH_REPLAYS = 3
TAGS = ["step", "stage", "cta", "load", "compute"]
# records per launch of each kernel
STAGED_RECORDS = CTAS * WARPS * STAGED_ITERS
DIRECT_RECORDS = CTAS * (1 + 2 * WARPS)


def define_kernels():
    """(staged launcher, direct launcher): ``@cute.jit`` functions taking a stream."""
    import cuda.bindings.driver as cuda
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
    def staged_kernel(buf: cute.Tensor, data: cute.Tensor, max_events: Int32, work: Int32):
        """Every warp stages STAGED_ITERS "step" regions (WarpRecorder: one atomic per 32)."""
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        warp = cute.arch.warp_idx()
        gidx = bidx * (32 * WARPS) + tidx
        x = data[gidx]
        rec = cp.WarpRecorder(buf, max_events, bidx * WARPS + warp)
        for i in cutlass.range(STAGED_ITERS):
            t = rec.start()
            x = churn(x, work // 4)
            rec.stop(t, 0, payload=i)
        rec.flush()
        data[gidx] = x

    @cute.kernel
    def direct_kernel(buf: cute.Tensor, data: cute.Tensor, max_events: Int32, work: Int32):
        """A CTA region (thread 0) around per-warp load/compute regions (one atomic each)."""
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        warp = cute.arch.warp_idx()
        gidx = bidx * (32 * WARPS) + tidx
        track = 100 + bidx * (WARPS + 1)
        x = data[gidx]
        with cp.profile_region(buf, max_events, 2, track):
            with cp.profile_region(buf, max_events, 3, track + 1 + warp, guard="lane0"):
                x = churn(x, work // 4)
            with cp.profile_region(buf, max_events, 4, track + 1 + warp, guard="lane0"):
                x = churn(x, work * (1 + warp) // 2)
            data[gidx] = x
            cute.arch.sync_threads()

    @cute.jit
    def launch_staged(buf: cute.Tensor, data: cute.Tensor, max_events: Int32, work: Int32,
                      stream: cuda.CUstream):
        staged_kernel(buf, data, max_events, work).launch(
            grid=(CTAS, 1, 1), block=(32 * WARPS, 1, 1), stream=stream)

    @cute.jit
    def launch_direct(buf: cute.Tensor, data: cute.Tensor, max_events: Int32, work: Int32,
                      stream: cuda.CUstream):
        direct_kernel(buf, data, max_events, work).launch(
            grid=(CTAS, 1, 1), block=(32 * WARPS, 1, 1), stream=stream)

    return launch_staged, launch_direct


def current_stream():
    """The torch stream in use now (the capturing one inside ``torch.cuda.graph``)."""
    import cuda.bindings.driver as cuda
    import torch

    return cuda.CUstream(torch.cuda.current_stream().cuda_stream)


class InstrumentedStep:
    """A tiny "model step": a torch op, then the two instrumented CuTe kernels, all on the
    current stream. Holds the compiled kernels and the profile buffer."""

    def __init__(self, buffer, *, work: int = WORK):
        import torch
        import cutlass.cute as cute
        from cutlass import Int32
        from cutlass.cute.runtime import from_dlpack

        from cute_prof.device import buffer_arg

        self.buffer = buffer
        self.work = Int32(work)
        self.max_events = Int32(buffer.max_events)
        self.data = torch.rand(CTAS * 32 * WARPS, device="cuda")
        self.buf_arg = buffer_arg(buffer)
        self.data_arg = from_dlpack(self.data)
        staged, direct = define_kernels()
        args = (self.buf_arg, self.data_arg, self.max_events, self.work, current_stream())
        self.staged = cute.compile(staged, *args)
        self.direct = cute.compile(direct, *args)

    def launch_staged(self):
        self.staged(self.buf_arg, self.data_arg, self.max_events, self.work, current_stream())

    def launch_direct(self):
        self.direct(self.buf_arg, self.data_arg, self.max_events, self.work, current_stream())

    def run_into(self, buffer):
        """Both kernels, recording into ``buffer`` (e.g. ``profile_loop``'s ``target``)."""
        from cutlass import Int32

        from cute_prof.device import buffer_arg

        arg, cap = buffer_arg(buffer), Int32(buffer.max_events)
        self.staged(arg, self.data_arg, cap, self.work, current_stream())
        self.direct(arg, self.data_arg, cap, self.work, current_stream())

    def __call__(self):
        self.data.mul_(0.5).add_(0.25)  # an ordinary torch kernel between ours
        self.launch_staged()
        self.launch_direct()


def capture_graph(step, *, next_launch: bool = True):
    """A CUDA graph of one step; with ``next_launch`` every replay starts a new epoch."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(side):
        with torch.cuda.graph(graph, stream=side):
            if next_launch:
                step.buffer.next_launch()
            step()
    torch.cuda.current_stream().wait_stream(side)
    return graph


def run(out_dir: Path, *, eager_steps: int = EAGER_STEPS, replays: int = GRAPH_REPLAYS):
    """The whole example; returns (trace, merge report)."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    import cute_prof
    from cute_prof.merge import merge_torch_trace
    from cute_prof.storage import save_buffer
    from cute_prof.tags import as_tag_table

    out_dir.mkdir(parents=True, exist_ok=True)
    launches = eager_steps * 2 + replays * 2
    buffer = cute_prof.allocate_profile_buffer(launches * (STAGED_RECORDS + DIRECT_RECORDS))
    step = InstrumentedStep(buffer)
    step()  # warm-up (loads the kernels) before the capture
    graph = capture_graph(step)
    torch.cuda.synchronize()
    buffer.reset()
    torch.cuda.synchronize()

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as torch_prof:
        for i in range(eager_steps):
            with record_function(f"eager_step_{i}"):
                step()
        for i in range(replays):
            with record_function(f"graph_replay_{i}"):
                graph.replay()
        torch.cuda.synchronize()
    torch_trace = out_dir / "torch_trace.json"
    torch_prof.export_chrome_trace(str(torch_trace))

    trace = cute_prof.decode_buffer(buffer, TAGS, metadata={"device": torch.cuda.get_device_name()})
    save_buffer(out_dir / "recording.npz", buffer.tensor, as_tag_table(TAGS),
                metadata={"device": torch.cuda.get_device_name(), "recorded": time.strftime("%Y-%m-%d"),
                          "source": "examples/torch_loop.py"})
    report = merge_torch_trace(torch_trace, trace, out_dir / "merged_trace.json")
    return trace, report


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", default="torch_loop_out", type=Path)
    parser.add_argument("--draw", nargs=2, metavar=("MERGED_JSON", "PNG"),
                        help="only draw the picture of a merged trace (no GPU needed)")
    args = parser.parse_args(argv)
    if args.draw:
        draw_merged(*args.draw)
        return 0
    trace, report = run(args.out_dir)
    print(f"{len(trace)} records from {len(trace.launches)} launches "
          f"(expected {EAGER_STEPS * 2 + GRAPH_REPLAYS * 2})")
    for launch in trace.launches:
        print(f"  launch {launch['index']:2d} epoch {launch['epoch']} grid {launch['grid_id']:2d} "
              f"records {launch['records']:4d}  {launch.get('kernel')}")
    print(report.describe())
    return 0



def draw_merged(merged_path, picture_path, *, zoom_launch: int = -2):
    """A picture of a merged trace: the whole loop (CPU annotations, CUDA API calls, kernels)
    and a zoom on the instrumented kernel ``zoom_launch`` (by cute_prof launch index; -2:
    the staged kernel of the last graph replay) with our warps' regions inside its slice."""
    import json

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    events = json.loads(Path(merged_path).read_text())["traceEvents"]
    spans = [e for e in events if e.get("ph") == "X" and "dur" in e]
    rows = [("CPU: record_function", lambda e: e.get("cat") == "user_annotation", "tab:blue"),
            ("CPU: CUDA API", lambda e: e.get("cat") == "cuda_runtime", "tab:gray"),
            ("GPU stream: torch kernels", lambda e: e.get("cat") == "kernel"
             and "cute_prof_launch" not in e.get("args", {}), "tab:green"),
            ("GPU stream: instrumented CuTe kernels", lambda e: e.get("cat") == "kernel"
             and "cute_prof_launch" in e.get("args", {}), "tab:red")]
    fig, (whole, zoom) = plt.subplots(2, 1, figsize=(13, 8), gridspec_kw={"height_ratios": [1, 2]})
    for y, (label, keep, colour) in enumerate(rows):
        bars = [(float(e["ts"]), max(float(e["dur"]), 0.5)) for e in spans if keep(e)]
        whole.broken_barh(bars, (len(rows) - 1 - y + 0.1, 0.8), color=colour)
    whole.set_yticks(range(len(rows)), [r[0] for r in rows][::-1], fontsize=8)
    whole.set_xlabel("us (profiler clock, rebased)")
    whole.set_title("torch.profiler trace of 5 eager steps and 3 CUDA-graph replays, merged with cute_prof")
    kernels = sorted((e for e in spans if "cute_prof_launch" in e.get("args", {})),
                     key=lambda e: e["args"]["cute_prof_launch"])
    kernel = kernels[zoom_launch]
    launch = kernel["args"]["cute_prof_launch"]
    ours = [e for e in spans if e.get("cat") == "cute_prof" and e["args"]["launch"] == launch]
    tracks = sorted({e["tid"] for e in ours})
    names = {e["tid"]: e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "thread_name"}
    colours = {}
    for e in ours:
        colours.setdefault(e["name"], f"C{len(colours)}")
    k0, k1 = float(kernel["ts"]), float(kernel["ts"]) + float(kernel["dur"])
    zoom.broken_barh([(k0, k1 - k0)], (len(tracks) + 0.1, 0.8), color="tab:red")
    for y, track in enumerate(tracks):
        for e in (e for e in ours if e["tid"] == track):
            zoom.broken_barh([(float(e["ts"]), float(e["dur"]))], (len(tracks) - 1 - y + 0.15, 0.7),
                             color=colours[e["name"]], edgecolor="white", linewidth=0.3)
    zoom.axvline(k0, color="tab:red", lw=0.8, ls="--")
    zoom.axvline(k1, color="tab:red", lw=0.8, ls="--")
    labels = [names.get(t, str(t)).split("cute_prof ")[-1] for t in tracks][::-1]
    zoom.set_yticks(range(len(tracks) + 1), labels + ["CUPTI kernel slice"], fontsize=7)
    zoom.set_xlim(k0 - 0.05 * (k1 - k0), k1 + 0.05 * (k1 - k0))
    zoom.set_xlabel("us")
    zoom.set_title(f"zoom: launch {launch} ({kernel['name'][:40]}...): each warp's regions inside "
                   f"the CUPTI slice", fontsize=9)
    zoom.legend(handles=[plt.Rectangle((0, 0), 1, 1, color=c) for c in colours.values()],
                labels=list(colours), fontsize=7, loc="lower right")
    whole.axvline(k0, color="black", lw=0.6)
    fig.tight_layout()
    fig.savefig(picture_path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
