"""The model-autoscaler greedy heuristic (INFaaS §4.2.2), the sub-second stand-in for the ILP of
§4.2.1 (:mod:`variants.infaas.autoscale_ilp`); same problem, same plan type.

Per architecture, every decision interval (INFaaS §5: 1 s):

* **Scale up** when the headroom (saturation capacity of the running instances / load) is below
  the slack-threshold (1.05, §5). Candidate actions, each scored with the ILP's objective
  C (delta + lambda T_load max(delta, 0)):

  - *replicate* a running SLO-meeting variant: ceil(deficit / Q) more instances;
  - *upgrade*: replace the running instances by a variant of higher throughput that meets the
    SLO (constraint 2), ceil(required / Q) instances of it;
  - *fill* (our addition, INFaaS's getVariant for Inactive variants applied to the deficit):
    add the mix of SLO-meeting variants picked one step at a time by the lowest cost per qps
    still missing.

  The cheapest action that fits the free resources of its hardware (constraint 3) wins; when
  none fits, as much as fits is loaded and the rest is reported as ``unmet_qps`` so the
  controller can invoke VM-level autoscaling (§4.2.2 step d).
* **Scale down** when the load is covered with headroom: remove replicas, or *downgrade* to a
  cheaper fill for the load. The action waits until a scale-down has been possible for T_v, the
  loading latency of the variant being removed (§4.2.2 "Scaling down algorithm"); the timer lives
  in :class:`GreedyState`, time comes in as ``now`` (no clock reads).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from variants.infaas.autoscale_ilp import QPS_TOL, ScalingPlan, ScalingProblem, ScalingVariant, plan_from_counts

_EPS = QPS_TOL / 2  # qps and resource comparisons: as the ILP, stricter than the feasibility check
_COST_EPS = 1e-12   # a scale-down must save money; costs are $/s, so no qps-sized tolerance here


def _replicas(need_qps: float, q: float) -> int:
    """Instances of saturation ``q`` needed for ``need_qps`` (0 when there is nothing to cover)."""
    return 0 if need_qps <= _EPS else max(1, math.ceil(need_qps / q - 1e-9))


@dataclass(frozen=True)
class GreedyState:
    """Scale-down timers: architecture -> time since when a scale-down has been possible."""

    down_since: Mapping[str, float] = field(default_factory=dict)


def _fits(v: ScalingVariant, k: int, free: Mapping[str, Mapping[str, float]]) -> bool:
    pool = free.get(v.hardware)
    if pool is None:
        return True
    return all(amount * k <= pool[r] + _EPS for r, amount in v.resources.items() if r in pool)


def _max_fit(v: ScalingVariant, free: Mapping[str, Mapping[str, float]]) -> float:
    pool = free.get(v.hardware)
    best = math.inf
    for r, amount in v.resources.items():
        if pool is not None and r in pool and amount > 0:
            best = min(best, math.floor(pool[r] / amount + _EPS))
    return best


def _take(v: ScalingVariant, k: int, free: dict[str, dict[str, float]]) -> None:
    pool = free.get(v.hardware)
    if pool is None:
        return
    for r, amount in v.resources.items():
        if r in pool:
            pool[r] -= amount * k


def _weight(v: ScalingVariant, lam: float) -> float:
    return v.cost_per_second * (1.0 + lam * v.load_latency_s)


def fill_greedy(
    variants: Sequence[ScalingVariant],
    need_qps: float,
    free: Mapping[str, Mapping[str, float]] | None = None,
    lam: float = 0.0,
) -> tuple[dict[str, int], float]:
    """Cover ``need_qps`` with new instances of ``variants`` (all assumed SLO-meeting), greedily.

    Each step adds the variant with the lowest weighted cost C(1 + lambda T_load) per qps it still
    covers, min(Q, remaining); redundant instances are then dropped (most expensive first), and
    the result is compared with the best single-variant cover. Returns (counts, qps left
    uncovered because resources ran out).
    """
    base = {hw: dict(p) for hw, p in (free or {}).items()}
    cands = sorted(variants, key=lambda v: v.name)
    options: list[tuple[float, dict[str, int], float]] = []

    # Mixed fill, one cheapest-per-covered-qps step at a time.
    pool = {hw: dict(p) for hw, p in base.items()}
    counts: dict[str, int] = {}
    remaining = need_qps
    while remaining > _EPS:
        best: tuple[float, str] | None = None
        pick: ScalingVariant | None = None
        for v in cands:
            if not _fits(v, 1, pool):
                continue
            score = _weight(v, lam) / min(v.saturation_qps, remaining)
            if best is None or (score, v.name) < best:
                best, pick = (score, v.name), v
        if pick is None:
            break
        # While remaining >= Q of the pick, its score is constant and the others' can only rise.
        k = max(1, int(remaining // pick.saturation_qps))
        k = int(min(k, _max_fit(pick, pool)))
        counts[pick.name] = counts.get(pick.name, 0) + k
        _take(pick, k, pool)
        remaining -= k * pick.saturation_qps
    by_name = {v.name: v for v in cands}
    for v in sorted(cands, key=lambda v: (-_weight(v, lam), v.name)):  # drop redundant instances
        while counts.get(v.name, 0) > 0 and remaining + v.saturation_qps <= _EPS:
            counts[v.name] -= 1
            remaining += v.saturation_qps
    counts = {n: c for n, c in counts.items() if c > 0}
    options.append((sum(_weight(by_name[n], lam) * c for n, c in counts.items()), counts, max(remaining, 0.0)))

    # Best single-variant cover.
    for v in cands:
        k = _replicas(need_qps, v.saturation_qps)
        if k > 0 and _fits(v, k, base):
            options.append((_weight(v, lam) * k, {v.name: k}, 0.0))
    # Fewest qps left uncovered first, then the cheapest.
    _, best_counts, left = min(options, key=lambda o: (o[2] > _EPS, o[2], o[0]))
    return best_counts, left


def _free_resources(problem: ScalingProblem, counts: Mapping[str, int]) -> dict[str, dict[str, float]]:
    free = {hw: dict(p) for hw, p in problem.capacity.items()}
    for v in problem.variants:
        _take(v, counts.get(v.name, 0), free)
    return free


def _action_objective(problem: ScalingProblem, deltas: Mapping[str, int], by_name: Mapping[str, ScalingVariant]) -> float:
    return sum(by_name[n].cost_per_second * (d + problem.lam * by_name[n].load_latency_s * max(d, 0))
               for n, d in deltas.items())


def _fits_deltas(deltas: Mapping[str, int], by_name: Mapping[str, ScalingVariant],
                 free: Mapping[str, Mapping[str, float]]) -> bool:
    pool = {hw: dict(p) for hw, p in free.items()}
    for n, d in deltas.items():
        _take(by_name[n], d, pool)
    return all(x >= -_EPS for p in pool.values() for x in p.values())


def greedy_scale(
    problem: ScalingProblem,
    now: float,
    state: GreedyState = GreedyState(),
) -> tuple[ScalingPlan, GreedyState]:
    """One Model-Autoscaler decision (INFaaS §4.2.2) for every architecture of ``problem``.
    Returns the plan (target counts + Load/Unload actions) and the next timer state."""
    t0 = time.perf_counter()
    by_name = {v.name: v for v in problem.variants}
    counts = {v.name: int(problem.running.get(v.name, 0)) for v in problem.variants}
    free = _free_resources(problem, counts)
    down_since = dict(state.down_since)
    order = sorted(problem.models(), key=lambda m: (-problem.load_qps.get(m, 0.0), m))
    for m in order:
        vs = [v for v in problem.variants if v.model == m]
        ok = [v for v in vs if problem.meets_slo(v)]
        need = problem.required(m)
        cap = sum(v.saturation_qps * counts[v.name] for v in vs)
        running = [v for v in vs if counts[v.name] > 0]
        options: list[tuple[float, int, dict[str, int]]] = []  # (objective, #actions, deltas)

        if cap < need - _EPS:  # ---- scale up (headroom below slack-threshold)
            down_since.pop(m, None)
            deficit = need - cap
            for v in running:  # replicate
                if problem.meets_slo(v):
                    options.append((0.0, 1, {v.name: _replicas(deficit, v.saturation_qps)}))
            top_q = max((v.saturation_qps for v in running), default=0.0)
            for v in ok:  # upgrade (replace the running instances)
                if v.saturation_qps > top_q:
                    d = {r.name: -counts[r.name] for r in running}
                    d[v.name] = d.get(v.name, 0) + _replicas(need, v.saturation_qps)
                    options.append((0.0, len(d), d))
            fill, left = fill_greedy(ok, deficit, free, problem.lam)  # fill the deficit
            if left <= _EPS and fill:
                options.append((0.0, len(fill), fill))
            options = [(_action_objective(problem, d, by_name), n, d) for _, n, d in options
                       if _fits_deltas(d, by_name, free)]
            if options:
                _, _, chosen = min(options, key=lambda o: (o[0], o[1], sorted(o[2].items())))
            else:  # constraint (3) binds: load what fits, report the rest (VM autoscaling)
                chosen = fill
            for n, d in chosen.items():
                counts[n] += d
                _take(by_name[n], d, free)
            continue

        # ---- scale down (remove replicas or downgrade), after T_v
        for v in running:  # remove replicas
            r = min(counts[v.name], int((cap - need + _EPS) // v.saturation_qps))
            if r > 0:
                options.append((0.0, 1, {v.name: -r}))
        own = {hw: dict(p) for hw, p in free.items()}
        for v in running:
            _take(v, -counts[v.name], own)
        fill, left = fill_greedy(ok, need, own, problem.lam)  # downgrade: cheapest cover from scratch
        if left <= _EPS:
            d = {v.name: -counts[v.name] for v in running}
            for n, k in fill.items():
                d[n] = d.get(n, 0) + k
            d = {n: k for n, k in d.items() if k != 0}
            if d:
                options.append((0.0, len(d), d))
        options = [(_action_objective(problem, d, by_name), n, d) for _, n, d in options]
        options = [o for o in options if o[0] < -_COST_EPS]
        if not options:
            down_since.pop(m, None)
            continue
        _, _, chosen = min(options, key=lambda o: (o[0], o[1], sorted(o[2].items())))
        since = down_since.setdefault(m, now)
        t_v = max(by_name[n].load_latency_s for n, d in chosen.items() if d < 0)
        if now - since < t_v:
            continue  # wait T_v before scaling down
        down_since.pop(m, None)
        for n, d in chosen.items():
            counts[n] += d
            _take(by_name[n], d, free)
    ms = (time.perf_counter() - t0) * 1000.0
    return plan_from_counts(problem, counts, solver="greedy", solve_ms=ms), GreedyState(down_since=down_since)
