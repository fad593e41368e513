"""The demand history in the daemon's state store (scaler.fleet.state, table demand_minutes): a round
trip across a reopen, pruning, and a store from before the table gaining it."""
from __future__ import annotations

import math
import sqlite3
from pathlib import Path

import numpy as np

from scaler.fleet.state import StateStore


def test_the_history_survives_a_reopen(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with StateStore.open(path) as s:
        assert s.record_demand("rm2", [100, 101, 103], [1.5, 0.0, 2.25]) == 3
        s.record_demand("rm2", [101], [4.0])                  # a minute recorded again takes the new rate
        s.record_demand("pipe", np.array([7]), np.array([9.0]))
    with StateStore.open(path) as s:
        assert s.demand_series() == ["pipe", "rm2"]
        h = s.demand_history("rm2", 35 * 86400.0)
        assert (h.first_minute, h.last_minute, h.known) == (100, 103, 3)
        assert h.at(100) == 1.5 and h.at(101) == 4.0 and math.isnan(h.at(102)) and h.at(103) == 2.25
        assert s.demand_history("pipe", 86400.0).at(7) == 9.0
        assert s.demand_history("nobody", 86400.0).known == 0


def test_prune_forgets_the_minutes_before(tmp_path: Path) -> None:
    with StateStore.open(tmp_path / "state.db") as s:
        s.record_demand("rm2", range(10), [1.0] * 10)
        s.record_demand("dien", range(5, 15), [2.0] * 10)
        assert s.prune_demand(8) == 8 + 3                    # rm2's 0..7, dien's 5..7
        assert s.demand_history("rm2", 86400.0).known == 2 and s.demand_history("dien", 86400.0).first_minute == 8


def test_the_retention_bounds_what_is_read_back(tmp_path: Path) -> None:
    with StateStore.open(tmp_path / "state.db") as s:
        s.record_demand("rm2", range(3000), [1.0] * 3000)
        h = s.demand_history("rm2", 86400.0)                 # a day: the newest 1440 minutes
        assert (h.first_minute, h.known) == (3000 - 1440, 1440)


def test_a_store_from_before_the_table_gains_it_at_open(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    old = sqlite3.connect(path)
    old.executescript("CREATE TABLE plans (plan_id TEXT PRIMARY KEY, target TEXT NOT NULL, budget REAL NOT NULL, "
                      "created_at REAL NOT NULL, ordinal INTEGER NOT NULL);"
                      "INSERT INTO plans VALUES ('p1', '{\"g4dn.xlarge\": 1}', 2.5, 1.0, 1);")
    old.close()
    with StateStore.open(path) as s:
        assert s.latest_plan() is not None and s.latest_plan().plan_id == "p1"   # kept
        s.record_demand("rm2", [1], [2.0])
        assert s.demand_history("rm2", 86400.0).at(1) == 2.0
