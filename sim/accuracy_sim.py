"""Accuracy scaling on a virtual clock: a fixed pool serving one application whose queries any of its
variants may answer, the variants placed and the queries routed by an allocation policy, each worker
batching its queue (Proteus §3-§6: the Resource Manager, the request router, the workers).

Decisions come from the shared pure functions: placement and routing from
:func:`variants.accuracy.planner.plan_accuracy` (Proteus §4), query assignment from
:class:`dispatcher.accuracy.plan_router.PlanRouter`, batching from :func:`variants.accuracy.adaptive_batching.batch_step`
(Proteus §5). Allocation policies (Proteus §6.1 baselines, on the same pool):

- ``proteus``: :func:`variants.accuracy.allocation.allocate` (the MILP over every variant for β × the
  measured demand, spare workers, headroom routing: what the daemon's model loop runs), replanned when :func:`variants.accuracy.trigger.replan` says (a burst at once, else on a timer);
- ``no_scaling`` (Clipper-HA): the most accurate variant on every worker, routed by the same MILP;
  queries beyond its capacity miss;
- ``clipper_ht``: the least accurate (fastest) variant everywhere;
- ``slackfit`` (SuperServe §4.2, :mod:`variants.accuracy.slackfit`): every variant resident on every worker,
  one queue; a free worker serves the earliest queries with the (variant, batch) whose latency
  bucket fits the earliest deadline's slack; no plan, no swaps, ``batching`` unused;
  ``slackfit_queue`` (ours): the same queue, the most accurate variant that serves what waits within
  the slack (:func:`variants.accuracy.slackfit.choose_for_queue`);
- ``infaas_accuracy``: INFaaS's greedy allocation with accuracy as the objective (Proteus §6.1
  "INFaaS-Accuracy"): from the most accurate variant everywhere, downgrade one worker at a time to
  its next faster variant, the step that gains the most capacity per accuracy point lost, until the
  capacity covers β × demand; queries split in proportion to capacity.

A worker that changes variant serves nothing for ``swap_s`` after its running batch; its queued
queries are routed again. A query that can no longer finish within its SLO is dropped (a miss).
Results: per query, served or not, latency and the accuracy of the variant that served it.
"""
from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from dispatcher.accuracy.plan_router import PlanRouter
from variants.accuracy.allocation import BETA, allocate as proteus_allocation
from variants.accuracy.planner import VariantProfile, capacity
from variants.accuracy.trigger import TriggerParams, initial_state, replan
from variants.accuracy.adaptive_batching import BatchingPolicy, batch_step, early_drops, interpolated_latency_s
from variants.accuracy.slackfit import buckets as slackfit_buckets, choose as slackfit_choose, choose_for_queue, pareto

ALLOCATIONS = ("proteus", "no_scaling", "clipper_ht", "infaas_accuracy", "slackfit", "slackfit_queue")
SHARED_QUEUE = ("slackfit", "slackfit_queue")

Greedy = tuple[dict[str, str | None], dict[str, float]]     # worker -> variant, worker -> fraction


@dataclass(frozen=True)
class AccuracySpec:
    allocation: str = "proteus"
    batching: BatchingPolicy = "proteus"
    trigger: TriggerParams = TriggerParams()   # when to replan (variants.accuracy.trigger)
    tick_s: float = 0.5                # how often measured demand is checked for a burst
    beta: float = BETA
    swap_s: float = 0.2                # a worker changing variant serves nothing this long (load time)
    min_accuracy: float = 0.0
    early_drop: bool = True            # drop heads that keep batches small (variants.accuracy.adaptive_batching.early_drops)


@dataclass
class AccuracyResult:
    served: np.ndarray                 # bool per query: answered within the SLO
    latency_ms: np.ndarray             # inf when dropped
    accuracy: np.ndarray               # accuracy of the serving variant; nan when dropped
    arrivals: np.ndarray
    top_accuracy: float
    replans: int
    swaps: int
    solve_ms: list[float] = field(default_factory=list)

    def summary(self, window_s: float = 60.0) -> dict[str, float]:
        """SLO attainment (within SLO / all queries), mean served accuracy, and the largest drop of a
        ``window_s`` mean of served accuracy below the most accurate variant (points)."""
        n = int(self.arrivals.size)
        ok = ~np.isnan(self.accuracy)
        mean_acc = float(self.accuracy[ok].mean()) if ok.any() else float("nan")
        drop = 0.0
        if ok.any():
            win = np.floor(self.arrivals[ok] / window_s).astype(np.int64)
            count = np.bincount(win)
            mean = np.bincount(win, weights=self.accuracy[ok])[count > 0] / count[count > 0]
            drop = max(0.0, float(self.top_accuracy - mean.min()))
        return {"queries": n, "slo_attainment": float(self.served.sum() / n) if n else 1.0,
                "mean_accuracy": mean_acc, "max_drop_points": 100.0 * drop,
                "missed": int(n - self.served.sum()), "replans": self.replans, "swaps": self.swaps,
                "max_solve_ms": max(self.solve_ms, default=0.0)}


