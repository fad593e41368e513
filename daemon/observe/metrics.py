"""Prometheus metrics (prometheus-client) on ``metrics.listen`` (default ``127.0.0.1:9464``,
``GET /metrics``): the numbers ``costscale status`` shows, as time series.

Every scrape reads one Status reply (:func:`dispatcher.api.status.build_status_reply`, built on the
daemon's event loop, never from the scrape's thread) and the outcome ledger
(:mod:`dispatcher.outcomes`), so a scrape and a ``costscale status`` taken between two of the
feed's one-second samples show the same numbers.

=========================================  =======  ==============================================
metric                                     type     what
=========================================  =======  ==============================================
costscale_budget_dollars_per_hour          gauge    the budget
costscale_pool_cost_dollars_per_hour       gauge    $/hr of the live pool (pending and running), billed prices
costscale_pool_cost_by_market_dollars_per_hour{market}  gauge  the same split: on_demand, spot
costscale_spent_dollars_total              counter  dollars spent since the daemon started
costscale_spent_today_dollars              gauge    dollars spent since 00:00 UTC
costscale_instances{instance_type,market,zone,state}  gauge  live instances (pending, running, parked,
                                                    draining); market on_demand (zone "") or spot
costscale_queries_total{model,code}        counter  queries that ended, by outcome (OK or gRPC status)
costscale_query_latency_seconds{model}     hist.    end-to-end latency of served queries
costscale_slo_violations_total{model}      counter  served late, or refused for lack of capacity/time
costscale_slo_attainment_ratio{model}      gauge    over the last 5 minutes
costscale_demand_queries_per_second{model} gauge    over the last minute
costscale_queue_depth                      gauge    queries waiting
costscale_fleet_decisions_total{kind}      counter  plan, launch, terminate, park, unpark
costscale_model_decisions_total{kind}      counter  load, unload, vm_add, vm_remove, accuracy_plan
costscale_variant_instances{variant,instance_type}  gauge  workers holding each variant
costscale_served_accuracy{model}           gauge    mean accuracy of the variants that served, 5 min
costscale_model_workers{model}             gauge    registered workers taking the model's queries
costscale_model_short_queries_per_second{model}  gauge  the last plan's shortfall below demand x (1+headroom)
costscale_model_planned_capacity_queries_per_second{model}  gauge  the upper bound of its planned workers
costscale_workers                          gauge    registered workers
=========================================  =======  ==============================================

and the forecast's (:mod:`daemon.observe.forecast_metrics`): ``costscale_forecast_queries_per_second``,
``costscale_forecast_lead_seconds``, ``costscale_forecast_held_back_total``; and the runtime's
(:mod:`daemon.observe.runtime_metrics`, what the soak bench watches): ``costscale_asyncio_tasks``,
``costscale_grpc_worker_channels``, ``costscale_loop_ticks_total``.
"""
from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import TYPE_CHECKING, Callable, Iterator

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from config.hostport import split_hostport
from dispatcher.outcomes import LATENCY_BUCKETS_S
from dispatcher.proto import costscale_pb2 as pb
from daemon.observe.forecast_metrics import ForecastCollector
from daemon.observe.runtime_metrics import RuntimeCollector, TickCounter, tasks_on_loop
from daemon.observe.status_feed import StatusFeed
from dispatcher.api.status import INSTANCE_STATES

if TYPE_CHECKING:
    from apscheduler.schedulers.asyncio import AsyncIOScheduler

    from dispatcher.server import Dispatcher

log = logging.getLogger("costscale")

#: (latency bucket counts, sum in s) per model
Histograms = dict[str, tuple[list[int], float]]
#: how long a scrape waits for the event loop to build its snapshot (s)
SNAPSHOT_TIMEOUT_S = 10.0
#: the windows the per-model gauges use (s)
ATTAINMENT_WINDOW_S = 300
DEMAND_WINDOW_S = 60


def snapshot_of(d: Dispatcher) -> tuple[pb.StatusReply, Histograms]:
    """Status and the latency histograms, read together (call it on the dispatcher's event loop)."""
    hists = {m: (list(o.latency_counts), o.latency_sum_s) for m, o in d.outcomes.models.items()}
    return d.status_reply(), hists


