"""An in-memory ``CloudProvider`` for unit tests and the simulator, with fault-injection hooks
(DESIGN "Actuators are narrow": the same interface as ``scaler.cloud.ec2.Ec2Cloud``).

Semantics follow EC2 as ``Ec2Cloud`` exposes it: launches are tagged atomically and idempotent per
ClientToken (instances already carrying the intent are returned), terminate refuses untagged ids,
a terminated instance goes to ``shutting-down`` (no longer billed) and then ``terminated``.

Hooks: ``throttle_next(k)`` (the next k calls raise ``Throttled``), ``fail_capacity(type)``
(launches of that type raise ``InsufficientCapacity``), ``stick_pending(type)`` (instances of that
type never leave ``pending``), ``limit_next_launch(n)`` (partial success: at most n instances),
``before_call``/``after_call`` (callables ``(op, args)`` run around every call: raise from them to
simulate a crash before or after the cloud acted), ``reclaim(id)`` (EC2 takes a spot instance
back), ``quota_check`` (a launch over the account's vCPU quota raises ``VcpuLimitExceeded``,
counted in ``quota_refusals``), and ``clock``/``boot_s`` for pending → running
(``boot_by_type``: a launch-to-running delay per instance type, a spot slot's that of its type,
``boot_s`` for the others; the replay's boot delays, ``sim.replay.run``).
"""
from __future__ import annotations

import itertools
import time
from dataclasses import replace
from typing import Any, Callable, Mapping

from scaler.cloud.provider import (
    CLUSTER_TAG,
    INTENT_TAG,
    MANAGED_BY_TAG,
    MANAGED_BY_VALUE,
    InsufficientCapacity,
    ManagedInstance,
    NotManaged,
    Throttled,
    VcpuLimitExceeded,
)
from scaler.cloud.slots import base_type

Hook = Callable[[str, dict[str, Any]], None]
#: the account's vCPU quotas as the fake enforces them: (slot, live instances, count to launch) ->
#: the refusal's one line, or None (built by ``sim.replay.fleet.quota_check``)
QuotaCheck = Callable[[str, list[ManagedInstance], int], "str | None"]