def _greedy_infaas(workers: dict[str, str], variants: Sequence[VariantProfile], slo_ms: float,
                   demand: float) -> Greedy:
    """INFaaS-Accuracy (see the module docstring)."""
    by_acc = sorted(variants, key=lambda v: -v.accuracy)
    opts: dict[str, list[tuple[str, float, float]]] = {}     # type -> [(variant, accuracy, q/s)], accurate first
    for t in set(workers.values()):
        opts[t] = [(v.variant, v.accuracy, c[1]) for v in by_acc
                   if (c := capacity(v.latency_ms.get(t, {}), slo_ms)) is not None]
    level = {w: 0 for w in workers if opts[workers[w]]}

    def cap() -> float:
        return sum(opts[workers[w]][k][2] for w, k in level.items())

    while cap() < demand:
        best, best_gain = None, 0.0
        for w, k in level.items():
            o = opts[workers[w]]
            if k + 1 < len(o):
                gain = (o[k + 1][2] - o[k][2]) / max(o[k][1] - o[k + 1][1], 1e-9)
                if gain > best_gain:
                    best, best_gain = w, gain
        if best is None:
            break
        level[best] += 1
    placement = {w: (opts[workers[w]][level[w]][0] if w in level else None) for w in workers}
    total = cap()
    fractions = {w: opts[workers[w]][k][2] / total for w, k in level.items()} if total > 0 else {}
    return placement, fractions


class _Worker:
    def __init__(self, wid: str, itype: str) -> None:
        self.wid, self.itype = wid, itype
        self.variant: str | None = None
        self.busy_until = 0.0
        self.ready_at = 0.0
        self.queue: deque[int] = deque()
        self.wake_at: float | None = None


