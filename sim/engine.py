"""The discrete-event simulator: production dispatcher policies on a virtual clock.

Events are query arrivals (a sorted array, merged in time order) and query completions (a heap).
After every event the policy is called exactly as the live dispatcher calls it (Kairos §5.1):
``policy.match(queue, workers, now)`` with :class:`~dispatcher.policy.QueryView` /
:class:`~dispatcher.policy.WorkerView` snapshots, ``busy_until`` being the *predicted* finish of
the query in flight (profile mean), and only idle workers may receive a query. A call is skipped
when it cannot assign anything (empty queue or no idle worker). At equal times completions are
processed before arrivals.

A query still queued ``qos_ms`` after its arrival can no longer meet its SLO; with
``drop_expired`` (the daemon's ``on_deadline: drop``) it is removed and counted as a violation
with infinite latency. This also bounds the queue at overload, so each event costs O(queue) with
the queue at most rate x QoS long.
"""
from __future__ import annotations

import heapq
import math
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Literal, Mapping

import numpy as np

from dispatcher.policy import Policy, QueryView, WorkerView
from config.profiles import ProfileTable
from sim.clock import VirtualClock
from sim.service import ServiceModel


@dataclass(frozen=True)
class SimResult:
    """Everything a run produced; :mod:`sim.metrics` turns it into numbers."""

    model: str
    qos_ms: float
    pool: dict[str, int]
    prices: dict[str, float]
    arrivals: np.ndarray          # s
    batches: np.ndarray
    latency_ms: np.ndarray        # completion - arrival; inf for dropped queries
    worker_of: np.ndarray         # index into worker_ids; -1 for dropped
    worker_ids: list[str]
    worker_types: list[str]
    busy_ms: np.ndarray           # per worker: total service time (ms)
    duration_s: float             # time of the last event (>= last arrival)
    policy_calls: int = 0
    dropped: int = 0
    extra: dict[str, float] = field(default_factory=dict)
    start_s: np.ndarray | None = None   # when each query started on its worker (s); nan for dropped


def worker_ids_for(pool: Mapping[str, int]) -> list[tuple[str, str]]:
    """(worker_id, instance_type) for a pool, types in sorted order: ``g4dn.xlarge-0``, ..."""
    out: list[tuple[str, str]] = []
    for itype in sorted(pool):
        for k in range(int(pool[itype])):
            out.append((f"{itype}-{k}", itype))
    return out


