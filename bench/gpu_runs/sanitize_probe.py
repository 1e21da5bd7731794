"""Run the overflow/clamp/unaligned cases once, for compute-sanitizer memcheck (the flat
buffer's write paths, then the slices path's records and span pairs, every buffer exactly
sized):

    compute-sanitizer --tool memcheck --error-exitcode 3 python bench/gpu_runs/sanitize_probe.py
"""
import os
import sys

import torch
from cutlass import Int32, Int64
from cutlass.cute.runtime import from_dlpack
import cutlass.cute as cute

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import kernels as K  # noqa: E402

from cute_prof.buffer import allocate_profile_buffer  # noqa: E402
from cute_prof.device import buffer_arg as cp_buffer_arg  # noqa: E402
from cute_prof.decode import decode_buffer  # noqa: E402
from cute_prof import layout  # noqa: E402

CTAS = 264
checked = 0
for variant in ("elected", "staged", "profile"):
    prof = allocate_profile_buffer(16, device="cuda")
    data = torch.randn(CTAS * K.THREADS_PER_CTA, device="cuda")
    fn = cute.compile(K.launch_probe, cp_buffer_arg(prof.tensor), from_dlpack(data), Int32(16), Int64(0),
                      Int32(1), Int32(-1), variant, CTAS)
    attempted = CTAS * K.VARIANTS[variant][0]
    for capacity in (1, 100, attempted - 1):
        # exact-size tensor (no slack after it) and a max_events far beyond it
        for max_events in (capacity, 10 * attempted):
            buf = torch.zeros(layout.buffer_words(capacity), dtype=torch.int64, device="cuda")
            fn(cp_buffer_arg(buf), from_dlpack(data), Int32(max_events), Int64(0), Int32(1), Int32(-1))
            torch.cuda.synchronize()
            trace = decode_buffer(buf)
            assert trace.attempted == attempted and len(trace.events) == capacity, (variant, capacity)
            assert trace.overflow == attempted - capacity
            checked += 1

# the slices path: per-warp capacities of one word, one short, odd, and fewer slices than warps
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_slices_gpu as S  # noqa: E402

for run, words in ((S._run, S.PER_WARP_RECORDS), (S._run_spans, S.SPAN_WORDS)):
    for per_warp, n_slices in ((1, S.N_WARPS), (words - 1, S.N_WARPS - 3), (7, 5)):
        trace = decode_buffer(run(n_slices, per_warp))
        assert trace.attempted == S.N_WARPS * words, (run.__name__, per_warp, n_slices)
        assert trace.overflow == S.N_WARPS * words - n_slices * per_warp and trace.incomplete == 0
        checked += 1
print(f"sanitize_probe: {checked} overflowing launches decoded exactly")
