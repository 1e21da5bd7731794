"""A GEMM nobody here wrote: NVIDIA's CuTe DSL Hopper persistent dense GEMM example
(HopperWgmmaGemmPersistentKernel), as a benchmark case beside quack's GEMM and ws_gemm.

The file is NVIDIA's, unmodified and kept out of git: ``.cutlass_examples/dense_gemm_persistent.py``
at the repository root, copied from github.com/NVIDIA/cutlass commit 7107b05535f8 (last changed
in cb37157db50d, "v4.5 tag update"), path
``examples/python/CuTeDSL/cute/hopper/kernel/dense_gemm/dense_gemm_persistent.py``
(``.cutlass_examples/SOURCE.txt``). The folder is listed in ``.git/info/exclude``; a GPU run
carries it to the GPU machine as an ignored path (``carry: [".cutlass_examples"]``).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

FOLDER = Path(__file__).resolve().parents[2] / ".cutlass_examples"
EXAMPLE = FOLDER / "dense_gemm_persistent.py"


def load_example():
    """The example as a module (named ``dense_gemm_persistent``: its kernels' names carry it)."""
    if not EXAMPLE.is_file():
        raise FileNotFoundError(f"{EXAMPLE.name} is not in {FOLDER} (copy it from NVIDIA/cutlass: "
                                f"see the docstring of {__name__})")
    spec = importlib.util.spec_from_file_location("dense_gemm_persistent", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cutlass_example_gemm(m: int, n: int, k: int, tile=(128, 256), cluster=(2, 1)):
    """C = A B^T (A m x k, B n x k, both k-major; C m x n, n-major), bf16 in, fp32 accumulate,
    bf16 out, compiled once through ``cute.compile``; returns a callable that launches it on
    torch's current stream. (The example's own dtype check lists fp16, not bf16; its kernel
    takes any 16-bit A/B and builds bf16 WGMMAs.)"""
    import cuda.bindings.driver as cuda
    import cutlass
    import cutlass.cute as cute
    import torch
    from cutlass.cute.runtime import from_dlpack

    example = load_example()

    def operand(rows, cols, fill):  # (rows, cols, 1) with cols contiguous, as the example's run()
        t = fill(1, rows, cols, device="cuda", dtype=torch.bfloat16).permute(1, 2, 0)
        return t, from_dlpack(t, assumed_align=16).mark_layout_dynamic(leading_dim=1)

    (ta, a), (tb, b), (tc, c) = (operand(m, k, torch.randn), operand(n, k, torch.randn),
                                 operand(m, n, torch.empty))
    # accumulator, tile (M, N), cluster (M, N), swizzle 1, raster along M
    gemm = example.HopperWgmmaGemmPersistentKernel(cutlass.Float32, tuple(tile), tuple(cluster),
                                                   1, True)
    clusters = cutlass.utils.HardwareInfo().get_max_active_clusters(cluster[0] * cluster[1])

    def stream():
        return cuda.CUstream(torch.cuda.current_stream().cuda_stream)

    compiled = cute.compile(gemm, a, b, c, clusters, stream())

    def launch():
        compiled(a, b, c, stream())

    launch.tensors = (ta, tb, tc)  # keeps them alive; torch (m, k, 1), (n, k, 1), (m, n, 1)
    return launch
