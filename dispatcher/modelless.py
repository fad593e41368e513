"""Model-less queries and offline jobs: the pure decisions behind the dispatcher's INFaaS API
(INFaaS §3.1 "model-less interface", §4.1 getVariant, §5 offline jobs).

* :func:`variant_infos` turns registry variants + latency profiles into the selection metadata of
  :mod:`variants.infaas.selection`, one entry per hardware class a variant can run on (a config model's
  base variant, hardware ``any``, runs on every class: it is expanded to ``name@<hw>``).
* :func:`route` is getVariant for one query over the live workers (least-loaded Active instance;
  else the Inactive variant with the lowest load+inference latency on the least-utilized worker of
  its hardware; else a typed :class:`RouteError` naming the closest variant).
* :func:`busy_fraction` and :func:`offline_may_run` decide when offline work may use the workers
  (INFaaS §5: offline jobs run while utilization stays under 40 %, and are paused -- never
  dropped -- above it).

No I/O, no clock reads: times and loads come in as arguments.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, NamedTuple, Sequence

from variants.runtime.executor import ANY_HARDWARE
from variants.naming import SEP, base_name, expand_name
from variants.infaas.selection import (Choice, NoVariant, Request, Servable, Utilization, VariantInfo, choose,
                                      least_active, meets)
from variants.infaas.state_machine import StateKey, VariantState

#: INFaaS §5: offline jobs are paused while online utilization is at or above 40 %.
OFFLINE_UTILIZATION_THRESHOLD = 0.40


@dataclass(frozen=True)
class VariantMeta:
    """What routing needs to know about a registered variant (from the registry)."""

    name: str
    model: str
    hardware: str              # cpu | gpu | inferentia | any
    accuracy: float
    max_batch: int
    load_latency_ms: float = 0.0
    speed_factor: float = 1.0  # latency relative to its model's base variant (local profiles)


class RouteWorker(NamedTuple):
    """A live worker as routing sees it (a named tuple: one is built per worker per query)."""

    worker: str
    hardware: str
    instance_type: str
    utilization: float                 # its load, :func:`routing_load` (0..1 busy, more when committed ahead);
    #                                    NaN when the caller gives loads lazily (:meth:`Router.route`'s ``util``)
    loaded: frozenset[str]             # variant names loaded on it


@dataclass(frozen=True)
class Route:
    variant: str
    worker: str | None                 # None: no worker yet (the query waits for capacity)
    needs_load: bool
    expected_ms: float


class RouteError(LookupError):
    """No variant can serve the query. ``code``: NOT_FOUND (nothing registered for the
    application/model) or INVALID_ARGUMENT (requirements unmet); ``closest`` names the nearest
    variant, when there is one."""

    def __init__(self, code: str, message: str, closest: str | None) -> None:
        super().__init__(message)
        self.code = code
        self.closest = closest


LatencyGrid = Callable[[str, str], tuple[tuple[int, float], ...]]

#: the largest batch a latency grid holds
GRID_MAX_BATCH = 1024


def grid_batches(max_batch: int) -> list[int]:
    """The batches of a variant's latency grid (:data:`LatencyGrid`): powers of two up to its
    model's ``max_batch`` (at most :data:`GRID_MAX_BATCH`), and that batch itself."""
    top = max(1, min(max_batch, GRID_MAX_BATCH))
    return sorted({1 << i for i in range(top.bit_length()) if (1 << i) <= top} | {top})


def variant_infos(variants: Sequence[VariantMeta], hardware_classes: Iterable[str],
                  grid: LatencyGrid) -> list[VariantInfo]:
    """Selection metadata: one :class:`VariantInfo` per (variant, hardware class it runs on).
    ``grid(variant, hardware)`` gives its profiled (batch, ms) points there (empty: unknown, that
    variant is left out on that hardware). Variants with hardware ``any`` are expanded to
    ``name@hw`` for each class in ``hardware_classes``."""
    hws = sorted(set(hardware_classes))
    out: list[VariantInfo] = []
    for v in variants:
        targets = hws if v.hardware == ANY_HARDWARE else [v.hardware]
        for hw in targets:
            pts = tuple(sorted(grid(v.name, hw)))
            if not pts:
                continue
            name = expand_name(v.name, hw) if v.hardware == ANY_HARDWARE else v.name
            out.append(VariantInfo(name=name, model=v.model, hardware=hw, latency_ms=pts[-1][1],
                                   accuracy=v.accuracy, max_batch=v.max_batch,
                                   load_latency_ms=v.load_latency_ms, batch_latency_ms=pts))
    return out


