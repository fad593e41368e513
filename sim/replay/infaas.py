"""INFaaS on an application with accuracy scaling off (issue #25): the daemon's model loop and
getVariant on the virtual clock, over an application's query loop (:class:`sim.replay.variant_lane.VariantLoop`).

Live, a family registered as an application is one registered model per member, each its own
variant (:mod:`variants.families.registration`); with ``model_scaling.accuracy_scaling`` off:

- **getVariant at admission** (``dispatcher.admission.Admission.validate`` →
  :func:`dispatcher.modelless.route`): a query that names only the application (no variant, no
  latency of its own in a trace; as minimum accuracy the application's ``models[].min_accuracy``,
  0 by default) takes the Active variant instance on the
  least-utilized worker, else the Inactive variant with the lowest load + inference latency, loaded
  on the least-utilized worker of its hardware (the query waits for the load); Overloaded and
  Interfered instances are skipped (the state machine's verdicts, below). :class:`ReplayInfaas.pin`
  calls ``route`` with the lane's workers: what each hosts, its load as admission measures it
  (:func:`dispatcher.modelless.routing_load`), the states of the last round.
- **The model loop** (``daemon.loops.model_loop.ModelLoop.tick``): every ``intervals.model_s`` the same
  :func:`variants.infaas.model_decision.decide` over the members as models (each one's load: the queries
  getVariant pinned to it, over the demand window's horizon as live), its Load/Unload placements applied after the load
  time (``load_s``), its VM-autoscaler decisions and shortfall turned into the capacity hint as for
  any model (:meth:`sim.replay.models.ReplayModelLoop.next_hint`).

Where the replay differs: a worker holds one variant (the model loop's "one instance slot per
worker"); live, a getVariant load on a worker adds a variant beside the one it hosts, here it
replaces it. Workers register hosting the most accurate variant, as the fleet planned them.
"""
from __future__ import annotations

import collections
import functools
import itertools
import math
import operator
import sys
from typing import Callable, Mapping, Sequence

from config.profiles import ProfileTable
from dispatcher import modelless as ml
from dispatcher.window import DemandWindow
from sim.replay.matching_round import LoopWorker
from sim.replay.variant_lane import BUSY_INTERVALS, VariantLoop
from variants.runtime.executor import ANY_HARDWARE
from variants.infaas.model_decision import (ModelDecision, ModelInputs, ModelLoopParams, ModelLoopState, VariantCandidate,
                                     WorkerSnapshot, above_floor, decide, profiled_ms)
from variants.infaas.selection import Request
from variants.infaas.state_machine import StateKey, VariantState

#: ``dispatcher.workers.registry.Workers.utilization_horizon_s``: getVariant's "least-utilized" looks this far back
UTILIZATION_HORIZON_S = 2.0


def _routing_load(dq: Sequence[tuple[float, float, float]], now: float, lo: float, ordered: bool,
                  busy_until: float | None, waiting_ms: float) -> float:
    """:func:`dispatcher.modelless.routing_load` over :data:`UTILIZATION_HORIZON_S` (``lo``: ``now``
    less it) for one worker whose calls are ``dq``: (start, end, end - start), the last left out
    while under way (its end after ``now``). The same float
    operations in the same order, without a call per interval (it runs for every worker at every
    arrival: the INFaaS replay's hottest loop). When its calls ran one after the other
    (``ordered``: each started at or after the one before it ended), the first ended at or after
    ``lo`` (as the lane prunes them) and the last counted by ``now``, every call after the first lies
    inside the window and adds its own ``end - start``: those are added left to right, as the loop
    adds them, by :func:`functools.reduce` over the stored durations."""
    n = len(dq) if dq and dq[-1][1] <= now else len(dq) - 1
    busy = 0.0
    if n > 0 and ordered and dq[0][1] >= lo and dq[n - 1][1] <= now:    # every call after the first inside
        s, e, _ = dq[0]
        x = (e if e < now else now) - (s if s > lo else lo)
        busy = _fold(_add, map(_DURATION, itertools.islice(dq, 1, n)), x if x > 0.0 else 0.0)
    elif n > 0:
        for s, e, _ in itertools.islice(dq, n):   # busy += max(0.0, min(e, now) - max(s, lo)), as busy_fraction
            x = (e if e < now else now) - (s if s > lo else lo)
            busy += x if x > 0.0 else 0.0
    frac = busy / (UTILIZATION_HORIZON_S * 1)                    # min(1.0, frac); max(ahead, 0.0)
    ahead = 0.0 if busy_until is None or 0.0 > (d := busy_until - now) else d
    return (frac if frac < 1.0 else 1.0) + (ahead + waiting_ms / 1000.0) / UTILIZATION_HORIZON_S


