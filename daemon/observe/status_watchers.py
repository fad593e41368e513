"""What the status feed finds by looking, a watcher per source, each given only what it reads:
:class:`FleetErrors` a failed fleet tick; :class:`IntentWatch` each launch and termination as its
write-ahead intent records it (DESIGN invariant 3; the pool's $/hr after each, at billed prices) and
each failed intent; :class:`ParkWatch` each park and unpark; :class:`ModelWatch` each variant load and
unload the model loop applied, its failures, and the accuracy round's plans. Each reports to a
:class:`daemon.observe.decision_log.DecisionLog`, once per decision."""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol, Sequence

from daemon.observe.decision_log import DecisionLog
from dispatcher.api.status import billed_price
from scaler.planner.pools import pool_text

if TYPE_CHECKING:
    from scaler.fleet.state import StateStore

log = logging.getLogger("costscale")

#: the last fleet target the feed heard (None before the first)
Target = Callable[[], "dict[str, int] | None"]


class Watcher(Protocol):
    """One source the feed looks at each second and whenever Status is asked."""

    def observe(self) -> None: ...


class FleetErrors:
    """A failed fleet tick (its last error, once per new one)."""

    def __init__(self, log: DecisionLog, last_error: Callable[[], str | None]) -> None:
        self.log = log
        self.last_error = last_error
        self._seen: str | None = None

    def observe(self) -> None:
        err = self.last_error()
        if err and err != self._seen:
            self.log.error(f"fleet: {err}")
        self._seen = err


def billed_at(prices: Callable[[], Mapping[str, float]] | None, price: Callable[[str], float], slot: str) -> float:
    """$/hr billed now for an instance in ``slot`` (:func:`dispatcher.api.status.billed_price` over the
    dispatcher's ``billed_prices``; without a dispatcher, the actuator's catalog ``price``)."""
    return billed_price(slot, prices()) if prices is not None else price(slot)


class IntentWatch:
    """Launches and terminations as the write-ahead intents record them (DESIGN invariant 3):
    instance ids, type, intent id, and the pool's $/hr after each; a failed intent is an error."""

    def __init__(self, log: DecisionLog, store: StateStore | None, target: Target,
                 cloud_slots: Callable[[], Mapping[str, str]], billed: Callable[[str], float],
                 stopping: Callable[[], bool]) -> None:
        self.log = log
        self.store = store
        self.target = target
        self.cloud_slots = cloud_slots
        self.billed = billed
        self.stopping = stopping
        self._t = log.clock()   # intents settled before (the start-up reconcile) are in its log line
        self._seen: set[tuple[str, str]] = set()

    def observe(self) -> None:
        store = self.store
        if store is None:
            return
        try:
            changed = store.intents_since(self._t)
        except Exception as exc:  # noqa: BLE001 - a closed store at shutdown: nothing more to report
            log.debug("status feed: intents: %s", exc)
            return
        new = [i for i in changed if i.status in ("done", "failed") and (i.client_token, i.status) not in self._seen]
        if not new:
            return
        # the pool before these intents (the cloud view may or may not show them yet), then each one's
        # effect; by slot (an intent's instance_type is its slot), priced at what each slot is billed
        pool = dict(self.cloud_slots())
        for it in new:
            if it.status == "done":
                if it.kind == "launch":
                    for iid in it.instance_ids:
                        pool.pop(iid, None)
                else:
                    pool.update({iid: it.instance_type for iid in it.instance_ids})
        latest = store.latest_plan()
        stopping = self.stopping()
        for it in new:
            ids = list(it.instance_ids)
            if it.status == "failed":
                self.log.error(f"fleet: {it.kind} {it.instance_type}×{it.count} (intent {it.client_token}) failed"
                               + (f": {it.note}" if it.note else ""))
                continue
            target = latest.target if latest is not None and latest.plan_id == it.plan_id else (self.target() or {})
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
            after = sum(self.billed(s) for s in pool.values())
            self.log.record("fleet", it.kind, f"{it.kind} {', '.join(ids) or '-'} ({it.instance_type}); pool {after:.3f} $/hr after",
                            why, instance_ids=ids, instance_type=it.instance_type, intent=it.client_token,
                            plan_id=it.plan_id, cost_per_hour_after=round(after, 6))
        last = max(i.updated_at for i in new)
        if last > self._t:
            self._t, self._seen = last, set()
        self._seen |= {(i.client_token, i.status) for i in new if i.updated_at == last}


