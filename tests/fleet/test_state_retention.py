"""The state store forgets its closed history past the retention, never an open intent, never the
plan in force or what names a live instance (issue #40: whatever grows with time gets a bound)."""
from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from config.errors import ConfigError
from config.schema import load_config
from config.sections.retention import StateRetentionSpec
from daemon.app import Daemon
from daemon.loops.fleet_upkeep import DAY_S, StorePruner, schedule_pruning
from scaler.fleet.retention import PruneReport
from scaler.cloud.fake import FakeCloud
from scaler.fleet.state import StateStore
from tests.config.test_config_checks import BASE
from tests.daemon.test_status import daemon_config
from tests.dispatch_helpers import run

CUT = 1000.0   # everything changed before this is old


def _intent(store: StateStore, token: str, plan: str, status: str, at: float, ids: tuple[str, ...] = (),
            kind: str = "launch", seq: int = 0) -> None:
    store.record_intent(token, kind, plan, "m5.large", max(len(ids), 1), seq, at, instance_ids=ids)
    if status != "planned":
        store.set_intent_status(token, status, at)


def _history(store: StateStore) -> None:
    """Old and new rows of every kind; the comments say which the prune may take."""
    store.record_plan("old", {"m5.large": 2}, 1.0, 100.0)                 # goes, with its 3 intents
    _intent(store, "old-0", "old", "done", 200.0, ("i-a", "i-b"))
    _intent(store, "old-1", "old", "failed", 300.0, seq=1)
    _intent(store, "old-t", "old", "done", 300.0, ("i-a",), kind="terminate", seq=-1)
    store.record_plan("open", {"m5.large": 1}, 1.0, 100.0)                # kept: an open intent
    _intent(store, "open-0", "open", "done", 100.0, ("i-c",))
    _intent(store, "open-1", "open", "sent", 150.0, seq=1)
    store.record_plan("live", {"m5.large": 1}, 1.0, 100.0)                # kept: names a live instance
    _intent(store, "live-0", "live", "done", 100.0, ("i-live",))
    store.record_plan("touched", {"m5.large": 1}, 1.0, 100.0)             # kept: an intent changed since
    _intent(store, "touched-0", "touched", "done", 100.0)
    store.set_intent_status("touched-0", "done", 2000.0)
    store.record_plan("new", {"m5.large": 3}, 1.0, 2000.0)                # kept: recent
    _intent(store, "reco-old", "reconcile:stuck", "done", 300.0, ("i-gone",), kind="terminate")   # goes
    _intent(store, "reco-open", "reconcile:stuck", "planned", 100.0, ("i-x",), kind="terminate")  # kept: open
    _intent(store, "reco-new", "reconcile:stuck", "done", 2000.0, ("i-y",), kind="terminate")     # kept: recent
    store.upsert_instance("i-gone", "m5.large", "running", "x", 50.0, 50.0)
    store.mark_gone("i-gone", 300.0)                                      # goes
    store.upsert_instance("i-gone-new", "m5.large", "running", "x", 50.0, 50.0)
    store.mark_gone("i-gone-new", 2000.0)                                 # kept: recent
    store.upsert_instance("i-live", "m5.large", "running", "live-0", 50.0, 100.0)   # kept: live
    store.mark_unavailable("c5.large", 500.0, "capacity")                 # goes: ended long ago
    store.mark_unavailable("c5.xlarge", 5000.0, "capacity")               # kept
    store.record_plan("latest", {"m5.large": 2}, 1.0, 50.0)               # kept: the plan in force
    _intent(store, "latest-0", "latest", "done", 60.0, ("i-z",))


@pytest.fixture
def store(tmp_path: Path):
    s = StateStore.open(tmp_path / "state.db")
    yield s
    s.close()


