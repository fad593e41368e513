"""What the soak bench watches from the inside (issue #40 deliverable 1), on ``/metrics`` beside the
status families (:mod:`daemon.observe.metrics`):

=========================================  =======  ==============================================
metric                                     type     what
=========================================  =======  ==============================================
costscale_asyncio_tasks                    gauge    tasks on the daemon's event loop (the scrape's own included)
costscale_grpc_worker_channels             gauge    channels to workers opened and not closed
costscale_loop_ticks_total{loop,outcome}   counter  the fleet, model and reconcile ticks: ``run`` (ended,
                                                    error or not) or ``skipped`` (the one before still running)
=========================================  =======  ==============================================

RSS, threads and file descriptors are the process's own (``/proc/PID``), not repeated here.
"""
from __future__ import annotations

import asyncio
from collections import Counter
from typing import TYPE_CHECKING, Callable, Iterator

from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_EXECUTED, EVENT_JOB_MAX_INSTANCES, JobEvent
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from dispatcher.workers.client import WorkerClient

if TYPE_CHECKING:
    from apscheduler.schedulers.base import BaseScheduler

#: the scheduler jobs counted (``daemon.loops.ticks.TICKS``' ids)
LOOPS = ("fleet", "model", "reconcile")


class TickCounter:
    """Each loop's ticks run and skipped, as the scheduler reports its jobs."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()

    def attach(self, scheduler: BaseScheduler) -> None:
        scheduler.add_listener(self._heard, EVENT_JOB_EXECUTED | EVENT_JOB_ERROR | EVENT_JOB_MAX_INSTANCES)

    def _heard(self, event: JobEvent) -> None:
        if event.job_id in LOOPS:
            self.counts[(event.job_id, "skipped" if event.code == EVENT_JOB_MAX_INSTANCES else "run")] += 1


def tasks_on_loop(loop: asyncio.AbstractEventLoop) -> Callable[[], int]:
    """The number of tasks on ``loop``, counted on it from a scrape's thread."""
    async def count() -> int:
        return len(asyncio.all_tasks())

    def read() -> int:
        return asyncio.run_coroutine_threadsafe(count(), loop).result(10.0)
    return read


class RuntimeCollector(Collector):
    """The families of the module docstring."""

    def __init__(self, tasks: Callable[[], int], ticks: TickCounter) -> None:
        self.tasks, self.ticks = tasks, ticks

    def collect(self) -> Iterator[Metric]:
        try:
            yield GaugeMetricFamily("costscale_asyncio_tasks", "Tasks on the daemon's event loop.", value=self.tasks())
        except Exception:  # noqa: BLE001 - a scrape during shutdown: the other families still
            pass
        yield GaugeMetricFamily("costscale_grpc_worker_channels", "gRPC channels to workers opened and not closed.",
                                value=WorkerClient.open_channels)
        ticks = CounterMetricFamily("costscale_loop_ticks", "Loop ticks run, or skipped while the one before ran.",
                                    labels=["loop", "outcome"])
        for loop in LOOPS:
            for outcome in ("run", "skipped"):
                ticks.add_metric([loop, outcome], self.ticks.counts[(loop, outcome)])
        yield ticks


__all__ = ["LOOPS", "RuntimeCollector", "TickCounter", "tasks_on_loop"]