def simulate_accuracy(pool: dict[str, str], variants: Sequence[VariantProfile], model: str, slo_ms: float,
                      arrivals: np.ndarray, spec: AccuracySpec = AccuracySpec(),
                      on_replan: Callable[[float, dict[str, str | None]], None] | None = None) -> AccuracyResult:
    """Serve ``arrivals`` (s, sorted; one request each) of ``model`` on the workers ``pool`` (worker id ->
    instance type) with ``variants`` (that model's, :func:`variants.accuracy.planner.profiles_from_rows`)."""
    if spec.allocation not in ALLOCATIONS:
        raise ValueError(f"unknown allocation {spec.allocation!r} (one of {', '.join(ALLOCATIONS)})")
    vs = [v for v in variants if v.model == model and v.accuracy >= spec.min_accuracy]
    if not vs:
        raise ValueError(f"no variant of {model!r} at or above the minimum accuracy")
    acc = {v.variant: v.accuracy for v in vs}
    top = max(acc.values())
    allowed = {"no_scaling": [max(vs, key=lambda v: v.accuracy)],
               "clipper_ht": [min(vs, key=lambda v: v.accuracy)]}.get(spec.allocation, vs)
    proc = {(v.variant, t): interpolated_latency_s(dict(lat)) for v in vs for t, lat in v.latency_ms.items()}
    fits = {(v.variant, t): c for v in vs for t, lat in v.latency_ms.items()
            if (c := capacity(lat, slo_ms)) is not None}        # (largest batch within SLO/2, q/s)
    maxb = {k: c[0] for k, c in fits.items()}
    arr = np.asarray(arrivals, dtype=float)
    n = int(arr.size)
    latency = np.full(n, np.inf)
    served_acc = np.full(n, np.nan)
    slo_s = slo_ms / 1000.0
    workers = {w: _Worker(w, t) for w, t in pool.items()}
    router = PlanRouter()
    heap: list[tuple[float, int, str]] = []
    seq = 0
    res = AccuracyResult(np.zeros(n, dtype=bool), latency, served_acc, arr, top, 0, 0)

    def push(t: float, wid: str) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(heap, (t, seq, wid))

    def allocate(now: float, demand: float, swap_s: float = spec.swap_s) -> None:
        if spec.allocation == "infaas_accuracy":
            placement, fractions = _greedy_infaas(pool, vs, slo_ms, max(demand, 1e-6) * spec.beta)
        else:
            alloc = proteus_allocation(pool, allowed, {model: demand}, {model: slo_ms},
                                       current={w: x.variant for w, x in workers.items()}, beta=spec.beta)
            res.solve_ms.append(alloc.plan.solve_ms)
            placement, fractions = alloc.placement, alloc.routing.get(model, {})
        res.replans += 1
        requeue: list[int] = []
        for w, x in workers.items():
            new = placement.get(w)
            if new != x.variant:
                if x.variant is not None or new is not None:
                    res.swaps += 1
                x.variant = new
                x.ready_at = max(now, x.busy_until) + (swap_s if new is not None else 0.0)
                push(x.ready_at, w)
                requeue.extend(x.queue)
                x.queue.clear()
        router.set_plan({model: fractions})
        for q in sorted(requeue):
            route(q, now)
        if on_replan is not None:
            on_replan(now, dict(placement))

    shared: deque[int] = deque()                 # slackfit's one queue
    on_type = {t: ({v.variant: (v.accuracy, proc[(v.variant, t)]) for v in vs if (v.variant, t) in proc},
                   {v.variant: max(v.latency_ms[t]) for v in vs if t in v.latency_ms}) for t in set(pool.values())}
    tables = {t: slackfit_buckets(*on_type[t]) for t in on_type} if spec.allocation == "slackfit" else {}
    fronts = {t: pareto(on_type[t][0]) for t in on_type}

    def slackfit(x: _Worker, now: float) -> None:
        if now < x.busy_until or not shared:
            return
        while shared:
            slack = arr[shared[0]] + slo_s - now
            if spec.allocation == "slackfit":
                b = slackfit_choose(tables[x.itype], slack)
                pick = (b.variant, min(b.batch, len(shared))) if b is not None else None
            else:
                pick = choose_for_queue(*on_type[x.itype], fronts[x.itype], len(shared), slack)
            if pick is not None:
                break
            shared.popleft()                     # nothing fits its slack: it cannot meet its SLO
        else:
            return
        variant, n_send = pick
        done = now + proc[(variant, x.itype)](n_send)
        for _ in range(n_send):
            q = shared.popleft()
            latency[q] = (done - arr[q]) * 1000.0
            served_acc[q] = acc[variant]
        x.busy_until = done
        push(done, x.wid)

    def route(q: int, now: float) -> None:
        if spec.allocation in SHARED_QUEUE:
            shared.append(q)
            for x in workers.values():
                if now >= x.busy_until:
                    slackfit(x, now)
                    if not shared:
                        break
            return
        wid = router.route(model)
        if wid is None:
            return                               # nothing serves the model: a miss
        workers[wid].queue.append(q)
        start(workers[wid], now)

    def start(x: _Worker, now: float) -> None:
        if x.variant is None or now < x.busy_until or now < x.ready_at or not x.queue:
            return
        key = (x.variant, x.itype)
        p = proc[key]
        while x.queue and now + p(1) > arr[x.queue[0]] + slo_s:
            x.queue.popleft()                    # can no longer meet its SLO: dropped
        if not x.queue:
            return
        mb = maxb.get(key, 1)
        exp = [arr[q] + slo_s for q in x.queue]      # at most SLO x rate long: expired queries leave
        if spec.early_drop:
            k = early_drops(exp, now, p, mb)
            for _ in range(k):
                x.queue.popleft()
            exp = exp[k:]
        step = batch_step(spec.batching, exp, now, p, mb)
        if step.send:
            done = now + p(step.send)
            for _ in range(step.send):
                q = x.queue.popleft()
                latency[q] = (done - arr[q]) * 1000.0
                served_acc[q] = acc[x.variant]
            x.busy_until = done
            push(done, x.wid)
        elif step.wait_until is not None and (x.wake_at is None or x.wake_at <= now or step.wait_until < x.wake_at):
            x.wake_at = step.wait_until
            push(step.wait_until, x.wid)

    def rate(now: float, window_s: float) -> float:
        """Arrivals per second over the last ``window_s``: those arrived so far (index < i) after
        ``now - window_s``."""
        return max(i - int(np.searchsorted(arr, now - window_s, side="right")), 0) / window_s

    trigger = spec.trigger
    # the first allocation for the trace's first window, loaded, as if the system had been running
    first = float(np.count_nonzero(arr < trigger.demand_window_s)) / trigger.demand_window_s
    if spec.allocation not in SHARED_QUEUE:
        allocate(0.0, first, swap_s=0.0)
    tstate = initial_state(first, trigger)
    next_tick = spec.tick_s
    i = 0
    while i < n or heap:
        t_arr = arr[i] if i < n else np.inf
        t_ev = heap[0][0] if heap else np.inf
        t_tick = next_tick if i < n and spec.allocation not in SHARED_QUEUE else np.inf
        now = min(t_arr, t_ev, t_tick)
        if now == np.inf:
            break
        if now == t_ev:
            _, _, wid = heapq.heappop(heap)
            (slackfit if spec.allocation in SHARED_QUEUE else start)(workers[wid], now)
        elif now == t_tick:
            demand, tstate = replan(tstate, now, lambda w: rate(now, w), trigger)
            if demand is not None:
                allocate(now, demand)
            next_tick = now + spec.tick_s
        else:
            route(i, now)
            i += 1
    res.served[:] = latency <= slo_ms * (1 + 1e-9)
    return res


__all__ = ["ALLOCATIONS", "AccuracyResult", "AccuracySpec", "simulate_accuracy"]
