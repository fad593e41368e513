"""The fleet-side faults of issue #40 (deliverable 2): the EC2 endpoint down, the state store's disk
full, the wall clock stepped. Shared by ``tests/faults/test_ec2_down.py``, ``test_store_full.py``,
``test_clock_step.py`` (one seeded point each) and ``bench/faults/fleet_faults_bench.py`` (≥ 5).

The real daemon (:class:`daemon.app.Daemon`, in process) runs its fleet tick over
:class:`scaler.cloud.ec2.Ec2Cloud` against moto in server mode on 127.0.0.1. Time is compressed and
virtual: the ticks are driven back to back, one every :data:`TICK_S` virtual seconds, each EC2
attempt takes :data:`ATTEMPT_S` and botocore's retry backoff is added to the virtual clock instead
of slept (:func:`virtual_backoff`), so a fault window of 60 s is 60 virtual seconds whatever the
machine's speed, and a seed replays exactly. The scheduler's own ticks are paused: the rig is the
fleet loop's clock. A surplus instance is retired at once (``vm_park_s: 0``: parking holds it on the
monotonic clock, which compressed time does not move). Each tick the decide port returns the next pool of a seeded schedule (every
pool within the budget), so every tick is a pool change.

The invariants are checked at the instant that could break them, at every RunInstances that reaches
moto (a botocore ``before-send`` handler registered after the fault injector, so it sees only the
attempts that are sent):

* **budget**: the cluster's pending and running instances (listed by a separate client) plus the
  launch ≤ the budget, else an excursion (and at the end every plan the store recorded within it);
* **write-ahead intent**: the launch's ClientToken is an intent of the store in status ``sent``
  (read through a separate read-only SQLite connection), else a launch without intent;
* **no duplicate**: no ClientToken reaches moto twice (moto does not honour ClientToken, so a
  repeat would launch twice).

At the end: **no orphan** (every cluster instance not terminated is known to the store), the pool
equals the last target (no duplicate, nothing missing), the store's ``integrity_check`` is ok, and
**recovery**: the virtual seconds from the fault's end to the first tick that applied its target
with the pool equal to it.
"""
from __future__ import annotations

import asyncio
import json
import logging
import random
import sqlite3
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Callable, Iterator

import apscheduler.executors.base as apscheduler_executors
import apscheduler.schedulers.base as apscheduler_schedulers
import boto3

from config.catalog import load_catalog
from config.schema import parse_config_text
from daemon.loops import ticks as daemon_ticks
from scaler.cloud.provider import CLUSTER_TAG, INTENT_TAG
from tests.aws_faults import ANY, Faults, refused

PRICE = {t: it.price_per_hour for t, it in load_catalog().items()}
CLUSTER = "faults"
BUDGET = 1.5
TYPES = ("g4dn.xlarge", "c5n.2xlarge", "r5n.large", "t3.xlarge")
TICK_S = 10.0        # virtual seconds between fleet ticks
ATTEMPT_S = 0.2      # virtual seconds one EC2 attempt takes
EPS = 1e-9
EXTRA_TICKS = 12     # ticks on the last target after the schedule, at most, for the pool to reach it

CONFIG = """\
cluster: {cluster}
budget_per_hour: {budget}
models:
  - name: rm2
    qos_ms: 350
instance_types:
{types}
launch:
  ami_id: {ami}
dispatcher:
  listen: 127.0.0.1:0
intervals:
  fleet_s: 3600
  reconcile_s: 3600
state_path: {state}
model_scaling:
  generate_variants: false
  vm_park_s: 0
metrics:
  listen: null
"""


def seeded_targets(seed: int, n: int) -> list[dict[str, int]]:
    """``n`` pools, each within :data:`BUDGET` and each unlike the one before."""
    rng = random.Random(seed)
    out: list[dict[str, int]] = []
    while len(out) < n:
        pool: dict[str, int] = {}
        for _ in range(rng.randint(2, 8)):
            t = rng.choice(TYPES)
            if sum(PRICE[k] * c for k, c in pool.items()) + PRICE[t] <= BUDGET + EPS:
                pool[t] = pool.get(t, 0) + 1
        if pool and (not out or pool != out[-1]):
            out.append(pool)
    return out


def pool_cost(pool: dict[str, int]) -> float:
    return sum(PRICE[t] * n for t, n in pool.items())


@dataclass(frozen=True)
class Window:
    start: float
    end: float

    def __contains__(self, t: float) -> bool:
        return self.start <= t < self.end

    def __str__(self) -> str:
        return f"[{self.start:g}, {self.end:g}) s"