def families(reply: pb.StatusReply, hists: Histograms, types: list[str]) -> Iterator[Metric]:
    """The metric families of one snapshot; ``types``: instance types always listed (zeros too)."""
    yield GaugeMetricFamily("costscale_budget_dollars_per_hour", "The budget ($/hr).", value=reply.budget_per_hour)
    yield GaugeMetricFamily("costscale_pool_cost_dollars_per_hour",
                            "$/hr of the live pool: pending and running instances, parked ones too, at the "
                            "prices billed now (spot at its spot price).", value=reply.cost_per_hour)
    by_market = GaugeMetricFamily("costscale_pool_cost_by_market_dollars_per_hour",
                                  "costscale_pool_cost_dollars_per_hour by market (on_demand, spot).", labels=["market"])
    for market, cost in sorted(reply.cost_per_hour_by_market.items()):
        by_market.add_metric([market], cost)
    yield by_market
    spent = CounterMetricFamily("costscale_spent_dollars", "Dollars spent since the daemon started.")
    spent.add_metric([], reply.spent_usd_total)
    yield spent
    yield GaugeMetricFamily("costscale_spent_today_dollars", "Dollars spent since 00:00 UTC.",
                            value=reply.spent_usd_today)
    inst = GaugeMetricFamily("costscale_instances", "Live instances by type, market (on_demand, spot), zone "
                             "(spot only) and state.", labels=["instance_type", "market", "zone", "state"])
    counts = {(c.instance_type, c.market or "on_demand", c.zone, c.state): c.count for c in reply.instances}
    where = {(t, "on_demand", "") for t in types} | {(t, m, z) for t, m, z, _ in counts}
    for t, m, z in sorted(where):
        for s in INSTANCE_STATES:
            inst.add_metric([t, m, z, s], counts.get((t, m, z, s), 0))
    yield inst
    queries = CounterMetricFamily("costscale_queries", "Queries that ended, by outcome (OK or the gRPC status).",
                                  labels=["model", "code"])
    viol = CounterMetricFamily("costscale_slo_violations", "Queries served late or refused for lack of capacity or time.",
                               labels=["model"])
    attain = GaugeMetricFamily("costscale_slo_attainment_ratio", "SLO attainment over the last 5 minutes.",
                               labels=["model"])
    demand = GaugeMetricFamily("costscale_demand_queries_per_second", "Queries per second over the last minute.",
                               labels=["model"])
    acc = GaugeMetricFamily("costscale_served_accuracy", "Mean accuracy of the variants that served, last 5 minutes.",
                            labels=["model"])
    workers = GaugeMetricFamily("costscale_model_workers", "Registered workers taking a model's queries.",
                                labels=["model"])
    short = GaugeMetricFamily("costscale_model_short_queries_per_second", "How far the workers the last fleet "
                              "plan gave a model fall short of its demand x (1 + headroom); 0 when covered.",
                              labels=["model"])
    planned = GaugeMetricFamily("costscale_model_planned_capacity_queries_per_second", "The upper bound of the "
                                "workers the last fleet plan gave a model.", labels=["model"])
    for m in reply.models:
        workers.add_metric([m.name], m.workers)
        if m.planned:
            short.add_metric([m.name], m.short_qps)
            planned.add_metric([m.name], m.capacity_qps)
        for code, n in sorted(m.queries.items()):
            queries.add_metric([m.name, code], n)
        viol.add_metric([m.name], m.slo_violations)
        for w in m.windows:
            if w.seconds == ATTAINMENT_WINDOW_S and w.HasField("attainment"):
                attain.add_metric([m.name], w.attainment)
            if w.seconds == ATTAINMENT_WINDOW_S and w.HasField("served_accuracy"):
                acc.add_metric([m.name], w.served_accuracy)
            if w.seconds == DEMAND_WINDOW_S:
                demand.add_metric([m.name], w.demand_qps)
    yield from (queries, viol, attain, demand, acc, workers, short, planned)
    lat = HistogramMetricFamily("costscale_query_latency_seconds", "End-to-end latency of served queries.",
                                labels=["model"])
    for model, (bucket_counts, total_s) in sorted(hists.items()):
        cumulative, buckets = 0, []
        for bound, n in zip((*(str(b) for b in LATENCY_BUCKETS_S), "+Inf"), bucket_counts):
            cumulative += n
            buckets.append((bound, cumulative))
        lat.add_metric([model], buckets, total_s)
    yield lat
    yield GaugeMetricFamily("costscale_queue_depth", "Queries waiting for a worker.", value=reply.queued)
    yield GaugeMetricFamily("costscale_workers", "Registered workers.", value=reply.workers)
    for loop in ("fleet", "model"):
        dec = CounterMetricFamily(f"costscale_{loop}_decisions", f"Decisions of the {loop} loop, by kind.",
                                  labels=["kind"])
        for c in reply.decision_counts:
            if c.loop == loop:
                dec.add_metric([c.kind], c.count)
        yield dec
    prof = GaugeMetricFamily("costscale_model_profiling", "1 while the daemon profiles a model (on a conservative "
                             "pool until its profiles are measured).", labels=["model"])
    for p in reply.profiling:
        prof.add_metric([p.model], 1)
    yield prof
    var = GaugeMetricFamily("costscale_variant_instances", "Workers holding each variant, by instance type.",
                            labels=["variant", "instance_type"])
    held = Counter((v, w.instance_type) for w in reply.worker_list for v in w.variants)
    for (v, t), n in sorted(held.items()):
        var.add_metric([v, t], n)
    yield var


