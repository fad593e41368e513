"""The getVariant fast path (issue #39's replay speed) against getVariant as it was written before:
:func:`dispatcher.modelless.route` (now a :class:`dispatcher.modelless.Router`, its metadata and each
request's servable variants built once) and :func:`variants.infaas.selection.get_variant` (one
pass per step, the Inactive step over workers ranked once) must return what the list-building
originals below returned, exception for exception, on seeded random cases with ties, NaN loads
and every state (route's workers each once, as the registry and the replay's lane hand them over).
The originals are kept here verbatim as the reference."""
from __future__ import annotations

import math
import random
from typing import Any, Mapping, Sequence

from dispatcher import modelless as ml
from variants.infaas.selection import (Choice, NoVariant, Request, VariantInfo, WorkerLoad, _describe, get_variant,
                                       meets, misses)
from variants.infaas.state_machine import StateKey, VariantState
from variants.naming import SEP, base_name, expand_name
from variants.runtime.executor import ANY_HARDWARE


# -- the reference: route and get_variant before the fast path, verbatim --------------------------

def reference_route(request: Request, variants: Sequence[ml.VariantMeta], workers: Sequence[ml.RouteWorker],
          grid: ml.LatencyGrid, states: Mapping[StateKey, VariantState] | None = None) -> ml.Route:
    """getVariant (INFaaS §4.1) for one query. ``states`` holds the state machine's view of loaded
    instances; a loaded instance without a state counts as Active. Raises :class:`RouteError`."""
    if not variants:
        what = f"model {request.model!r}" if request.model else "the application"
        raise ml.RouteError("NOT_FOUND", f"no variant of {what} is registered", None)
    hws = {w.hardware for w in workers}
    infos = ml.variant_infos(variants, hws or {v.hardware for v in variants if v.hardware != ANY_HARDWARE} or {"cpu"}, grid)
    hw_of = {v.name: v.hardware for v in variants}
    st: dict[StateKey, VariantState] = {}
    loads: dict[str, WorkerLoad] = {}
    for w in workers:
        loads[w.worker] = WorkerLoad(w.worker, w.hardware, w.utilization)
        for name in w.loaded:
            if name not in hw_of:
                continue
            key_name = expand_name(name, w.hardware) if hw_of[name] == ANY_HARDWARE else name
            state = (states or {}).get((name, w.worker), VariantState.ACTIVE)
            st[(key_name, w.worker)] = VariantState.ACTIVE if state is VariantState.INACTIVE else state
    servable = [i for i in infos if meets(request, i)]

    def queue_on_busy() -> ml.Route | None:
        # queue on the least-utilized loaded instance that meets the query (the model loop scales)
        busy = [(w.utilization, w.worker, key[0]) for key, state in st.items() for w in workers
                if key[1] == w.worker and any(i.name == key[0] for i in servable)]
        if not busy:
            return None
        util, worker, name = min(busy)
        info = next(i for i in servable if i.name == name)
        return ml.Route(base_name(name), worker, False, info.latency_at(request.batch))

    try:
        c: Choice = reference_get_variant(request, infos, st, loads)
    except NoVariant as exc:
        if servable and not workers:
            # nothing to run on yet: queue for the best variant, capacity may arrive
            best = min(servable, key=lambda i: (i.latency_at(request.batch), i.name))
            return ml.Route(base_name(best.name), None, True, best.latency_at(request.batch))
        fallback = queue_on_busy()   # every instance that meets it is Overloaded or Interfered
        if fallback is not None:
            return fallback
        closest = base_name(exc.closest) if exc.closest else None
        code = "NOT_FOUND" if closest is None else ("UNAVAILABLE" if servable else "INVALID_ARGUMENT")
        msg = str(exc)
        for i in infos:  # report plain variant names to the user
            if SEP in i.name:
                msg = msg.replace(i.name, base_name(i.name))
        raise ml.RouteError(code, msg, closest) from None
    if c.needs_load and c.worker is not None:
        # a worker runs one query at a time: a second variant of the same model on a worker that
        # already holds one adds no capacity, only load time. Load on demand only into a worker
        # that holds none; otherwise queue on a loaded instance and leave scaling to the model loop
        held = next((w.loaded for w in workers if w.worker == c.worker), frozenset())
        if any(name in hw_of for name in held):
            fallback = queue_on_busy()
            if fallback is not None:
                return fallback
    return ml.Route(base_name(c.variant), c.worker, c.needs_load, c.expected_ms)