def test_prune_forgets_exactly_the_closed_history_past_the_cutoff(store: StateStore) -> None:
    _history(store)
    assert store.row_counts() == {"plans": 6, "intents": 11, "instances": 3, "unavailable": 2, "demand_minutes": 0}
    rep = store.prune(CUT, 10_000)
    assert rep == PruneReport(plans=1, intents=4, instances=1, unavailable=1)
    assert store.row_counts() == {"plans": 5, "intents": 7, "instances": 2, "unavailable": 1, "demand_minutes": 0}
    assert store.get_intent("old-0") is None and store.get_intent("reco-old") is None
    kept = {i.client_token for i in store.intents()}
    assert kept == {"open-0", "open-1", "live-0", "touched-0", "reco-open", "reco-new", "latest-0"}
    assert store.latest_plan().plan_id == "latest"
    assert store.next_seq("latest") == 1 and store.next_seq("open") == 2
    assert store.prune(CUT, 10_000) == PruneReport()    # nothing more to forget


def test_open_intents_are_never_forgotten_however_old(store: StateStore) -> None:
    store.record_plan("p", {"m5.large": 1}, 1.0, 1.0)
    _intent(store, "p-planned", "p", "planned", 1.0)
    _intent(store, "p-sent", "p", "sent", 1.0, seq=1)
    store.record_plan("q", {"m5.large": 2}, 1.0, 1.0)
    assert store.prune(1e12, 10_000) == PruneReport()
    assert [i.client_token for i in store.open_intents()] == ["p-planned", "p-sent"]
    store.set_intent_status("p-planned", "rolled_back", 2.0)
    store.set_intent_status("p-sent", "done", 2.0)
    assert store.prune(1e12, 10_000) == PruneReport(plans=1, intents=2)


def test_each_run_forgets_at_most_max_rows_and_the_next_runs_take_the_rest(store: StateStore) -> None:
    for k in range(10):   # 10 superseded plans of 2 intents each: 30 rows that may go
        store.record_plan(f"p{k}", {"m5.large": k + 1}, 1.0, float(k))
        _intent(store, f"p{k}-0", f"p{k}", "done", float(k))
        _intent(store, f"p{k}-1", f"p{k}", "failed", float(k), seq=1)
    store.record_plan("latest", {"m5.large": 1}, 1.0, 5.0)
    for k in range(4):
        store.upsert_instance(f"i-{k}", "m5.large", "running", None, 0.0, 0.0)
        store.mark_gone(f"i-{k}", 1.0)
    runs = []
    while (rep := store.prune(CUT, 7)).rows:
        runs.append(rep.rows)
    # a plan goes whole (3 rows): two fit in 7, the gone instances fill what is left
    assert runs == [7, 7, 7, 7, 6]
    assert store.row_counts()["plans"] == 1 and store.row_counts()["intents"] == 0
    assert store.row_counts()["instances"] == 0


def test_the_pruner_job_uses_the_configured_days_and_is_scheduled_every_every_s(store: StateStore) -> None:
    spec = StateRetentionSpec(days=7, every_s=120, max_rows=100)
    now = 30 * DAY_S
    store.record_plan("old", {"m5.large": 1}, 1.0, now - 8 * DAY_S)       # past 7 days: goes
    store.record_plan("week", {"m5.large": 2}, 1.0, now - 6 * DAY_S)      # within: kept
    store.record_plan("latest", {"m5.large": 3}, 1.0, now)
    pruner = StorePruner(store, lambda: spec, wall=lambda: now)
    assert asyncio.run(pruner.run()) == PruneReport(plans=1)
    assert store.row_counts()["plans"] == 2

    class Jobs:
        def __init__(self) -> None:
            self.added: list[tuple[str, float, str]] = []

        def add_job(self, func, trigger, *, seconds, id, **kw) -> None:   # noqa: A002 - APScheduler's name
            self.added.append((id, seconds, trigger))

    jobs = Jobs()
    schedule_pruning(jobs, store, lambda: spec)   # type: ignore[arg-type]
    assert jobs.added == [("prune", 120, "interval")]


