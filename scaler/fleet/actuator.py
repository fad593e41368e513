"""The fleet actuator: applies a target pool to the cloud and repairs it after a crash.

It is the narrow actuator under the fleet loop (Kairos §5.2 decides the pool; INFaaS §4.2.3's VM
autoscaler starts and retires the VMs). It keeps the three invariants of DESIGN.md:

1. **Money** — steps come from ``scaler.fleet.transitions.plan_transition`` (retire before launch when
   headroom is short), and before *every* launch the live managed instances are listed again and
   the launch is cut to what fits the budget.
2. **Ownership** — it only ever terminates ids returned by ``list_managed`` (and the cloud adapter
   re-verifies the cluster tag).
3. **Write-ahead intent** — each launch/terminate is recorded in the state store (``planned``,
   then ``sent``) *before* the cloud call, under a deterministic ClientToken; ``reconcile()``
   finishes, re-issues (same token) or rolls back half-done intents, so a crash never launches twice.

Capacity errors mark the type unavailable for a cooldown (``unavailable_types()``) and are
reported, so the caller replans without it. What an apply or reconcile did is reported as data
(:mod:`scaler.fleet.reports`). The actuator prices instances only from what it is given: the
allowed types' catalog and ``other_prices`` (the shipped table's, for a type the config no longer
allows but the cloud still lists).
"""
from __future__ import annotations

import asyncio
import hashlib
import inspect
import logging
import math
import threading
import time
from collections import defaultdict
from contextlib import contextmanager
from typing import Any, Awaitable, Callable, Iterator, Mapping, Sequence

from config.budget import BUDGET_EPS
from config.catalog import InstanceType
from scaler.fleet.reports import ApplyReport, ReconcileReport
from scaler.cloud.provider import (CloudConfigError, CloudError, CloudProvider, InsufficientCapacity, ManagedInstance,
                                   Throttled, VcpuLimitExceeded)
from scaler.fleet.state import StateStore
from scaler.fleet.store_clock import NeverBack
from scaler.fleet.transitions import Step, _retire_order, client_token, plan_transition


log = logging.getLogger("costscale")
DrainFn = Callable[[str], "Awaitable[bool] | bool"]


class _Stop(Exception):
    """Internal: abort the remaining steps (throttled or an unknown cloud outcome)."""


class _CloudCall:
    """What :func:`_recorded` saw: ``failed`` once a cloud error was recorded."""

    failed = False


@contextmanager
def _recorded(errors: list[str], what: str) -> Iterator[_CloudCall]:
    """A block of cloud calls whose :class:`CloudError` is recorded in ``errors`` as ``what: error``
    and ends the block (``failed`` set); a :class:`CloudConfigError` (a refused configuration, the
    same on every retry) propagates."""
    call = _CloudCall()
    try:
        yield call
    except CloudConfigError:
        raise
    except CloudError as exc:
        errors.append(f"{what}: {exc}")
        call.failed = True


