"""What the daemon adds to the dispatcher's Status (``costscale status``) and so to the metrics:
the dollars spent (:class:`daemon.observe.spend.SpendMeter`, sampled each second), the fleet and model
loops' decisions with their reasons, the last error, and the models being profiled on a
conservative pool (:class:`dispatcher.api.status.FleetFacts`).

The loops push to a :class:`daemon.observe.decision_log.DecisionLog`: each new fleet target from
``Daemon.fleet_tick`` (:class:`daemon.observe.decision_log.PlanDecisions`: the planner's rule, the demand it
planned for, and the workers planned from estimated profiles, issue #29) and each VM-autoscaler add
or remove from ``Daemon._on_vm`` (with its reason, INFaaS §4.2.3). A watcher per source
(:mod:`daemon.observe.status_watchers`) looks at the rest once a second (an APScheduler job on the event
loop) and whenever Status is asked: each launch and termination as its write-ahead intent records
it (instance ids, type, intent id, the pool's $/hr after), each park and unpark
(``Daemon.fleet_events``), each variant load and unload the model loop applied, and errors (a
failed fleet tick, a failed intent, a failed placement). Each decision is also an audit event
(:mod:`daemon.observe.audit`). :func:`build_feed` composes them from the narrow views they read; none is
given the daemon.
"""
from __future__ import annotations

import functools
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from daemon.observe.decision_log import DecisionLog, PlanDecisions
from daemon.observe.spend import SpendMeter
from daemon.observe.status_watchers import FleetErrors, IntentWatch, ModelWatch, ParkWatch, Watcher, billed_at
from dispatcher.api.status import Decision, FleetFacts, Profiling, ReplicaFacts, ShadowFacts
from scaler.planner.pools import pool_text

if TYPE_CHECKING:
    from apscheduler.schedulers.asyncio import AsyncIOScheduler

    from config.profiles import ProfileTable
    from config.schema import Config
    from daemon.observe.fleet_status import FleetStatus
    from dispatcher.server import Dispatcher
    from scaler.planner.joint_plan import JointPlan
    from scaler.planner.replan import DemandView
    from scaler.fleet.state import StateStore
    from scaler.forecast.state import ForecastState

#: how often the feed samples the spend and looks for new decisions (s)
OBSERVE_S = 1.0


def status_line(target: Mapping[str, int], demand_qps: float, cost_per_hour: float, budget: float,
                note: str = "") -> str:
    """The systemd STATUS line after a fleet tick: the type target, and what the live pool is billed
    now (``Dispatcher.cost_per_hour``: spot instances at their spot price, the number Status and
    ``costscale_pool_cost_dollars_per_hour`` show)."""
    return (f"STATUS=pool {pool_text(target) or 'none'} at {cost_per_hour:.3f} of {budget:g} $/hr; "
            f"demand {demand_qps:.1f} q/s{note}")


@dataclass
class LoopFacts:
    """What Status shows of the loops besides their decisions, read when it is asked."""

    capacity_hint: Callable[[], Mapping[str, float]]            # per model (the model loop's)
    plan: Callable[[], JointPlan | None]                        # the fleet's last joint plan
    profiling: Callable[[], tuple[Profiling, ...]] = tuple      # models on a conservative pool
    replica: Callable[[], ReplicaFacts | None] = lambda: None   # lease.replicas


