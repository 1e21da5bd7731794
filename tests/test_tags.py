"""Tag tables: fixed and auto-assigning, strict and lenient lookups, thread safety."""

from __future__ import annotations

import threading

import pytest

from cute_prof import ProfileBufferError, TagTable, default_tag_table, layout
from cute_prof.tags import as_tag_table, unknown_tag_name


def test_fixed_table_ids_follow_list_order():
    names = ["load", "compute", "store"]
    table = TagTable(names)
    assert [table.id(n) for n in names] == list(range(len(names)))
    assert [table.name(i) for i in range(len(names))] == names
    assert table.names == tuple(names)
    assert list(table) == names
    assert len(table) == len(names)
    assert "load" in table and "nope" not in table
    assert table["store"] == 2
    assert not table.is_auto


@pytest.mark.parametrize("names", [["a", "b", "a"], ["x", ""], ["ok", 3], "single"])
def test_bad_names_are_rejected(names):
    with pytest.raises(ProfileBufferError):
        TagTable(names)


def test_bad_input_errors_are_value_errors_for_reference_compat():
    with pytest.raises(ValueError):
        TagTable(["dup", "dup"])


def test_fixed_table_rejects_unknown_name():
    table = TagTable(["load"])
    with pytest.raises(ProfileBufferError, match="unknown tag name 'lod'"):
        table.id("lod")
    assert len(table) == 1


@pytest.mark.parametrize("bad_id", [-1, 2, 70000])
def test_name_of_out_of_range_id_raises(bad_id):
    table = TagTable(["a", "b"])
    with pytest.raises(ProfileBufferError):
        table.name(bad_id)


def test_lookup_name_is_lenient():
    table = TagTable(["a"])
    assert table.lookup_name(0) == "a"
    assert table.lookup_name(17) == "<unknown tag 17>" == unknown_tag_name(17)


def test_auto_table_assigns_next_id_once_per_name():
    table = TagTable.auto(["pre"])
    assert table.is_auto
    assert table.id("load") == 1
    assert table.id("mma") == 2
    assert table.id("load") == 1
    assert table.names == ("pre", "load", "mma")
    assert TagTable(["x"], auto=True).id("y") == 1


def test_auto_table_is_thread_safe():
    table = TagTable.auto()
    names = [f"region{i}" for i in range(200)]
    results: list[dict[str, int]] = []
    barrier = threading.Barrier(8)

    def worker(offset: int):
        barrier.wait()
        order = names[offset:] + names[:offset]
        results.append({name: table.id(name) for name in order})

    threads = [threading.Thread(target=worker, args=(i * 25,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 8
    assert all(r == results[0] for r in results), "threads saw different ids"
    assert sorted(results[0].values()) == list(range(len(names))), "ids must be dense"
    assert all(table.name(i) == n for n, i in results[0].items())


def test_auto_table_stops_at_the_16_bit_limit():
    table = TagTable.auto(f"t{i}" for i in range(layout.MAX_TAG_ID + 1))
    assert table.id(f"t{layout.MAX_TAG_ID}") == layout.MAX_TAG_ID
    with pytest.raises(ProfileBufferError, match="tag table is full"):
        table.id("one_too_many")
    with pytest.raises(ProfileBufferError):
        TagTable(f"n{i}" for i in range(layout.MAX_TAG_ID + 2))


def test_default_table_is_one_process_wide_auto_table():
    table = default_tag_table()
    assert table is default_tag_table()
    assert table.is_auto
    first = table.id("test_tags::default")
    assert default_tag_table().id("test_tags::default") == first


def test_as_tag_table_normalises_inputs():
    table = TagTable(["a"])
    assert as_tag_table(table) is table
    assert as_tag_table(None) is default_tag_table()
    assert as_tag_table(["x", "y"]).names == ("x", "y")
    with pytest.raises(ProfileBufferError):
        as_tag_table("abc")
    with pytest.raises(ProfileBufferError):
        as_tag_table(5)
