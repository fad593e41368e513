"""One accuracy allocation (Proteus §4 and §3's request router): the accuracy plan for β x demand,
spare workers given the most accurate variant they can run, and each model's queries split over the
workers that host one of its variants with headroom (pure).

Shared by the accuracy simulator (:mod:`sim.accuracy_sim`, policy ``proteus``) and the daemon's model
loop (:func:`variants.accuracy.plan_round.accuracy_round`), so the replay judges the decision the daemon
makes.

- :func:`variants.accuracy.planner.plan_accuracy` chooses a variant per worker and serves the most
  demand, then the most accurately, then with the fewest swaps; it is given ``beta`` x the measured
  demand (Proteus's demand multiplier β = 1.05, its artifact's default) so a plan is not sized to the
  last second's rate exactly;
- workers the plan leaves empty host the most accurate variant of their type
  (:func:`variants.accuracy.spare_workers.fill_spare`): they are paid for anyway, and they absorb the next burst;
- :func:`headroom_routing` splits the measured demand (not β x it) over what is placed.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from variants.accuracy.planner import AccuracyPlan, VariantProfile, capacity, plan_accuracy
from variants.accuracy.spare_workers import fill_spare

#: Proteus's demand multiplier β (its artifact's default, appendix "hyper-parameters")
BETA = 1.05


@dataclass(frozen=True)
class Allocation:
    plan: AccuracyPlan                              # the planner's answer (before spare workers)
    placement: dict[str, str | None]                # worker -> variant it hosts (spare workers filled)
    routing: dict[str, dict[str, float]]            # model -> worker -> fraction of its queries
    demand_qps: dict[str, float] = field(default_factory=dict)   # the measured demand (the plan's is β x it)

    def unmet_qps(self) -> dict[str, float]:
        """Per model, the measured demand the plan cannot serve (q/s; 0 when served): the shortfall
        below the load itself, not below β x it (what the fleet's capacity hint acts on)."""
        return {m: max(0.0, d - self.plan.served_qps.get(m, 0.0)) for m, d in self.demand_qps.items()}


def headroom_routing(workers: Mapping[str, tuple[float, float]], demand_qps: float, beta: float = BETA
                     ) -> dict[str, float]:
    """Fractions of one model's queries over the workers that host one of its variants, each given
    as (accuracy, capacity q/s), for ``demand_qps``: the most accurate variants take the demand
    first, as the accuracy plan does (Proteus §4), but each worker only up to ``capacity / beta``
    while others have room (a worker loaded to its full capacity queues past its SLO on every
    burst of arrivals); within one accuracy, in proportion to capacity. Demand beyond every
    worker's ``capacity / beta`` is spread in proportion to the headroom left. Empty when no
    worker has capacity."""
    live = {w: (a, c) for w, (a, c) in workers.items() if c > 0}
    if not live:
        return {}
    if demand_qps <= 0:
        total = sum(c for _, c in live.values())
        return {w: c / total for w, (_, c) in sorted(live.items())}
    load: dict[str, float] = {w: 0.0 for w in live}
    left = demand_qps
    for acc in sorted({a for a, _ in live.values()}, reverse=True):
        level = {w: c / beta for w, (a, c) in live.items() if a == acc}
        room = sum(level.values())
        take = min(left, room)
        for w, c in level.items():
            load[w] += take * c / room
        left -= take
        if left <= 0:
            break
    if left > 0:
        head = {w: c - load[w] for w, (_, c) in live.items()}
        room = sum(head.values())
        for w, h in head.items():
            load[w] += min(left, room) * h / room if room > 0 else 0.0
    total = sum(load.values())
    return {w: x / total for w, x in sorted(load.items()) if x > 0}


def most_accurate_by_type(variants: Sequence[VariantProfile], types: Sequence[str], slo_ms: float) -> dict[str, str]:
    """Per instance type, the most accurate of ``variants`` that has a batch within SLO/2 there."""
    best: dict[str, str] = {}
    for v in sorted(variants, key=lambda v: (v.accuracy, v.variant)):    # the most accurate placeable, last wins
        for t in set(types):
            if capacity(v.latency_ms.get(t, {}), slo_ms) is not None:
                best[t] = v.variant
    return best


def allocate(workers: Mapping[str, str], variants: Sequence[VariantProfile], demand_qps: Mapping[str, float],
             slo_ms: Mapping[str, float], current: Mapping[str, str | None], beta: float = BETA,
             min_accuracy: Mapping[str, float] | None = None, time_limit_s: float | None = None) -> Allocation:
    """The allocation for ``demand_qps`` (measured, per model) over ``workers`` (id -> type) with
    ``variants`` of every model; ``current``: what each worker hosts now. Spare workers host the most
    accurate variant of the model with the most demand."""
    target = {m: max(q, 1e-6) * beta for m, q in demand_qps.items()}
    kw = {} if time_limit_s is None else {"time_limit_s": time_limit_s}
    plan = plan_accuracy(workers, variants, target, slo_ms, min_accuracy=min_accuracy, current=current, **kw)
    mins = dict(min_accuracy or {})
    spare = max(sorted(demand_qps), key=lambda m: demand_qps[m]) if demand_qps else None
    placement = dict(plan.placement)
    if spare is not None:
        allowed = [v for v in variants if v.model == spare and v.accuracy >= mins.get(spare, 0.0)]
        placement = fill_spare(placement, workers, most_accurate_by_type(allowed, list(workers.values()), slo_ms[spare]))
    by_name = {v.variant: v for v in variants}
    routing: dict[str, dict[str, float]] = {}
    for m, q in demand_qps.items():
        hosts = {}
        for w, v in placement.items():
            p = by_name.get(v) if v is not None else None
            if p is not None and p.model == m and (c := capacity(p.latency_ms.get(workers[w], {}), slo_ms[m])) is not None:
                hosts[w] = (p.accuracy, c[1])
        fr = headroom_routing(hosts, q, beta)
        if fr:
            routing[m] = fr
    return Allocation(plan, placement, routing, dict(demand_qps))


__all__ = ["Allocation", "BETA", "allocate", "headroom_routing", "most_accurate_by_type"]
