"""Profiling on the fleet (INFaaS §3.2: every variant on every hardware type at registration): measure
a model and its variants on a worker of each instance type, a running one or a *probe* launched for
the purpose. An adapter: the decisions are ``scaler.fleet.probes`` (which probes go up together within the
budget, what they cost) and ``variants.type_profiles`` (which variants run on which type).

:func:`measure_on_worker` times ``Infer`` calls on one worker at each batch size (the worker's own
service time: ONNX Runtime on that machine, padded where it emulates a type), loading each
generated variant there first. :class:`Prober` launches probes through the fleet actuator (write-ahead
intents, cluster tags, the budget invariant with the probes counted), waits for their workers to
register with the dispatcher, measures them, and terminates them, also on an error or Ctrl-C.
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable, Mapping, Sequence

from dispatcher.proto import costscale_pb2 as pb
from dispatcher.workers.client import WorkerClient
from scaler.fleet.actuator import FleetActuator
from scaler.cloud.provider import CloudProvider, ManagedInstance, pool_of
from scaler.fleet.probes import PROBE_PLAN_PREFIX, probe_cost, probe_rounds, probe_target
from scaler.planner.pools import pool_digest
from variants.generator import Variant
from variants.profiler import VariantProfile, summarize

log = logging.getLogger("costscale.profile")

CALL_TIMEOUT_S = 60.0       # one Infer or LoadVariant call on a probe
POLL_S = 0.5                # how often the cloud is listed while probes boot
MEMORY_METHOD = "unavailable (measured through the worker's Infer)"

Progress = Callable[[str], None]
FleetHook = Callable[[list[ManagedInstance]], Awaitable[None]]


async def measure_on_worker(client: WorkerClient, instance_type: str, variants: Sequence[Variant],
                            batch_sizes: Sequence[int], repeats: int = 5, warmup: int = 1,
                            on_step: Progress | None = None,
                            loaded: set[str] | None = None) -> dict[str, VariantProfile | str]:
    """Profile each of ``variants`` on the worker behind ``client`` (it stands for ``instance_type``).
    On a probe (``loaded`` None) a variant the worker did not load at boot is loaded first and
    unloaded after; on a worker that serves (``loaded``: what it holds) only those are measured and
    nothing is loaded or unloaded. Returns variant name -> profile, or the reason it was not measured."""
    out: dict[str, VariantProfile | str] = {}
    for v in variants:
        if loaded is not None and v.name not in loaded:
            out[v.name] = f"not loaded on this {instance_type} worker"
            continue
        if on_step is not None:
            on_step(f"{v.name} on {instance_type}")
        load_ms, loaded_here = 0.0, loaded is None and v.name != v.model
        try:
            if loaded_here:
                rep = await client.load_variant(pb.VariantRequest(model=v.model, variant=v.name,
                                                                  onnx=Path(v.path).read_bytes()), CALL_TIMEOUT_S)
                if not rep.ok:
                    out[v.name] = rep.message
                    continue
                load_ms = rep.load_ms
            rows, provider = [], ""
            for b in batch_sizes:
                samples = []
                for i in range(warmup + repeats):
                    r = await client.infer(pb.InferRequest(variant=v.name, batch_size=int(b)), CALL_TIMEOUT_S)
                    provider = r.provider or provider
                    if i >= warmup:
                        samples.append(r.service_ms)
                rows.append(summarize(int(b), samples))
            out[v.name] = VariantProfile(variant=v.name, model=v.model, instance_type=instance_type, provider=provider,
                                         batches=tuple(rows), load_ms=load_ms, peak_memory_mb=0.0,
                                         memory_method=MEMORY_METHOD)
        except Exception as exc:  # noqa: BLE001 - gRPC and file errors alike: the variant is reported unmeasured
            details = getattr(exc, "details", None)
            text = (details() if callable(details) else None) or str(exc) or type(exc).__name__
            out[v.name] = text.strip().splitlines()[0]
        finally:
            if loaded_here:
                try:
                    await client.unload_variant(pb.VariantRequest(model=v.model, variant=v.name), CALL_TIMEOUT_S)
                except Exception:  # noqa: BLE001 - the probe is terminated anyway
                    pass
    return out


@dataclass
class ProbeOutcome:
    """What probing did: profiles by type, types not measured and why, the probes and their cost."""

    profiles: dict[str, dict[str, VariantProfile | str]] = field(default_factory=dict)  # type -> variant -> profile
    failed: dict[str, str] = field(default_factory=dict)
    instances: dict[str, str] = field(default_factory=dict)          # probe id -> type
    seconds: dict[str, float] = field(default_factory=dict)          # probe id -> seconds it was up
    cost: float = 0.0
    left_running: list[str] = field(default_factory=list)            # probes a failed terminate left up

    def cost_line(self) -> str:
        if not self.instances:
            return "probes: none launched"
        up = ", ".join(f"{t} {self.seconds.get(i, 0.0):.0f} s" for i, t in sorted(self.instances.items()))
        line = (f"probes: {len(self.instances)} launched and terminated ({up}); they cost ${self.cost:.4f} "
                "(on-demand, per-second billing with a 60 s minimum)")
        if self.left_running:
            line += f"; STILL RUNNING, terminate them: {', '.join(self.left_running)}"
        return line


Measure = Callable[[WorkerClient, str], Awaitable[dict[str, VariantProfile | str]]]


@dataclass
class Prober:
    """Launch one probe per type through ``actuator``, measure it once its worker registers with
    ``dispatcher``, terminate it (see the module docstring). ``on_fleet_change`` is the embedded
    default's local runner (it starts a worker process for each running instance)."""

    actuator: FleetActuator
    cloud: CloudProvider
    dispatcher: Any                     # dispatcher.server.Dispatcher: allow, park, forget, workers
    on_fleet_change: FleetHook | None = None
    register_timeout_s: float = 600.0
    clock: Callable[[], float] = time.time

    def leftover_probes(self) -> list[str]:
        """Probes an earlier run launched and did not get to terminate (a crash): still live."""
        ids = {iid for it in self.actuator.store.intents(statuses=["done"])
               if it.kind == "launch" and it.plan_id.startswith(PROBE_PLAN_PREFIX) for iid in it.instance_ids}
        return sorted(i.instance_id for i in self.cloud.list_managed() if i.live and i.instance_id in ids)

    async def run(self, types: Sequence[str], measure: Measure, on_step: Progress | None = None) -> ProbeOutcome:
        out = ProbeOutcome()
        leftover = await asyncio.to_thread(self.leftover_probes)
        listed = await asyncio.to_thread(self.cloud.list_managed)
        held = pool_of([i for i in listed if i.instance_id not in leftover])
        if leftover:
            log.warning("terminating probes an earlier run left up: %s", ", ".join(leftover))
            await self._retire(held, leftover, out)
        prices: Mapping[str, float] = {t: self.actuator.price(t) for t in set(types) | set(held)}
        room = self.actuator.budget - sum(prices[t] * n for t, n in held.items())
        rounds, unaffordable = probe_rounds(list(types), prices, room)
        for t in unaffordable:
            out.failed[t] = (f"a probe ({prices[t]:g} $/hr) does not fit the budget beside the pool held "
                             f"({max(room, 0.0):.3f} $/hr left)")
        for k, round_types in enumerate(rounds):
            target = probe_target(held, round_types)
            plan_id = f"{PROBE_PLAN_PREFIX}{pool_digest(target)}-{int(self.clock())}-{k}"
            ids: list[str] = []
            try:
                rep = await asyncio.to_thread(self.actuator.apply, target, plan_id)
                for t in round_types:
                    got = rep.launched.get(t, [])
                    if not got:
                        out.failed[t] = "no probe launched: " + (rep.errors[0] if rep.errors else rep.summary())
                    for iid in got:
                        ids.append(iid)
                        out.instances[iid] = t
                        self.dispatcher.allow_instance(iid, t)
                        self.dispatcher.mark_parked(iid)   # measured only: no live queries
                await self._measure_all(ids, measure, out, on_step)
            finally:   # also what an apply that failed half-way launched (its intents say)
                await self._retire(held, ids or await asyncio.to_thread(self._launched_by, plan_id), out)
        return out

    def _launched_by(self, plan_id: str) -> list[str]:
        return sorted({iid for it in self.actuator.store.intents(plan_id=plan_id) if it.kind == "launch"
                       for iid in it.instance_ids})

    async def _measure_all(self, ids: list[str], measure: Measure, out: ProbeOutcome, on_step: Progress | None) -> None:
        deadline = self.clock() + self.register_timeout_s
        waiting = set(ids)
        jobs: list[asyncio.Task] = []
        while waiting:
            listed = await asyncio.to_thread(self.cloud.list_managed)
            if self.on_fleet_change is not None:
                await self.on_fleet_change(listed)
            live = {i.instance_id for i in listed if i.live}
            for iid in sorted(waiting):
                w = self.dispatcher.workers.get(iid)
                if w is not None:
                    waiting.discard(iid)
                    if on_step is not None:
                        on_step(f"probe {iid} ({w.instance_type}) registered")
                    jobs.append(asyncio.create_task(self._one(iid, w.client, measure, out)))
                elif iid not in live:
                    waiting.discard(iid)
                    out.failed[out.instances[iid]] = f"probe {iid} stopped before its worker registered"
            if waiting and self.clock() > deadline:
                for iid in waiting:
                    out.failed[out.instances[iid]] = (f"probe {iid}: its worker did not register within "
                                                      f"{self.register_timeout_s:g} s")
                break
            if waiting:
                await asyncio.sleep(POLL_S)
        await asyncio.gather(*jobs)

    async def _one(self, iid: str, client: WorkerClient, measure: Measure, out: ProbeOutcome) -> None:
        t = out.instances[iid]
        try:
            out.profiles[t] = await measure(client, t)
        except Exception as exc:  # noqa: BLE001 - one probe's failure leaves the others measured
            out.failed[t] = f"measuring on probe {iid}: {exc}"

    async def _retire(self, held: Mapping[str, int], ids: list[str], out: ProbeOutcome) -> None:
        """Terminate the probes ``ids`` (the pool goes back to ``held``); shielded, so a Ctrl-C while it
        runs still lets the terminate finish (asyncio.run waits for its thread)."""
        if not ids:
            return
        launched = {i.instance_id: i.launch_time for i in await asyncio.to_thread(self.cloud.list_managed)}
        plan_id = f"{PROBE_PLAN_PREFIX}end-{pool_digest(dict(held))}-{int(self.clock())}"
        try:
            await asyncio.shield(asyncio.to_thread(self.actuator.apply, dict(held), plan_id, ids))
        finally:
            now = self.clock()
            for iid in ids:
                self.dispatcher.forget_instance(iid)
                if iid in out.instances:
                    out.seconds[iid] = max(0.0, now - launched.get(iid, now))
                    out.cost += probe_cost(self.actuator.price(out.instances[iid]), out.seconds[iid])
            still = {i.instance_id for i in await asyncio.to_thread(self.cloud.list_managed) if i.live}
            out.left_running = sorted(set(out.left_running) | (still & set(ids)))
            for iid in ids:
                log.info("probe %s (%s) terminated", iid, out.instances.get(iid, "left over"))
