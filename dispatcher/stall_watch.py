"""A worker that stopped answering without dying (issue #40, a SIGSTOPped or hung host): its TCP
connection stays open, so its call neither answers nor fails, and nothing else would free the call's
queries before the health loop drops the worker (2-3 s).

:class:`StallWatch` arms a timer per worker call: once the call has run ``factor`` x its predicted
time (at least ``floor_s``), the worker is probed with a Health call; no reply within
``probe_timeout_s`` removes it (``WorkerRegistry.remove_worker``: its channel and stream closed, so
the call fails and its queries go back to the head of the queue, re-dispatched within their SLO; it
registers again once it answers, ``worker.rejoin``). A live worker that is only slow answers Health on
its event loop while it computes, keeps its call, and is watched again.
"""
from __future__ import annotations

import asyncio

from dispatcher.runtime import STALL_FACTOR, STALL_FLOOR_S, STALL_PROBE_TIMEOUT_S, Runtime
from dispatcher.workers.registry import WorkerRegistry, WorkerState


class StallWatch:
    """The probe of a worker whose call runs long (module docstring); the thresholds are attributes
    a test may set."""

    def __init__(self, rt: Runtime, registry: WorkerRegistry) -> None:
        self.rt, self.registry = rt, registry
        self.factor = STALL_FACTOR
        self.floor_s = STALL_FLOOR_S
        self.probe_timeout_s = STALL_PROBE_TIMEOUT_S

    def watch(self, w: WorkerState, call: tuple[list, list], predicted_s: float) -> asyncio.TimerHandle | None:
        """Arm the probe of ``w`` for ``call``, predicted to take ``predicted_s``; the caller cancels
        the handle when the call ends (None: no loop to arm it on)."""
        return self._arm(w, call, max(self.floor_s, self.factor * predicted_s))

    def _arm(self, w: WorkerState, call: tuple[list, list], after_s: float) -> asyncio.TimerHandle | None:
        loop = self.rt.loop
        if loop is None:
            return None
        return loop.call_later(after_s, lambda: self.rt.spawn(self._probe(w, call, after_s)))

    async def _probe(self, w: WorkerState, call: tuple[list, list], after_s: float) -> None:
        if w.call is not call or w.removed:
            return
        if await self.registry.answers(w, self.probe_timeout_s):
            if w.call is call and not w.removed:
                self._arm(w, call, after_s)   # only slow: watched again (the call's own timer is gone)
            return
        if w.call is call and not w.removed:
            self.registry.remove_worker(w, f"stopped answering: a call ran {after_s:.2f} s and Health got no reply "
                                           f"within {self.probe_timeout_s:g} s")


__all__ = ["StallWatch"]