class ParkWatch:
    """Each park and unpark (``Daemon.fleet_events``: (monotonic time, kind, instance id), newest
    last); launches and retirements come from the intents, with their ids."""

    def __init__(self, log: DecisionLog, target: Target, events: Callable[[], Sequence[tuple[float, str, str]]],
                 instance_types: Callable[[], Mapping[str, str]], cloud_view: Callable[[], Mapping[str, str]],
                 hold_s: Callable[[], float]) -> None:
        self.log = log
        self.target = target
        self.events = events
        self.instance_types = instance_types
        self.cloud_view = cloud_view
        self.hold_s = hold_s
        self._t = float("-inf")
        self._at_t: set[tuple[float, str, str]] = set()

    def observe(self) -> None:
        new = [e for e in list(self.events()) if e[0] > self._t or (e[0] == self._t and e not in self._at_t)]
        if not new:
            return
        types = self.instance_types()
        target = pool_text(self.target() or {}) or "none"
        hold = self.hold_s()
        reasons = {"park": f"surplus to the target {target}: kept warm up to {hold:g} s before it retires",
                   "unpark": f"the target {target} needs it back: warm, before any launch"}
        view = self.cloud_view()
        for t, kind, iid in new:
            if kind not in reasons:   # launch and retire: from the intents, with their ids
                continue
            itype = types.get(iid) or view.get(iid, "")
            self.log.record("fleet", kind, f"{kind} {iid}" + (f" ({itype})" if itype else ""), reasons[kind],
                            instance_ids=[iid], instance_type=itype)
        last = max(e[0] for e in new)
        if last > self._t:
            self._t, self._at_t = last, set()
        self._at_t |= {e for e in new if e[0] == last}


class ModelWatch:
    """The model loop's applied loads and unloads (with the solver and the model whose demand moved
    them), its failed ones, and the accuracy round's plans (a placement that changed) and failed loads."""

    def __init__(self, log: DecisionLog, loop: Any, solver: Callable[[], str],
                 variant_model: Callable[[str], str] | None) -> None:
        self.log = log
        self.loop = loop          # daemon.loops.model_loop.ModelLoop: applied, failed, accuracy
        self.solver = solver
        self.variant_model = variant_model
        self._applied = 0
        self._failed = 0
        self._acc_plans = 0
        self._acc_failed = 0
        self._acc_placement: dict[str, str | None] | None = None

    def observe(self) -> None:
        loop = self.loop
        solver = self.solver()
        for p in loop.applied.since(self._applied):
            self.log.record("model", p.action, f"{p.action} {p.variant} on {p.worker}",
                            f"model autoscaler ({solver}, INFaaS §4.2) for the demand of {self.variant_model(p.variant)}"
                            if self.variant_model is not None else f"model autoscaler ({solver})",
                            variant=p.variant, instance_id=p.worker)
        self._applied = loop.applied.total
        for p, msg in loop.failed.since(self._failed):
            self.log.error(f"model loop: {p.action} {p.variant} on {p.worker}: {msg}")
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
            self.log.record("model", "accuracy_plan",
                            ", ".join(f"{w}={v or '-'}" for w, v in sorted(a.placement.items())),
                            f"accuracy planner (Proteus §4): serves {served} at accuracy {at}",
                            placement=dict(a.placement), demand_qps=dict(p.demand_qps), served_qps=dict(p.served_qps),
                            effective_accuracy=p.effective_accuracy)
        self._acc_plans = acc.allocations.total
        for w, v, why in acc.failed.since(self._acc_failed):
            self.log.error(f"accuracy plan: load {v} on {w}: {why}")
        self._acc_failed = acc.failed.total


__all__ = ["FleetErrors", "IntentWatch", "ModelWatch", "ParkWatch", "Watcher", "billed_at"]
