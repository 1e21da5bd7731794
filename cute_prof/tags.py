"""Tag tables: the mapping between region names and the 16-bit tag ids stored on the GPU.

A record on the device carries only a tag *id* (bits 0..15 of the tag word, see
``cute_prof.layout``); the host turns it back into a name with a :class:`TagTable`.

Two ways to build one:

* **Fixed** (the reference API): ``TagTable(["load", "compute", "store"])`` gives ids
  0, 1, 2 in list order. Asking for a name that is not in the table is an error, which
  catches typos.
* **Auto-assigning**: ``TagTable.auto()`` (or ``TagTable(names, auto=True)``) hands out the
  next free id the first time ``.id(name)`` sees a name, so kernels can use tags *by name*
  with no hand-numbered constants. Ids are assigned under a lock, so kernels traced from
  several threads agree on them, and stay stable for the life of the table.

The process-wide :func:`default_tag_table` is an auto table. Device ops resolve a string
tag through it when the kernel is traced (``default_tag_table().id("load")`` becomes a
compile-time constant in the kernel), and ``decode_events`` / ``decode_buffer`` /
``profile_session`` use it when they are given no table, so string tags round-trip with no
set-up at all. Because ids are assigned at trace time, the table must be the same object
(same process) that traced the kernel; save ``table.names`` next to a stored buffer to
decode it elsewhere (``TagTable(saved_names)`` reproduces the ids exactly).

Lookups of ids the table does not know: :meth:`TagTable.name` raises (a strict lookup for
code that expects only known ids); :meth:`TagTable.lookup_name` returns
``"<unknown tag N>"`` (what the decoder shows for records whose id was never registered).

Owns tag tables and their ids (stage 1); it may import only ``layout`` and ``errors``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator

from . import layout
from .errors import ProfileBufferError

__all__ = ["TagTable", "as_tag_table", "default_tag_table", "unknown_tag_name"]


def unknown_tag_name(tag_id: int) -> str:
    """Display name of a tag id that no table knows."""
    return f"<unknown tag {int(tag_id)}>"


def _check_name(name) -> str:
    if not isinstance(name, str):
        raise ProfileBufferError(
            f"tag names must be str, got {type(name).__name__} {name!r}; "
            "pass names like TagTable(['load', 'compute'])"
        )
    if not name:
        raise ProfileBufferError("tag names must be non-empty strings; give the region a name")
    return name


class TagTable:
    """Tag name <-> id mapping. ``TagTable(names)`` is fixed; ``TagTable.auto()`` grows."""

    def __init__(self, names: Iterable[str] = (), *, auto: bool = False):
        if isinstance(names, str):
            raise ProfileBufferError(
                f"TagTable takes a list of names, not the single string {names!r}; "
                f"write TagTable([{names!r}])"
            )
        self._lock = threading.Lock()
        self._auto = bool(auto)
        self._names: list[str] = []
        self._ids: dict[str, int] = {}
        for name in names:
            name = _check_name(name)
            if name in self._ids:
                raise ProfileBufferError(
                    f"duplicate tag name {name!r} (ids {self._ids[name]} and {len(self._names)}); "
                    "every tag name must be unique"
                )
            self._append(name)

    @classmethod
    def auto(cls, names: Iterable[str] = ()) -> "TagTable":
        """An auto-assigning table, optionally pre-seeded with ``names`` (ids 0..len-1)."""
        return cls(names, auto=True)

    def _append(self, name: str) -> int:
        tag_id = len(self._names)
        if tag_id > layout.MAX_TAG_ID:
            raise ProfileBufferError(
                f"tag table is full: {layout.MAX_TAG_ID + 1} names is the most a 16-bit tag id "
                f"can address; cannot add {name!r}. Reuse names instead of making one per event "
                "(put the varying part in the payload)"
            )
        self._names.append(name)
        self._ids[name] = tag_id
        return tag_id

    @property
    def is_auto(self) -> bool:
        """Whether ``.id`` assigns ids to names it has not seen."""
        return self._auto

    @property
    def names(self) -> tuple[str, ...]:
        """Names in id order (a snapshot: ``names[i]`` is the name of tag id ``i``)."""
        with self._lock:
            return tuple(self._names)

    def id(self, name: str) -> int:
        """Tag id of ``name``; an auto table assigns the next free id on first sight."""
        found = self._ids.get(name)
        if found is not None:
            return found
        _check_name(name)
        if not self._auto:
            raise ProfileBufferError(
                f"unknown tag name {name!r}; known: {list(self._names)}. Add it to the "
                "TagTable, or use TagTable.auto() to assign ids on first use"
            )
        with self._lock:
            found = self._ids.get(name)  # another thread may have added it meanwhile
            return found if found is not None else self._append(name)

    __getitem__ = id

    def name(self, tag_id: int) -> str:
        """Name of ``tag_id``; raises ProfileBufferError if the table has no such id."""
        index = self._check_id(tag_id)
        names = self._names
        if not 0 <= index < len(names):
            raise ProfileBufferError(
                f"tag id {index} is not in this table (ids 0..{len(names) - 1}); use "
                "lookup_name() for a placeholder name instead of an error"
            )
        return names[index]

    def lookup_name(self, tag_id: int) -> str:
        """Name of ``tag_id``, or ``"<unknown tag N>"`` when the table has no such id."""
        index = int(tag_id)
        names = self._names
        return names[index] if 0 <= index < len(names) else unknown_tag_name(index)

    @staticmethod
    def _check_id(tag_id) -> int:
        try:
            return int(tag_id)
        except (TypeError, ValueError):
            raise ProfileBufferError(f"tag ids are integers, got {tag_id!r}") from None

    def __len__(self) -> int:
        return len(self._names)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __contains__(self, name: object) -> bool:
        return name in self._ids

    def __repr__(self) -> str:
        kind = "auto" if self._auto else "fixed"
        return f"TagTable({list(self._names)!r}, {kind})"


_DEFAULT_TABLE = TagTable.auto()


def default_tag_table() -> TagTable:
    """The process-wide auto table used for string tags and when no table is given."""
    return _DEFAULT_TABLE


def as_tag_table(tags) -> TagTable:
    """Normalise what users pass as tags: None (default table), a TagTable, or names."""
    if tags is None:
        return default_tag_table()
    if isinstance(tags, TagTable):
        return tags
    if isinstance(tags, (str, bytes)) or not hasattr(tags, "__iter__"):
        raise ProfileBufferError(
            f"expected a TagTable, a list of tag names or None, got {type(tags).__name__} "
            f"{tags!r}"
        )
    return TagTable(tags)