@dataclass
class Ledger:
    """What the checks found (each list empty when the invariants held)."""

    excursions: list[tuple[float, float]] = field(default_factory=list)   # (virtual t, $/hr with the launch)
    duplicates: list[str] = field(default_factory=list)                   # ClientTokens sent twice
    without_intent: list[str] = field(default_factory=list)               # launches with no 'sent' intent
    sent: list[str] = field(default_factory=list)                         # ClientTokens that reached moto
    peak: float = 0.0
    orphans: list[str] = field(default_factory=list)
    pool_ok: bool = False
    integrity: str = ""
    failed_ticks: list[tuple[float, str]] = field(default_factory=list)   # (virtual t, the tick's error)
    recovered_after_s: float | None = None
    ticks: int = 0
    audit_missing: list[str] = field(default_factory=list)   # done intents the audit log never told
    audit_twice: list[str] = field(default_factory=list)     # told more than once
    spent_usd: float = 0.0            # the status feed's spend since the start
    elapsed_s: float = 0.0            # monotonic seconds the run took

@contextmanager
def virtual_backoff(add: Callable[[float], None], seed: int) -> Iterator[None]:
    """botocore's standard-mode backoff added to the virtual clock, not slept (as ``conftest.py``'s
    ``botocore_backoff``: its retry decisions, quota and attempt counting untouched), its jitter
    drawn from a generator seeded with ``seed`` (a seed replays to the same virtual instant)."""
    from botocore.retries import standard

    computed = standard.ExponentialBackoff.delay_amount
    rng = random.Random(seed)

    def record(self: Any, context: Any) -> float:
        self._random = rng.random
        add(computed(self, context))
        return 0.0

    standard.ExponentialBackoff.delay_amount = record   # type: ignore[method-assign]
    try:
        yield
    finally:
        standard.ExponentialBackoff.delay_amount = computed   # type: ignore[method-assign]


def live_pool(ec2: Any) -> tuple[dict[str, int], list[dict[str, Any]]]:
    resp = ec2.describe_instances(Filters=[{"Name": f"tag:{CLUSTER_TAG}", "Values": [CLUSTER]}])
    every = [i for r in resp["Reservations"] for i in r["Instances"]]
    live = [i for i in every if i["State"]["Name"] in ("pending", "running")]
    pool: dict[str, int] = {}
    for i in live:
        pool[i["InstanceType"]] = pool.get(i["InstanceType"], 0) + 1
    return pool, live


