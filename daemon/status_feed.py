"""What the daemon adds to the dispatcher's Status (``costscale status``) and so to the metrics:
the dollars spent, the fleet and model loops' decisions with their reasons, the last error, and
the models being profiled on a conservative pool (:class:`dispatcher.status.FleetFacts`).

:class:`StatusFeed` hears each new fleet target from ``Daemon.fleet_tick`` (the planner's rule,
the demand it planned for, and the workers planned from estimated profiles, issue #29) and each VM-autoscaler add or remove from ``Daemon._on_vm`` (with its
reason, INFaaS §4.2.3), and watches the rest once a second (an APScheduler job on the event loop)
and whenever Status is asked: each launch and termination as its write-ahead intent records it
(instance ids, type, intent id, the pool's $/hr after), each park and unpark
(``Daemon.fleet_events``), each variant load and unload the model loop applied, and errors (a
failed fleet tick, a failed intent, a failed placement). Each decision is also an audit event
(:mod:`daemon.audit`).

:class:`SpendMeter` integrates the live pool's $/hr over time (each second's sample holds until
the next). "Today" is since 00:00 UTC (as AWS bills) and is kept across restarts in
``<state_path>.spend.json`` (0600), where the pool's last $/hr also goes: the time the daemon was
down is counted at that price (a stopped daemon keeps its instances unless ``on_shutdown:
terminate``, after which the last price is 0).
"""
from __future__ import annotations

import json
import logging
import time
from collections import Counter, deque
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from config.files import write_atomic
from daemon import audit
from daemon.fleet_status import plan_estimates
from dispatcher.status import Decision, FleetFacts, Profiling, billed_price
from scaler.actuator import pool_text
from scaler.estimate_gate import estimates_line

if TYPE_CHECKING:
    from scaler.joint_plan import JointPlan
    from scaler.replan import DemandView
    from apscheduler.schedulers.asyncio import AsyncIOScheduler

    from daemon.app import Daemon

log = logging.getLogger("costscale")

#: how often the feed samples the spend and looks for new decisions (s)
OBSERVE_S = 1.0
#: how often the spend file is rewritten (s); also at stop
SAVE_S = 60.0
#: decisions kept in memory (Status shows the last ten)
DECISIONS_KEPT = 100


def status_line(target: Mapping[str, int], demand_qps: float, cost_per_hour: float, budget: float,
                note: str = "") -> str:
    """The systemd STATUS line after a fleet tick: the type target, and what the live pool is billed
    now (``Dispatcher.cost_per_hour``: spot instances at their spot price, the number Status and
    ``costscale_pool_cost_dollars_per_hour`` show)."""
    return (f"STATUS=pool {pool_text(target) or 'none'} at {cost_per_hour:.3f} of {budget:g} $/hr; "
            f"demand {demand_qps:.1f} q/s{note}")


