"""The daemon's state store: SQLite in WAL mode at ``cfg.state_path`` (DESIGN invariant 3).

Tables: ``plans`` (each target pool the fleet loop decided), ``intents`` (every launch/terminate,
written *before* the EC2 call, keyed by its deterministic ClientToken: planned → sent → done |
failed | rolled_back), ``instances`` (what costscale has seen of its managed instances) and
``unavailable`` (instance types with a capacity error, until a cooldown expires) and ``demand_minutes``
(each model's and pipeline's arrival rate per minute, :mod:`scaler.forecast.history`, pruned to the
``forecast.retention_days``; issue #39). The closed history older than ``state_retention.days`` is
forgotten by :meth:`StateStore.prune` (:mod:`scaler.fleet.retention`; never an open intent).

Schema changes are additive: each table is created ``IF NOT EXISTS`` when a store opens, so a store
written by an older costscale gains the new tables (empty) at its next open.

One daemon per cluster: ``StateStore.open`` takes an exclusive ``fcntl.flock`` on
``path + ".lock"`` (released by the kernel when the process dies, kill -9 included) and raises
:class:`StateLocked` naming the holder's pid otherwise.

Durability: WAL with ``synchronous=NORMAL`` — a committed intent survives any crash of the
process (kill -9 included), which is what invariant 3 needs; after an OS crash or power loss the
last commits may be lost, and then the instances launched meanwhile are still found by their
cluster and intent tags and adopted by reconciliation (a replanned launch that reuses the lost
sequence number also reuses its token, so it finds them instead of launching again).

A full disk (SQLite's SQLITE_FULL, "database or disk is full") is :class:`StoreFull`, one line
naming the store: the write that failed did not happen (SQLite rolls the statement back), so an
intent that could not be recorded is never followed by its cloud call, and the store stays whole;
the next write after space returns goes through.

This is an adapter (I/O); times are passed in by the caller, never read here.
"""
from __future__ import annotations

import fcntl
import json
import os
import sqlite3
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

from config.errors import UsageError
from scaler.fleet.retention import PruneReport, prune_history, row_counts
from scaler.forecast.history import DemandHistory