class FleetRig:
    """One seeded run of the daemon's fleet loop under a fault (module docstring).

    The fault, on the virtual clock: ``ec2_down``, the endpoint refuses every connection inside the
    window; ``store_full``, the store's disk full inside it (:meth:`_disk`); ``wall_step`` (at,
    seconds), the wall clock stepped once at that virtual time."""

    def __init__(self, endpoint: str, tmp: Path, seed: int, ticks: int, *, ec2_down: Window | None = None,
                 store_full: Window | None = None, wall_step: tuple[float, float] | None = None) -> None:
        self.endpoint, self.seed, self.ticks = endpoint, seed, ticks
        self.targets = seeded_targets(seed, ticks)
        self.ec2_down, self.store_full, self.wall_step = ec2_down, store_full, wall_step
        self.wall = SteppedWall()
        self.audited: list[str] = []            # the intents the audit log told, in order
        self._full_pages: int | None = None     # the store's max_page_count while its disk is full
        self.t = 0.0
        self.tick_no = 0
        self.ledger = Ledger()
        self.probe = boto3.client("ec2", region_name="us-east-1", endpoint_url=endpoint)
        ami = self.probe.describe_images()["Images"][0]["ImageId"]
        types = "\n".join(f"  - type: {t}" for t in TYPES)
        self.state = tmp / "state.db"
        self.cfg = parse_config_text(CONFIG.format(cluster=CLUSTER, budget=BUDGET, types=types, ami=ami,
                                                   state=self.state))
        self.daemon: Any = None
        self.faults: Faults | None = None

    # -- the virtual clock -------------------------------------------------------------------
    def advance(self, dt: float) -> None:
        self.t += dt
        if self.store_full is not None and self.daemon is not None:
            self._disk(self.t in self.store_full)
        if self.wall_step is not None and self.t >= self.wall_step[0] and not self.wall.stepped:
            self.wall.step(self.wall_step[1])

    def _disk(self, full: bool) -> None:
        """The state store's disk full: SQLite's ``max_page_count`` set to the pages the store has
        now, on the daemon's own connection. A real small tmpfs needs root (a mount); this stands
        for it on the same error path: a write that needs a page more fails with SQLITE_FULL,
        "database or disk is full", the code SQLite returns for ENOSPC, the statement rolled
        back; writes that fit the pages already there go through, as on a full disk whose files
        still have room. (A file-size rlimit would fail the write with EFBIG, which SQLite returns
        as SQLITE_IOERR, not SQLITE_FULL, and it would bound every file of the process.)"""
        store = self.daemon.store
        if full == (self._full_pages is not None):
            return
        with store._mu:
            conn = store._conn
            if full:
                pages = int(conn.execute("PRAGMA page_count").fetchone()[0])
                self._full_pages = int(conn.execute("PRAGMA max_page_count").fetchone()[0])
                conn.execute(f"PRAGMA max_page_count={pages}")
            else:
                conn.execute(f"PRAGMA max_page_count={self._full_pages}")
                self._full_pages = None

    def _clock_attempt(self, **_: Any) -> None:
        self.advance(ATTEMPT_S)
        assert self.faults is not None
        if self.ec2_down is not None and self.t in self.ec2_down:
            self.faults.always(ANY, refused())
        else:
            self.faults.clear()

    def _check_launch(self, request: Any, event_name: str, **_: Any) -> None:
        """At a RunInstances sent to moto: budget, write-ahead intent, no repeated token."""
        if not event_name.endswith(".RunInstances"):
            return
        from urllib.parse import parse_qs

        body = request.body.decode() if isinstance(request.body, bytes) else (request.body or "")
        params = {k: v[0] for k, v in parse_qs(body).items()}
        token, itype, count = params["ClientToken"], params["InstanceType"], int(params["MaxCount"])
        if token in self.ledger.sent:
            self.ledger.duplicates.append(token)
        self.ledger.sent.append(token)
        with sqlite3.connect(f"file:{self.state}?mode=ro", uri=True) as ro:
            row = ro.execute("SELECT status FROM intents WHERE client_token=?", (token,)).fetchone()
        ro.close()
        if row is None or row[0] != "sent":
            self.ledger.without_intent.append(token)
        pool, _ = live_pool(self.probe)
        cost = pool_cost(pool) + PRICE[itype] * count
        self.ledger.peak = max(self.ledger.peak, cost)
        if cost > BUDGET + EPS:
            self.ledger.excursions.append((self.t, cost))

    # -- the run -----------------------------------------------------------------------------
    async def start(self) -> None:
        from daemon.app import Daemon
        from scaler.cloud.ec2 import Ec2Cloud, make_ec2_client

        client = make_ec2_client("us-east-1", self.endpoint)
        client.meta.events.register_first("before-send", self._clock_attempt)
        self.faults = Faults(client)
        client.meta.events.register("before-send", self._check_launch)
        cloud = Ec2Cloud(CLUSTER, "us-east-1", self.cfg.launch, client=client)
        d = Daemon(self.cfg, None, cloud=cloud, listen="127.0.0.1:0", generate_variants=False)

        async def decide(demand: Any, keep: Any = None) -> tuple[dict[str, int], None]:
            return self._target(), None

        d._decided = decide
        await d.start()
        assert d._scheduler is not None
        d._scheduler.pause()     # the rig drives the fleet loop on its virtual clock
        self.daemon = d
        # the clocks the daemon took from time.time when its modules were imported (default
        # arguments): the actuator's (the store's times) and the status feed's (decisions, spend)
        d.actuator.clock.wall = self.wall
        d.status_feed.log.clock = d.status_feed.clock = self.wall

    async def tick(self) -> None:
        d = self.daemon
        await d.fleet_tick("fault bench")
        d.status_feed.observe()     # the status feed's job (every second) sees the tick's intents
        err = d.status.last_error
        if err is not None:
            self.ledger.failed_ticks.append((self.t, err))

    async def run(self, fault_end: float) -> Ledger:
        """Every tick of the schedule, then ticks on the last target until the pool holds it (at
        most :data:`EXTRA_TICKS` more); recovery is measured from ``fault_end``."""
        began = time.monotonic()
        await self.start()
        try:
            ok = False
            while self.tick_no < len(self.targets) or (not ok and len(self.targets) < self.ticks + EXTRA_TICKS):
                if self.tick_no == len(self.targets):
                    self.targets.append(self.targets[-1])
                start = self.tick_no * TICK_S
                if self.t < start:
                    self.advance(start - self.t)
                await self.tick()
                ok = self.daemon.status.last_error is None and self._pool() == self._target()
                if ok and self.t >= fault_end and self.ledger.recovered_after_s is None:
                    self.ledger.recovered_after_s = round(max(0.0, self.t - fault_end), 3)
                self.tick_no += 1
            self.tick_no -= 1
            self.finish()
        finally:
            await self.daemon.stop(grace=0.0)
        self.ledger.elapsed_s = time.monotonic() - began
        self.ledger.spent_usd = self.daemon.status_feed.spend.total
        self.ledger.integrity = integrity(self.state)
        self.ledger.ticks = self.tick_no + 1
        with sqlite3.connect(f"file:{self.state}?mode=ro", uri=True) as ro:
            done = [r[0] for r in ro.execute("SELECT client_token FROM intents WHERE status='done'")]
            plans = [json.loads(r[0]) for r in ro.execute("SELECT target FROM plans")]
        ro.close()
        for target in plans:      # planned $/hr: every plan recorded within the budget too
            if pool_cost(target) > BUDGET + EPS:
                self.ledger.excursions.append((-1.0, pool_cost(target)))
        told = {t: self.audited.count(t) for t in set(self.audited)}
        self.ledger.audit_missing = sorted(t for t in done if t not in told)
        self.ledger.audit_twice = sorted(t for t, n in told.items() if n > 1)
        return self.ledger

    def _target(self) -> dict[str, int]:
        return dict(self.targets[min(self.tick_no, len(self.targets) - 1)])

    def _pool(self) -> dict[str, int]:
        return live_pool(self.probe)[0]

    def finish(self) -> None:
        """No orphan, the pool equal to the last target."""
        pool, live = live_pool(self.probe)
        known = set(self.daemon.store.known_instances())
        intents = {i.client_token for i in self.daemon.store.intents()}
        for i in live:
            tags = {t["Key"]: t["Value"] for t in i.get("Tags", [])}
            if i["InstanceId"] not in known or tags.get(INTENT_TAG) not in intents:
                self.ledger.orphans.append(i["InstanceId"])
        self.ledger.pool_ok = pool == self._target()