class StatusFeed:
    """Decisions, errors and spend of one daemon (see the module docstring): the decision log, the
    plan decisions the fleet tick pushes, and a watcher per source, sampled each second."""

    def __init__(self, log: DecisionLog, spend: SpendMeter, plans: PlanDecisions, watchers: Sequence[Watcher],
                 facts: LoopFacts, cost_per_hour: Callable[[], float] | None = None) -> None:
        self.log = log
        self.clock = log.clock
        self.monotonic = time.monotonic     # times the spend between samples (daemon.observe.spend)
        self.spend = spend
        self.plans = plans
        self.watchers = tuple(watchers)
        self.loop_facts = facts
        self.cost_per_hour = cost_per_hour
        #: the fleet's forecasts for /metrics and Status, and forecast.mode (issue #39; set by :func:`build_feed`)
        self.forecast: Callable[[], ForecastState] | None = None
        self.forecast_mode: Callable[[], str] = lambda: ""

    # -- the log, as the loops push to it ----------------------------------------------------------
    @property
    def decisions(self) -> deque[Decision]:
        """The decisions kept (:attr:`daemon.observe.decision_log.DecisionLog.decisions`)."""
        return self.log.decisions

    def vm(self, decisions: Any) -> None:
        """The VM autoscaler's adds and removes (``Daemon._on_vm`` tells it)."""
        self.log.vm(decisions)

    def planned(self, target: dict[str, int], plan: JointPlan | None, demand: Mapping[str, DemandView] | None) -> None:
        """A fleet decision as ``Daemon.fleet_tick`` takes it (:class:`PlanDecisions`)."""
        self.plans.planned(target, plan, demand)

    # -- wiring ------------------------------------------------------------------------------------
    def start(self, scheduler: AsyncIOScheduler) -> None:
        """Observe every :data:`OBSERVE_S` (the dispatcher's Status reads :meth:`facts`)."""
        self.observe()
        scheduler.add_job(self._tick, "interval", seconds=OBSERVE_S, max_instances=1, coalesce=True,
                          id="status-feed")

    async def _tick(self) -> None:   # a coroutine: APScheduler runs it on the event loop
        self.observe()

    def stop(self) -> None:
        """The last sample (after a terminating shutdown the pool is empty) and the spend file."""
        self.observe()
        self.spend.save(self.clock())

    # -- what the dispatcher's Status reads --------------------------------------------------------
    def facts(self) -> FleetFacts:
        self.observe(sample=False)
        f, lg = self.loop_facts, self.log
        plan = f.plan()
        return FleetFacts(spent_usd_today=self.spend.today, spent_usd_total=self.spend.total,
                          decisions=tuple(lg.decisions), decision_counts=dict(lg.counts),
                          last_error=lg.last_error, last_error_at_unix=lg.last_error_at,
                          capacity_hint=max(f.capacity_hint().values(), default=1.0),  # the highest model's
                          planned={m: (s.demand_qps, s.capacity_qps, s.short_qps)    # each model's, last plan
                                   for m, s in plan.models.items()} if plan else {},
                          profiling=f.profiling(), replica=f.replica(), **self._forecast_facts())

    def _forecast_facts(self) -> dict[str, Any]:
        """forecast.mode, the lead and each model's last forecast with its forecaster (none: reactive)."""
        fc = self.forecast() if self.forecast is not None else None
        if fc is None:
            return {}
        led = fc.shadow
        shadow = (ShadowFacts(led.would_usd_per_hr, led.applied_usd_per_hr, led.would_usd, led.applied_usd,
                              fc.served.percent("ahead"), fc.served.percent("applied"))
                  if led.would_usd_per_hr is not None and led.applied_usd_per_hr is not None else None)
        return {"forecast_mode": self.forecast_mode(), "forecast_lead_s": fc.lead_s,
                "forecasts": {m: (q, fc.chosen.get(m, "")) for m, q in fc.last.items() if q is not None},
                "shadow": shadow}

    # -- watching the loops ------------------------------------------------------------------------
    def observe(self, sample: bool = True) -> None:
        if sample and self.cost_per_hour is not None:
            self.spend.sample(self.clock(), self.cost_per_hour(), self.monotonic())
        for w in self.watchers:
            w.observe()


def build_feed(cfg: Callable[[], Config], *, fleet: Callable[[], FleetStatus],
               fleet_events: Callable[[], Sequence[tuple[float, str, str]]],
               store: StateStore | None, dispatcher: Dispatcher | None, price: Callable[[str], float],
               stopping: Callable[[], bool], facts: LoopFacts, profiles: ProfileTable | None = None,
               model_loop: Any = None, solver: Callable[[], str] = lambda: "", clock: Callable[[], float] = time.time
               ) -> StatusFeed:
    """The feed of one daemon from its parts: the spend file beside ``state_path``; watchers over the
    fleet loop's errors, the intents in ``store``, ``fleet_events`` and ``model_loop``; the pool and
    its prices from ``dispatcher`` (else the catalog's ``price``), whose Status then reads the feed."""
    state = cfg().state_path
    log_ = DecisionLog(clock)
    spend = SpendMeter(None if state == ":memory:" else Path(state + ".spend.json"), clock())
    plans = PlanDecisions(log_, cfg, profiles, price)
    d = dispatcher
    watchers: list[Watcher] = [
        FleetErrors(log_, lambda: fleet().last_error),
        IntentWatch(log_, store, lambda: plans.target, lambda: d.worker_registry.cloud_slots if d is not None else {},
                    functools.partial(billed_at, d.billed_prices if d is not None else None, price), stopping),
        ParkWatch(log_, lambda: plans.target, fleet_events,
                  lambda: {i.instance_id: i.instance_type for i in fleet().instances},
                  lambda: (d.cloud_view or {}) if d is not None else {}, lambda: cfg().model_scaling.vm_park_s)]
    if model_loop is not None:
        watchers.append(ModelWatch(log_, model_loop, solver, d.variant_model if d is not None else None))
    feed = StatusFeed(log_, spend, plans, watchers, facts, d.cost_per_hour if d is not None else None)
    feed.forecast = lambda: fleet().forecast     # /metrics and Status show it (daemon.observe.forecast_metrics)
    feed.forecast_mode = lambda: cfg().forecast.mode
    if d is not None:   # the dispatcher's Status reads the feed
        d.status_source = feed.facts
    return feed


__all__ = ["LoopFacts", "OBSERVE_S", "StatusFeed", "build_feed", "status_line"]
