"""What the state store forgets, so that it stays bounded over months (issue #40 deliverable 1):
the closed history older than a cutoff, never what reconciliation or the next launch reads.

Forgotten, oldest first, at most ``max_rows`` rows in one run (the daemon prunes again at its next
run, :mod:`daemon.loops.store_upkeep`):

1. **A superseded plan with its intents**, whole: the plan is not the latest one (the one in force),
   it was recorded before the cutoff, none of its intents is open (``planned``/``sent``: those are what
   reconcile repairs after a crash), none changed at or after the cutoff, and none names an instance the
   store still knows as live. A plan and its intents go together because ``StateStore.next_seq`` numbers
   a plan's next launch from its intents: dropping some of a plan's intents could hand out a sequence
   number, and so a ClientToken, that was used before. A plan with more intents than one run may take
   loses them over several runs, its last-numbered intent (its ``next_seq``) last, with the plan.
2. **An intent of no recorded plan** (``reconcile:...`` terminations: their tokens hash the instance
   ids, not a sequence), closed, unchanged since before the cutoff, naming no live instance.
3. **An instance gone** (terminated) and last seen before the cutoff.
4. **A capacity cooldown** (``unavailable``) that ended before the cutoff.

The demand history has its own window (``forecast.retention_days``, ``StateStore.prune_demand``).

Why a day at least: a ClientToken stays valid "for at least 24 hours after the termination of the
instance" (AWS, "Ensuring idempotency in Amazon EC2 API requests"), and a restarted daemon may derive a
forgotten plan's id again (``scaler.fleet.step.plan_id_for``); with a cutoff of a day or more the
instances of a forgotten plan were terminated longer ago than that.

SQLite reuses the pages of deleted rows, so the file stays at its high-water mark rather than growing.
Pure SQL on a connection the caller holds (``StateStore.prune`` takes its lock); times come in.
"""
from __future__ import annotations

import sqlite3
from dataclasses import dataclass

#: an intent that names an instance the store still knows as live (``instances.gone = 0``)
_NAMES_LIVE = ("EXISTS (SELECT 1 FROM json_each(i.instance_ids) j JOIN instances s ON s.instance_id = j.value "
               "WHERE s.gone = 0)")
_OPEN = "('planned', 'sent')"


@dataclass(frozen=True)
class PruneReport:
    """Rows forgotten by one run, per table."""

    plans: int = 0
    intents: int = 0
    instances: int = 0
    unavailable: int = 0

    @property
    def rows(self) -> int:
        return self.plans + self.intents + self.instances + self.unavailable

    def summary(self) -> str:
        return (f"{self.plans} plans, {self.intents} intents, {self.instances} gone instances, "
                f"{self.unavailable} ended cooldowns")


def _prunable_plans(conn: sqlite3.Connection, before: float, limit: int) -> list[tuple[str, int]]:
    """(plan id, its intents) of the superseded plans that may go, oldest first."""
    rows = conn.execute(
        "SELECT p.plan_id, (SELECT COUNT(*) FROM intents i WHERE i.plan_id = p.plan_id) FROM plans p "
        "WHERE p.created_at < ? AND p.ordinal < (SELECT MAX(ordinal) FROM plans) "
        f"AND NOT EXISTS (SELECT 1 FROM intents i WHERE i.plan_id = p.plan_id AND (i.status IN {_OPEN} "
        f"OR i.updated_at >= ? OR {_NAMES_LIVE})) "
        "ORDER BY p.ordinal LIMIT ?", (before, before, limit)).fetchall()
    return [(str(r[0]), int(r[1])) for r in rows]


def prune_history(conn: sqlite3.Connection, before: float, max_rows: int) -> PruneReport:
    """Forget the closed history older than ``before`` (module docstring), at most ``max_rows`` rows,
    in one transaction."""
    if max_rows < 1:
        raise ValueError(f"max_rows must be >= 1, got {max_rows}")
    left = max_rows
    plans = intents = 0
    conn.execute("BEGIN IMMEDIATE")
    try:
        for plan_id, n in _prunable_plans(conn, before, left):
            if n + 1 > left:     # more than this run may take: a part of its intents, the last-numbered kept
                intents += conn.execute(
                    "DELETE FROM intents WHERE client_token IN (SELECT client_token FROM intents WHERE plan_id = ? "
                    "AND client_token != (SELECT client_token FROM intents WHERE plan_id = ? "
                    "ORDER BY seq DESC, client_token LIMIT 1) ORDER BY seq, client_token LIMIT ?)",
                    (plan_id, plan_id, left)).rowcount
                left = max_rows - plans - intents
                break
            intents += conn.execute("DELETE FROM intents WHERE plan_id = ?", (plan_id,)).rowcount
            plans += conn.execute("DELETE FROM plans WHERE plan_id = ?", (plan_id,)).rowcount
            left = max_rows - plans - intents
        if left > 0:
            intents_lone = conn.execute(
                "DELETE FROM intents WHERE client_token IN (SELECT i.client_token FROM intents i "
                f"WHERE i.status NOT IN {_OPEN} AND i.updated_at < ? "
                "AND NOT EXISTS (SELECT 1 FROM plans p WHERE p.plan_id = i.plan_id) "
                f"AND NOT {_NAMES_LIVE} ORDER BY i.updated_at LIMIT ?)", (before, left)).rowcount
            intents += intents_lone
            left -= intents_lone
        gone = conn.execute("DELETE FROM instances WHERE instance_id IN (SELECT instance_id FROM instances "
                            "WHERE gone = 1 AND last_seen < ? ORDER BY last_seen LIMIT ?)",
                            (before, left)).rowcount if left > 0 else 0
        left -= gone
        ended = conn.execute("DELETE FROM unavailable WHERE instance_type IN (SELECT instance_type FROM unavailable "
                             "WHERE until < ? ORDER BY until LIMIT ?)", (before, left)).rowcount if left > 0 else 0
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:   # (a full disk may have rolled it back already)
            conn.execute("ROLLBACK")
        raise
    return PruneReport(plans=plans, intents=intents, instances=gone, unavailable=ended)


def row_counts(conn: sqlite3.Connection) -> dict[str, int]:
    """Rows per table of the store (what the soak bench samples)."""
    return {t: int(conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0])
            for t in ("plans", "intents", "instances", "unavailable", "demand_minutes")}


__all__ = ["PruneReport", "prune_history", "row_counts"]
