"""The daemon's ports of the one fleet tick (:mod:`scaler.fleet.tick`): EC2 listed in a thread, the
dispatcher's worker registry (unparks awaited, each bounded by :data:`UNPARK_TIMEOUT_S`, before the
actuator runs), and the audit (the log lines, ``Daemon.fleet_events``, the plan's estimates on
``Daemon.status``). It decides nothing: the tick's order and decisions are the replay's too.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from typing import Any, Awaitable, Callable, Mapping, Sequence

from config.errors import UsageError
from config.profiles import ProfileTable
from config.schema import Config
from daemon.observe.fleet_status import FleetStatus, plan_estimates, tick_line
from dispatcher.server import Dispatcher
from scaler.cloud.provider import CloudProvider, ManagedInstance
from scaler.fleet.reports import ReconcileReport
from scaler.fleet.tick import EventKind, TickResult
from scaler.forecast.state import ForecastState
from scaler.planner.joint_plan import JointPlan, declared_demands
from scaler.planner.replan import DemandView

log = logging.getLogger("costscale")

UNPARK_TIMEOUT_S = 15.0   # loading a parked instance's variants back, before the actuator runs
FLEET_EVENTS_KEPT = 1000  # the newest fleet events the status feed can read

FleetHook = Callable[[list[ManagedInstance]], Awaitable[None]]
#: a pipeline round's moves, laid over the fleet's assignment (``ModelLoop.pipelines.pins_for``)
Pins = Callable[[dict[str, str]], dict[str, str]]


class ThreadedCloud:
    """The cloud as the fleet tick lists it: in a worker thread (the query path never waits on EC2)."""

    def __init__(self, cloud: CloudProvider) -> None:
        self.cloud = cloud

    async def list_managed(self) -> list[ManagedInstance]:
        return await asyncio.to_thread(self.cloud.list_managed)


class DispatcherWorkers:
    """The dispatcher's worker registry as the fleet tick sees it (:class:`scaler.fleet.tick.WorkerView`);
    the sync also keeps ``status.instances`` and tells ``on_fleet_change`` the typed instances."""

    def __init__(self, dispatcher: Dispatcher | None, status: FleetStatus, models: int,
                 unpark_ms: deque[float], pins: Pins | None = None, on_fleet_change: FleetHook | None = None) -> None:
        self.dispatcher, self.status, self.models = dispatcher, status, models
        self.unpark_ms, self.pins, self.on_fleet_change = unpark_ms, pins, on_fleet_change

    def _d(self) -> Dispatcher:
        assert self.dispatcher is not None
        return self.dispatcher

    def ready(self) -> frozenset[str]:
        return frozenset(iid for iid, w in self._d().workers.items() if not w.removed)

    def serves(self) -> Mapping[str, str]:
        return self._d().serves  # type: ignore[no-any-return]

    async def unpark_all(self, ids: Sequence[str]) -> None:
        """Each unparked worker gets its variants back, at once and each bounded (a hung worker must
        not hold up the launches a spike needs); the actuator then launches the rest."""
        d = self._d()

        async def unpark(iid: str) -> tuple[Any, float]:
            t0 = time.monotonic()
            res = await asyncio.wait_for(d.unpark(iid), UNPARK_TIMEOUT_S)
            return res, 1000.0 * (time.monotonic() - t0)
        done = await asyncio.gather(*(unpark(iid) for iid in ids), return_exceptions=True)
        for iid, got in zip(ids, done):
            if isinstance(got, BaseException):
                log.warning("fleet: unpark %s: %s", iid, type(got).__name__)
            else:
                res, ms = got
                self.unpark_ms.append(ms)
                log.info("fleet: unpark %s in %.0f ms (load %s)", iid, ms,
                         ", ".join(f"{v}{'' if ok else ' failed: ' + m}" for v, ok, m in res) or "-")

    def mark_parked(self, instance_id: str) -> None:
        self._d().mark_parked(instance_id)

    async def park_all(self, ids: Sequence[str]) -> None:
        d = self._d()
        for iid, res in zip(ids, await asyncio.gather(*(d.park(iid) for iid in ids), return_exceptions=True)):
            for v, ok, m in ([] if isinstance(res, BaseException) else res):
                if not ok:
                    log.warning("fleet: unload %s from parked %s: %s", v, iid, m)

    def set_base_types(self, plan: JointPlan) -> None:
        base = plan.dispatch_base_type()
        if base is not None and self.dispatcher is not None:
            self.dispatcher.set_base_type(base, plan.base_types)   # each model's own C_j

    async def synced(self, listed: list[ManagedInstance], typed: list[ManagedInstance],
                     assignment: Callable[[], dict[str, str]]) -> None:
        """The dispatcher's cloud view (who may register, who boots: Status, admission); with several
        models, which model each instance serves; the typed list to the hook."""
        self.status.instances = listed
        if self.dispatcher is not None:
            observe_boots(self.status.forecast, listed, frozenset(self._d().workers), time.time())
            self.dispatcher.set_cloud_view(listed)   # by slot: Status counts each market
            if self.models > 1:   # each model's queries go to the workers planned for it
                serves = assignment()
                self.dispatcher.set_assignment({**serves, **self.pins(serves)} if self.pins is not None
                                               else serves)   # pipeline rounds' moves hold
        if self.on_fleet_change is not None:
            await self.on_fleet_change(typed)


def observe_boots(fc: ForecastState, listed: list[ManagedInstance], registered: frozenset[str], now: float) -> None:
    """Each instance seen pending (launched, its worker not registered) and then registered: its boot
    (now - launch time) into the measured boot delays of its type (the forecast's lead, issue #39).
    Seen at the worker syncs, so up to one sync late; an instance first seen running (adopted at a
    start or a takeover) is not counted."""
    live = {i.instance_id: i for i in listed if i.live}
    for iid in list(fc.booting):
        inst = live.get(iid)
        if inst is None:
            fc.booting.discard(iid)
        elif iid in registered:
            fc.booting.discard(iid)
            fc.boot = fc.boot.observe(inst.instance_type.split("@")[0], now - inst.launch_time)
    fc.booting.update(iid for iid, i in live.items() if i.state == "pending" and iid not in registered)


class DaemonAudit:
    """The fleet tick's audit port in the daemon: one log line per tick (:func:`daemon.observe.fleet_status.tick_line`),
    the fleet events the status feed reads, the plan's estimated workers on ``status``."""

    def __init__(self, cfg: Callable[[], Config], profiles: Callable[[], ProfileTable], status: FleetStatus,
                 events: list[tuple[float, str, str]]) -> None:
        self.cfg, self.profiles, self.status, self.events = cfg, profiles, status, events
        self._failing: str | None = None   # the expected error the ticks keep meeting, logged once

    def event(self, kind: EventKind, instance_id: str, target: Mapping[str, int]) -> None:
        """(monotonic time, kind, instance id), newest last; a termination is the intents' to tell."""
        if kind == "terminate":
            return
        self.events.append((time.monotonic(), kind, instance_id))
        del self.events[:-FLEET_EVENTS_KEPT]
        if kind == "park":
            log.info("fleet: park %s for up to %gs (surplus to %s)", instance_id,
                     self.cfg().model_scaling.vm_park_s, target)

    def applied(self, result: TickResult) -> None:
        cfg, plan = self.cfg(), result.plan
        if self._failing is not None:
            log.info("fleet: ticks apply again (they failed: %s)", self._failing)
            self._failing = None
        self.status.estimated = plan_estimates(cfg, self.profiles(), plan)
        log.info("%s", tick_line(result.reason, dict(result.demand), result.target, plan, bool(cfg.pinned_pool),
                                 result.report.summary(), self.status.estimated))
        if plan is not None and plan.short:
            log.warning("fleet: the budget %.4g $/hr cannot cover every model: short %s", plan.budget_per_hour,
                        ", ".join(f"{m} {q:.1f} q/s" for m, q in plan.short.items()))

    def failed(self, error: str, expected: bool) -> None:
        if expected:   # no pool fits, EC2 down, the store full: one line, not again while it lasts
            if error != self._failing:
                log.error("fleet: %s", error)
            self._failing = error
        else:
            log.exception("fleet tick failed")

    def list_failed(self, exc: Exception) -> None:
        log.warning("list instances failed: %s", exc)

    def reconciled(self, report: ReconcileReport) -> None:
        """The actuator logs what a reconcile repaired."""

    def reconcile_failed(self, exc: Exception) -> None:
        if isinstance(exc, UsageError):   # fenced (the lease lost or not renewed): one line
            log.error("reconcile: %s", exc)
        else:
            log.error("reconcile failed", exc_info=exc)


__all__ = ["DaemonAudit", "DispatcherWorkers", "FLEET_EVENTS_KEPT", "FleetHook", "ThreadedCloud", "observe_boots", "UNPARK_TIMEOUT_S"]


class DeclaredDemands:
    """Each model's declared workload (:func:`scaler.planner.joint_plan.declared_demands`), once per
    config: sampling the batch mix is not free, and the daemon asks for it every tick."""

    def __init__(self) -> None:
        self._for: tuple[Config, dict[str, DemandView]] | None = None

    def __call__(self, cfg: Config) -> dict[str, DemandView]:
        if self._for is None or self._for[0] is not cfg:
            self._for = (cfg, declared_demands(cfg))
        return self._for[1]
