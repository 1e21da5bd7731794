"""Reading what ``cute-prof record`` saved: a folder with ``run.json`` and ``pool.npy``.

:class:`RecordedRun` memory-maps the raw pool and decodes on first read: the launch table
from the slice headers (and each slice's last record), a launch's trace from its own slices.
A slice names its kernel and that kernel's launch epoch; ``run.json`` lists each recorded
launch with the same epoch, its index among its kernel name's launches, its stream. After a
CUDA graph captured one of a kernel's launches, that kernel's launches are numbered by epoch
and marked ``replay`` (the host never saw the replays).

Owns the run folder's reading, the launch table and the verbs' choice of kernels and
launches (stage 7, beside the session); it may not import the CLI.
"""

from __future__ import annotations

import dataclasses
import json
import re
from functools import cached_property
from pathlib import Path

import numpy as np

from . import layout
from .analysis.zero_edit import finish_zero_edit_trace
from .decode_slices import decode_slices, launch_slices_buffer, pool_slices
from .errors import ProfileBufferError
from .record_run import POOL_FILE, RUN_FILE, RUN_FORMAT
from .trace import EVENT_DTYPE, Trace, stack_traces

__all__ = ["LaunchRow", "RecordedRun", "is_run_folder", "short_kernel_name"]

_LOW32 = np.int64(0xFFFFFFFF)


def is_run_folder(path) -> bool:
    path = Path(path)
    return path.is_dir() and (path / RUN_FILE).is_file()


def short_kernel_name(name: str, width: int = 64) -> str:
    """A CuTe DSL kernel's name without the DSL's prefix and argument mangling."""
    short = re.sub(r"^kernel_cutlass_(kernel_)?", "", name)
    short = re.split(r"_object_at_|_tensor(?:ptr)?[0-9a-z]|_Tensorgmem", short)[0] or name
    return short if len(short) <= width else short[:width - 1] + "…"


@dataclasses.dataclass
class LaunchRow:
    """One recorded launch: where its slices are and what they hold."""

    number: int  # position in the run's table (start order)
    kernel_id: int
    kernel: str
    launch: int | None  # index among the launches of its kernel name (None: a graph replay)
    epoch: int
    slices: int
    ctas: int
    records: int
    attempted: int
    lost: int
    start_ns: int
    end_ns: int
    stream: int | None
    replay: bool
    order_begin: int = 0  # where its slices start in the run's slice order
    no_slice: int = 0  # records of its warps that found no slice (the pool's lost table)

    @property
    def duration_ns(self) -> int:
        return max(self.end_ns - self.start_ns, 0)

    def label(self) -> str:
        which = f"launch {self.launch}" if self.launch is not None else f"replay epoch {self.epoch}"
        return f"{short_kernel_name(self.kernel)} {which}"