_DURATION = operator.itemgetter(2)
_fold, _add = functools.reduce, operator.add


def _reduce_sum(xs: Sequence[float], start: float) -> float:
    """``start`` + each of ``xs`` left to right, one rounding per addition."""
    return _fold(_add, xs, start)


#: the left-to-right sum :func:`_routing_load` folds: ``sum`` adds floats in a C double one by one
#: up to Python 3.11; from 3.12 it compensates the rounding (a different float), so the fold there
_left_sum: Callable[[Sequence[float], float], float] = sum if sys.version_info < (3, 12) else _reduce_sum
_NONE: frozenset[str] = frozenset()
_MODEL = operator.attrgetter("model")


class _Roster:
    """The live workers as getVariant sees them, less their loads (:meth:`ReplayInfaas._roster`):
    per worker, from ``recs`` (id, the lane's worker, its variant, hardware class, type, loaded set,
    (variant, type)), its calls (the lane's ``busy`` deque) in ``calls``, and by id in ``by_id``
    (the lane's worker, variant, type, (variant, type), calls); ``variants`` each one's variant, in order; ``workers``
    their route workers, utilization NaN (given by :meth:`ReplayInfaas._route_workers`' load function);
    the hardware classes and their router; how many host each variant; the state map over them
    (``st``) and the model loop round it is of; the lane's ``swaps`` when it was built."""

    __slots__ = ("live", "loading", "by_id", "variants", "workers", "hws", "router", "hosts", "st",
                 "states_n", "swaps", "calls")

    def __init__(self, live: list[LoopWorker], loading: int, recs: list[tuple[str, LoopWorker, str, str, str,
                 frozenset[str], tuple[str, str]]], hws: frozenset[str], router: ml.Router,
                 hosts: collections.Counter[str], swaps: int, calls: list[collections.deque[tuple[float, float, float]]]) -> None:
        self.live, self.loading, self.hws, self.swaps = live, loading, hws, swaps
        self.calls = calls
        self.by_id = {r[0]: (r[1], r[2], r[4], r[6], dq) for r, dq in zip(recs, calls)}
        self.variants = [r[2] for r in recs]
        self.workers = [ml.RouteWorker(r[0], r[3], r[4], math.nan, r[5]) for r in recs]
        self.router, self.hosts = router, hosts
        self.st: dict[StateKey, VariantState] | None = None
        self.states_n = -1


_VARIANT = operator.attrgetter("variant")