def simulate(
    pool: Mapping[str, int],
    model: str,
    profiles: ProfileTable,
    policy: Policy,
    arrivals: np.ndarray,
    batches: np.ndarray,
    qos_ms: float,
    *,
    service: Literal["mean", "sampled"] = "mean",
    noise: float = 0.0,
    seed: int = 0,
    prices: Mapping[str, float] | None = None,
    drop_expired: bool = True,
    stop_after_misses: int | None = None,
) -> SimResult:
    """Run ``policy`` on ``pool`` against the queries (``arrivals`` in s, sorted; ``batches``).

    Service times come from :class:`sim.service.ServiceModel` (``service``, ``noise``), drawn with
    ``seed`` once per query and instance type, so the same seed gives the same numbers.

    ``stop_after_misses``: stop as soon as more than this many queries missed ``qos_ms`` (dropped,
    or completed late); ``extra["stopped_early"]`` is then 1.0 and the latencies of the queries not
    yet finished stay infinite. A p99 check needs no more (``sim.slo_check``).
    """
    arr = np.asarray(arrivals, dtype=float)
    bat = np.asarray(batches, dtype=np.int64)
    if arr.shape != bat.shape or arr.ndim != 1:
        raise ValueError("arrivals and batches must be 1-D arrays of the same length")
    if arr.size and np.any(np.diff(arr) < 0):
        raise ValueError("arrivals must be sorted")
    if qos_ms <= 0:
        raise ValueError("qos_ms must be > 0")
    workers = worker_ids_for(pool)
    if not workers:
        raise ValueError("the pool has no instances")
    types = sorted({t for _, t in workers})
    for t in types:
        profiles.get(model, t)  # KeyError naming the missing profile
    prices = dict(prices or {})

    svc_model = ServiceModel(profiles, model, service, noise)
    rng = np.random.default_rng(seed)
    actual_s: dict[str, list[float]] = {}
    pred_s: dict[str, list[float]] = {}
    for t in types:  # vectorized once per type; scalar lookups in the loop use Python lists
        actual_s[t] = (svc_model.sample(t, bat, rng) / 1000.0).tolist()
        pred_s[t] = (svc_model.predicted_ms(t, bat) / 1000.0).tolist()

    n = int(arr.size)
    arr_l = arr.tolist()
    bat_l = bat.tolist()
    qos_s = qos_ms / 1000.0
    w_ids = [w for w, _ in workers]
    w_types = [t for _, t in workers]
    w_index = {w: k for k, w in enumerate(w_ids)}
    w_idle = [True] * len(workers)
    w_query = [-1] * len(workers)
    views: list[WorkerView] = [WorkerView(w, t, 0.0, True) for w, t in workers]
    busy = [0.0] * len(workers)
    n_idle = len(workers)

    latency = np.full(n, np.inf)
    worker_of = np.full(n, -1, dtype=np.int64)
    started = [math.nan] * n
    queue: OrderedDict[str, QueryView] = OrderedDict()
    heap: list[tuple[float, int, int]] = []
    clk = VirtualClock(min(0.0, float(arr[0])) if n else 0.0)
    i = 0
    seq = 0
    calls = 0
    dropped = 0
    now = clk.now()
    match = policy.match
    misses = 0
    miss_limit = n + 1 if stop_after_misses is None else int(stop_after_misses)

    while True:
        if heap and (i >= n or heap[0][0] <= arr_l[i]):
            now, _, w = heapq.heappop(heap)
            q = w_query[w]
            lat = (now - arr_l[q]) * 1000.0
            latency[q] = lat
            if lat > qos_ms:
                misses += 1
            w_query[w] = -1
            w_idle[w] = True
            n_idle += 1
            views[w] = WorkerView(w_ids[w], w_types[w], views[w].busy_until, True)
        elif i < n:
            now = arr_l[i]
            qid = str(i)
            queue[qid] = QueryView(qid, model, bat_l[i], now, qos_ms)
            i += 1
        else:
            break
        clk.advance_to(now)
        if drop_expired:
            while queue:
                first = next(iter(queue.values()))
                if now - first.arrival >= qos_s:
                    queue.popitem(last=False)
                    dropped += 1
                    misses += 1
                else:
                    break
        if misses > miss_limit:
            break
        if not queue or n_idle == 0:
            continue
        calls += 1
        assignments = match(list(queue.values()), list(views), now)
        for a in assignments:
            w = w_index.get(a.worker_id)
            if w is None or not w_idle[w]:
                raise ValueError(f"policy {getattr(policy, 'name', policy)!r} assigned to a busy or unknown worker {a.worker_id!r}")
            qv = queue.pop(a.query_id, None)
            if qv is None:
                raise ValueError(f"policy {getattr(policy, 'name', policy)!r} assigned unknown query {a.query_id!r}")
            q = int(qv.query_id)
            t = w_types[w]
            started[q] = now
            done = now + actual_s[t][q]
            busy[w] += actual_s[t][q]
            worker_of[q] = w
            w_query[w] = q
            w_idle[w] = False
            n_idle -= 1
            views[w] = WorkerView(w_ids[w], t, now + pred_s[t][q], False)
            seq += 1
            heapq.heappush(heap, (done, seq, w))

    duration = max(now, float(arr[-1]) if n else 0.0)
    return SimResult(
        model=model, qos_ms=float(qos_ms), pool={t: int(c) for t, c in pool.items() if c}, prices=prices,
        arrivals=arr, batches=bat, latency_ms=latency, worker_of=worker_of, worker_ids=w_ids,
        worker_types=w_types, busy_ms=np.asarray(busy) * 1000.0, duration_s=float(duration),
        policy_calls=calls, dropped=dropped, extra={"stopped_early": 1.0} if misses > miss_limit else {},
        start_s=np.asarray(started, dtype=float),
    )
