"""The wall clock stepped ±10 minutes (issue #40, deliverable 2). Where costscale reads which clock:

* monotonic (a step changes nothing): the fleet tick's clock (the scale-in window, plan due, the park
  hold), the fleet events, the dispatcher's deadlines and token grace, the subnet cooldowns, the
  image cache, the lease's local validity (``scaler.replicas.lease_holder``);
* wall, and right to be: the store's timestamps, the demand minutes, the spend's UTC day, the
  retention's days, the audit log's times, a lease's expiry in DynamoDB (shared between hosts);
* wall, and wrong under a step until this change (each fixed here, each with a test below):
  APScheduler's interval jobs (a step back held every loop 10 minutes: fleet, model, reconcile, the
  lease renewal, heartbeats, systemd's watchdog; ``daemon.loops.ticks.WallSteps``); the spend between
  two samples (a step forward billed 10 minutes at the pool's price; ``daemon.observe.spend``); the
  audit of launches and terminations (a step back hid the next 10 minutes of them for good;
  ``scaler.fleet.store_clock.NeverBack``);
* wall, still: a capacity cooldown ends early by a forward step (one more refused launch, no
  dollar), and a pending instance's age is EC2's launch time against this host's clock (a host
  clock 10 minutes fast ends a boot as stuck; ``launch.pending_timeout_s`` ≥ the clock's error).

The daemon's fleet loop runs a seeded point (``tests/fleet_faults.py``) with the wall clock stepped
back 600 s at virtual second 45: budget, intents, no duplicate, no orphan, and every launch and
terminate told by the audit log exactly once; the spend no more than the pool could have cost in
the monotonic time the run took. About 7 s of CPU for the file (pytest's start
included; 60 s wall at a load average of 20 on 2 cores), the scheduler test 2.5 s of it."""
from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from daemon.observe.spend import SpendMeter
from scaler.fleet.store_clock import NeverBack
from tests.fleet_faults import BUDGET, run_seed

SEED = 3
STEP = (45.0, -600.0)


@pytest.mark.timeout(120)
def test_the_wall_clock_stepped_back_10_minutes_keeps_budget_intents_and_the_audit_log(
        moto_endpoint: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="costscale"):
        led = run_seed(moto_endpoint, tmp_path, SEED, 12, STEP[0], wall_step=STEP)
    assert led.excursions == [] and led.peak <= BUDGET
    assert led.duplicates == [] and led.without_intent == [] and len(led.sent) > 0
    assert led.orphans == [] and led.pool_ok and led.integrity == "ok"
    assert led.failed_ticks == [] and led.recovered_after_s is not None
    assert led.audit_missing == [] and led.audit_twice == []
    assert 0 < led.spent_usd <= BUDGET * led.elapsed_s / 3600.0
    assert "the wall clock stepped -600.0 s: every loop keeps its interval" in [r.getMessage() for r in caplog.records]


def test_the_store_clock_never_goes_back() -> None:
    wall = [1000.0]
    clock = NeverBack(lambda: wall[0])
    seen = [clock()]
    wall[0] -= 600            # stepped back: held at the latest time until the wall passes it
    seen += [clock(), clock()]
    wall[0] = 1001.0
    seen.append(clock())
    wall[0] += 600            # stepped forward: follows
    seen.append(clock())
    assert seen == [1000.0, 1000.0, 1000.0, 1001.0, 1601.0]


def test_spend_between_samples_is_timed_on_the_monotonic_clock() -> None:
    noon = datetime(2026, 11, 29, 12).timestamp()
    meter = SpendMeter(None, noon)
    meter.sample(noon, 3.6, monotonic=50.0)
    meter.sample(noon + 1 + 600, 3.6, monotonic=51.0)      # the wall stepped +600 s within a second
    meter.sample(noon + 2, 3.6, monotonic=52.0)            # and back
    assert meter.total == pytest.approx(3.6 * 2 / 3600.0) and meter.today == pytest.approx(meter.total)


class _Stepped(datetime):
    """``datetime.now`` of a wall clock ``offset`` seconds from the real one (APScheduler's)."""

    offset = 0.0

    @classmethod
    def now(cls, tz=None):  # type: ignore[no-untyped-def, override]
        return datetime.now(tz) + timedelta(seconds=cls.offset)


@pytest.mark.timeout(60)
def test_a_wall_clock_step_either_way_leaves_every_scheduled_loop_its_interval(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A real AsyncIOScheduler whose wall clock (``datetime.now`` in APScheduler's scheduler and
    executor) steps back 600 s, then forward 1200 s: with :class:`daemon.loops.ticks.WallSteps`
    the 0.2 s job keeps running (without it, a step back holds it 600 s)."""
    import apscheduler.executors.base as executors
    import apscheduler.schedulers.base as schedulers
    from apscheduler.schedulers.asyncio import AsyncIOScheduler

    from daemon.loops.ticks import WallSteps

    monkeypatch.setattr(schedulers, "datetime", _Stepped)
    monkeypatch.setattr(executors, "datetime", _Stepped)
    monkeypatch.setattr(_Stepped, "offset", 0.0)

    async def scenario() -> list[float]:
        loop = asyncio.get_running_loop()
        scheduler = AsyncIOScheduler(event_loop=loop)
        runs: list[float] = []

        async def job() -> None:
            runs.append(time.monotonic())
        scheduler.add_job(job, "interval", seconds=0.2, max_instances=1, coalesce=True, id="tick")
        watch = WallSteps(scheduler, loop, wall=lambda: time.time() + _Stepped.offset)
        scheduler.start()
        try:
            for step in (-600.0, 1200.0):
                await _until(lambda: len(runs) >= 3)
                _Stepped.offset += step
                runs.clear()
                await _until(lambda: len(runs) >= 4)       # runs on, as it did before the step
            return watch.steps
        finally:
            scheduler.shutdown(wait=False)

    assert [round(s) for s in asyncio.run(scenario())] == [-600, 1200]


async def _until(cond, timeout: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "the job stopped running"
        await asyncio.sleep(0.02)