class StatusCollector(Collector):
    """A scrape's families from a snapshot taken on the daemon's event loop."""

    def __init__(self, snapshot: Callable[[], tuple[pb.StatusReply, Histograms]], types: Callable[[], list[str]]) -> None:
        self.snapshot = snapshot
        self.types = types

    def collect(self) -> Iterator[Metric]:
        try:
            reply, hists = self.snapshot()
        except Exception as exc:  # noqa: BLE001 - a scrape during shutdown: no samples, not a crash
            log.warning("metrics: no snapshot (%s)", type(exc).__name__)
            return
        yield from families(reply, hists, self.types())


def snapshot_on_loop(d: Dispatcher | None, loop: asyncio.AbstractEventLoop | None
                     ) -> Callable[[], tuple[pb.StatusReply, Histograms]]:
    """A scrape's snapshot (:func:`snapshot_of`), taken on the daemon's event ``loop`` from the
    scrape's thread; RuntimeError once the daemon is not running."""
    def snapshot() -> tuple[pb.StatusReply, Histograms]:
        if d is None or loop is None or loop.is_closed():
            raise RuntimeError("daemon not running")

        async def take() -> tuple[pb.StatusReply, Histograms]:
            return snapshot_of(d)

        return asyncio.run_coroutine_threadsafe(take(), loop).result(SNAPSHOT_TIMEOUT_S)

    return snapshot


class MetricsServer:
    """The ``/metrics`` endpoint of one daemon: its own registry, its own HTTP thread, serving what
    ``snapshot`` (:func:`snapshot_on_loop`) and ``types`` (the instance types always listed) give."""

    def __init__(self, snapshot: Callable[[], tuple[pb.StatusReply, Histograms]],
                 types: Callable[[], list[str]]) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(StatusCollector(snapshot, types))
        self.port = 0
        self._httpd = None
        self._thread = None

    def start(self, listen: str) -> int:
        """Serve on ``listen`` (HOST:PORT; port 0: any free one); returns the bound port. A port
        that cannot be bound is logged and skipped: metrics never keep the daemon from running."""
        try:
            host, port = split_hostport(listen)
            host = host.strip("[]")   # an IPv6 address in brackets
            self._httpd, self._thread = start_http_server(port, addr=host, registry=self.registry)
        except (OSError, ValueError) as exc:
            log.warning("metrics: cannot listen on %s (%s): no /metrics endpoint; set metrics.listen",
                        listen, getattr(exc, "strerror", None) or exc)
            return 0
        self.port = int(self._httpd.server_port)
        log.info("metrics on http://%s:%d/metrics", host, self.port)
        return self.port

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None


def start_observing(feed: StatusFeed, scheduler: AsyncIOScheduler, listen: str | None,
                    snapshot: Callable[[], tuple[pb.StatusReply, Histograms]],
                    types: Callable[[], list[str]]) -> MetricsServer | None:
    """The daemon's status feed (``costscale status``) observing and, when ``metrics.listen`` is
    set, its ``/metrics`` endpoint (a port that cannot be bound is a warning: metrics never stop the
    daemon)."""
    feed.start(scheduler)
    metrics = None
    if listen:
        metrics = MetricsServer(snapshot, types)
        if feed.forecast is not None:     # the fleet's forecasts (issue #39, daemon.observe.forecast_metrics)
            metrics.registry.register(ForecastCollector(feed.forecast))
        ticks = TickCounter()             # tasks, worker channels, ticks (issue #40, daemon.observe.runtime_metrics)
        ticks.attach(scheduler)
        metrics.registry.register(RuntimeCollector(tasks_on_loop(asyncio.get_running_loop()), ticks))
        metrics.start(listen)
    return metrics


def stop_observing(feed: StatusFeed | None, metrics: MetricsServer | None) -> None:
    """The last spend sample (after ``on_shutdown: terminate``, of an empty pool), the spend file
    written, the endpoint closed."""
    if feed is not None:
        feed.stop()
    if metrics is not None:
        metrics.stop()