def reference_get_variant(
    request: Request,
    variants: Sequence[VariantInfo],
    states: Mapping[StateKey, VariantState],
    loads: Mapping[str, Any],
) -> Choice:
    """INFaaS getVariant (§4.1). ``states`` maps (variant, worker) -> state (missing: Inactive);
    ``loads`` maps worker id -> its utilization and hardware. Ties break by name (deterministic)."""
    ok = [v for v in variants if meets(request, v)]
    by_name = {v.name: v for v in ok}

    # 1. Active instances: least-loaded worker, then fastest variant.
    active: list[tuple[float, float, str, str]] = []
    for (vname, worker), st in states.items():
        v = by_name.get(vname)
        if v is None or st is not VariantState.ACTIVE or worker not in loads:
            continue
        active.append((loads[worker].utilization, v.latency_at(request.batch), vname, worker))
    if active:
        util, lat, vname, worker = min(active)
        return Choice(vname, worker, needs_load=False, expected_ms=lat)

    # 2. Inactive: lowest loading + inference latency, then least-utilized worker of its hardware.
    inactive: list[tuple[float, float, str, str]] = []
    for v in ok:
        total = v.load_latency_ms + v.latency_at(request.batch)
        for w in loads.values():
            if w.hardware == v.hardware and states.get((v.name, w.worker), VariantState.INACTIVE) is VariantState.INACTIVE:
                inactive.append((total, w.utilization, v.name, w.worker))
    if inactive:
        total, util, vname, worker = min(inactive)
        return Choice(vname, worker, needs_load=True, expected_ms=total)

    # 3. Nothing servable: name the closest variant.
    if ok:
        best = min(ok, key=lambda v: (v.latency_at(request.batch), v.name))
        raise NoVariant(
            f"no worker can serve a variant meeting {_describe(request)} now "
            f"(all instances of {', '.join(sorted(by_name))} are overloaded, interfered or lack a "
            f"{best.hardware} worker); closest: {best.name}", closest=best.name)
    candidates = [(misses(request, v), v.name, v) for v in variants]
    candidates = [c for c in candidates if math.isfinite(c[0])]
    what = f"model {request.model}" if request.model else "the application"
    if not candidates:
        raise NoVariant(f"no variant of {what} is registered", closest=None)
    _, _, v = min(candidates, key=lambda c: (c[0], c[1]))
    raise NoVariant(
        f"no variant of {what} meets {_describe(request)}; closest: {v.name} "
        f"(latency {v.latency_at(request.batch):g} ms, accuracy {v.accuracy:g}, max batch {v.max_batch})",
        closest=v.name)


STATES = list(VariantState)
HWS = ["cpu", "gpu", "inferentia"]
NAMES = ["a", "b", "c", "d", "e"]


def _outcome(f: Any) -> Any:
    try:
        return ("ok", repr(f()))            # repr: a NaN latency compares unequal to itself
    except (ml.RouteError, NoVariant) as exc:
        return ("error", type(exc).__name__, getattr(exc, "code", None), str(exc), exc.closest)


def _grid_for(rng: random.Random) -> ml.LatencyGrid:
    table = {(v, hw): tuple(sorted((b, rng.choice([5.0, 10.0, 20.0, 40.0, 80.0, float("nan")] if rng.random() < 0.05
                                                   else [5.0, 10.0, 20.0, 40.0, 80.0]) * b ** 0.5)
                                   for b in (1, 4, 8)))
             for v in NAMES for hw in HWS if rng.random() < 0.8}
    return lambda v, hw: table.get((v, hw), ())


