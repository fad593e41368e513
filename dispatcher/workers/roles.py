"""What each registered worker is kept for, and the variant loads and unloads a change of it needs.

- **Parked** (:mod:`scaler.fleet.parking`: surplus kept warm): the worker takes no queries (it counts as
  draining) and every variant on it is unloaded; unparked, it gets back what it held (else the
  config's models) and takes queries again -- also when a load fails, since the model loop and
  getVariant (INFaaS §4.1) place variants on it as on any worker. An instance marked parked before
  it registers is parked when it does (:meth:`dispatcher.workers.registry.WorkerRegistry.add_worker_direct`).
- **The model it serves** (the fleet's joint plan, :mod:`scaler.fleet.worker_assignment`, issue #24): a
  worker moved to another model stops taking the old one's queries and has the new one loaded when
  it holds none of its variants.

:class:`WorkerRoles` takes the worker registry (the workers, their parked marks and assignment),
placement (what each worker holds, Load/Unload) and the round trigger.
"""
from __future__ import annotations

import asyncio
from typing import Mapping

from dispatcher.workers.placement import VariantPlacement
from dispatcher.runtime import RoundTrigger
from dispatcher.workers.registry import WorkerRegistry


class WorkerRoles:
    """Park, unpark and the assignment of workers to models (see the module docstring)."""

    def __init__(self, registry: WorkerRegistry, placement: VariantPlacement, trigger: RoundTrigger) -> None:
        self.registry = registry
        self.placement = placement
        self.trigger = trigger

    def set_assignment(self, serves: Mapping[str, str]) -> None:
        """Which model each instance serves from now on: its queries of other models stop (a call
        running finishes), and the model it now serves is loaded on it when it is not."""
        moved = self.registry.set_assignment(serves)
        p = self.placement
        for iid in moved:
            w = self.registry.workers.get(iid)
            if w is not None and not w.removed and not w.parked and w.loaded is not None \
                    and not any(p.variant_model(v) == serves[iid] for v in w.loaded):
                p.ensure_loaded(iid, serves[iid])
        if moved:
            self.trigger.kick()

    def mark_parked(self, instance_id: str) -> None:
        """Stop giving a (possibly not yet registered) instance queries: it is parked; a running
        query finishes."""
        self.registry.parked_ids.add(instance_id)
        w = self.registry.workers.get(instance_id)
        if w is not None and not w.removed and not w.parked:
            w.parked_variants = set(self.placement.loaded_on(w))
            w.parked = w.draining = True
            self.trigger.kick()

    async def park(self, instance_id: str) -> list[tuple[str, bool, str]]:
        """Park an instance (:meth:`mark_parked`) and unload every variant on it (each unload waits
        for a running query of it). Idempotent: a worker that registered while parked, or got a
        variant since, has it unloaded by the next call. Returns (variant, ok, message) per unload."""
        self.mark_parked(instance_id)
        w = self.registry.workers.get(instance_id)
        if w is None or w.removed:
            return []
        held = sorted(self.placement.loaded_on(w))
        w.parked_variants = (w.parked_variants or set()) | set(held)
        out = []
        for v, r in zip(held, await asyncio.gather(*(self.placement.unload_variant(instance_id, v) for v in held),
                                                   return_exceptions=True)):
            ok, msg = (False, str(r)) if isinstance(r, BaseException) else r
            out.append((v, ok, msg))
        return out

    async def unpark(self, instance_id: str) -> list[tuple[str, bool, str]]:
        """Bring a parked instance back: load what it held when parked (else the config's models),
        then route queries to it again -- also when a load fails or is cut short. Returns (variant,
        ok, message) per load."""
        self.registry.parked_ids.discard(instance_id)
        w = self.registry.workers.get(instance_id)
        if w is None or w.removed or not w.parked:
            return []
        want = sorted(w.parked_variants or set(self.placement.cfg_model_names()))
        out = []
        try:
            for v, r in zip(want, await asyncio.gather(*(self.placement.load_variant(instance_id, v, allow_parked=True)
                                                         for v in want), return_exceptions=True)):
                ok, msg = (False, str(r)) if isinstance(r, BaseException) else r
                out.append((v, ok, msg))
        finally:
            if not w.removed and instance_id not in self.registry.parked_ids:   # not parked again meanwhile
                w.parked = w.draining = False
                w.parked_variants = None
                self.trigger.kick()
        return out


__all__ = ["WorkerRoles"]
