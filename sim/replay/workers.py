"""The dispatcher's worker registry on the virtual clock (``dispatcher.workers.registry.WorkerRegistry`` for
the replay), and the fleet tick's worker view over it (:class:`scaler.fleet.tick.WorkerView`): an
instance registers when it runs and its model is loaded, parks and unparks with a load, moves
between models' query loops, and is forgotten when its instance is gone. It decides nothing: the
fleet tick (:mod:`scaler.fleet.tick`) and the pipeline rounds say what to do.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from scaler.cloud.provider import ManagedInstance
from scaler.planner.joint_plan import JointPlan
from sim.clock import VirtualClock
from sim.replay.query_loop import QueryLoop

Schedule = Callable[[float, Callable[[], None]], None]


@dataclass
class Decisions:
    """What the loops decided, counted (the replay's ``decisions``)."""

    launch: int = 0
    terminate: int = 0
    park: int = 0
    unpark: int = 0
    variant_load: int = 0
    variant_unload: int = 0


class ReplayWorkers:
    """The dispatcher's worker registry (``dispatcher.workers.registry.WorkerRegistry``) for the replay: an
    instance may register once its sync allowed it; its worker joins the query loop of the model it
    is assigned to (``lanes``: one :class:`sim.replay.query_loop.QueryLoop` per configured model) when the
    instance runs and the model is loaded (``load_s``); parked ones take no queries. An instance
    moved to another model (:meth:`assign`) leaves the first loop and joins the other after a load.
    The methods under "the fleet tick's worker view" are :class:`scaler.fleet.tick.WorkerView`'s;
    none of them waits."""

    def __init__(self, lanes: Mapping[str, QueryLoop], clock: VirtualClock, schedule: Schedule,
                 running_at: Callable[[ManagedInstance], float], load_s: float, decisions: Decisions,
                 warm_until: float = float("-inf")) -> None:
        self.lanes = dict(lanes)
        self.clock, self.schedule, self.running_at, self.load_s = clock, schedule, running_at, load_s
        self.warm_until = warm_until
        self.decisions = decisions
        self.allowed: dict[str, str] = {}
        self.assignment: dict[str, str] = {}      # instance id -> model it serves
        self.joined: dict[str, str] = {}          # instance id -> the lane its worker is in
        self.parked_ids: set[str] = set()
        self._joining: set[str] = set()
        self._holding: set[str] = set()    # registered parked workers whose model is still loaded
        #: instance -> model overrides a pipeline round set (sim.replay.pipeline_round), kept over the
        #: fleet's own assignment while the instance lives
        self.pins: dict[str, str] = {}
        #: (type, launch to registration, s) of each worker that booted, for the forecast's lead (issue #39)
        self.boots: list[tuple[str, float]] = []
        self._launched: dict[str, float] = {}

    def _model_of(self, iid: str) -> str | None:
        """The model the instance serves: its assignment (one model: that one); None before it has
        one (its worker then joins at the next sync, which assigns it)."""
        if len(self.lanes) == 1:
            return next(iter(self.lanes))
        return self.assignment.get(iid)

    def _worker_lane(self, iid: str) -> QueryLoop | None:
        m = self.joined.get(iid)
        return self.lanes[m] if m is not None else None

    def registered(self) -> frozenset[str]:
        return frozenset().union(*(q.registered() for q in self.lanes.values()))

    def serving(self, model: str | None = None) -> dict[str, int]:
        """Workers taking queries by type: of one model's loop, or of all."""
        out: dict[str, int] = {}
        for m, q in self.lanes.items():
            if model is None or m == model:
                for t, n in q.serving().items():
                    out[t] = out.get(t, 0) + n
        return out

    def allow(self, inst: ManagedInstance) -> None:
        """``allow_instance``; the worker registers at launch + boot + model load."""
        self.allowed[inst.instance_id] = inst.instance_type
        iid = inst.instance_id
        if iid in self._joining or iid in self.joined:
            return
        self._joining.add(iid)
        load = 0.0 if inst.launch_time <= self.warm_until else self.load_s
        if load:
            self._launched[iid] = inst.launch_time
        at = max(self.running_at(inst) + load, self.clock.now())
        self.schedule(at, lambda: self._join(iid))

    def _join(self, iid: str) -> None:
        self._joining.discard(iid)
        itype = self.allowed.get(iid)
        if itype is None or iid in self.joined:     # terminated before its worker came up
            return
        m = self._model_of(iid)
        if m is None:
            return
        parked = iid in self.parked_ids
        self.joined[iid] = m
        launched = self._launched.pop(iid, None)
        if launched is not None:
            self.boots.append((itype.split("@")[0], self.clock.now() - launched))
        self.lanes[m].add_worker(iid, itype, self.clock.now(), draining=parked)
        if parked:
            self._holding.add(iid)

    def assign(self, assignment: Mapping[str, str]) -> None:
        """The model each instance serves now (:func:`scaler.fleet.worker_assignment.assign_workers`); a
        registered worker whose model changed swaps it: it leaves its loop (its running query
        finishes) and joins the new model's after ``load_s``."""
        for iid, m in assignment.items():
            self.assignment[iid] = m
            was = self.joined.get(iid)
            if was is None or was == m:
                continue
            q = self.lanes[was]
            q.set_draining(iid, True, self.clock.now())
            q.remove_worker(iid, self.clock.now())
            del self.joined[iid]
            self._holding.discard(iid)
            self.decisions.variant_unload += 1
            self.decisions.variant_load += 1
            self._joining.add(iid)
            self.schedule(self.clock.now() + self.load_s, lambda iid=iid: self._join(iid))

    def forget(self, iid: str) -> None:
        self.allowed.pop(iid, None)
        self.parked_ids.discard(iid)
        self._holding.discard(iid)
        self.assignment.pop(iid, None)
        q = self._worker_lane(iid)
        self.joined.pop(iid, None)
        if q is not None:
            q.remove_worker(iid, self.clock.now())

    def drain(self, iid: str) -> bool:
        """Before a termination: no new queries (the in-flight one finishes, see the module doc)."""
        q = self._worker_lane(iid)
        if q is not None:
            q.set_draining(iid, True, self.clock.now())
        return True

    def mark_parked(self, iid: str) -> None:
        self.parked_ids.add(iid)
        q = self._worker_lane(iid)
        if q is not None and iid in q.workers and not q.workers[iid].draining:
            self._holding.add(iid)
        if q is not None:
            q.set_draining(iid, True, self.clock.now())

    def park(self, iid: str) -> None:
        """Unload the parked worker's model (once per park; idempotent like ``Dispatcher.park``)."""
        q = self._worker_lane(iid)
        if iid in self._holding and q is not None and iid in q.workers:
            self._holding.discard(iid)
            self.decisions.variant_unload += 1

    def unpark(self, iid: str) -> None:
        """Load the model back (``load_s``), then take queries again; an unregistered one just
        stops being parked."""
        self.parked_ids.discard(iid)
        q = self._worker_lane(iid)
        w = q.workers.get(iid) if q is not None else None
        if q is None or w is None or not w.draining:
            return
        if iid in self._holding:        # never unloaded: routable at once
            self._holding.discard(iid)
            q.set_draining(iid, False, self.clock.now())
            return
        self.decisions.variant_load += 1

        def back() -> None:
            lane = self._worker_lane(iid)
            if iid not in self.parked_ids and lane is q and iid in q.workers:
                q.set_draining(iid, False, self.clock.now())
        self.schedule(self.clock.now() + self.load_s, back)


    # ---- the fleet tick's worker view (scaler.fleet.tick.WorkerView) ----------------------------
    def ready(self) -> frozenset[str]:
        return self.registered()

    def serves(self) -> Mapping[str, str]:
        return self.assignment

    async def unpark_all(self, ids: Sequence[str]) -> None:
        for iid in ids:
            self.unpark(iid)

    async def park_all(self, ids: Sequence[str]) -> None:
        for iid in ids:
            self.park(iid)

    def set_base_types(self, plan: JointPlan) -> None:
        for model, base in plan.base_types.items():
            self.lanes[model].set_base_type(base)

    async def synced(self, listed: list[ManagedInstance], typed: list[ManagedInstance],
                     assignment: Callable[[], dict[str, str]]) -> None:
        """``Dispatcher.set_cloud_view`` and ``set_assignment``: the live instances may register, the
        gone are forgotten; each serves its model (a pipeline round's pin holds over it)."""
        live = {i.instance_id: i for i in typed if i.live}
        serves = assignment()
        for iid in [i for i in self.pins if i not in live]:
            del self.pins[iid]
        self.assign({**serves, **{i: mod for i, mod in self.pins.items() if i in serves}})
        for inst in live.values():
            self.allow(inst)
        for iid in list(self.allowed):
            if iid not in live:
                self.forget(iid)
        self.parked_ids &= set(live)


__all__ = ["Decisions", "ReplayWorkers", "Schedule"]