def _case(rng: random.Random
          ) -> tuple[Request, list[ml.VariantMeta], list[ml.RouteWorker], dict[StateKey, VariantState]]:
    metas = [ml.VariantMeta(n, rng.choice(["m", "m", "k"]), rng.choice(HWS + [ANY_HARDWARE]),
                            rng.choice([0.6, 0.7, 0.8, 0.9]), rng.choice([4, 8]), rng.choice([0.0, 100.0, 500.0]))
             for n in rng.sample(NAMES, rng.randint(0, 4))]
    ids = [f"w{i}" for i in range(rng.randint(0, 7))]           # each once, as the registry's keys
    utils = [0.0, 0.1, 0.1, 0.5, 0.9, 1.4] + ([float("nan")] if rng.random() < 0.1 else [])
    workers = [ml.RouteWorker(w, rng.choice(HWS), "t", rng.choice(utils),
                              frozenset(rng.sample(NAMES, rng.choice([0, 0, 1, 1, 2])))) for w in ids]
    states = {(n, w): rng.choice(STATES) for n in NAMES for w in ids if rng.random() < 0.3}
    req = Request(rng.choice([None, None, "m", "k"]), rng.choice([math.inf, math.inf, 30.0, 60.0, 200.0]),
                  rng.choice([0.0, 0.0, 0.7, 0.85]), rng.choice([1, 2, 4, 8, 16]))
    return req, metas, workers, states


def test_route_equals_the_reference_on_random_cases() -> None:
    rng = random.Random(39)
    seen = set()
    for _ in range(3000):
        req, metas, workers, states = _case(rng)
        grid = _grid_for(rng)
        st = states if rng.random() < 0.8 else None
        want = _outcome(lambda: reference_route(req, metas, workers, grid, st))
        assert _outcome(lambda: ml.route(req, metas, workers, grid, st)) == want
        router = ml.Router(metas, ml.route_hardware(metas, workers), grid)
        for _ in range(2):                                          # the second from the router's cache
            assert _outcome(lambda: router.route(req, workers, st)) == want
        seen.add(want[0] if want[0] == "error" else (("needs_load=True" in want[1]), ("worker=None" in want[1])))
    assert seen == {"error", (False, False), (True, False), (True, True)}


def _random_case(rng: random.Random) -> tuple[list[VariantInfo], dict[str, WorkerLoad], dict, Request]:
    """A seeded getVariant case: variants (NaN latencies, empty grids), workers (NaN loads, a
    mislabelled id), states (of workers that left too) and a request."""
    infos = [VariantInfo(rng.choice(NAMES), rng.choice(["m", "k"]), rng.choice(HWS),
                         rng.choice([10.0, 20.0, 50.0] + ([float("nan")] if rng.random() < 0.05 else [])),
                         rng.choice([0.7, 0.8, 0.9]), rng.choice([4, 8]), rng.choice([0.0, 100.0, 110.0]),
                         ((1, 5.0), (4, 10.0)) if rng.random() < 0.5 else ())
             for _ in range(rng.randint(0, 5))]
    ids = [f"w{i}" for i in range(rng.randint(0, 6))]
    utils = [0.0, 0.2, 0.2, 0.7] + ([float("nan")] if rng.random() < 0.1 else [])
    loads = {w: WorkerLoad(w if rng.random() < 0.95 else "w0", rng.choice(HWS), rng.choice(utils)) for w in ids}
    states = {(i.name, w): rng.choice(STATES) for i in infos for w in ids + ["gone"] if rng.random() < 0.3}
    req = Request(rng.choice([None, "m"]), rng.choice([math.inf, 15.0, 60.0]), rng.choice([0.0, 0.75]),
                  rng.choice([1, 4, 8]))
    return infos, loads, states, req


def test_get_variant_equals_the_reference_on_random_cases() -> None:
    rng = random.Random(25)
    kinds = set()
    for _ in range(3000):
        infos, loads, states, req = _random_case(rng)
        want = _outcome(lambda: reference_get_variant(req, infos, states, loads))
        assert _outcome(lambda: get_variant(req, infos, states, loads)) == want
        kinds.add(want[0] if want[0] == "error" else "needs_load=True" in want[1])
    assert kinds == {"error", False, True}


# -- the loads asked for lazily (Router.route's and choose's ``util``) --------------------------------

class _Asked:
    """A worker's load by id, as a caller computing them lazily gives it: kept once computed; the
    workers it was asked for, in order."""

    def __init__(self, loads: Mapping[str, float]) -> None:
        self.loads, self.asked, self.got = loads, [], {}   # type: ignore[var-annotated]

    def __call__(self, wid: str) -> float:
        self.asked.append(wid)
        if wid not in self.got:
            self.got[wid] = self.loads[wid]
        return self.got[wid]  # type: ignore[no-any-return]