def route_hardware(variants: Sequence[VariantMeta], workers: Sequence[RouteWorker]) -> set[str]:
    """The hardware classes :func:`route` expands ``any`` variants to: the workers' (none: the
    variants' own, else cpu)."""
    return ({w.hardware for w in workers} or {v.hardware for v in variants if v.hardware != ANY_HARDWARE}
            or {"cpu"})


def route(request: Request, variants: Sequence[VariantMeta], workers: Sequence[RouteWorker],
          grid: LatencyGrid, states: Mapping[StateKey, VariantState] | None = None) -> Route:
    """getVariant (INFaaS §4.1) for one query. ``states`` holds the state machine's view of loaded
    instances; a loaded instance without a state counts as Active. Raises :class:`RouteError`."""
    return Router(variants, route_hardware(variants, workers), grid).route(request, workers, states)


class Router:
    """:func:`route` with its per-variant work done once: the selection metadata of ``variants`` on
    ``hardware_classes`` (:func:`variant_infos`) and, per distinct request, the variants meeting it
    (:class:`variants.infaas.selection.Servable`). A caller routing many queries over the same
    variants and hardware classes (the replay's getVariant) keeps one; ``grid`` must not change
    under it."""

    #: distinct requests whose servable variants are kept (then forgotten all at once)
    MAX_REQUESTS = 4096

    def __init__(self, variants: Sequence[VariantMeta], hardware_classes: Iterable[str], grid: LatencyGrid) -> None:
        self.variants = tuple(variants)
        self.infos = variant_infos(self.variants, hardware_classes, grid)
        self.hw_of = {v.name: v.hardware for v in self.variants}
        self._servable: dict[Request, Servable] = {}
        self._keys: dict[tuple[str, str], str] = {}
        self._routes: dict[tuple[str, str, float], Route] = {}     # routes to loaded instances, made once
        self._seen: _Seen | None = None                                 # the last workers routed over

    def servable(self, request: Request) -> Servable:
        """The variants that meet ``request`` (their names are unique: a variant, or ``name@hw`` of an ``any`` one)."""
        got = self._servable.get(request)
        if got is None:
            if len(self._servable) >= self.MAX_REQUESTS:
                self._servable.clear()
            got = self._servable[request] = Servable.of(request, [i for i in self.infos if meets(request, i)])
        return got

    def _key(self, name: str, hardware: str) -> str:
        """The state map's name of ``name`` loaded on a ``hardware`` worker (``name@hw`` for an ``any`` variant)."""
        k = self._keys.get((name, hardware))
        if k is None:
            k = self._keys[(name, hardware)] = (expand_name(name, hardware) if self.hw_of[name] == ANY_HARDWARE
                                                else name)
        return k

    def _loaded_route(self, name: str, worker: str, ms: float) -> Route:
        """``Route(base_name(name), worker, False, ms)``: a route to a loaded instance (a frozen value,
        made once per distinct one; forgotten all at once past :data:`MAX_REQUESTS`)."""
        got = self._routes.get((name, worker, ms))
        if got is None:
            if len(self._routes) >= self.MAX_REQUESTS:
                self._routes.clear()
            got = self._routes[(name, worker, ms)] = Route(base_name(name), worker, False, ms)
        return got

    def state_map(self, workers: Sequence[RouteWorker],
                  states: Mapping[StateKey, VariantState] | None = None) -> dict[StateKey, VariantState]:
        """The instances getVariant chooses among: (name as the state map keys it, worker) -> its
        state for each registered variant loaded on ``workers`` (no state: Active; Inactive: Active,
        it is loaded). It depends only on each worker's id, hardware and loaded set and on
        ``states``: a caller that knows none of them changed may keep it for :meth:`route`'s ``st``."""
        hw_of, states = self.hw_of, states or {}
        st: dict[StateKey, VariantState] = {}
        active, inactive, keys = VariantState.ACTIVE, VariantState.INACTIVE, self._keys
        for w in workers:
            wid = w.worker
            for name in w.loaded:
                if name not in hw_of:
                    continue
                state = states.get((name, wid), active)
                key = keys.get((name, w.hardware)) or self._key(name, w.hardware)
                st[(key, wid)] = active if state is inactive else state
        return st

    def route(self, request: Request, workers: Sequence[RouteWorker],
              states: Mapping[StateKey, VariantState] | None = None,
              st: Mapping[StateKey, VariantState] | None = None, util: Utilization | None = None) -> Route:
        """:func:`route` for one query over ``workers`` (each worker id once: the registry's keys; the
        same list again, as the replay passes its kept one, must hold the same workers);
        ``st``: :meth:`state_map` of these workers and ``states``, when the caller kept it; ``util``:
        each worker's load by id, computed only for the workers getVariant ranks
        (:func:`variants.infaas.selection.choose`; the workers' ``utilization`` is then not read)
        and kept by the caller once computed (a worker may be asked twice)."""
        if not self.variants:
            what = f"model {request.model!r}" if request.model else "the application"
            raise RouteError("NOT_FOUND", f"no variant of {what} is registered", None)
        if st is None:
            st = self.state_map(workers, states)
        seen = self._seen
        if seen is None or seen.workers is not workers:
            seen = self._seen = _Seen(workers, {w.worker: w for w in workers})
        loads = seen.by_id
        if util is None:
            util = _utilization(loads)
        hw_of = self.hw_of
        sv = self.servable(request)
        lat = sv.latency                       # name -> latency at the request's batch

        def queue_on_busy() -> Route | None:
            # queue on the least-utilized loaded instance that meets the query (the model loop scales)
            best: tuple[float, str, str] | None = None
            for key in st:
                if key[0] in lat:
                    w = loads[key[1]]
                    t = (util(w.worker), w.worker, key[0])
                    if best is None or t < best:
                        best = t
            if best is None:
                return None
            _, worker, name = best
            return self._loaded_route(name, worker, lat[name])

        got = least_active(sv, st, loads, util)     # getVariant's step 1 (choose's own)
        if got is not None:
            return self._loaded_route(got[2], got[3], got[1])
        if seen.all_hold is None:              # every worker holds a variant (kept with the list)
            seen.all_hold = bool(workers) and all(any(name in hw_of for name in w.loaded) for w in workers)
        if seen.all_hold:
            # every worker holds a variant: whichever step 2 picks, or none, the query queues on a
            # loaded instance when there is one (below), so the loads step 2 ranks are not needed
            fallback = queue_on_busy()
            if fallback is not None:
                return fallback
        try:
            c: Choice = choose(request, self.infos, sv, st, loads, util)
        except NoVariant as exc:
            servable = sv.ok
            if servable and not workers:
                # nothing to run on yet: queue for the best variant, capacity may arrive
                best = min(servable, key=lambda i: (i.latency_at(request.batch), i.name))
                return Route(base_name(best.name), None, True, best.latency_at(request.batch))
            fallback = queue_on_busy()   # every instance that meets it is Overloaded or Interfered
            if fallback is not None:
                return fallback
            closest = base_name(exc.closest) if exc.closest else None
            code = "NOT_FOUND" if closest is None else ("UNAVAILABLE" if servable else "INVALID_ARGUMENT")
            msg = str(exc)
            for i in self.infos:  # report plain variant names to the user
                if SEP in i.name:
                    msg = msg.replace(i.name, base_name(i.name))
            raise RouteError(code, msg, closest) from None
        if c.needs_load and c.worker is not None:
            # a worker runs one query at a time: a second variant of the same model on a worker that
            # already holds one adds no capacity, only load time. Load on demand only into a worker
            # that holds none; otherwise queue on a loaded instance and leave scaling to the model loop
            held = loads[c.worker].loaded if c.worker in loads else frozenset()
            if any(name in hw_of for name in held):
                fallback = queue_on_busy()
                if fallback is not None:
                    return fallback
        return Route(base_name(c.variant), c.worker, c.needs_load, c.expected_ms)


