"""Launch identity in the PTX (sm_90a, no GPU needed): every claim masks the epoch out of the
slot and stores it in the tid word; the staged path does it at the flush, never per record."""

import os
import sys

import pytest

pytest.importorskip("cutlass")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import kernels as K  # noqa: E402
from test_ptx import asm_blocks, probe_ptx  # noqa: E402

from cute_prof import layout  # noqa: E402

MASK = f"and.b64 s, s, {layout.COUNTER_MASK};"
SHIFT = f"shr.u64 ep, s, {layout.LAUNCH_EPOCH_SHIFT};"
EPOCH_INSERT = f"bfi.b64 w3, ep, w3, {layout.EPOCH_SHIFT}, {layout.EPOCH_BITS};"


@pytest.mark.parametrize("variant", ["profile", "elected", "instant", "region"])
def test_one_atomic_ops_split_the_counter_word(variant):
    blocks = [b for b in asm_blocks(probe_ptx(variant)) if "atom.global.add.u64" in b]
    assert blocks
    for block in blocks:
        atom = block.index("atom.global.add.u64 s")
        # the slot is masked before the bound check, so epochs never look like overflow
        assert atom < block.index(SHIFT) < block.index(MASK) < block.index("setp.lt.and.s64 p, s, cap, p;")
        assert "mov.u64 gid, %gridid;" in block
        assert f"bfi.b64 w3, gid, w3, {layout.GRID_SHIFT}, {layout.GRID_BITS};" in block
        assert block.index(EPOCH_INSERT) < block.index("st.global")


def test_staged_records_pay_nothing_per_record():
    ptx = probe_ptx("staged")
    blocks = asm_blocks(ptx)
    stages = [b for b in blocks if "setp.eq.u32 f, c, 32;" in b]
    flushes = [b for b in blocks if "setp.eq.u32 f, n, 0;" in b]
    constants = [b for b in blocks if "%laneid" in b and "%smid" in b]
    assert stages and len(flushes) == 1 and len(constants) == 1
    assert "%gridid" in constants[0]  # read once per recorder, folded into the tid word
    for block in stages + flushes:
        assert "%gridid" not in block
        claim = block.index("@l0 atom.global.add.u64 base")
        epoch = block.index(f"shr.u64 ep, base, {layout.LAUNCH_EPOCH_SHIFT};")
        assert claim < epoch < block.index(f"and.b64 base, base, {layout.COUNTER_MASK};")
        assert EPOCH_INSERT in block
    # everything launch-related in a stage block sits behind the once-per-32 branch
    for block in stages:
        assert block.index("@!f bra.uni") < block.index("shr.u64 ep")
    assert K.VARIANTS["staged"] is not None
