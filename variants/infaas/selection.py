"""getVariant for an arriving query (INFaaS §4.1 "Case I: On arrival of a query").

1. An Active variant instance that meets the query's requirements (latency SLO, minimum accuracy,
   batch size) -> the least-loaded worker running it (no loading latency).
2. Else an Inactive variant meeting them, the one with the lowest loading + inference latency,
   placed on the least-utilized worker of its target hardware (the query waits for the load).
   Overloaded and Interfered instances are never chosen (§4.1 "Mitigating performance
   degradation").
3. Else :class:`NoVariant`, naming the closest variant the system has (§4.1: "INFaaS suggests a
   variant that can achieve the closest target accuracy and/or latency").

Pure: the metadata (variants, states, worker loads) comes in as plain data.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping, Protocol, Sequence

from variants.infaas.state_machine import StateKey, VariantState


@dataclass(frozen=True)
class VariantInfo:
    """Static metadata of a variant (INFaaS §3.2 Variant-Profiler / Metadata Store)."""

    name: str
    model: str                     # model architecture, e.g. "resnet50"
    hardware: str                  # "cpu" | "gpu" | "inferentia"
    latency_ms: float              # profiled inference latency at max_batch
    accuracy: float = 1.0
    max_batch: int = 1
    load_latency_ms: float = 0.0
    batch_latency_ms: tuple[tuple[int, float], ...] = ()   # optional profile grid (batch, ms)

    def latency_at(self, batch: int) -> float:
        """Profiled latency for ``batch``, rounded up to the profile grid (INFaaS §5 profiles
        batch 1..64 in powers of two); without a grid, the latency at max_batch."""
        for b, ms in sorted(self.batch_latency_ms):
            if b >= batch:
                return ms
        return self.latency_ms


@dataclass(frozen=True)
class Request:
    """A query's requirements (INFaaS §3.1 online_query: latency and accuracy; batch size)."""

    model: str | None = None       # None: any architecture of the application
    latency_slo_ms: float = math.inf
    min_accuracy: float = 0.0
    batch: int = 1


class Load(Protocol):
    """A worker's load as getVariant reads it (:class:`WorkerLoad`, or the dispatcher's route workers)."""

    @property
    def worker(self) -> str: ...
    @property
    def hardware(self) -> str: ...
    @property
    def utilization(self) -> float: ...


@dataclass(frozen=True)
class WorkerLoad:
    worker: str
    hardware: str
    utilization: float             # 0..1, from the monitoring daemon


@dataclass(frozen=True)
class Choice:
    variant: str
    worker: str
    needs_load: bool               # True when the variant is Inactive on that worker
    expected_ms: float             # inference latency (+ loading latency when needs_load)


class NoVariant(LookupError):
    """No variant can serve the request; ``closest`` names the nearest miss (or None)."""

    def __init__(self, message: str, closest: str | None) -> None:
        super().__init__(message)
        self.closest = closest


#: a relative shortfall this small is rounding, not a miss: a pipeline step's own budget is the SLO
#: less the time spent, and 0.4 - 0.3 s is 0.10000000000000003 s (a 50 ms variant "missed" 49.99999 ms)
MISS_TOL = 1e-9


def misses(request: Request, v: VariantInfo) -> float:
    """How far ``v`` misses the request: sum of relative shortfalls (0 when it meets it, to
    :data:`MISS_TOL`)."""
    if request.model is not None and v.model != request.model:
        return math.inf
    lat = v.latency_at(request.batch)
    miss = 0.0
    if math.isfinite(request.latency_slo_ms):
        if request.latency_slo_ms <= 0:
            miss += math.inf
        elif lat / request.latency_slo_ms - 1.0 > MISS_TOL:
            miss += lat / request.latency_slo_ms - 1.0
    if request.min_accuracy > 0:
        miss += max(0.0, (request.min_accuracy - v.accuracy) / request.min_accuracy)
    miss += max(0.0, request.batch / max(v.max_batch, 1) - 1.0)
    return miss


def meets(request: Request, v: VariantInfo) -> bool:
    return misses(request, v) == 0.0


def _describe(request: Request) -> str:
    parts = []
    if math.isfinite(request.latency_slo_ms):
        parts.append(f"latency <= {request.latency_slo_ms:g} ms")
    if request.min_accuracy > 0:
        parts.append(f"accuracy >= {request.min_accuracy:g}")
    parts.append(f"batch {request.batch}")
    return ", ".join(parts)


def get_variant(
    request: Request,
    variants: Sequence[VariantInfo],
    states: Mapping[StateKey, VariantState],
    loads: Mapping[str, Load],
) -> Choice:
    """INFaaS getVariant (§4.1). ``states`` maps (variant, worker) -> state (missing: Inactive);
    ``loads`` maps worker id -> its utilization and hardware. Ties break by name (deterministic)."""
    ok = [v for v in variants if meets(request, v)]
    return choose(request, variants, Servable.of(request, ok), states, loads)


