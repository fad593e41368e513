"""The fleet loop's pick confirmation, off the tick (issue #16 deliverable 2).

With ``objective: max_throughput`` the planner's similarity pick rests on fluid upper bounds; on
some mixes (Gaussian batch sizes) it measured below the homogeneous pool of the base type. The
fleet decision (:func:`scaler.planner.model_plan.plan_fleet`, given :attr:`PickConfirmer.cache`)
returns a pick not confirmed yet with the question to confirm (``Plan.confirm``); :meth:`want`
then runs :func:`sim.pick_eval.confirmed_plan` (Kairos+ with the simulator, ``confirm_evaluations``
pools, ~1-2 s of CPU at 2.5 $/hr: BENCHMARKS.md "kairos-repro") in a process of its own at a lower
CPU priority, one at a time, so the event loop and the dispatcher never wait for it. The result
goes into the cache (per model, batch mix, QoS, budget, types: ``scaler.planner.pick_cache``), and when it
differs from the pool held the fleet ticks at once ("pick confirmed"). A failed confirmation is
logged once and that question keeps the similarity pick.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Callable

from scaler.planner.pools import pool_text
from scaler.planner.pick_cache import PickCache, PickKey
from scaler.planner.plan_inputs import Plan, ToConfirm
from sim.pick_eval import confirmed_plan

log = logging.getLogger("costscale.daemon")

#: the confirming process's niceness (it yields the CPU to the daemon and its workers)
NICE = 10


class PickConfirmer:
    """Confirms max_throughput picks in the background (see the module docstring)."""

    def __init__(self, on_confirmed: Callable[[str], None]) -> None:
        self.cache = PickCache()
        self.confirmed = 0                                  # confirmations done
        self._on_confirmed = on_confirmed
        self._failed: set[PickKey] = set()
        self._task: asyncio.Task[None] | None = None
        self._executor: ProcessPoolExecutor | None = None

    @property
    def busy(self) -> bool:
        return self._task is not None and not self._task.done()

    def want(self, plan: Plan | None) -> None:
        """Start confirming ``plan``'s question unless it is confirmed, failed before, or another
        confirmation is under way (the next fleet tick asks again)."""
        if plan is None or plan.confirm is None or self.busy:
            return
        todo = plan.confirm
        if todo.key in self.cache or todo.key in self._failed:
            return
        self._task = asyncio.get_running_loop().create_task(self._confirm(todo, plan))

    async def _confirm(self, todo: ToConfirm, pick: Plan) -> None:
        if self._executor is None:
            self._executor = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                                                 initializer=os.nice, initargs=(NICE,))
        t0 = time.monotonic()
        try:
            plan = await asyncio.get_running_loop().run_in_executor(self._executor, confirmed_plan, todo)
        except asyncio.CancelledError:
            raise
        except Exception as exc:   # the similarity pick stays: a confirmation only ever improves it
            if isinstance(exc, BrokenProcessPool):      # its process died: a fresh one for the next
                self._executor.shutdown(wait=False)
                self._executor = None
            self._failed.add(todo.key)
            log.warning("fleet: confirming the pick %s failed (%s: %s); holding it unconfirmed",
                        pool_text(pick.chosen), type(exc).__name__, exc)
            return
        self.cache.put(todo.key, plan)
        self.confirmed += 1
        moved = plan.chosen != pick.chosen
        log.info("fleet: pick confirmed in %.1f s by simulating up to %d pools: %s (%s)%s", time.monotonic() - t0,
                 todo.evaluations, pool_text(plan.chosen), plan.rule,
                 f", instead of {pool_text(pick.chosen)}" if moved else "")
        if moved:
            self._on_confirmed("pick confirmed")

    async def close(self) -> None:
        """Stop: a confirmation under way is abandoned (its process ends with its evaluation)."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None


__all__ = ["PickConfirmer"]