class FleetActuator:
    def __init__(
        self,
        cloud: CloudProvider,
        store: StateStore,
        catalog: Mapping[str, InstanceType],
        budget: float,
        *,
        clock: Callable[[], float] = time.time,
        drain: DrainFn | None = None,
        pending_timeout_s: float = 600.0,
        capacity_cooldown_s: float = 300.0,
        drain_timeout_s: float = 60.0,
        drain_loop: asyncio.AbstractEventLoop | None = None,
        step_hook: Callable[[Step], None] | None = None,
        other_prices: Mapping[str, float] | None = None,
    ) -> None:
        """``catalog``: the allowed types (and spot slots), their prices; ``other_prices``: $/hr of
        the other types an instance may still be listed with (the caller's ``cfg.table_prices()``:
        a type the config no longer allows); a type in neither has no price (ValueError)."""
        self.cloud = cloud
        self.store = store
        self.catalog = dict(catalog)
        self.budget = float(budget)
        self.clock = NeverBack(clock)   # the store's times never go back (scaler.fleet.store_clock)
        self.drain = drain
        self.pending_timeout_s = pending_timeout_s
        self.capacity_cooldown_s = capacity_cooldown_s
        self.drain_timeout_s = drain_timeout_s
        self.drain_loop = drain_loop
        self.step_hook = step_hook
        self.other_prices = dict(other_prices or {})
        self._retire_first: tuple[str, ...] = ()   # the last apply's, for reconcile's surplus
        # apply() and reconcile() may be called from different threads (the daemon's fleet and
        # reconcile jobs): they are serialized, or two money checks could pass side by side.
        self._mu = threading.RLock()

    # -- helpers -----------------------------------------------------------------------------
    def price(self, instance_type: str) -> float:
        if instance_type in self.catalog:
            return self.catalog[instance_type].price_per_hour
        if instance_type in self.other_prices:
            return self.other_prices[instance_type]
        raise ValueError(f"no price known for instance type {instance_type}")

    def unavailable_types(self) -> set[str]:
        """Types with a recent capacity error, still in their cooldown: plan without them."""
        return set(self.store.unavailable_types(self.clock()))

    def _live(self) -> list[ManagedInstance]:
        return [i for i in self.cloud.list_managed() if i.live]

    def _fit(self, instance_type: str, count: int, extra: Mapping[str, str]) -> int:
        """How many of ``count`` fit the budget now: live managed instances are listed afresh,
        plus ``extra`` (id → type) launched by us but not yet visible in the listing."""
        live = self._live()
        seen = {i.instance_id for i in live}
        cost = sum(self.price(i.instance_type) for i in live)
        cost += sum(self.price(t) for iid, t in extra.items() if iid not in seen)
        room = self.budget - cost
        if room <= -BUDGET_EPS:
            return 0
        return max(0, min(count, int(math.floor((room + BUDGET_EPS) / self.price(instance_type)))))

    def _drain_one(self, instance_id: str) -> bool:
        if self.drain is None:
            return True
        try:
            res = self.drain(instance_id)
            if inspect.isawaitable(res):
                aw = res

                async def _wait() -> Any:
                    return await asyncio.wait_for(aw, self.drain_timeout_s)

                if self.drain_loop is not None:
                    return bool(asyncio.run_coroutine_threadsafe(_wait(), self.drain_loop).result(self.drain_timeout_s + 1))
                return bool(asyncio.run(_wait()))
            return bool(res)
        except Exception as exc:  # a failed or timed-out drain still lets the terminate go ahead
            log.warning("fleet: drain of %s failed (%s: %s); it is terminated anyway", instance_id,
                        type(exc).__name__, exc)
            return False

    def _terminate(self, ids: list[str], token: str, plan_id: str, instance_type: str, seq: int) -> None:
        now = self.clock()
        self.store.record_intent(token, "terminate", plan_id, instance_type, len(ids), seq, now, ids)
        self.store.set_intent_status(token, "sent", now)
        self.cloud.terminate(ids)
        now = self.clock()
        self.store.set_intent_status(token, "done", now)
        for iid in ids:
            self.store.mark_gone(iid, now)

    def _launch(self, instance_type: str, count: int, token: str, plan_id: str, seq: int) -> list[ManagedInstance]:
        """Write-ahead launch; capacity errors mark the type unavailable and re-raise."""
        now = self.clock()
        it = self.store.record_intent(token, "launch", plan_id, instance_type, count, seq, now)
        self.store.set_intent_status(token, "sent", now)
        try:
            got = self.cloud.launch(instance_type, it.count, token)
        except VcpuLimitExceeded as exc:   # the family's quota, not the type's capacity: the fleet lowers it
            self.store.set_intent_status(token, "failed", self.clock(), note=str(exc))
            raise
        except InsufficientCapacity as exc:
            now = self.clock()
            self.store.set_intent_status(token, "failed", now, note=str(exc))
            self.store.mark_unavailable(instance_type, now + self.capacity_cooldown_s, str(exc))
            raise
        except (Throttled, CloudConfigError) as exc:  # rejected: nothing was launched
            self.store.set_intent_status(token, "failed", self.clock(), note=str(exc))
            raise
        # any other CloudError leaves the intent 'sent': reconcile looks the token up later
        now = self.clock()
        self.store.set_intent_status(token, "done", now, instance_ids=[i.instance_id for i in got])
        for i in got:
            self.store.upsert_instance(i.instance_id, i.instance_type, i.state, i.intent, i.launch_time, now)
        return got

    def _retire(self, ids: list[str], instance_type: str, plan_id: str, drained: dict[str, bool]) -> None:
        for iid in ids:
            drained[iid] = self._drain_one(iid)
        h = hashlib.sha256(",".join(sorted(ids)).encode()).hexdigest()[:16]
        self._terminate(ids, client_token(self.cloud.cluster, plan_id, h, instance_type, 0, "terminate"),
                        plan_id, instance_type, -1)

    # -- reconciliation ----------------------------------------------------------------------
    def _settle_open_intents(self, rep: ReconcileReport) -> None:
        """Finish, re-issue (same token) or roll back every planned/sent intent."""
        latest = self.store.latest_plan()
        for it in self.store.open_intents():
            now = self.clock()
            if it.kind == "launch":
                found = self.cloud.find_by_intent(it.client_token)
                if found:
                    self.store.set_intent_status(it.client_token, "done", now,
                                                 instance_ids=[i.instance_id for i in found], note="found on reconcile")
                    for i in found:
                        self.store.upsert_instance(i.instance_id, i.instance_type, i.state, i.intent, i.launch_time, now)
                    rep.finished.append(it.client_token)
                    continue
                wanted = False
                if latest is not None and it.plan_id == latest.plan_id:
                    have = sum(1 for i in self._live() if i.instance_type == it.instance_type)
                    wanted = have + it.count <= latest.target.get(it.instance_type, 0)
                if wanted and it.instance_type not in self.unavailable_types() and \
                        self._fit(it.instance_type, it.count, {}) == it.count:
                    with _recorded(rep.errors, f"re-issue {it.client_token}"):
                        try:
                            self._launch(it.instance_type, it.count, it.client_token, it.plan_id, it.seq)
                            rep.reissued.append(it.client_token)
                        except InsufficientCapacity as exc:
                            rep.unavailable.append(exc.instance_type)
                else:
                    self.store.set_intent_status(it.client_token, "rolled_back", now, note="not sent before a crash")
                    rep.rolled_back.append(it.client_token)
            else:
                managed = {i.instance_id for i in self.cloud.list_managed() if i.state not in ("shutting-down", "terminated")}
                still = [iid for iid in it.instance_ids if iid in managed]
                if still and latest is not None and it.plan_id != latest.plan_id and not it.plan_id.startswith("reconcile"):
                    self.store.set_intent_status(it.client_token, "rolled_back", now, note="superseded plan")
                    rep.rolled_back.append(it.client_token)
                    continue
                with _recorded(rep.errors, f"finish {it.client_token}") as call:
                    if still:
                        self.cloud.terminate(still)
                if call.failed:
                    continue
                now = self.clock()
                self.store.set_intent_status(it.client_token, "done", now, note="finished on reconcile")
                for iid in it.instance_ids:
                    self.store.mark_gone(iid, now)
                rep.finished.append(it.client_token)

    def reconcile(self) -> ReconcileReport:
        """Compare intents, the store and ``list_managed``: settle half-done intents, adopt
        managed instances, terminate those stuck pending past the timeout and those the latest
        plan does not want. With no plan recorded yet nothing is terminated for being unwanted."""
        with self._mu:
            return self._reconcile()

    def _reconcile(self) -> ReconcileReport:
        rep = ReconcileReport()
        self._settle_open_intents(rep)
        now = self.clock()
        listed = self.cloud.list_managed()
        ids = {i.instance_id for i in listed}
        for i in listed:
            if self.store.upsert_instance(i.instance_id, i.instance_type, i.state, i.intent, i.launch_time, now):
                rep.adopted.append(i.instance_id)
        for iid in self.store.known_instances():
            if iid not in ids:
                self.store.mark_gone(iid, now)
                rep.gone.append(iid)
        live = [i for i in listed if i.live]
        stuck = [i for i in live if i.state == "pending" and now - i.launch_time > self.pending_timeout_s]
        drained: dict[str, bool] = {}
        by_type: dict[str, list[str]] = defaultdict(list)
        for i in stuck:
            by_type[i.instance_type].append(i.instance_id)
        for t, lst in sorted(by_type.items()):
            with _recorded(rep.errors, f"terminate stuck {t}"):
                self._retire(sorted(lst), t, "reconcile:stuck", drained)
                rep.terminated_stuck.extend(sorted(lst))
        latest = self.store.latest_plan()
        if latest is not None:
            stuck_ids = {i.instance_id for i in stuck}
            groups: dict[str, list[ManagedInstance]] = defaultdict(list)
            for i in live:
                if i.instance_id not in stuck_ids:
                    groups[i.instance_type].append(i)
            for t, lst in sorted(groups.items()):
                extra = len(lst) - latest.target.get(t, 0)
                if extra <= 0:
                    continue
                victims = _retire_order(lst, self._retire_first)[:extra]
                with _recorded(rep.errors, f"terminate unwanted {t}"):
                    self._retire(victims, t, f"reconcile:{latest.plan_id}", drained)
                    rep.terminated_unwanted.extend(victims)
        return rep

    def _launch_step(self, step: Step, plan_id: str, unavailable: set[str], mine: dict[str, str],
                     rep: ApplyReport) -> None:
        """One launch step. EC2 may give fewer than asked (MinCount=1 < MaxCount: partial
        success; moto always gives MinCount): the remainder is topped up under derived tokens
        (each one write-ahead too) until the step's count is reached, a launch returns nothing,
        or the type runs out of capacity. The budget is re-checked before every call."""
        t = step.instance_type
        want = step.count
        k = 0
        while want > 0:
            if t in unavailable:
                return
            n = self._fit(t, want, mine)
            if n < want:  # cut by the budget: the rest is dropped, not chased
                rep.budget_cut[t] = rep.budget_cut.get(t, 0) + want - n
                want = n
            if n == 0:
                return
            token = step.client_token if k == 0 else client_token(self.cloud.cluster, plan_id, step.client_token, t, k, "topup")
            got: list[ManagedInstance] = []
            with _recorded(rep.errors, f"launch {t}") as call:
                try:
                    got = self._launch(t, n, token, plan_id, step.seq)
                except VcpuLimitExceeded as exc:
                    rep.quota_refused += [t] if t not in rep.quota_refused else []
                    rep.errors.append(str(exc))
                    return
                except InsufficientCapacity as exc:
                    unavailable.add(t)
                    if t not in rep.unavailable:
                        rep.unavailable.append(t)
                    rep.errors.append(str(exc))
                    return
            if call.failed:
                raise _Stop
            fresh = [i for i in got if i.instance_id not in mine]
            for i in fresh:
                mine[i.instance_id] = i.instance_type
            rep.launched.setdefault(t, []).extend(i.instance_id for i in fresh)
            if not fresh:
                return
            want -= len(fresh)
            k += 1

    # -- apply -------------------------------------------------------------------------------
    def apply(self, target: Mapping[str, int], plan_id: str, retire_first: Sequence[str] = (),
              listed: Sequence[ManagedInstance] | None = None) -> ApplyReport:
        """Move the managed pool to ``target`` (type → count) under the budget; where a type
        shrinks, the ids in ``retire_first`` go first. ``listed``: the managed instances as the
        caller just listed them (saves a DescribeInstances; each launch still re-lists for the
        budget check)."""
        with self._mu:
            return self._apply(target, plan_id, retire_first, listed)

    def _apply(self, target: Mapping[str, int], plan_id: str, retire_first: Sequence[str] = (),
               listed: Sequence[ManagedInstance] | None = None) -> ApplyReport:
        tgt = {t: int(n) for t, n in target.items() if int(n) > 0}
        for t in tgt:
            self.price(t)  # unknown type → ValueError before anything is recorded
        rep = ApplyReport(plan_id=plan_id, target=dict(tgt))
        self._retire_first = tuple(retire_first)
        self.store.record_plan(plan_id, tgt, self.budget, self.clock())
        settled = ReconcileReport()
        self._settle_open_intents(settled)
        rep.settled = settled
        # the caller's listing stands unless settling open intents changed the pool
        changed = settled.finished or settled.reissued or settled.rolled_back or settled.gone
        live = [i for i in listed if i.live] if listed is not None and not changed else self._live()
        current: dict[str, list[ManagedInstance]] = defaultdict(list)
        for i in live:
            current[i.instance_type].append(i)
        prices = {t: self.price(t) for t in set(tgt) | set(current)}
        steps = plan_transition(current, tgt, prices, self.budget, cluster=self.cloud.cluster, plan_id=plan_id,
                                seq_start=self.store.next_seq(plan_id), retire_first=retire_first)
        rep.steps = steps
        unavailable = self.unavailable_types()
        mine: dict[str, str] = {}  # ids launched in this apply → type
        try:
            for step in steps:
                if self.step_hook is not None:
                    self.step_hook(step)
                if step.kind == "drain":
                    for iid in step.instance_ids:
                        rep.drained[iid] = self._drain_one(iid)
                elif step.kind == "terminate":
                    with _recorded(rep.errors, f"terminate {step.instance_type}") as call:
                        self._terminate(list(step.instance_ids), step.client_token, plan_id, step.instance_type, step.seq)
                    if call.failed:
                        raise _Stop
                    rep.terminated.extend(step.instance_ids)
                else:
                    self._launch_step(step, plan_id, unavailable, mine, rep)
        except _Stop:
            pass
        have: dict[str, int] = defaultdict(int)
        terminated = set(rep.terminated)
        for i in live:
            if i.instance_id not in terminated:
                have[i.instance_type] += 1
        for t, lst in rep.launched.items():
            have[t] += len(lst)
        rep.shortfall = {t: n - have.get(t, 0) for t, n in tgt.items() if n > have.get(t, 0)}
        return rep


__all__ = ["FleetActuator"]