@dataclass(frozen=True)
class Servable:
    """The variants that meet one request, with what getVariant reads of them at its batch: built
    once per (request, variants) by a caller that routes many queries alike
    (:class:`dispatcher.modelless.Router`)."""

    ok: tuple[VariantInfo, ...]
    latency: Mapping[str, float]                   # name -> latency at the batch (the last of a name)
    totals: tuple[tuple[float, VariantInfo], ...]  # (load + inference latency, variant), in ``ok``'s order
    nan: bool = False                              # a total is NaN

    @staticmethod
    def of(request: Request, ok: Sequence[VariantInfo]) -> "Servable":
        """``ok``: the variants that meet ``request`` (:func:`meets`), in the caller's order."""
        lat = [v.latency_at(request.batch) for v in ok]
        totals = tuple((v.load_latency_ms + x, v) for v, x in zip(ok, lat))
        return Servable(tuple(ok), {v.name: x for v, x in zip(ok, lat)}, totals, any(t != t for t, _ in totals))


#: a worker's utilization by id, computed when a step ranks it (:func:`choose`'s ``util``)
Utilization = Callable[[str], float]


def choose(request: Request, variants: Sequence[VariantInfo], servable: Servable,
           states: Mapping[StateKey, VariantState], loads: Mapping[str, Load],
           util: Utilization | None = None) -> Choice:
    """:func:`get_variant` given the variants that meet ``request`` (``servable``): the least of
    the same tuples, taken in one pass each instead of built into lists.

    ``util``: each worker's utilization by id, asked for only when a step ranks that worker (then
    the loads' own ``utilization`` is not read; ``loads`` gives the workers and their hardware). Step
    1 asks for the workers holding an Active instance of a servable variant, and only when there is
    one; step 2 for every worker. A caller whose loads cost something to compute (each is a sum over
    the worker's recent calls) computes only those; it should keep each one it computed, as a step
    may ask twice."""
    ok, lat = servable.ok, servable.latency
    if util is None:
        util = _own(loads)
    # 1. Active instances: least-loaded worker, then fastest variant.
    best = least_active(servable, states, loads, util)
    if best is not None:
        return Choice(best[2], best[3], needs_load=False, expected_ms=best[1])

    # 2. Inactive: lowest loading + inference latency, then least-utilized worker of its hardware.
    got = _least_inactive(servable, states, loads, util)
    if got is not None:
        total, _, vname, worker = got
        return Choice(vname, worker, needs_load=True, expected_ms=total)

    # 3. Nothing servable: name the closest variant.
    if ok:
        near = min(ok, key=lambda v: (v.latency_at(request.batch), v.name))
        raise NoVariant(
            f"no worker can serve a variant meeting {_describe(request)} now "
            f"(all instances of {', '.join(sorted(lat))} are overloaded, interfered or lack a "
            f"{near.hardware} worker); closest: {near.name}", closest=near.name)
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


def least_active(servable: Servable, states: Mapping[StateKey, VariantState], loads: Mapping[str, Load],
                 util: Utilization) -> tuple[float, float, str, str] | None:
    """getVariant's step 1 (:func:`choose`): the least (utilization, inference ms, variant, worker)
    over the Active instances of the servable variants on ``loads``' workers; None when there is none
    (then no utilization was asked for)."""
    lat = servable.latency
    best: tuple[float, float, str, str] | None = None
    active = VariantState.ACTIVE
    for key, st in states.items():
        if st is not active:
            continue
        ms = lat.get(key[0])
        if ms is None:
            continue
        if key[1] not in loads:
            continue
        t = (util(key[1]), ms, key[0], key[1])
        if best is None or t < best:
            best = t
    return best


def _own(loads: Mapping[str, Load]) -> Utilization:
    """The loads' own utilization by worker id."""
    return lambda wid: loads[wid].utilization


def _least_inactive(servable: Servable, states: Mapping[StateKey, VariantState],
                    loads: Mapping[str, Load], util: Utilization) -> tuple[float, float, str, str] | None:
    """The least (load + inference ms, utilization, variant, worker) over the variants' Inactive
    instances: each variant on each worker of its hardware that does not hold it. Workers are taken
    by (utilization, id), so each variant's first such worker is its least; a variant whose total
    is above the best so far is passed over (its every tuple is greater). With a NaN total or
    utilization (no order: the first NaN tuple would stay least) every pair is compared in the
    order a flat minimum over the list takes them."""
    inactive = VariantState.INACTIVE
    best: tuple[float, float, str, str] | None = None
    totals = servable.totals
    utils = [(util(wid), w) for wid, w in loads.items()]
    if servable.nan or any(u != u for u, _ in utils):
        for total, v in totals:
            for u, w in utils:
                if w.hardware == v.hardware and states.get((v.name, w.worker), inactive) is inactive:
                    t = (total, u, v.name, w.worker)
                    if best is None or t < best:
                        best = t
        return best
    ranked = sorted(((u, w.worker, w.hardware) for u, w in utils))
    for total, v in totals:
        if best is not None and total > best[0]:
            continue
        for util, wid, hw in ranked:
            if hw == v.hardware and states.get((v.name, wid), inactive) is inactive:
                t = (total, util, v.name, wid)
                if best is None or t < best:
                    best = t
                break
    return best
