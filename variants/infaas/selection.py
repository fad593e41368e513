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
from typing import Mapping, Sequence

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
    loads: Mapping[str, WorkerLoad],
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