INTENT_KINDS = ("launch", "terminate")
INTENT_STATUSES = ("planned", "sent", "done", "failed", "rolled_back")
OPEN_STATUSES = ("planned", "sent")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS plans (
    plan_id     TEXT PRIMARY KEY,
    target      TEXT NOT NULL,           -- JSON {type: count}
    budget      REAL NOT NULL,
    created_at  REAL NOT NULL,
    ordinal     INTEGER NOT NULL         -- order of recording: the latest plan is the one in force
);
CREATE TABLE IF NOT EXISTS intents (
    client_token  TEXT PRIMARY KEY,
    kind          TEXT NOT NULL CHECK (kind IN ('launch', 'terminate')),
    plan_id       TEXT NOT NULL,
    instance_type TEXT NOT NULL,
    count         INTEGER NOT NULL,
    seq           INTEGER NOT NULL,
    status        TEXT NOT NULL CHECK (status IN ('planned', 'sent', 'done', 'failed', 'rolled_back')),
    instance_ids  TEXT NOT NULL DEFAULT '[]',
    note          TEXT NOT NULL DEFAULT '',
    created_at    REAL NOT NULL,
    updated_at    REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS intents_status ON intents(status);
CREATE INDEX IF NOT EXISTS intents_plan ON intents(plan_id, seq);
CREATE TABLE IF NOT EXISTS instances (
    instance_id   TEXT PRIMARY KEY,
    instance_type TEXT NOT NULL,
    state         TEXT NOT NULL,
    intent        TEXT,
    launch_time   REAL NOT NULL DEFAULT 0,
    first_seen    REAL NOT NULL,
    last_seen     REAL NOT NULL,
    gone          INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS unavailable (
    instance_type TEXT PRIMARY KEY,
    until         REAL NOT NULL,
    reason        TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS demand_minutes (
    series  TEXT NOT NULL,               -- a model's or a pipeline's name
    minute  INTEGER NOT NULL,            -- floor(epoch seconds / 60)
    qps     REAL NOT NULL,               -- the arrival rate measured over that minute
    PRIMARY KEY (series, minute)
) WITHOUT ROWID;
"""


class StateLocked(UsageError):
    """Another daemon holds this state store (one daemon per cluster)."""


class StoreFull(UsageError):
    """The state store's disk is full: the write was refused (and rolled back). A UsageError, so
    the fleet tick, the reconcile round and the start report it in one line (the operator frees
    space; the next tick retries)."""


@contextmanager
def _full_as_one_line(path: str) -> Iterator[None]:
    try:
        yield
    except sqlite3.OperationalError as exc:
        if getattr(exc, "sqlite_errorname", "") != "SQLITE_FULL":
            raise
        raise StoreFull(f"state store {path}: {exc}: nothing is launched or terminated until its intent "
                        "can be recorded") from None


@dataclass(frozen=True)
class Intent:
    client_token: str
    kind: str
    plan_id: str
    instance_type: str
    count: int
    seq: int
    status: str
    instance_ids: tuple[str, ...]
    note: str
    created_at: float
    updated_at: float


@dataclass(frozen=True)
class PlanRecord:
    plan_id: str
    target: dict[str, int]
    budget: float
    created_at: float


@dataclass(frozen=True)
class InstanceRecord:
    instance_id: str
    instance_type: str
    state: str
    intent: str | None
    launch_time: float
    first_seen: float
    last_seen: float
    gone: bool


def _intent(row: sqlite3.Row) -> Intent:
    return Intent(row["client_token"], row["kind"], row["plan_id"], row["instance_type"], int(row["count"]),
                  int(row["seq"]), row["status"], tuple(json.loads(row["instance_ids"])), row["note"],
                  float(row["created_at"]), float(row["updated_at"]))


class StateStore:
    """SQLite (WAL) store; safe to share between threads of one process (one connection, a lock)."""

    def __init__(self, conn: sqlite3.Connection, path: str, lock_fd: int | None) -> None:
        self._conn = conn
        self.path = path
        self._lock_fd = lock_fd
        self._mu = threading.RLock()

    # -- open / close ------------------------------------------------------------------------
    @classmethod
    def open(cls, path: str | os.PathLike[str], *, lock: bool = True) -> "StateStore":
        p = str(path)
        if p != ":memory:":
            Path(p).parent.mkdir(parents=True, exist_ok=True)
        fd = _acquire_lock(p + ".lock") if lock and p != ":memory:" else None
        try:
            conn = sqlite3.connect(p, isolation_level=None, check_same_thread=False, timeout=10)
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.executescript(_SCHEMA)
        except BaseException:
            if fd is not None:
                os.close(fd)
            raise
        return cls(conn, p, fd)

    def close(self) -> None:
        with self._mu:
            try:
                self._conn.close()
            finally:
                if self._lock_fd is not None:
                    fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
                    os.close(self._lock_fd)
                    self._lock_fd = None

    def __enter__(self) -> "StateStore":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def journal_mode(self) -> str:
        return str(self._q1("PRAGMA journal_mode")[0])

    # -- helpers -----------------------------------------------------------------------------
    def _x(self, sql: str, args: Iterable[Any] = ()) -> sqlite3.Cursor:
        with self._mu, _full_as_one_line(self.path):
            return self._conn.execute(sql, tuple(args))

    def _q1(self, sql: str, args: Iterable[Any] = ()) -> sqlite3.Row | None:
        with self._mu:
            return self._conn.execute(sql, tuple(args)).fetchone()

    def _qa(self, sql: str, args: Iterable[Any] = ()) -> list[sqlite3.Row]:
        with self._mu:
            return self._conn.execute(sql, tuple(args)).fetchall()

    # -- plans -------------------------------------------------------------------------------
    def record_plan(self, plan_id: str, target: dict[str, int], budget: float, now: float) -> PlanRecord:
        """Record a plan (idempotent per plan_id) and make it the latest one in force."""
        with self._mu:
            row = self._q1("SELECT COALESCE(MAX(ordinal), 0) FROM plans")
            ordinal = int(row[0]) + 1 if row else 1
            tgt = {t: int(n) for t, n in sorted(target.items()) if int(n) > 0}
            self._x("INSERT INTO plans(plan_id, target, budget, created_at, ordinal) VALUES (?,?,?,?,?) "
                    "ON CONFLICT(plan_id) DO UPDATE SET ordinal=excluded.ordinal, target=excluded.target, "
                    "budget=excluded.budget",
                    (plan_id, json.dumps(tgt), float(budget), now, ordinal))
            return PlanRecord(plan_id, tgt, float(budget), now)

    def latest_plan(self) -> PlanRecord | None:
        r = self._q1("SELECT * FROM plans ORDER BY ordinal DESC LIMIT 1")
        return PlanRecord(r["plan_id"], json.loads(r["target"]), float(r["budget"]), float(r["created_at"])) if r else None

    # -- intents -----------------------------------------------------------------------------
    def record_intent(self, client_token: str, kind: str, plan_id: str, instance_type: str, count: int, seq: int,
                      now: float, instance_ids: Iterable[str] = ()) -> Intent:
        """Write-ahead: insert a ``planned`` intent (or return the existing one with this token)."""
        if kind not in INTENT_KINDS:
            raise ValueError(f"bad intent kind {kind!r}")
        self._x("INSERT OR IGNORE INTO intents(client_token, kind, plan_id, instance_type, count, seq, status, "
                "instance_ids, created_at, updated_at) VALUES (?,?,?,?,?,?,'planned',?,?,?)",
                (client_token, kind, plan_id, instance_type, int(count), int(seq), json.dumps(list(instance_ids)),
                 now, now))
        got = self.get_intent(client_token)
        assert got is not None
        return got

    def set_intent_status(self, client_token: str, status: str, now: float, *,
                          instance_ids: Iterable[str] | None = None, note: str | None = None) -> None:
        if status not in INTENT_STATUSES:
            raise ValueError(f"bad intent status {status!r}")
        sets, args = ["status=?", "updated_at=?"], [status, now]
        if instance_ids is not None:
            sets.append("instance_ids=?")
            args.append(json.dumps(list(instance_ids)))
        if note is not None:
            sets.append("note=?")
            args.append(note)
        cur = self._x(f"UPDATE intents SET {', '.join(sets)} WHERE client_token=?", (*args, client_token))
        if cur.rowcount != 1:
            raise KeyError(client_token)

    def get_intent(self, client_token: str) -> Intent | None:
        r = self._q1("SELECT * FROM intents WHERE client_token=?", (client_token,))
        return _intent(r) if r else None

    def intents(self, *, plan_id: str | None = None, statuses: Iterable[str] | None = None) -> list[Intent]:
        sql, args = "SELECT * FROM intents WHERE 1=1", []
        if plan_id is not None:
            sql += " AND plan_id=?"
            args.append(plan_id)
        if statuses is not None:
            st = list(statuses)
            sql += f" AND status IN ({','.join('?' * len(st))})"
            args.extend(st)
        return [_intent(r) for r in self._qa(sql + " ORDER BY created_at, seq", args)]

    def intents_since(self, t: float) -> list[Intent]:
        """Intents changed at or after ``t`` (created or given a new status), oldest change first."""
        return [_intent(r) for r in self._qa("SELECT * FROM intents WHERE updated_at >= ? ORDER BY updated_at, seq", (t,))]

    def open_intents(self) -> list[Intent]:
        return self.intents(statuses=OPEN_STATUSES)

    def next_seq(self, plan_id: str) -> int:
        r = self._q1("SELECT MAX(seq) FROM intents WHERE plan_id=?", (plan_id,))
        return 0 if r is None or r[0] is None else int(r[0]) + 1

    # -- instances ---------------------------------------------------------------------------
    def upsert_instance(self, instance_id: str, instance_type: str, state: str, intent: str | None,
                        launch_time: float, now: float) -> bool:
        """Record a sighting; returns True when the instance was not known before (adopted)."""
        with self._mu:
            known = self._q1("SELECT 1 FROM instances WHERE instance_id=?", (instance_id,)) is not None
            self._x("INSERT INTO instances(instance_id, instance_type, state, intent, launch_time, first_seen, "
                    "last_seen) VALUES (?,?,?,?,?,?,?) ON CONFLICT(instance_id) DO UPDATE SET state=excluded.state, "
                    "last_seen=excluded.last_seen, gone=0",
                    (instance_id, instance_type, state, intent, launch_time, now, now))
            return not known

    def mark_gone(self, instance_id: str, now: float) -> None:
        self._x("UPDATE instances SET gone=1, state='terminated', last_seen=? WHERE instance_id=?", (now, instance_id))

    def known_instances(self) -> dict[str, InstanceRecord]:
        rows = self._qa("SELECT * FROM instances WHERE gone=0")
        return {r["instance_id"]: InstanceRecord(r["instance_id"], r["instance_type"], r["state"], r["intent"],
                                                 float(r["launch_time"]), float(r["first_seen"]),
                                                 float(r["last_seen"]), bool(r["gone"])) for r in rows}

    # -- unavailable types -------------------------------------------------------------------
    def mark_unavailable(self, instance_type: str, until: float, reason: str = "") -> None:
        self._x("INSERT INTO unavailable(instance_type, until, reason) VALUES (?,?,?) ON CONFLICT(instance_type) "
                "DO UPDATE SET until=MAX(until, excluded.until), reason=excluded.reason",
                (instance_type, until, reason))

    def unavailable_types(self, now: float) -> dict[str, float]:
        """Types still cooling down at ``now`` → the time their cooldown ends."""
        return {r["instance_type"]: float(r["until"]) for r in
                self._qa("SELECT instance_type, until FROM unavailable WHERE until > ?", (now,))}

    # -- demand history (issue #39) -------------------------------------------------------------
    def record_demand(self, series: str, minutes: Iterable[int], rates: Iterable[float]) -> int:
        """Each ``minutes[i]``'s rate ``rates[i]`` of ``series`` (a minute recorded again takes the new
        rate), in one transaction; returns the rows written."""
        rows = [(series, int(m), float(q)) for m, q in zip(minutes, rates)]
        with self._mu, _full_as_one_line(self.path):
            self._conn.execute("BEGIN")
            try:
                self._conn.executemany("INSERT INTO demand_minutes(series, minute, qps) VALUES (?,?,?) "
                                       "ON CONFLICT(series, minute) DO UPDATE SET qps=excluded.qps", rows)
                self._conn.execute("COMMIT")
            except BaseException:
                if self._conn.in_transaction:   # (SQLITE_FULL may have rolled it back already)
                    self._conn.execute("ROLLBACK")
                raise
        return len(rows)

    def prune_demand(self, before_minute: int) -> int:
        """Forget every series' minutes before ``before_minute``; returns the rows deleted."""
        return int(self._x("DELETE FROM demand_minutes WHERE minute < ?", (int(before_minute),)).rowcount)

    # -- retention (issue #40) ---------------------------------------------------------------
    def prune(self, before: float, max_rows: int) -> PruneReport:
        """Forget the closed history older than ``before``, at most ``max_rows`` rows
        (:func:`scaler.fleet.retention.prune_history`)."""
        with self._mu, _full_as_one_line(self.path):
            return prune_history(self._conn, before, max_rows)

    def row_counts(self) -> dict[str, int]:
        with self._mu:
            return row_counts(self._conn)

    def demand_series(self) -> list[str]:
        return [r[0] for r in self._qa("SELECT DISTINCT series FROM demand_minutes ORDER BY series")]

    def demand_history(self, series: str, retention_s: float) -> DemandHistory:
        """``series``' minutes as a :class:`scaler.forecast.history.DemandHistory` (its newest
        ``retention_s`` of them)."""
        rows = self._qa("SELECT minute, qps FROM demand_minutes WHERE series=? ORDER BY minute", (series,))
        return DemandHistory.from_minutes([int(r[0]) for r in rows], [float(r[1]) for r in rows], retention_s)


def _acquire_lock(lock_path: str) -> int:
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        try:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
        finally:
            os.close(fd)
        raise StateLocked(f"another costscale daemon (pid {holder}) holds {lock_path}; stop it or use another "
                          f"state_path") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    return fd