class SteppedWall:
    """The wall clock, stepped once by :meth:`step` (``time.time`` is this while :func:`run_seed`
    runs with a step)."""

    def __init__(self) -> None:
        self.real = time.time
        self.offset = 0.0
        self.stepped = False

    def __call__(self) -> float:
        return self.real() + self.offset

    def step(self, seconds: float) -> None:
        self.offset += seconds
        self.stepped = True


class AuditTokens(logging.Handler):
    """The intent of every launch and terminate the audit log tells."""

    def __init__(self, into: list[str]) -> None:
        super().__init__(logging.INFO)
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        data = getattr(record, "audit", None)
        if isinstance(data, dict) and data.get("event") in ("launch", "terminate"):
            self.into.append(str(data.get("intent")))


def integrity(path: Path) -> str:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as ro:
        out = str(ro.execute("PRAGMA integrity_check").fetchone()[0])
    ro.close()
    return out


def run_seed(endpoint: str, tmp: Path, seed: int, ticks: int, fault_end: float, **kw: Any) -> Ledger:
    """One seeded run (the virtual backoff on for its length)."""
    rig = FleetRig(endpoint, tmp, seed, ticks, **kw)
    audit = logging.getLogger("costscale.audit")
    handler = AuditTokens(rig.audited)
    audit.addHandler(handler)
    level = audit.level
    audit.setLevel(logging.INFO)
    real = time.time
    time.time = rig.wall    # type: ignore[assignment]   # (runtime reads of the wall clock)
    # APScheduler's clock (``datetime.now`` in its scheduler and executor, and as the daemon's
    # ``WallSteps`` reads it) stepped with it, as a real step moves both
    wall = rig.wall

    class SteppedNow(datetime):
        @classmethod
        def now(cls, tz=None):  # type: ignore[no-untyped-def, override]
            return datetime.now(tz) + timedelta(seconds=wall.offset)
    modules = (apscheduler_executors, apscheduler_schedulers, daemon_ticks)
    saved = [m.datetime for m in modules]
    for m in modules:
        m.datetime = SteppedNow    # type: ignore[attr-defined]
    try:
        with virtual_backoff(rig.advance, seed):
            return asyncio.run(rig.run(fault_end))
    finally:
        time.time = real    # type: ignore[assignment]
        # a module first imported during the run may have bound ``time.time`` (a default argument):
        # from now on that is the real clock again (test_dynamo_down's leases, run after it in one process)
        rig.wall.offset = 0.0
        for m, d in zip(modules, saved):
            m.datetime = d    # type: ignore[attr-defined]
        audit.removeHandler(handler)
        audit.setLevel(level)
