"""Clockwork-style distribution (the "CLKWRK" baseline of Kairos §7).

Each worker keeps its own FCFS queue. A central controller tracks every worker's predicted
availability (busy time + the predicted service of everything already in its queue) and places each
new query, in arrival order, on the worker where it would *finish earliest* among those that meet
its QoS (finish − arrival ≤ ξ·T_qos); if none can, on the earliest finish overall. An idle worker
takes the head of its own queue; it never steals from another queue.

The per-worker queues are the policy's state (a policy is a function plus its state): queries that
left the snapshot (served, dropped) are forgotten, and queries queued on a worker that disappeared
are placed again.
"""
from __future__ import annotations

from collections import deque
from typing import Sequence

import numpy as np

from dispatcher.policies import _matrix as mx
from dispatcher.policy import DISPATCH_XI, Assignment, LatencyPredictor, QueryView, WorkerView


class ClockworkPolicy:
    name = "clockwork"

    def __init__(self, predictor: LatencyPredictor, base_type: str, *, xi: float = DISPATCH_XI) -> None:
        self.predictor = predictor
        self.base_type = base_type
        self.xi = xi
        self.queues: dict[str, deque[str]] = {}
        self._placed: dict[str, tuple[str, float]] = {}    # query id -> (worker id, predicted ms)

    def match(self, queue: Sequence[QueryView], workers: Sequence[WorkerView], now: float) -> list[Assignment]:
        if not workers:
            return []
        present = {q.query_id for q in queue}
        wids = {w.worker_id for w in workers}
        for wid in list(self.queues):
            if wid not in wids:
                del self.queues[wid]
        for qid, (wid, _) in list(self._placed.items()):
            if qid not in present or wid not in wids:
                del self._placed[qid]
        for wid in wids:
            dq = self.queues.setdefault(wid, deque())
            if any(qid not in self._placed for qid in dq):
                self.queues[wid] = deque(qid for qid in dq if qid in self._placed)
        new = [q for q in mx.earliest(queue, len(queue)) if q.query_id not in self._placed]
        if new:
            self._place(new, workers, now)
        out: list[Assignment] = []
        for w in workers:
            dq = self.queues[w.worker_id]
            if w.idle and dq:
                qid = dq.popleft()
                del self._placed[qid]
                out.append(Assignment(qid, w.worker_id))
        return out

    def _place(self, new: list[QueryView], workers: Sequence[WorkerView], now: float) -> None:
        types, tix = mx.type_index(workers)
        S = mx.service_by_type(new, types, self.predictor)[:, tix]       # new × n, ms
        ready = now + mx.remaining_ms(workers, now) / 1000.0
        ready += np.array([sum(self._placed[q][1] for q in self.queues[w.worker_id]) for w in workers]) / 1000.0
        for i, q in enumerate(new):
            finish = ready + S[i] / 1000.0
            ok = (finish - q.arrival) * 1000.0 <= self.xi * q.qos_ms
            j = int(np.argmin(np.where(ok, finish, np.inf))) if ok.any() else int(np.argmin(finish))
            wid = workers[j].worker_id
            self.queues[wid].append(q.query_id)
            self._placed[q.query_id] = (wid, float(S[i, j]))
            ready[j] = finish[j]