class RecordedRun:
    """A ``cute-prof record`` output folder, decoded lazily."""

    def __init__(self, path):
        self.path = Path(path)
        if not is_run_folder(self.path):
            raise ProfileBufferError(f"{self.path}: not a cute-prof record folder (no {RUN_FILE})")
        try:
            self.info = json.loads((self.path / RUN_FILE).read_text())
        except (OSError, ValueError) as error:
            raise ProfileBufferError(f"{self.path / RUN_FILE}: unreadable ({error})") from error
        if self.info.get("format") != RUN_FORMAT:
            raise ProfileBufferError(f"{self.path / RUN_FILE}: not a cute-prof run "
                                     f"(format {self.info.get('format')!r})")
        self.kernels = {int(k["id"]): k for k in self.info.get("kernels", [])}

    @cached_property
    def words(self) -> np.ndarray | None:
        pool = self.path / POOL_FILE
        if not pool.is_file():
            return None
        words = np.load(pool, mmap_mode="r")
        if words.dtype != np.int64 or words.ndim != 1 or words.shape[0] < layout.SLICES_HEADER_WORDS:
            raise ProfileBufferError(f"{pool}: not a pooled slices buffer")
        return words

    @cached_property
    def _slices(self) -> dict:
        if self.words is None:
            return {"kernel": np.zeros(0, np.int64), "epoch": np.zeros(0, np.int64),
                    "lost": np.zeros((layout.MAX_POOL_KERNELS, layout.POOL_LOST_EPOCHS), np.int64),
                    "claimed": 0, "per_warp": 0, "slices": 0}
        return pool_slices(self.words)

    @cached_property
    def launches(self) -> list[LaunchRow]:
        """Every recorded launch, in start order (from the slice headers only)."""
        sl = self._slices
        opened = np.flatnonzero(sl["kernel"] >= 0)
        host = self._host_launches()
        rows: list[LaunchRow] = []
        self._order = np.zeros(0, np.int64)
        if opened.size:
            key = sl["kernel"][opened] * (1 << 40) + sl["epoch"][opened]
            order = opened[np.argsort(key, kind="stable")]
            key_sorted = sl["kernel"][order] * (1 << 40) + sl["epoch"][order]
            first = np.r_[True, key_sorted[1:] != key_sorted[:-1]]
            starts = np.flatnonzero(first)
            stats = self._slice_stats(order)
            bounds = np.r_[starts, order.size]
            for i, begin in enumerate(starts):
                end = bounds[i + 1]
                kernel, epoch = int(sl["kernel"][order[begin]]), int(sl["epoch"][order[begin]])
                entry = host.get((kernel, epoch))
                lost_table = int(sl["lost"][kernel, epoch % layout.POOL_LOST_EPOCHS]) if (
                    kernel < layout.MAX_POOL_KERNELS) else 0
                part = slice(begin, end)
                rows.append(LaunchRow(
                    number=0, kernel_id=kernel, kernel=self._kernel_name(kernel),
                    launch=entry["launch"] if entry else None, epoch=epoch,
                    slices=int(end - begin), ctas=int(np.unique(stats["cta"][part]).size),
                    records=int(stats["stored"][part].sum()),
                    attempted=int(stats["attempted"][part].sum()) + lost_table,
                    lost=int(stats["overflow"][part].sum()) + lost_table,
                    start_ns=int(stats["open"][part].min()), end_ns=int(stats["last"][part].max()),
                    stream=entry.get("stream") if entry else None, replay=entry is None,
                    order_begin=int(begin), no_slice=lost_table))
            self._order = order
        seen = {(r.kernel_id, r.epoch) for r in rows}
        for (kernel, epoch), entry in host.items():  # recorded launches that kept no slice
            if (kernel, epoch) in seen:
                continue
            lost = int(sl["lost"][kernel, epoch % layout.POOL_LOST_EPOCHS]) if (
                kernel < layout.MAX_POOL_KERNELS) else 0
            rows.append(LaunchRow(number=0, kernel_id=kernel, kernel=self._kernel_name(kernel),
                                  launch=entry["launch"], epoch=epoch, slices=0, ctas=0,
                                  records=0, attempted=lost, lost=lost, start_ns=0, end_ns=0,
                                  stream=entry.get("stream"), replay=False, no_slice=lost))
        rows.sort(key=lambda r: (r.start_ns == 0, r.start_ns, r.kernel_id, r.epoch))
        for number, row in enumerate(rows):
            row.number = number
        return rows

    def _kernel_name(self, kernel: int) -> str:
        return self.kernels.get(kernel, {}).get("name", f"kernel id {kernel}")

    def _host_launches(self) -> dict:
        """(kernel id, epoch) -> the host's entry, for kernels no graph captured before."""
        found, captured = {}, set()
        for entry in self.info.get("launches", []):
            kernel = int(entry["kernel_id"])
            if entry.get("captured"):
                captured.add(kernel)
            if kernel in captured or entry.get("epoch") is None:
                continue
            found[(kernel, int(entry["epoch"]))] = entry
        return found

    def _slice_stats(self, rows: np.ndarray) -> dict:
        """Per slice in ``rows``, from its header and last record: CTA, records stored and
        attempted, overflow, open time and last record's time."""
        words, per_warp = self.words, self._slices["per_warp"]
        stride = layout.SLICE_HEADER_WORDS + per_warp
        at = layout.SLICES_HEADER_WORDS + rows.astype(np.int64) * stride
        opened_ns, ident, closing, fit_word = (np.asarray(words[at + i]) for i in range(4))
        closed = ((closing >> layout.SLICE_MAGIC_SHIFT) & 0x7F) == layout.SLICE_CLOSED_MAGIC
        fits = np.minimum(fit_word & _LOW32, per_warp)
        counts = np.where(closed, closing & _LOW32, 0)
        stored = np.where(closed, np.minimum(counts, fits), 0)
        bad = np.flatnonzero(~closed)  # unclosed warps (a crash): count the leading written
        if bad.size:
            column = np.arange(per_warp)
            written = np.asarray(words[(at[bad] + layout.SLICE_HEADER_WORDS)[:, None]
                                       + column[None, :]]) < 0
            written &= column[None, :] < fits[bad][:, None]
            stored[bad] = np.where(written.all(axis=1), per_warp, np.argmin(written, axis=1))
        attempted = np.where(closed, counts, stored)
        last_at = at + layout.SLICE_HEADER_WORDS + np.maximum(stored - 1, 0)
        last = np.asarray(words[last_at]) & _LOW32
        end = np.where(stored > 0, opened_ns + ((last - (opened_ns & _LOW32)) & _LOW32), opened_ns)
        return {"cta": ident & _LOW32, "stored": stored, "attempted": attempted,
                "overflow": np.maximum(attempted - stored, 0), "open": opened_ns, "last": end}

    def torch_trace(self) -> Path | None:
        """The torch.profiler trace the program exported last, if it still exists."""
        found = [Path(p) for p in self.info.get("torch_traces", []) if Path(p).is_file()]
        return found[-1] if found else None

    # ------------------------------------------------------------------ selection
    def select(self, *, kernel: str | None = None, launch: str | int | None = None) -> list[LaunchRow]:
        """Launches of kernels named with ``kernel`` in them, of index ``launch`` within their
        kernel name (``3``, ``"2:5"``, ``"1,4"``); all by default."""
        rows = self.launches
        if kernel is not None:
            rows = [r for r in rows if kernel in r.kernel]
            if not rows:
                names = sorted({short_kernel_name(r.kernel) for r in self.launches})
                raise ProfileBufferError(f"--kernel {kernel!r} matches no recorded kernel "
                                         f"(recorded: {names or 'none'})")
        if launch is not None:
            wanted = _launch_set(launch)
            rows = [r for r in rows if r.launch is not None and wanted(r.launch)]
            if not rows:
                raise ProfileBufferError(f"--launch {launch} matches no recorded launch")
        return rows

    # ------------------------------------------------------------------ decoding
    def trace(self, row: LaunchRow) -> Trace:
        """One launch decoded, named like an ``autoprofile()`` trace."""
        kernel = self.kernels.get(row.kernel_id, {})
        if row.slices:
            slices = self._order[row.order_begin:row.order_begin + row.slices]
            buffer = launch_slices_buffer(self.words, slices, lost=row.no_slice)
        else:  # every warp found no slice: a buffer of no slice, its losses counted
            buffer = np.array(layout.slices_header(0, 1), dtype=np.int64)
            buffer[2] = row.no_slice
        meta = {"autoprof": kernel.get("metadata", {}), "kernel": row.kernel,
                "run_launch": {"number": row.number, "launch": row.launch, "epoch": row.epoch,
                               "stream": row.stream, "replay": row.replay}}
        trace = decode_slices(buffer, list(kernel.get("tags", [])), metadata=meta)
        return finish_zero_edit_trace(trace)

    def combined_trace(self, rows: list[LaunchRow]) -> Trace:
        """Several launches in one trace: each launch its own group of tracks (tids moved
        apart per launch), tags merged by name."""
        traces = [self.trace(r) for r in rows]
        if len(traces) == 1:
            return traces[0]
        parts, names, stride = stack_traces(traces)
        track_names, launches = {}, []
        for number, (row, trace, ev) in enumerate(zip(rows, traces, parts)):
            for tid, name in trace.track_names.items():
                track_names[number * stride + int(tid)] = name
            ev["launch"] = number
            launches.append({"index": number, "name": row.label(), "kernel": row.kernel,
                             "start_ns": row.start_ns, "end_ns": row.end_ns,
                             "first_ns": row.start_ns, "last_ns": row.end_ns,
                             "tid_base": number * stride})
        events = np.concatenate(parts) if parts else np.zeros(0, dtype=EVENT_DTYPE)
        events = events[np.argsort(events["start_ns"], kind="stable")]
        return Trace(events=events, tag_names=names,
                     capacity=sum(t.capacity for t in traces),
                     attempted=sum(t.attempted for t in traces),
                     overflow=sum(t.overflow for t in traces),
                     incomplete=sum(t.incomplete for t in traces),
                     invalid=sum(t.invalid for t in traces),
                     metadata={"run": {"path": str(self.path), "launches": len(rows)}},
                     launches=launches, track_names=track_names)

    # ------------------------------------------------------------------ summary
    def summary(self, rows: list[LaunchRow] | None = None) -> dict:
        """Kernels and launches (time share, records, lost) and what was not recorded."""
        rows = self.launches if rows is None else rows
        kernels: dict[str, dict] = {}
        total = sum(r.duration_ns for r in rows) or 1
        for r in rows:
            k = kernels.setdefault(r.kernel, {"kernel": r.kernel, "launches": 0, "time_ns": 0,
                                              "records": 0, "lost": 0})
            k["launches"] += 1
            k["time_ns"] += r.duration_ns
            k["records"] += r.records
            k["lost"] += r.lost
        for k in kernels.values():
            k["time_share"] = k["time_ns"] / total
        info = self.info
        return {
            "program": info.get("program"), "exit_reason": info.get("exit_reason"),
            "device": info.get("device_name"), "kernels": sorted(kernels.values(),
                                                                 key=lambda k: -k["time_ns"]),
            "launches": [dataclasses.asdict(r) | {"label": r.label()} for r in rows],
            "counts": info.get("counts", {}), "unknown_launches": info.get("unknown_launches", {}),
            "skipped_kernels": info.get("skipped_kernels", []),
            "selection": info.get("selection", {}), "notes": info.get("notes", []),
            "cutlass_imported": info.get("cutlass_imported", False),
        }

    def format_summary(self, rows: list[LaunchRow] | None = None, *, max_rows: int = 20) -> str:
        s = self.summary(rows)
        lines = [f"cute-prof run {self.path}: {' '.join(s['program'] or [])}"]
        if s["device"]:
            lines[0] += f" on {s['device']}"
        if self.info.get("install_error"):
            lines.append(f"nothing recorded: the recording could not be set up "
                         f"({self.info['install_error']})")
        elif not s["cutlass_imported"]:
            lines.append("nothing recorded: the program never imported cutlass (the CuTe DSL)")
        elif not s["kernels"] and not s["counts"]:
            compiled = [short_kernel_name(k["name"]) for k in self.kernels.values()]
            lines.append(f"nothing recorded: {len(compiled)} kernel(s) compiled to record "
                         f"({', '.join(compiled)}) and never launched" if compiled else
                         "nothing recorded: no CuTe DSL kernel that records (one that calls a "
                         "cutlass.pipeline or a barrier) was compiled with cute.compile")
        if s["kernels"]:
            lines.append(f"{'time':>7} {'launches':>8} {'records':>12} {'lost':>9}  kernel")
            for k in s["kernels"]:
                lines.append(f"{100 * k['time_share']:6.1f}% {k['launches']:8d} "
                             f"{k['records']:12,d} {k['lost']:9,d}  {short_kernel_name(k['kernel'])}")
            lines.append("")
            lines.append(f"{'#':>4} {'start us':>10} {'dur us':>9} {'CTAs':>6} {'warps':>6} "
                         f"{'records':>10} {'lost':>8}  launch")
            first = min((r["start_ns"] for r in s["launches"] if r["slices"]), default=0)
            for r in s["launches"][:max_rows]:
                lines.append(f"{r['number']:4d} {(r['start_ns'] - first) / 1e3:10.1f} "
                             f"{(r['end_ns'] - r['start_ns']) / 1e3:9.1f} {r['ctas']:6d} "
                             f"{r['slices']:6d} {r['records']:10,d} {r['lost']:8,d}  {r['label']}")
            if len(s["launches"]) > max_rows:
                lines.append(f"     ... {len(s['launches']) - max_rows} more (--max-rows)")
        plain = {name: c for name, c in s["counts"].items()
                 if c.get("plain_range") or c.get("plain_memory")}
        for name, c in plain.items():
            why = []
            if c.get("plain_range"):
                why.append(f"{c['plain_range']} outside the launch range")
            if c.get("plain_memory"):
                why.append(f"{c['plain_memory']} after the pool filled (raise --max-memory)")
            lines.append(f"not recorded, run plain: {short_kernel_name(name)}: {', '.join(why)}")
        for name, n in s["unknown_launches"].items():
            lines.append(f"launched but not built in this run (not recorded): "
                         f"{name} x{n}")
        selection = s["selection"] or {}
        if selection.get("kernels") and not s["counts"]:
            seen = s["skipped_kernels"]
            lines.append(f"--kernel {' '.join(selection['kernels'])} matched no kernel; kernels "
                         f"compiled: {', '.join(short_kernel_name(n) for n in seen) or 'none'}")
        lines.extend(f"note: {n}" for n in s["notes"])
        return "\n".join(lines)


def _launch_set(text: str | int):
    """``--launch`` as a predicate: ``3``, ``2:5`` (2, 3, 4), ``:4``, ``1,3``."""
    if isinstance(text, int):
        return lambda i: i == text
    picks = []
    for part in str(text).split(","):
        part = part.strip()
        try:
            if ":" in part:
                lo, hi = part.split(":", 1)
                lo_i, hi_i = int(lo or 0), (int(hi) if hi else None)
                picks.append(lambda i, lo_i=lo_i, hi_i=hi_i: i >= lo_i and (hi_i is None or i < hi_i))
            else:
                value = int(part)
                picks.append(lambda i, value=value: i == value)
        except ValueError:
            raise ProfileBufferError(f"--launch takes N, A:B or N,M (launch indices), got {text!r}")
    return lambda i: any(p(i) for p in picks)
