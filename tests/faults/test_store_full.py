"""The state store's disk full (issue #40, deliverable 2), from virtual second 15 to 85 of a seeded run
of pool changes, then space back. A real small tmpfs needs root; the disk is full here by SQLite's
``max_page_count`` on the daemon's own connection (``tests/fleet_faults.py`` ``FleetRig._disk`` says
why that, and not a file-size rlimit): a write that needs a page more fails with SQLITE_FULL,
"database or disk is full", as on ENOSPC.

Held: no RunInstances reaches EC2 without its intent recorded ``sent`` before it; the daemon reports
the fault in ONE line (``scaler.fleet.state.StoreFull``, no traceback, not repeated while it lasts)
and one line when ticks apply again; the budget held at every launch; no orphan, no duplicate; the
store passes ``PRAGMA integrity_check`` after. About 6.5 s of CPU (pytest's start included; 63 s wall
at a load average of 20 on 2 cores)."""
from __future__ import annotations

import logging
from pathlib import Path

import pytest

from scaler.fleet.state import StateStore, StoreFull
from tests.fleet_faults import BUDGET, Window, run_seed

SEED = 2
FULL = Window(15.0, 85.0)


@pytest.mark.timeout(120)
def test_a_full_store_disk_stops_launches_in_one_line_and_recovers_with_the_store_whole(
        moto_endpoint: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="costscale"):
        led = run_seed(moto_endpoint, tmp_path, SEED, 12, FULL.end, store_full=FULL)
    assert led.without_intent == [] and len(led.sent) > 0
    assert led.excursions == [] and led.peak <= BUDGET
    assert led.duplicates == [] and led.orphans == [] and led.pool_ok
    assert led.integrity == "ok"
    line = (f"state store {tmp_path / 'state.db'}: database or disk is full: nothing is launched or terminated "
            "until its intent can be recorded")
    assert [err for _, err in led.failed_ticks] == [line] * 3     # the ticks at 60, 70 and 80 s
    assert [r for r in caplog.records if r.name == "costscale" and r.exc_info] == []
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [f"fleet: {line}"]
    assert [r.getMessage() for r in caplog.records if "apply again" in r.getMessage()] == [
        f"fleet: ticks apply again (they failed: {line})"]
    assert led.recovered_after_s == 7.4


def test_an_intent_the_full_disk_refuses_is_not_recorded_and_the_next_write_after_space_returns_is(
        tmp_path: Path) -> None:
    """The store's side alone: the refused write rolled back (no half intent), StoreFull is one line,
    and the same write goes through once the disk has room."""
    store = StateStore.open(tmp_path / "s.db")
    try:
        conn = store._conn
        before = int(conn.execute("PRAGMA max_page_count").fetchone()[0])
        conn.execute(f"PRAGMA max_page_count={int(conn.execute('PRAGMA page_count').fetchone()[0])}")
        with pytest.raises(StoreFull) as full:
            for seq in range(200):     # the pages there fill up, then a write needs one more
                store.record_intent(f"tok-{seq}", "launch", "p1", "r5n.large", 1, seq, 1000.0 + seq)
        assert "\n" not in str(full.value) and str(full.value).endswith("until its intent can be recorded")
        assert store.get_intent(f"tok-{seq}") is None
        conn.execute(f"PRAGMA max_page_count={before}")
        assert store.record_intent(f"tok-{seq}", "launch", "p1", "r5n.large", 1, seq, 2000.0).status == "planned"
        assert [i.seq for i in store.intents()] == list(range(seq + 1))
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        store.close()