class FakeCloud:
    def __init__(self, cluster: str, *, clock: Callable[[], float] = time.time, boot_s: float = 0.0,
                 terminate_s: float = 0.0, boot_by_type: Mapping[str, float] | None = None,
                 quota_check: QuotaCheck | None = None) -> None:
        self.cluster = cluster
        self.clock = clock
        self.boot_s = boot_s
        self.boot_by_type = dict(boot_by_type or {})
        self.warm_until = float("-inf")   # instances launched at or before this time run at once
        self.terminate_s = terminate_s
        self._instances: dict[str, ManagedInstance] = {}
        self._terminated_at: dict[str, float] = {}
        self._ids = itertools.count(1)
        self._throttle = 0
        self._capacity_fail: set[str] = set()
        self._stuck: set[str] = set()
        self._launch_limit: int | None = None
        self.before_call: list[Hook] = []
        self.after_call: list[Hook] = []
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.run_instances_calls = 0
        #: the account's vCPU quotas: (slot, live instances, count) -> the refusal's line, or None
        self.quota_check = quota_check
        self.quota_refusals = 0     # launches refused with VcpuLimitExceeded

    # -- fault injection ---------------------------------------------------------------------
    def throttle_next(self, k: int) -> None:
        self._throttle = k

    def fail_capacity(self, instance_type: str, on: bool = True) -> None:
        (self._capacity_fail.add if on else self._capacity_fail.discard)(instance_type)

    def stick_pending(self, instance_type: str, on: bool = True) -> None:
        (self._stuck.add if on else self._stuck.discard)(instance_type)

    def limit_next_launch(self, n: int) -> None:
        self._launch_limit = n

    def add_unmanaged(self, instance_type: str, tags: dict[str, str] | None = None) -> str:
        """An instance this cluster does not own (no cluster tag, or another cluster's)."""
        iid = f"i-{next(self._ids):017x}"
        self._instances[iid] = ManagedInstance(iid, instance_type, "running", self.clock(), None, dict(tags or {}))
        return iid

    # -- internals ---------------------------------------------------------------------------
    def _enter(self, op: str, args: dict[str, Any]) -> None:
        self.calls.append((op, args))
        for h in list(self.before_call):
            h(op, args)
        if self._throttle > 0:
            self._throttle -= 1
            raise Throttled(f"{op}: throttled (injected)")

    def _leave(self, op: str, args: dict[str, Any]) -> None:
        for h in list(self.after_call):
            h(op, args)

    def boot_for(self, instance_type: str) -> float:
        """Seconds from launch to ``running`` for an instance of ``instance_type`` (a slot: a spot
        ``TYPE@ZONE`` boots as its type unless the slot has a delay of its own)."""
        return self.boot_by_type.get(instance_type, self.boot_by_type.get(base_type(instance_type), self.boot_s))

    def running_at(self, inst: ManagedInstance) -> float:
        """When ``inst`` (launched) is ``running``: its launch time plus its type's boot delay, or
        at once when launched at or before ``warm_until`` (a replay that starts warm)."""
        if inst.launch_time <= self.warm_until:
            return inst.launch_time
        return inst.launch_time + self.boot_for(inst.instance_type)

    def _view(self, inst: ManagedInstance) -> ManagedInstance:
        now = self.clock()
        if (inst.state == "pending" and inst.instance_type not in self._stuck
                and now >= self.running_at(inst)):
            inst = replace(inst, state="running")
            self._instances[inst.instance_id] = inst
        if inst.state == "shutting-down" and now - self._terminated_at.get(inst.instance_id, now) >= self.terminate_s:
            inst = replace(inst, state="terminated")
            self._instances[inst.instance_id] = inst
        return inst

    def _mine(self, inst: ManagedInstance) -> bool:
        return inst.tags.get(CLUSTER_TAG) == self.cluster

    def all_instances(self) -> list[ManagedInstance]:
        """Every instance, managed or not, any state (a test's view of the account; not a cloud call)."""
        return [self._view(i) for i in list(self._instances.values())]

    # -- CloudProvider -----------------------------------------------------------------------
    def list_managed(self) -> list[ManagedInstance]:
        args: dict[str, Any] = {}
        self._enter("list_managed", args)
        out = [i for i in self.all_instances() if self._mine(i) and i.state != "terminated"]
        self._leave("list_managed", args)
        return out

    def find_by_intent(self, client_token: str) -> list[ManagedInstance]:
        args = {"client_token": client_token}
        self._enter("find_by_intent", args)
        out = [i for i in self.all_instances() if self._mine(i) and i.intent == client_token]
        self._leave("find_by_intent", args)
        return out

    def launch(self, instance_type: str, count: int, client_token: str,
               tags: dict[str, str] | None = None) -> list[ManagedInstance]:
        args = {"instance_type": instance_type, "count": count, "client_token": client_token}
        self._enter("launch", args)
        found = [i for i in self.all_instances() if self._mine(i) and i.intent == client_token]
        if found:
            self._leave("launch", args)
            return found
        if instance_type in self._capacity_fail:
            raise InsufficientCapacity(instance_type, f"InsufficientInstanceCapacity for {instance_type} (injected)")
        n = count
        if self.quota_check is not None:
            refused = self.quota_check(instance_type, [i for i in self.list_managed() if i.live], n)
            if refused:
                self.quota_refusals += 1
                raise VcpuLimitExceeded(instance_type, refused)
        if self._launch_limit is not None:
            n, self._launch_limit = min(count, self._launch_limit), None
        self.run_instances_calls += 1
        all_tags = dict(tags or {})
        all_tags.update({CLUSTER_TAG: self.cluster, MANAGED_BY_TAG: MANAGED_BY_VALUE, INTENT_TAG: client_token})
        now = self.clock()
        out = []
        for _ in range(n):
            iid = f"i-{next(self._ids):017x}"
            inst = ManagedInstance(iid, instance_type, "pending", now, f"10.0.0.{len(self._instances) % 250 + 2}",
                                   dict(all_tags))
            self._instances[iid] = inst
            out.append(inst)
        self._leave("launch", args)
        return out

    def reclaim(self, instance_id: str) -> bool:
        """EC2 takes a spot instance back (issue #28; not a call of ours, so no hook raises): it goes
        to ``shutting-down`` and is no longer billed; ``after_call`` hooks see ``("reclaim", ...)``.
        False when it had already gone."""
        inst = self._instances.get(instance_id)
        if inst is None or self._view(inst).state in ("shutting-down", "terminated"):
            return False
        self._instances[instance_id] = replace(self._view(inst), state="shutting-down")
        self._terminated_at[instance_id] = self.clock()
        self._leave("reclaim", {"instance_ids": [instance_id]})
        return True

    def terminate(self, instance_ids: list[str]) -> None:
        args = {"instance_ids": list(instance_ids)}
        self._enter("terminate", args)
        bad = [i for i in instance_ids if i not in self._instances or not self._mine(self._instances[i])]
        if bad:
            raise NotManaged(f"refusing to terminate {', '.join(bad)}: not tagged {CLUSTER_TAG}={self.cluster}")
        now = self.clock()
        for iid in instance_ids:
            inst = self._view(self._instances[iid])
            if inst.state not in ("shutting-down", "terminated"):
                self._instances[iid] = replace(inst, state="shutting-down")
                self._terminated_at[iid] = now
        self._leave("terminate", args)