@dataclass
class _Seen:
    """The last ``workers`` :meth:`Router.route` was given (held, so its id is not reused; a caller
    passing the same list again has not changed it), them by id, and whether each holds a registered
    variant (None until asked)."""

    workers: Sequence[RouteWorker]
    by_id: dict[str, RouteWorker]
    all_hold: bool | None = None


def _utilization(loads: Mapping[str, RouteWorker]) -> Utilization:
    """The route workers' own utilization by id."""
    return lambda wid: loads[wid].utilization


# -- offline jobs ------------------------------------------------------------------------------------

def busy_fraction(intervals: Iterable[tuple[float, float]], now: float, horizon_s: float, workers: int) -> float:
    """Utilization of ``workers`` over ``[now - horizon_s, now]``: summed busy time of the
    (start, end) service intervals inside that window / (horizon · workers); 0 with no workers."""
    if workers <= 0 or horizon_s <= 0:
        return 0.0
    lo = now - horizon_s
    busy = 0.0
    for s, e in intervals:     # busy += max(0.0, min(e, now) - max(s, lo)), the builtins' picks written out
        x = (now if now < e else e) - (lo if lo > s else s)
        busy += x if x > 0.0 else 0.0
    return min(1.0, busy / (horizon_s * workers))


def routing_load(intervals: Iterable[tuple[float, float]], now: float, horizon_s: float,
                 busy_until: float | None, waiting_ms: float = 0.0) -> float:
    """The load getVariant ranks a worker by (INFaaS §4.1: "the least-loaded worker"): its busy
    fraction over the last ``horizon_s`` (the finished calls' ``intervals``, :func:`busy_fraction`)
    plus the work committed to it, in the same unit: what its call under way still has to run by
    its prediction (``busy_until``, seconds; None when idle) and ``waiting_ms``, its share of the
    queries waiting for the variants it hosts (:func:`waiting_share_ms`). Above 1 when the worker is
    committed past the horizon.

    Replaying INFaaS on the resnet family (issue #25): with the finished calls alone, every query
    admitted while a worker's first call ran saw it unloaded, and a burst piled onto the fastest
    variant's worker while five resnet-152 workers stood idle; with the call under way but not the
    queue, once every worker was busy the fast variants' queues grew unseen (67.46 % within the SLO
    at the budget's capacity)."""
    if horizon_s <= 0:
        return 0.0
    ahead = max(busy_until - now, 0.0) if busy_until is not None else 0.0
    return busy_fraction(intervals, now, horizon_s, 1) + (ahead + waiting_ms / 1000.0) / horizon_s


def waiting_share_ms(hosted: Iterable[str], waiting: Mapping[str, int], hosts: Mapping[str, int],
                     ms: Callable[[str], float]) -> float:
    """A worker's share of the work waiting for the variants it ``hosted``: for each, the queries
    waiting for it (``waiting``) times its predicted ms on this worker at batch 1 (``ms``), split
    evenly over the live workers hosting it (``hosts``)."""
    return sum(waiting.get(v, 0) * ms(v) / max(hosts.get(v, 1), 1) for v in hosted if waiting.get(v, 0))


def offline_may_run(online_utilization: float, threshold: float = OFFLINE_UTILIZATION_THRESHOLD) -> bool:
    """INFaaS §5: offline work proceeds only while online utilization is below the threshold."""
    return online_utilization < threshold


def chunks(total_rows: int, size: int) -> list[tuple[int, int]]:
    """[start, end) row ranges of at most ``size`` rows covering ``total_rows``."""
    if size < 1:
        raise ValueError("chunk size must be >= 1")
    return [(s, min(s + size, total_rows)) for s in range(0, max(total_rows, 0), size)]

