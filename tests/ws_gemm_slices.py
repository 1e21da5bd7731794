"""Host-side helpers for the ws_gemm "slices" recorder tests (CPU and GPU): a slices buffer
written on the host exactly as ``RoleRecorder(write_path="slices")`` leaves it, and the
per-warp record order a decoded slices trace keeps, so a run whose slices overflowed can be
compared with a full one; and the checks of the slices path in a ws_gemm kernel's PTX."""

from __future__ import annotations

import re

import numpy as np

from cute_prof import layout


def slices_words(regions, *, n_slices: int, per_warp: int, warps_per_cta: int,
                 open_lead_ns: int = 5) -> np.ndarray:
    """A slices buffer from ``regions``: rows ``(start, dur, tag_id, cta, tid, warp, payload,
    sm)`` in each warp's program order. Each row is a START word (start's low 32 bits, payload
    bits 13..31) and a SPAN word (end's low 32 bits, tag, payload bits 0..12) in slice
    ``cta * warps_per_cta + warp``, which is opened ``open_lead_ns`` before the warp's first
    start and closed with the warp's exact word count; words past ``per_warp`` are dropped, as
    the device drops them."""
    words = np.zeros(layout.slices_buffer_words(n_slices, per_warp), dtype=np.int64)
    words[: layout.SLICES_HEADER_WORDS] = layout.slices_header(n_slices, per_warp)
    stride = layout.SLICE_HEADER_WORDS + per_warp
    by_slice: dict = {}
    for row in regions:
        by_slice.setdefault(int(row[3]) * warps_per_cta + int(row[5]), []).append(row)
    for index, rows in by_slice.items():
        first = layout.SLICES_HEADER_WORDS + index * stride
        _, _, _, _, tid, warp, _, sm = rows[0]
        words[first] = int(rows[0][0]) - open_lead_ns
        words[first + 1] = (int(tid) | (int(sm) << layout.SM_SHIFT) | (int(warp) << layout.WARP_SHIFT)
                            | (layout.SLICE_OPEN_MAGIC << layout.SLICE_MAGIC_SHIFT))
        pairs = []
        for start, dur, tag, _, _, _, payload, _ in rows:
            end = int(start) + int(dur)
            pairs.append((layout.slice_start_high(int(payload)) << 32) | (int(start) & 0xFFFFFFFF))
            high = layout.slice_record_high(int(tag), kind=layout.SLICE_KIND_SPAN,
                                            payload=int(payload) & layout.MAX_SLICE_PAYLOAD)
            pairs.append((high << 32) | (end & 0xFFFFFFFF))
        kept = [layout.as_int64(w) for w in pairs[:per_warp]]
        body = first + layout.SLICE_HEADER_WORDS
        words[body: body + len(kept)] = kept
        words[first + 2] = len(pairs) | (layout.SLICE_CLOSED_MAGIC << layout.SLICE_MAGIC_SHIFT)
    return words


def stored_order(events) -> dict:
    """{tid: [(tag, payload), ...]} in the order each warp stored its regions (a slices
    trace's ``slot`` column), not the trace's time order."""
    order = np.lexsort((events["slot"], events["tid"]))
    ev = events[order]
    out: dict = {}
    for tid, tag, payload in zip(ev["tid"].tolist(), ev["tag"].tolist(), ev["payload"].tolist()):
        out.setdefault(tid, []).append((tag, payload))
    return out


def prefix_mismatches(short_events, full_events) -> list:
    """Warps whose stored regions in ``short_events`` are not the first ones of the same warp
    in ``full_events`` (same tags and payloads, same order); empty when every warp's is."""
    full = stored_order(full_events)
    return [tid for tid, seq in stored_order(short_events).items()
            if full.get(tid, [])[: len(seq)] != seq]


# ------------------------------------------------------------------ PTX


def _matches(text: str, pattern: str) -> int:
    return len(re.findall(pattern, text))


def _inline_asm_blocks(text: str) -> list:
    """(offset, body) of every inline-asm block (the recorders' device ops are inline asm)."""
    return [(mo.start(), mo.group(1))
            for mo in re.finditer(r"// begin inline asm\n(.*?)// end inline asm", text, flags=re.S)]


REDUCTION = r"(?<![\w.])red\."  # red.global..., not "shared." or "bar.red"


def check_slices_record_sites(text: str, level0: str, *, producer_sites: int,
                              consumer_sites: int) -> None:
    """The slices write path in a ws_gemm kernel's PTX (non-persistent and persistent):
    every region is one inline-asm block of two ``st.global.v2.u32`` (the START word, then the
    SPAN word), no atomic and no shuffle anywhere, one reduction per recording warp (the
    close's count of records lost for want of a slice) after that warp's loop."""
    assert not re.search(r"(?<![\w.])atom\.", text)
    # the shuffles are the kernel's own (warp-uniform broadcasts): level 0 has the same
    assert _matches(text, r"shfl\.sync") == _matches(level0, r"shfl\.sync")
    blocks = _inline_asm_blocks(text)
    consumer_branch = text.index("setmaxnreg.inc.sync.aligned")
    spans = [(at, b) for at, b in blocks if "st.global.v2.u32" in b]
    assert [at < consumer_branch for at, _ in spans] == [True] * producer_sites + [False] * consumer_sites
    assert _matches(text, r"st\.global\.v2\.u32") == 2 * len(spans)
    start_kind = str(layout.slice_start_high(0))  # START, written, payload bits 13..31 or'ed in
    span_kind = str(layout.slice_record_high(0, kind=layout.SLICE_KIND_SPAN))
    for _, b in spans:
        stores = re.findall(r"@%?\w+ st\.global\.v2\.u32 \[a(\+-8)?\], \{[^,]+, (\w+)\};", b)
        assert stores == [("+-8", "shi"), ("", "hi")], b
        assert re.search(rf"or\.b32 shi, shi, {start_kind};", b), b
        assert re.search(rf"or\.b32 hi, hi, {span_kind};", b), b
        assert "atom" not in b and "shfl" not in b
    # one close per recording warp (producer, consumer), each after its warp's loop: the
    # producer's after its last TMA load, the consumer's after its last wgmma retired
    closes = [at for at, b in blocks if re.search(REDUCTION, b)]
    assert len(closes) == 2 and _matches(text, REDUCTION) == 2
    closed = str(layout.SLICE_CLOSED_MAGIC << layout.SLICE_MAGIC_SHIFT)
    assert all(closed in b for _, b in blocks if re.search(REDUCTION, b))
    last_tma = max(mo.start() for mo in re.finditer(
        r"cp\.async\.bulk\.tensor\.2d\.shared::(cta|cluster)\.global", text))
    last_wait = max(mo.start() for mo in re.finditer(r"wgmma\.wait_group", text))
    assert last_tma < closes[0] < consumer_branch < last_wait < closes[1]
    # the full 64-bit timer only opens and closes the two slices (the close's long-open
    # check); each region boundary reads the low word
    assert len([b for _, b in blocks if "%globaltimer;" in b]) == 4
    assert _matches(text, r"%globaltimer;") == 4
