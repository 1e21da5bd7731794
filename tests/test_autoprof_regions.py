"""Opt-in regions in zero-edit mode, compiled for sm_90a on a CPU box: ``with region(tag):``
and ``mark(tag)`` inside a kernel record on the warp's zero-edit slice inside
``autoprofile()`` and emit nothing outside it."""

from __future__ import annotations


import pytest
from sm90_child import compile_in_child

pytest.importorskip("cutlass")
pytest.importorskip("torch")


CHILD = r"""
import json, os, sys
import cutlass.cute as cute
from cutlass import Int32
import cute_prof
from tests.zero_edit_region_kernel import launch

def ptx():
    import torch
    from cutlass.cute.runtime import from_dlpack
    x = from_dlpack(torch.zeros(64, dtype=torch.int32))
    text = cute.compile(launch, x, Int32(4)).__ptx__
    return open(text).read() if os.path.exists(text[:512]) else text

before = ptx()
with cute_prof.autoprofile(per_warp=16, max_warps=8, device="cpu") as prof:
    recorded = ptx()
rec = prof.recordings[0]
json.dump({"before": before, "recorded": recorded, "closed": rec.closed,
           "sites": [s.to_dict() for s in rec.sites.values()]}, open(sys.argv[1], "w"))
"""


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    return compile_in_child(tmp_path_factory.mktemp("regions"), CHILD, timeout=600)


def test_outside_the_block_a_region_emits_nothing(compiled):
    assert "%globaltimer" not in compiled["before"]
    assert "st.global.v2" not in compiled["before"]


def test_inside_the_block_the_region_and_the_mark_record(compiled):
    sites = {s["name"]: s for s in compiled["sites"]}
    assert sites["body"]["op"] == "region" and sites["body"]["kind"] == "work"
    assert sites["done"]["op"] == "mark" and sites["done"]["kind"] == "signal"
    ptx = compiled["recorded"]
    # the region: a timer read before the loop and a START + SPAN pair after it; the mark:
    # one word; then the slice's close
    assert ptx.count("%globaltimer_lo") == 3
    assert ptx.count("st.global.v2.u32") == 3
    assert compiled["closed"] and ".local" not in ptx
