"""Dump the SASS of the overhead probe for each write path (needs nvdisasm), to count what
one record costs in instructions (``bench/parts/overhead.py --sass-dir`` does the same on the GPU).

    python bench/tools/sass_probe.py OUTDIR
"""
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "parts"))

import torch  # noqa: E402
import cutlass.cute as cute  # noqa: E402
from cutlass import Int32  # noqa: E402
from cutlass.base_dsl.compiler import DumpDir  # noqa: E402
from cutlass.cute.runtime import from_dlpack  # noqa: E402

import overhead as O  # noqa: E402
from cute_prof.device import buffer_arg  # noqa: E402
from cute_prof.sass import disassemble  # noqa: E402

out = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp()
os.makedirs(out, exist_ok=True)
launch = O.build()
buf = torch.zeros(1 + 4 * 16, dtype=torch.int64)
data = torch.zeros(O.CTAS * O.THREADS)
for mode in O.MODES:  # F = 64, every warp recording every iteration
    d = tempfile.mkdtemp()
    compiled = cute.compile[cute.KeepCUBIN(), cute.KeepPTX(), cute.GPUArch("sm_90a"), DumpDir(d)](
        launch, buffer_arg(buf), from_dlpack(data), Int32(16), Int32(0), Int32(O.WARPS), 64, mode, True)
    cubins = [os.path.join(d, f) for f in os.listdir(d) if f.endswith(".cubin")]
    if not cubins:
        print(mode, "no cubin", os.listdir(d))
        continue
    sass = disassemble(cubins[0])
    with open(os.path.join(out, f"probe_{mode}.sass"), "w") as fh:
        fh.write(sass)
    instr = [l for l in sass.splitlines() if re.search(r"/\*[0-9a-f]{4}\*/", l)]
    print(f"{mode}: {len(instr)} SASS instructions in the kernel; "
          f"S2UR/S2R globaltimer reads: {sum('GLOBALTIMER' in l for l in instr)}, "
          f"CS2R: {sum('CS2R' in l for l in instr)}, FFMA: {sum('FFMA' in l for l in instr)}")
