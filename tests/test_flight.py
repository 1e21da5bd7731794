"""Hang/crash report of the flight recorder, built from synthetic position regions written
exactly as the device ops write them (layout's flight section)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from cute_prof import layout
from cute_prof.errors import ProfileBufferError
from cute_prof.flight import diagnose, load_dump, save_dump

TAGS = ["mainloop", "wait_full", "issue_tma", "mma"]
WARPS_PER_CTA = 4  # warp 0 producer, warps 1..3 consumers


def region(ctas: int) -> np.ndarray:
    words = np.zeros(layout.flight_words(ctas * WARPS_PER_CTA), dtype=np.int64)
    words[0] = layout.FLIGHT_MAGIC
    words[1] = ctas * WARPS_PER_CTA * layout.FLIGHT_DEPTH
    return words


def put(words, *, cta, warp, depth, tag, payload, enter_ns, leave_ns=0, sm=0):
    """What flight_enter (and flight_leave, when leave_ns) stores for one warp."""
    slot = (cta * WARPS_PER_CTA + warp) * layout.FLIGHT_DEPTH + depth
    base = layout.FLIGHT_HEADER_WORDS + layout.FLIGHT_SLOT_WORDS * slot
    words[base + layout.FLIGHT_WORD_ENTER] = enter_ns
    words[base + layout.FLIGHT_WORD_LEAVE] = leave_ns
    words[base + layout.FLIGHT_WORD_TAG] = layout.encode_tag_words(TAGS.index(tag), payload=payload)
    words[base + layout.FLIGHT_WORD_WHERE] = layout.encode_where_words(cta, sm=sm, warp=warp)


def hung_pipeline(ctas=64, now=10_000_000_000):
    """Consumers stuck in wait_full k=37 since t=7.9 s; the producer left issue_tma k=36 at
    t=7.8 s; everybody is inside mainloop (depth 0)."""
    words = region(ctas)
    for cta in range(ctas):
        for warp in range(WARPS_PER_CTA):
            put(words, cta=cta, warp=warp, depth=0, tag="mainloop", payload=0, enter_ns=1_000_000_000, sm=cta)
        put(words, cta=cta, warp=0, depth=1, tag="issue_tma", payload=36, enter_ns=7_700_000_000,
            leave_ns=7_800_000_000, sm=cta)
        for warp in (1, 2, 3):
            put(words, cta=cta, warp=warp, depth=1, tag="wait_full", payload=37, enter_ns=7_900_000_000, sm=cta)
            # a stale, closed deeper level from an earlier k-tile must not hide the open one
            put(words, cta=cta, warp=warp, depth=2, tag="mma", payload=36, enter_ns=7_850_000_000,
                leave_ns=7_880_000_000, sm=cta)
    return words, now


def test_hang_report_groups_consumers_and_producers():
    words, now = hung_pipeline()
    report = diagnose(words, now_ns=now, tag_table=TAGS)
    assert len(report.warps["cta"]) == 64 * 4
    waiting = [g for g in report.groups if g["open"] and g["name"] == "wait_full"]
    assert len(waiting) == 1
    g = waiting[0]
    assert (g["warps"], g["ctas"], g["payload"], g["depth"]) == (192, 64, 37, 1)
    assert g["since_min_ns"] == g["since_max_ns"] == 2_100_000_000
    assert "192 warps (warp 1,2,3 of 64 CTAs) wait in 'wait_full' payload=37 depth 1 for 2.1 s" in g["text"]
    # the producer's innermost open region is mainloop; it is reported there
    producer = [g for g in report.groups if g["open"] and g["name"] == "mainloop"]
    assert len(producer) == 1 and producer[0]["warps"] == 64 and producer[0]["since_min_ns"] == 9_000_000_000
    # per-warp rows
    w = report.warps
    consumers = w["warp"] > 0
    assert np.all(w["tag"][consumers] == TAGS.index("wait_full"))
    assert np.all(w["payload"][consumers] == 37)
    assert np.all(w["sm"] == w["cta"])


def test_left_and_entered_nothing():
    words = region(2)
    for cta in range(2):
        put(words, cta=cta, warp=0, depth=0, tag="issue_tma", payload=36, enter_ns=100, leave_ns=400)
        put(words, cta=cta, warp=0, depth=1, tag="mma", payload=35, enter_ns=150, leave_ns=200)
    report = diagnose(words, now_ns=1_000, tag_table=TAGS)
    assert len(report.groups) == 1
    g = report.groups[0]
    assert not g["open"] and g["name"] == "issue_tma" and g["payload"] == 36 and g["warps"] == 2
    assert g["since_min_ns"] == 600
    assert "left 'issue_tma' payload=36 and entered nothing" in g["text"]
    assert "6 warp slots recorded no position" in report.format()


def test_torn_or_unwritten_slots_are_not_positions():
    words = region(1)
    put(words, cta=0, warp=1, depth=0, tag="wait_full", payload=3, enter_ns=500)
    # a claimed slot whose tag word never arrived (complete marker missing)
    base = layout.FLIGHT_HEADER_WORDS + layout.FLIGHT_SLOT_WORDS * (2 * layout.FLIGHT_DEPTH)
    words[base] = 600
    report = diagnose(words, now_ns=1_500, tag_table=TAGS)
    assert list(report.warps["warp"]) == [1]
    assert report.groups[0]["since_min_ns"] == 1_000


def test_negative_payload_and_default_now():
    words = region(1)
    put(words, cta=0, warp=2, depth=3, tag="mma", payload=-5, enter_ns=2_000)
    put(words, cta=0, warp=3, depth=0, tag="mma", payload=1, enter_ns=1_000, leave_ns=5_000)
    report = diagnose(words, tag_table=TAGS)
    open_group = [g for g in report.groups if g["open"]][0]
    assert open_group["payload"] == -5 and open_group["depth"] == 3
    assert open_group["since_min_ns"] == 3_000  # now = latest stamp (5000)


@pytest.mark.parametrize("damage", ["magic", "count"])
def test_bad_region_is_an_error(damage):
    words = region(1)
    if damage == "magic":
        words[0] = 0
    else:
        words[1] += layout.FLIGHT_DEPTH
    with pytest.raises(ProfileBufferError):
        diagnose(words)


def test_dump_roundtrip_and_cli(tmp_path):
    words, now = hung_pipeline(ctas=4)
    records = np.zeros(layout.buffer_words(8), dtype=np.int64)
    layout.write_records(records, [10, 20, 30], 5, [0, 2, 3], [0, 1, 2], payload=[1, 36, 36])
    path = save_dump(tmp_path / "hang", records, position_words=words, now_ns=now, tag_names=TAGS)
    report = load_dump(path)
    assert len(report.trace.events) == 3
    assert [g["warps"] for g in report.groups if g["name"] == "wait_full"] == [12]
    out = subprocess.run([sys.executable, "-m", "cute_prof.cli", "flight", str(path)],
                         capture_output=True, text=True, check=True).stdout
    assert "12 warps (warp 1,2,3 of 4 CTAs) wait in 'wait_full' payload=37 depth 1 for 2.1 s" in out
    assert "3 records decoded" in out
    assert out.startswith("kernel hung")


# ---- profile_session's flight mode, with the device side replaced by synthetic memory ----

class SyntheticRecorder:
    """Stands in for FlightRecorder: what the mapped memory holds at the moment of reading."""

    def __init__(self, positions, records):
        self.positions, self.records_words = positions, records
        self.launched_host_ns = None
        self.report = self.trace = None
        self.records = None

    def position_words(self):
        return self.positions.copy()

    def record_words(self):
        return self.records_words.copy()


def synthetic_records(n_per_track=3, tracks=4):
    """A record buffer as the ops leave it: ``wait_full`` regions k = 0.. on each track."""
    words = np.zeros(layout.buffer_words(64), dtype=np.int64)
    n = n_per_track * tracks
    words[layout.COUNTER_INDEX] = n
    track, k = np.divmod(np.arange(n), n_per_track)
    slots = np.arange(n)
    words[layout.record_word_index(slots, layout.WORD_START)] = 1_000 + 100 * k
    words[layout.record_word_index(slots, layout.WORD_DUR)] = 50
    words[layout.record_word_index(slots, layout.WORD_TAG)] = layout.encode_tag_words(
        np.full(n, TAGS.index("wait_full")), payload=k)
    words[layout.record_word_index(slots, layout.WORD_TID)] = layout.encode_tid_words(track)
    return words, n


def test_session_watchdog_reports_hang_and_writes_partial_trace(monkeypatch, tmp_path):
    import cute_prof.flight as flight
    from cute_prof.errors import KernelHangError
    from cute_prof.session import profile_session

    positions, now = hung_pipeline(ctas=8)
    records, n_records = synthetic_records()
    fake = SyntheticRecorder(positions, records)
    monkeypatch.setattr(flight, "allocate_flight_recorder", lambda max_events, *, warps: fake)
    waited = []
    monkeypatch.setattr(flight, "wait_for_device", lambda timeout, *, stream=None: waited.append(timeout) or False)
    monkeypatch.setattr(flight, "_now_globaltimer", lambda positions, launched: now)
    out = tmp_path / "partial.json"
    with pytest.raises(KernelHangError) as caught:
        with profile_session(64, TAGS, out, watchdog=2.5, flight_warps=8 * WARPS_PER_CTA) as rec:
            assert rec is fake
    assert waited == [2.5]
    report = caught.value.report
    assert report.hung and "partial.json" in str(caught.value) and "os._exit" in str(caught.value)
    wait = [g for g in report.groups if g["open"] and g["name"] == "wait_full"]
    assert wait[0]["warps"] == 8 * 3 and wait[0]["payload"] == 37 and wait[0]["since_min_ns"] == 2_100_000_000
    assert len(report.trace.events) == n_records
    assert out.exists() and out.stat().st_size > 0


def test_session_fault_attaches_report_to_the_error(monkeypatch, tmp_path, capsys):
    import cute_prof.flight as flight
    from cute_prof.session import profile_session

    positions, now = hung_pipeline(ctas=2)
    records, n_records = synthetic_records()
    fake = SyntheticRecorder(positions, records)
    monkeypatch.setattr(flight, "allocate_flight_recorder", lambda max_events, *, warps: fake)
    monkeypatch.setattr(flight, "_now_globaltimer", lambda positions, launched: now)
    with pytest.raises(RuntimeError, match="illegal memory access") as caught:
        with profile_session(64, TAGS, tmp_path / "t.json", flight_warps=2 * WARPS_PER_CTA):
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
    assert fake.report is not None and fake.report.error.startswith("RuntimeError")
    assert len(fake.trace.events) == n_records
    if sys.version_info >= (3, 11):
        assert any("wait in 'wait_full' payload=37" in note for note in caught.value.__notes__)
    assert "kernel faulted" in capsys.readouterr().err


@pytest.mark.parametrize("options, message", [
    ({"watchdog": 2.0}, "flight_warps"),
    ({"watchdog": 0, "flight_warps": 4}, "positive"),
    ({"watchdog": "2", "flight_warps": 4}, "positive"),
])
def test_session_watchdog_rejects_bad_options(options, message):
    from cute_prof.session import profile_session

    with pytest.raises(ProfileBufferError, match=message):
        with profile_session(64, TAGS, **options):
            pass


def test_session_fault_seen_while_polling_is_reported(monkeypatch, tmp_path):
    """The watchdog's poll is where an asynchronous fault surfaces first."""
    import cute_prof.flight as flight
    from cute_prof.session import profile_session

    positions, now = hung_pipeline(ctas=2)
    records, n_records = synthetic_records()
    fake = SyntheticRecorder(positions, records)
    monkeypatch.setattr(flight, "allocate_flight_recorder", lambda max_events, *, warps: fake)
    monkeypatch.setattr(flight, "_now_globaltimer", lambda positions, launched: now)

    def poll_fails(timeout, *, stream=None):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(flight, "wait_for_device", poll_fails)
    with pytest.raises(RuntimeError, match="illegal memory access"):
        with profile_session(64, TAGS, tmp_path / "t.json", watchdog=1.0, flight_warps=2 * WARPS_PER_CTA):
            pass
    assert fake.report.error.startswith("RuntimeError") and len(fake.trace.events) == n_records
    assert (tmp_path / "t.json").exists()


def test_a_report_never_compiles_the_decoder(monkeypatch):
    """A hang report must not wait for numba: a first compile took 4.4 s in the middle of
    one on the H100 machine. The report decodes on the numpy path, also where numba is."""
    import cute_prof.decode as decode
    import cute_prof.flight as flight

    positions, now = hung_pipeline(ctas=4)
    records, n_records = synthetic_records()

    def compiled(*args, **kwargs):
        raise AssertionError("the compiled decoder ran inside a flight report")

    monkeypatch.setattr(decode, "_decode_compiled", compiled)
    monkeypatch.setattr(decode, "_classify_compiled", compiled)
    monkeypatch.setattr(flight, "_now_globaltimer", lambda positions, launched: now)
    monkeypatch.setattr(flight.jit, "numba", object())  # as if numba were there
    monkeypatch.delenv("CUTE_PROF_NO_JIT", raising=False)
    assert flight.jit.enabled()
    report = flight.flight_report(SyntheticRecorder(positions, records), tag_table=TAGS, hung=True)
    assert report.hung and len(report.trace.events) == n_records