def utc_day(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d")


def day_start(t: float) -> float:
    d = datetime.fromtimestamp(t, timezone.utc)
    return d.replace(hour=0, minute=0, second=0, microsecond=0).timestamp()


class SpendMeter:
    """Dollars spent today (UTC) and since the start (see the module docstring)."""

    def __init__(self, path: Path | None, now: float) -> None:
        self.path = path
        self.day = utc_day(now)
        self.today = 0.0
        self.total = 0.0
        self._last: tuple[float, float] | None = None   # (time, $/hr then)
        self._saved_at = now
        self._load(now)

    def _load(self, now: float) -> None:
        if self.path is None or not self.path.is_file():
            return
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            last_t, last_cost = float(data["last_at"]), float(data["last_cost_per_hour"])
            day, today = str(data["day"]), float(data["today_usd"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("spend: ignoring %s (%s); today's spend counts from now", self.path, exc)
            return
        if day == self.day:
            self.today = today
        # the time the daemon was down, at the pool's last price (today's part only)
        gap_from = max(last_t, day_start(now))
        if last_cost > 0 and now > gap_from:
            self.today += last_cost * (now - gap_from) / 3600.0

    def sample(self, now: float, cost_per_hour: float) -> None:
        """The pool costs ``cost_per_hour`` from ``now`` on; what it cost since the last sample is added."""
        if self._last is not None:
            t0, c0 = self._last
            spent = c0 * max(now - t0, 0.0) / 3600.0
            self.total += spent
            day = utc_day(now)
            if day != self.day:    # a new UTC day: only the part since midnight counts for it
                self.day = day
                self.today = c0 * max(now - max(day_start(now), t0), 0.0) / 3600.0
            else:
                self.today += spent
        self._last = (now, cost_per_hour)
        if now - self._saved_at >= SAVE_S:
            self.save(now)

    def save(self, now: float) -> None:
        if self.path is None or self._last is None:
            return
        self._saved_at = now
        data = {"day": self.day, "today_usd": self.today, "last_at": self._last[0],
                "last_cost_per_hour": self._last[1]}
        try:
            write_atomic(self.path, json.dumps(data).encode())
        except OSError as exc:
            log.warning("spend: cannot write %s: %s", self.path, exc.strerror or exc)


class StatusFeed:
    """Decisions, errors and spend of one daemon (see the module docstring)."""

    def __init__(self, daemon: Daemon, clock: Callable[[], float] = time.time) -> None:
        self.daemon = daemon
        self.clock = clock
        state = daemon.cfg.state_path
        self.spend = SpendMeter(None if state == ":memory:" else Path(state + ".spend.json"), clock())
        self.decisions: deque[Decision] = deque(maxlen=DECISIONS_KEPT)
        self.counts: Counter[tuple[str, str]] = Counter()
        self.last_error = ""
        self.last_error_at = 0.0
        self._target: dict[str, int] | None = None
        self._fleet_error: str | None = None
        self._event_t = float("-inf")
        self._intent_t = clock()   # intents settled before (the start-up reconcile) are in its log line
        self._intent_seen: set[tuple[str, str]] = set()
        self._events_at_t: set[tuple[float, str, str]] = set()
        self._applied = 0
        self._failed = 0
        self._acc_plans = 0
        self._acc_failed = 0
        self._acc_placement: dict[str, str | None] | None = None

    # -- wiring ------------------------------------------------------------------------------------
    def start(self, scheduler: AsyncIOScheduler) -> None:
        """Observe every :data:`OBSERVE_S` and answer the dispatcher's Status."""
        d = self.daemon
        if d.dispatcher is not None:
            d.dispatcher.status_source = self.facts
        self.observe()
        scheduler.add_job(self._tick, "interval", seconds=OBSERVE_S, max_instances=1, coalesce=True,
                          id="status-feed")

    def vm(self, decisions: Any) -> None:
        """The VM autoscaler's adds and removes (``Daemon._on_vm`` tells it)."""
        for v in decisions:
            if v.action != "hold":
                self.record("model", f"vm_{v.action}", f"{v.action} {v.hardware} capacity", v.reason,
                            hardware=v.hardware)

    def planned(self, target: dict[str, int], plan: JointPlan | None, demand: Mapping[str, DemandView] | None) -> None:
        """A fleet decision as ``Daemon.fleet_tick`` takes it, before the launches it leads to:
        the target, and the rule and demand behind it (a target held again is not a new decision)."""
        if target == self._target:
            return
        self._target = target
        d = self.daemon
        if plan is not None:
            why = f"{plan.rule} pool"
        elif d.cfg.pinned_pool:
            why = "pinned pool (config)"
        else:
            why = "conservative pool while a model is profiled"
        qps = sum(v.qps for v in demand.values()) if demand else None        # every model's
        measured = all(v.measured for v in demand.values()) if demand else None
        short = plan.short if plan is not None else {}
        if short:
            why += "; short " + ", ".join(f"{m} {q:.1f} q/s" for m, q in short.items())
        if qps is not None:
            why += f" for {qps:.1f} q/s ({'measured' if measured else 'declared'})"
        profiles = getattr(d, "profiles", None)             # issue #29: said wherever a plan shows
        est = plan_estimates(d.cfg, profiles, plan) if profiles is not None else {}
        if est:
            why += f"; {estimates_line(est)}"
        cost = sum(self._price(d, t) * n for t, n in target.items())
        self.record("fleet", "plan", f"target {pool_text(target) or 'none'} at {cost:.3f} $/hr", why,
                    target=target, cost_per_hour=round(cost, 6), rule=plan.rule if plan is not None else why,
                    demand_qps=round(qps, 4) if qps is not None else None, demand_measured=measured,
                    short_qps={m: round(q, 4) for m, q in short.items()},
                    models={m: s.to_dict() for m, s in plan.models.items()} if plan is not None else None,
                    estimated={m: {t: e.basis for t, e in per.items()} for m, per in est.items()})

    async def _tick(self) -> None:   # a coroutine: APScheduler runs it on the event loop
        self.observe()

    def stop(self) -> None:
        """The last sample (after a terminating shutdown the pool is empty) and the spend file."""
        self.observe()
        self.spend.save(self.clock())

    # -- what the dispatcher's Status reads --------------------------------------------------------
    def facts(self) -> FleetFacts:
        self.observe(sample=False)
        return FleetFacts(spent_usd_today=self.spend.today, spent_usd_total=self.spend.total,
                          decisions=tuple(self.decisions), decision_counts=dict(self.counts),
                          last_error=self.last_error, last_error_at_unix=self.last_error_at,
                          capacity_hint=max(self.daemon.capacity_hint.values(), default=1.0),  # the highest model's
                          planned=self._planned(),
                          profiling=self._profiling(),
                          replica=self.daemon.replica.facts() if getattr(self.daemon, "replica", None) else None)

    def _planned(self) -> dict[str, tuple[float, float, float]]:
        """Each model's demand, capacity and shortfall in the fleet's last joint plan."""
        plan = self.daemon.status.plan
        return {m: (s.demand_qps, s.capacity_qps, s.short_qps) for m, s in plan.models.items()} if plan else {}

    def _profiling(self) -> tuple[Profiling, ...]:
        """The models the daemon is profiling and the conservative pool each is served on meanwhile."""
        profiler = getattr(self.daemon, "profiling", None)
        return profiler.status() if profiler is not None else ()

    def record(self, loop: str, kind: str, summary: str, reason: str = "", **fields: Any) -> None:
        """A decision: kept for Status, counted for the metrics, written to the audit log."""
        self.decisions.append(Decision(self.clock(), loop, kind, summary, reason))
        self.counts[(loop, kind)] += 1
        audit.emit(kind, summary, reason, loop=loop, **fields)

    def error(self, message: str) -> None:
        self.last_error, self.last_error_at = message, self.clock()
        audit.emit("error", message)

    # -- watching the loops ------------------------------------------------------------------------
    def observe(self, sample: bool = True) -> None:
        d = self.daemon
        if sample and d.dispatcher is not None:
            self.spend.sample(self.clock(), d.dispatcher.cost_per_hour())
        self._fleet(d)
        self._intents(d)
        self._fleet_events(d)
        self._model(d)

    def _fleet(self, d: Daemon) -> None:
        st = d.status
        err = getattr(st, "last_error", None)
        if err and err != self._fleet_error:
            self.error(f"fleet: {err}")
        self._fleet_error = err

    @staticmethod
    def _price(d: Daemon, instance_type: str) -> float:
        return d.actuator.price(instance_type) if d.actuator is not None else 0.0

    @staticmethod
    def _billed(d: Daemon, slot: str) -> float:
        """$/hr billed now for an instance in ``slot`` (:func:`dispatcher.status.billed_price`)."""
        if d.dispatcher is not None:
            return billed_price(slot, d.dispatcher.billed_prices())
        return StatusFeed._price(d, slot)

    def _intents(self, d: Daemon) -> None:
        """Launches and terminations as the write-ahead intents record them (DESIGN invariant 3):
        instance ids, type, intent id, and the pool's $/hr after each."""
        store = getattr(d, "store", None)
        if store is None:
            return
        try:
            changed = store.intents_since(self._intent_t)
        except Exception as exc:  # noqa: BLE001 - a closed store at shutdown: nothing more to report
            log.debug("status feed: intents: %s", exc)
            return
        new = [i for i in changed if i.status in ("done", "failed") and (i.client_token, i.status) not in self._intent_seen]
        if not new:
            return
        # the pool before these intents (the cloud view may or may not show them yet), then each one's
        # effect; by slot (an intent's instance_type is its slot), priced at what each slot is billed
        pool = dict(d.dispatcher.worker_registry.cloud_slots) if d.dispatcher is not None else {}
        for it in new:
            if it.status == "done":
                if it.kind == "launch":
                    for iid in it.instance_ids:
                        pool.pop(iid, None)
                else:
                    pool.update({iid: it.instance_type for iid in it.instance_ids})
        latest = store.latest_plan()
        stopping = getattr(getattr(d, "_stop", None), "is_set", lambda: False)()
        for it in new:
            ids = list(it.instance_ids)
            if it.status == "failed":
                self.error(f"fleet: {it.kind} {it.instance_type}×{it.count} (intent {it.client_token}) failed"
                           + (f": {it.note}" if it.note else ""))
                continue
            target = latest.target if latest is not None and latest.plan_id == it.plan_id else (self._target or {})
            if it.kind == "launch":
                pool.update({iid: it.instance_type for iid in ids})
                why = f"pool below the target {pool_text(target) or 'none'}"
            else:
                for iid in ids:
                    pool.pop(iid, None)
                if it.plan_id.startswith("reconcile:"):
                    why = f"reconcile: {it.plan_id.removeprefix('reconcile:')}"
                elif stopping and not any(target.values()):
                    why = "on_shutdown: terminate"
                else:
                    why = f"surplus to the target {pool_text(target) or 'none'}"
            after = sum(self._billed(d, s) for s in pool.values())
            self.record("fleet", it.kind, f"{it.kind} {', '.join(ids) or '-'} ({it.instance_type}); pool {after:.3f} $/hr after",
                        why, instance_ids=ids, instance_type=it.instance_type, intent=it.client_token,
                        plan_id=it.plan_id, cost_per_hour_after=round(after, 6))
        last = max(i.updated_at for i in new)
        if last > self._intent_t:
            self._intent_t, self._intent_seen = last, set()
        self._intent_seen |= {(i.client_token, i.status) for i in new if i.updated_at == last}

    def _fleet_events(self, d: Daemon) -> None:
        events: list[tuple[float, str, str]] = list(getattr(d, "fleet_events", ()))
        new = [e for e in events if e[0] > self._event_t or (e[0] == self._event_t and e not in self._events_at_t)]
        if not new:
            return
        types = {i.instance_id: i.instance_type for i in d.status.instances}
        target = pool_text(self._target or {}) or "none"
        hold = d.cfg.model_scaling.vm_park_s
        reasons = {"park": f"surplus to the target {target}: kept warm up to {hold:g} s before it retires",
                   "unpark": f"the target {target} needs it back: warm, before any launch"}
        view = (d.dispatcher.cloud_view or {}) if d.dispatcher is not None else {}
        for t, kind, iid in new:
            if kind not in reasons:   # launch and retire: from the intents, with their ids
                continue
            itype = types.get(iid) or view.get(iid, "")
            self.record("fleet", kind, f"{kind} {iid}" + (f" ({itype})" if itype else ""), reasons[kind],
                        instance_ids=[iid], instance_type=itype)
        last = max(e[0] for e in new)
        if last > self._event_t:
            self._event_t, self._events_at_t = last, set()
        self._events_at_t |= {e for e in new if e[0] == last}

    def _model(self, d: Daemon) -> None:
        loop = d.model_loop
        if loop is None:
            return
        solver = d.model_params.solver
        for p in loop.applied.since(self._applied):
            self.record("model", p.action, f"{p.action} {p.variant} on {p.worker}",
                        f"model autoscaler ({solver}, INFaaS §4.2) for the demand of {d.dispatcher.variant_model(p.variant)}"
                        if d.dispatcher is not None else f"model autoscaler ({solver})",
                        variant=p.variant, instance_id=p.worker)
        self._applied = loop.applied.total
        for p, msg in loop.failed.since(self._failed):
            self.error(f"model loop: {p.action} {p.variant} on {p.worker}: {msg}")
        self._failed = loop.failed.total
        self._accuracy(loop.accuracy)

    def _accuracy(self, acc: Any) -> None:
        """The accuracy round's plans (a placement that changed) and failed loads."""
        for _, a in acc.allocations.since(self._acc_plans):
            if a.placement == self._acc_placement:
                continue
            self._acc_placement = dict(a.placement)
            p = a.plan
            served = ", ".join(f"{m} {q:.1f} of {p.demand_qps[m]:.1f} q/s" for m, q in sorted(p.served_qps.items()))
            at = "-" if p.effective_accuracy is None else f"{p.effective_accuracy:.4f}"
            self.record("model", "accuracy_plan",
                        ", ".join(f"{w}={v or '-'}" for w, v in sorted(a.placement.items())),
                        f"accuracy planner (Proteus §4): serves {served} at accuracy {at}",
                        placement=dict(a.placement), demand_qps=dict(p.demand_qps), served_qps=dict(p.served_qps),
                        effective_accuracy=p.effective_accuracy)
        self._acc_plans = acc.allocations.total
        for w, v, why in acc.failed.since(self._acc_failed):
            self.error(f"accuracy plan: load {v} on {w}: {why}")
        self._acc_failed = acc.failed.total