def test_route_with_lazy_loads_equals_the_reference_on_random_cases() -> None:
    """The workers' own utilization NaN, each load given by ``util`` when getVariant asks: the
    reference's route over every load, exception for exception; with an Active instance that serves
    the query, only the workers holding one are asked (and when every worker holds a variant, step 2
    is skipped for the loaded instance the query would queue on anyway)."""
    rng = random.Random(3939)
    seen, asked, total = set(), 0, 0
    for _ in range(4000):
        req, metas, workers, states = _case(rng)
        grid = _grid_for(rng)
        st = states if rng.random() < 0.8 else None
        want = _outcome(lambda: reference_route(req, metas, workers, grid, st))
        router = ml.Router(metas, ml.route_hardware(metas, workers), grid)
        blank = [w._replace(utilization=math.nan) for w in workers]
        util = _Asked({w.worker: w.utilization for w in workers})
        assert _outcome(lambda: router.route(req, blank, st, util=util)) == want
        kept = router.state_map(blank, st)
        lat = router.servable(req).latency
        active = {k[1] for k, s in kept.items() if s is VariantState.ACTIVE and k[0] in lat}
        if active:                        # step 1 ranks only the workers holding a servable Active instance
            assert set(util.asked) == active
        asked, total = asked + len(util.got), total + len(workers)
        hold = bool(workers) and all(any(n in router.hw_of for n in w.loaded) for w in workers)
        seen.add((want[0] if want[0] == "error" else (("needs_load=True" in want[1]), ("worker=None" in want[1])),
                  bool(active), hold))
    assert asked < 0.8 * total
    # step 1; a loaded instance queued on, step 2 skipped (every worker holds one) or not
    assert {((False, False), True, False), ((False, False), False, True), ((False, False), False, False)} <= seen
    assert {k for k, _, _ in seen} == {"error", (False, False), (True, False), (True, True)}


def test_choose_with_lazy_loads_equals_the_reference_on_random_cases() -> None:
    """:func:`variants.infaas.selection.choose` given ``util`` (the loads' own utilization NaN) returns
    what the reference getVariant returns over the loads, ties and NaN loads included."""
    from variants.infaas.selection import Servable, choose
    rng = random.Random(2539)
    kinds = set()
    for _ in range(4000):
        infos, loads, states, req = _random_case(rng)
        want = _outcome(lambda: reference_get_variant(req, infos, states, loads))
        blank = {k: WorkerLoad(w.worker, w.hardware, math.nan) for k, w in loads.items()}
        util = _Asked({k: w.utilization for k, w in loads.items()})
        sv = Servable.of(req, [i for i in infos if meets(req, i)])
        assert _outcome(lambda: choose(req, infos, sv, states, blank, util)) == want
        assert _outcome(lambda: choose(req, infos, sv, states, loads)) == want
        kinds.add(want[0] if want[0] == "error" else "needs_load=True" in want[1])
    assert kinds == {"error", False, True}


def reference_busy_fraction(intervals: Any, now: float, horizon_s: float, workers: int) -> float:
    """``busy_fraction`` before its builtins were written out, verbatim."""
    if workers <= 0 or horizon_s <= 0:
        return 0.0
    lo = now - horizon_s
    busy = 0.0
    for s, e in intervals:
        busy += max(0.0, min(e, now) - max(s, lo))
    return min(1.0, busy / (horizon_s * workers))


def test_busy_fraction_equals_the_reference_bit_for_bit() -> None:
    """On seeded intervals with ties at the window's edges, signed zeros, infinities and NaN."""
    rng = random.Random(4039)
    edge = [0.0, -0.0, 1.0, 2.0, 2.5, 3.0, math.inf, -math.inf, math.nan]
    for _ in range(5000):
        now = rng.choice([3.0, 2.0, 0.0, -0.0, 10.0])
        h = rng.choice([2.0, 1.0, 0.0, 0.5])
        ivs = [(rng.choice(edge + [rng.uniform(-1, 12)]), rng.choice(edge + [rng.uniform(-1, 12)]))
               for _ in range(rng.randint(0, 8))]
        n = rng.choice([1, 1, 2, 0])
        want, got = reference_busy_fraction(ivs, now, h, n), ml.busy_fraction(ivs, now, h, n)
        assert repr(got) == repr(want) and (got != got or math.copysign(1, got) == math.copysign(1, want))