class ReplayInfaas:
    """getVariant and the INFaaS model loop over one application's lane (see the module docstring)."""

    def __init__(self, lane: VariantLoop, params: ModelLoopParams, load_s: float,
                 hardware: Mapping[str, str], prices: Mapping[str, float], profiles: ProfileTable,
                 schedule: Callable[[float, Callable[[], None]], None], now: Callable[[], float],
                 min_accuracy: float = 0.0) -> None:
        self.lane, self.params, self.load_s = lane, params, load_s
        self.min_accuracy = min_accuracy       # the application's floor (``models[].min_accuracy``)
        self.hardware, self.prices, self.profiles = dict(hardware), dict(prices), profiles
        self.schedule, self.now = schedule, now
        self.state = ModelLoopState()
        self.states: dict[StateKey, VariantState] = {}
        self.loading: set[str] = set()              # workers with a load in flight
        self.last_at: float | None = None
        #: each member's own arrivals after getVariant (live: ``Dispatcher.model_windows``)
        self.windows = {v: DemandWindow() for v in lane.vnames}
        app = lane.app
        self.metas = [ml.VariantMeta(v, v, ANY_HARDWARE, acc, lane.times.max_batch, load_s * 1000.0)
                      for v, acc in app.variants]
        self._grid: dict[tuple[str, str], tuple[tuple[int, float], ...]] = {}
        #: (instance type, variant) -> (its hardware class, frozenset((variant,))), made once
        self._static: dict[tuple[str, str], tuple[str, frozenset[str]]] = {}
        self._routers: dict[frozenset[str], ml.Router] = {}      # hardware classes -> getVariant's metadata
        self._requests: dict[tuple[float, int], Request] = {}    # (slo_ms, batch) -> the request
        self._kept: _Roster | None = None          # the roster of the last arrival
        #: worker -> (its first call in the window, the calls counted, the later ones' durations)
        self._tails: dict[str, tuple[tuple[float, float, float], int, tuple[float, ...]]] = {}
        self._loading_n = 0                          # loads started and done, so far
        self._states_n = 0                           # model loop rounds, so far (each sets self.states)
        lane.get_variant = self.pin
        lane.busy = {}

    # -- getVariant --------------------------------------------------------------------------------
    def grid(self, variant: str, hw: str) -> tuple[tuple[int, float], ...]:
        """``VariantPlacement.grid``: ``variant``'s (batch, ms) on the fastest type of ``hw`` it has a
        profile for."""
        got = self._grid.get((variant, hw))
        if got is None:
            pred = self.lane.vtimes[variant].pred_ms
            types = [t for t in self.lane.app.types(variant) if self.hardware.get(t) == hw]
            got = ()
            if types:
                t = min(types, key=lambda x: (pred(x)[1], x))
                got = tuple((b, float(pred(t)[b])) for b in ml.grid_batches(self.lane.times.max_batch))
            self._grid[(variant, hw)] = got
        return got

    def _roster(self) -> "_Roster":
        """The lane's live workers as getVariant sees them, less their loads (:class:`_Roster`),
        built again when the lane's live list (rebuilt on any change to its workers or what they
        host), a worker's variant or the loads in flight changed."""
        lane = self.lane
        live = lane._live if lane._live is not None else lane._refresh_live()
        got = self._kept
        if got is not None and got.live is live and got.loading == self._loading_n:
            return got
        static, loading, recs = self._static, self.loading, []
        for w in live:
            hw_loaded = static.get((w.itype, w.variant))
            if hw_loaded is None:
                hw_loaded = static[(w.itype, w.variant)] = (self.hardware.get(w.itype, "cpu"),
                                                            frozenset((w.variant,)) if w.variant else frozenset())
            loaded = hw_loaded[1] if w.wid not in loading else _NONE
            recs.append((w.wid, w, w.variant, hw_loaded[0], w.itype, loaded, (w.variant, w.itype)))
        hws = frozenset({r[3] for r in recs} or ml.route_hardware(self.metas, ()))
        router = self._routers.get(hws)
        if router is None:         # the variants' metadata on these hardware classes, built once
            router = self._routers[hws] = ml.Router(self.metas, hws, self.grid)
        busy = lane.busy if lane.busy is not None else {}    # each worker's deque made now (the lane's own)
        calls = [busy.setdefault(r[0], collections.deque(maxlen=BUSY_INTERVALS)) for r in recs]
        got = self._kept = _Roster(live, self._loading_n, recs, hws, router,
                                   collections.Counter(w.variant for w in live), lane.swaps, calls)
        return got

    def _route_workers(self, now: float) -> tuple[list[ml.RouteWorker], "_Roster", Callable[[str], float]]:
        """The lane's live workers as admission hands them to getVariant (``Admission.route_workers``),
        what each hosts (nothing while a load is in flight), with their :class:`_Roster`, and the
        function that gives a worker's load by id, what admission ranks them by
        (:func:`dispatcher.modelless.routing_load`), computed when getVariant first asks for it
        (``Router.route``'s ``util``; most arrivals rank only the workers holding an Active servable
        instance) and kept for the arrival: the busy fraction over the last
        :data:`UTILIZATION_HORIZON_S` of the calls it finished (live, a call's interval is recorded
        when it completes), plus its call under way's predicted rest and its share of the queries
        waiting for its variant; the same float operations in the same order, inline:
        :func:`_routing_load`'s summing by duration written out for a worker whose calls ran one
        after another, that function for any other. Every worker's calls are pruned here, at each
        arrival, as before (the loads read none but the window's)."""
        lane = self.lane
        roster = self._roster()
        # a worker hosts another variant now: the roster again. Each swap, plan or load (the lane's
        # ``swaps``), also builds a new live list; only a late-bound lane changes variants without one
        if (lane.late or lane.swaps != roster.swaps) and list(map(_VARIANT, roster.live)) != roster.variants:
            self._kept = None
            roster = self._roster()
        lo = now - UTILIZATION_HORIZON_S
        for dq in roster.calls:
            if dq and dq[0][1] < lo:
                while dq and dq[0][1] < lo:      # as the dispatcher prunes ``WorkerState.busy``
                    dq.popleft()
        unordered = lane.busy_unordered
        retry, queue = lane._retry, lane._queue
        waiting = (collections.Counter(map(_MODEL, itertools.chain(retry.values(), queue.values())))
                   if retry or queue else None)
        hosts = roster.hosts if waiting else None    # read only for the variants waiting
        shares: dict[tuple[str, str], float] = {}
        h, by_id, tails, left_sum, islice, duration = UTILIZATION_HORIZON_S, roster.by_id, self._tails, _left_sum, \
            itertools.islice, _DURATION
        got: dict[str, float] = {}

        def util(wid: str) -> float:
            load = got.get(wid)
            if load is not None:
                return load
            w, variant, itype, skey, dq = by_id[wid]
            share = 0.0
            if hosts is not None and variant:   # ml.waiting_share_ms for its one variant, once per (variant, type)
                share = shares.get(skey)  # type: ignore[assignment]
                if share is None:
                    share = shares[skey] = ml.waiting_share_ms((variant,), waiting, hosts,  # type: ignore[arg-type]
                                                               lambda v, t=itype: lane.vtimes[v].pred_ms(t)[1])
            if not dq:                                   # _routing_load with no calls: busy 0
                ahead = 0.0 if w.query < 0 or 0.0 > (d := w.busy_until - now) else d
                load = 0.0 + (ahead + share / 1000.0) / h
            elif wid in unordered:
                load = _routing_load(dq, now, lo, False, w.busy_until if w.query >= 0 else None, share)
            else:                                        # _routing_load's ordered branch, written out
                n = len(dq) if dq[-1][1] <= now else len(dq) - 1
                if n > 0 and dq[0][1] >= lo and dq[n - 1][1] <= now:
                    s, e, _ = first = dq[0]
                    x = (e if e < now else now) - (s if s > lo else lo)
                    tail = tails.get(wid)         # the later calls' durations, kept while they stay
                    if tail is None or tail[0] is not first or tail[1] > n:
                        tail = tails[wid] = (first, n, tuple(map(duration, islice(dq, 1, n))))
                    elif tail[1] < n:                 # calls appended since, the first the same: theirs added
                        tail = tails[wid] = (first, n, tail[2] + tuple(map(duration, islice(dq, tail[1], n))))
                    frac = left_sum(tail[2], x if x > 0.0 else 0.0) / h
                    ahead = 0.0 if w.query < 0 or 0.0 > (d := w.busy_until - now) else d
                    load = (frac if frac < 1.0 else 1.0) + (ahead + share / 1000.0) / h
                else:
                    load = _routing_load(dq, now, lo, True, w.busy_until if w.query >= 0 else None, share)
            got[wid] = load
            return load

        return roster.workers, roster, util

    def pin(self, batch: int, slo_ms: float = 0.0) -> str:
        """getVariant for one query of ``batch`` asking for ``slo_ms`` (a pipeline step's own budget,
        as ``PipelineRunner`` sends it in ``latency_slo_ms``; 0: none); a load it starts is applied
        ``load_s`` later. The state map (:meth:`dispatcher.modelless.Router.state_map`) is kept with
        the roster until the model loop's next states."""
        lane = self.lane
        now = lane.now                   # the arrival's time (the fleet's clock moves at its ticks)
        workers, roster, util = self._route_workers(now)
        router = roster.router
        key = (slo_ms, batch)
        req = self._requests.get(key)
        if req is None:
            if len(self._requests) >= ml.Router.MAX_REQUESTS:     # a pipeline step's budgets: each its own
                self._requests.clear()
            req = self._requests[key] = Request(None, slo_ms if slo_ms > 0 else math.inf, self.min_accuracy, int(batch))
        st = roster.st
        if st is None or roster.states_n != self._states_n:
            st = roster.st = router.state_map(workers, self.states)
            roster.states_n = self._states_n
        try:
            r = router.route(req, workers, self.states, st, util)
        except ml.RouteError:
            return lane.app.top          # live: the query is refused; here it waits for the top variant
        if r.needs_load and r.worker is not None and r.worker not in self.loading:
            self._load(r.worker, r.variant, now)
        self.windows[r.variant].record(int(batch), now)
        return r.variant

    def _load(self, wid: str, variant: str, now: float) -> None:
        self.loading.add(wid)
        self._loading_n += 1

        def done() -> None:
            self.loading.discard(wid)
            self._loading_n += 1
            self.lane.host(wid, variant, self.now())

        self.schedule(now + self.load_s, done)

    # -- the model loop ----------------------------------------------------------------------------
    def _profile(self, model: str, itype: str, batch: float, stat: str) -> float:
        """``ModelLoop._profile`` for a member: its profile on ``itype`` (0 where it has none: the
        autoscaler skips that pair)."""
        if (model, itype) not in self.lane.app.latency:
            return 0.0
        return profiled_ms(self.lane.times.predictor.predict_ms, self.profiles, model, itype, batch, stat)

    def snapshot(self, now: float) -> ModelInputs:
        """``ModelLoop.snapshot``: the lane's workers and each member's load since the last tick."""
        lane = self.lane
        interval = max(now - self.last_at if self.last_at is not None else 1.0, 1e-3)
        workers = []
        for wid, (busy, served) in lane.take_samples(now).items():
            w = lane.workers[wid]
            hosted = () if (not w.variant or wid in self.loading) else (w.variant,)
            workers.append(WorkerSnapshot(wid, w.itype, self.hardware.get(w.itype, "cpu"), min(busy / interval, 1.0),
                                          hosted, tuple((w.variant, int(b), float(ms)) for b, ms in served)))
        names = lane.vnames
        snaps = {v: self.windows[v].snapshot(now) for v in names}
        candidates = above_floor([VariantCandidate(v, v, ANY_HARDWARE, 1.0, max(self.load_s, 0.1)) for v in names],
                                 dict(lane.app.variants), {v: self.min_accuracy for v in names})
        return ModelInputs(now=now, interval_s=interval, workers=tuple(workers), variants=candidates,
                           load_qps={v: snaps[v].arrival_qps for v in names},
                           mean_batch={v: snaps[v].mean_batch or 1.0 for v in names},
                           slo_ms={v: lane.qos_ms for v in names},
                           price_per_hour=self.prices, profile=self._profile)

    def tick(self, now: float) -> ModelDecision:
        """One round: decide, then apply its loads ``load_s`` later (unloads are the loads' other
        half here: one slot per worker)."""
        inputs = self.snapshot(now)
        self.last_at = now
        decision, self.state = decide(inputs, self.state, self.params)
        self.states = dict(decision.states)
        self._states_n += 1                         # the state maps kept are of the last states
        for p in decision.placements:
            if p.action == "load" and p.worker in self.lane.workers and p.worker not in self.loading:
                self._load(p.worker, p.variant, now)
        return decision


__all__ = ["ReplayInfaas"]
