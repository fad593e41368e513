"""The runtime's families on /metrics (daemon.observe.runtime_metrics, issue #40's soak): the event
loop's tasks, the worker channels open, and each loop's ticks run and skipped, as the scheduler reports them."""
from __future__ import annotations

import asyncio

from apscheduler.schedulers.asyncio import AsyncIOScheduler
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from daemon.observe.runtime_metrics import RuntimeCollector, TickCounter, tasks_on_loop
from dispatcher.workers.client import WorkerClient


def _samples(reg: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(reg).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_ticks_tasks_and_channels() -> None:
    async def body() -> tuple[dict, dict]:   # type: ignore[type-arg]
        loop = asyncio.get_running_loop()
        ran = asyncio.Event()
        slow_started = asyncio.Event()

        async def fleet() -> None:
            if not slow_started.is_set():
                slow_started.set()
                await ran.wait()      # the first fleet tick runs on while the next ones come due

        async def model() -> None:
            pass

        sched = AsyncIOScheduler(event_loop=loop)
        ticks = TickCounter()
        ticks.attach(sched)
        sched.add_job(fleet, "interval", seconds=0.02, max_instances=1, id="fleet")
        sched.add_job(model, "interval", seconds=0.02, max_instances=1, id="model")
        sched.add_job(model, "interval", seconds=0.02, max_instances=1, id="other")   # not a loop: not counted
        reg = CollectorRegistry(auto_describe=False)
        reg.register(RuntimeCollector(tasks_on_loop(loop), ticks))
        clients = [WorkerClient(f"127.0.0.1:{p}") for p in (1, 2, 3)]
        sched.start()
        while ticks.counts[("fleet", "skipped")] < 2 or ticks.counts[("model", "run")] < 3:
            await asyncio.sleep(0.01)
        ran.set()
        while ticks.counts[("fleet", "run")] < 2:
            await asyncio.sleep(0.01)
        sched.shutdown(wait=False)
        during = await asyncio.to_thread(_samples, reg)
        for c in clients[:2]:
            await c.close()
        await clients[0].close()      # closed once
        after = await asyncio.to_thread(_samples, reg)
        await clients[2].close()
        return during, after

    base = WorkerClient.open_channels
    during, after = asyncio.run(body())
    assert during[("costscale_grpc_worker_channels", ())] == base + 3
    assert after[("costscale_grpc_worker_channels", ())] == base + 1
    assert during[("costscale_asyncio_tasks", ())] >= 2     # body and the count itself
    assert during[("costscale_loop_ticks_total", (("loop", "fleet"), ("outcome", "skipped")))] >= 2
    assert during[("costscale_loop_ticks_total", (("loop", "fleet"), ("outcome", "run")))] >= 2
    assert during[("costscale_loop_ticks_total", (("loop", "reconcile"), ("outcome", "run")))] == 0
    assert {lbl for (name, lbl) in during if name == "costscale_loop_ticks_total"} == {
        (("loop", loop), ("outcome", o)) for loop in ("fleet", "model", "reconcile") for o in ("run", "skipped")}
    assert WorkerClient.open_channels == base