def test_a_failed_prune_is_one_warning_and_the_next_run_tries_again(store: StateStore, caplog) -> None:
    spec = StateRetentionSpec()
    pruner = StorePruner(store, lambda: spec, wall=lambda: 1e9)
    store.close()
    assert asyncio.run(pruner.run()) is None
    assert [r.getMessage().split(":")[0:2] for r in caplog.records] == [["state store", " prune failed"]]


def test_a_running_daemon_prunes_its_store_with_the_prune_job(tmp_path: Path) -> None:
    """The daemon's ``prune`` job on its own store: the history of an earlier run, 10 days old, goes;
    the plan in force and the intents of its live instances stay."""
    cfg = daemon_config(tmp_path)
    old = time.time() - 10 * DAY_S
    with StateStore.open(cfg.state_path) as s:
        for k in range(2):
            s.record_plan(f"g{k}-earlier", {"r5n.large": k + 1}, 1.0, old)
            _intent(s, f"earlier-{k}", f"g{k}-earlier", "done", old, (f"i-earlier{k}",))
            s.upsert_instance(f"i-earlier{k}", "r5n.large", "running", None, old, old)
            s.mark_gone(f"i-earlier{k}", old)

    async def body() -> tuple[dict[str, int], PruneReport | None, dict[str, int], float]:
        d = Daemon(cfg, None, cloud=FakeCloud("ops"), listen="127.0.0.1:0", generate_variants=False)
        await d.start()
        try:
            await d.fleet_tick("test")
            assert d.store is not None and d._scheduler is not None
            job = d._scheduler.get_job("prune")
            before = d.store.row_counts()
            rep = await job.func()
            return before, rep, d.store.row_counts(), job.trigger.interval.total_seconds()
        finally:
            await d.stop(grace=0.0)

    before, rep, after, every = run(body, timeout=60)
    assert every == 3600.0          # state_retention.every_s's default
    assert rep == PruneReport(plans=2, intents=2, instances=2)
    assert {k: before[k] - after[k] for k in before} == {"plans": 2, "intents": 2, "instances": 2, "unavailable": 0,
                                                         "demand_minutes": 0}
    assert after["plans"] == 1 and after["intents"] == 3 and after["instances"] == 3   # the pinned pool's


@pytest.mark.parametrize("extra, line", [
    ("state_retention:\n  days: 0.5\n", "line 15: state_retention.days: Input should be greater than or equal to 1"),
    ("state_retention:\n  max_rows: 0\n", "line 15: state_retention.max_rows: Input should be greater than or equal to 1"),
    ("audit_log:\n  max_bytes: 10\n", "line 14: audit_log.path: required field is missing"),
    ("audit_log:\n  path: a.log\n  backups: 0\n", "line 16: audit_log.backups: Input should be greater than or equal to 1"),
])
def test_bad_retention_settings_are_one_line(tmp_path: Path, extra: str, line: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(BASE + extra)
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert e.value.lines == [f"{path}: {line}"]


def test_a_plan_larger_than_a_run_goes_over_several_its_next_seq_kept_until_the_end(store: StateStore) -> None:
    store.record_plan("big", {"m5.large": 9}, 1.0, 1.0)
    for k in range(9):
        _intent(store, f"big-{k}", "big", "done", 1.0, seq=k)
    _intent(store, "big-t", "big", "done", 1.0, kind="terminate", seq=-1)
    store.record_plan("older-first", {"m5.large": 1}, 1.0, 1.0)   # recorded after: pruned after "big"
    store.record_plan("latest", {"m5.large": 2}, 1.0, 5.0)
    runs, next_seqs = [], []
    while (rep := store.prune(CUT, 4)).rows:
        runs.append((rep.plans, rep.intents))
        next_seqs.append(store.next_seq("big"))
    # 10 intents + the plan: 4, 4, then the last 2 with the plan (and the next plan in the room left)
    assert runs == [(0, 4), (0, 4), (2, 2)]
    assert next_seqs == [9, 9, 0]
    assert [i.client_token for i in store.intents()] == [] and store.latest_plan().plan_id == "latest"
