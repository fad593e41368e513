"""The forecast on ``/metrics`` (issue #39: "status, metrics and the audit log show forecast against
actual"), beside ``costscale_demand_queries_per_second{model}`` (the rate measured over the last
minute):

=============================================  =======  ==========================================
metric                                         type     what
=============================================  =======  ==========================================
costscale_forecast_queries_per_second{model,forecaster}  gauge  the upper quantile of the rate over
                                                        the lead the last fleet tick read (shadow, on;
                                                        a model without a forecast has no sample)
costscale_forecast_lead_seconds                gauge    that lead (slowest type's boot + a fleet tick)
costscale_forecast_held_back_total             counter  plans for a forecast not taken: they retired
                                                        what the reactive plan keeps
costscale_forecast_shadow_dollars_per_hour{pool}  gauge  ``shadow``: the $/hr of the pool planning ahead
                                                        would hold (``pool="ahead"``) and of the one
                                                        applied (``pool="applied"``), as the last
                                                        planning tick priced them
costscale_forecast_shadow_dollars_total{pool}  counter  those pools' planned dollars summed over time
costscale_forecast_shadow_arrived_queries_total{pool}  counter  ``shadow``'s capacity estimate
                                                        (:mod:`scaler.forecast.served`): the queries
                                                        measured in the minutes counted for the pool
costscale_forecast_shadow_within_capacity_queries_total{pool}  counter  of those, the ones within the
                                                        pool's capacity in force (per model and minute,
                                                        min(arrivals, capacity)); the ratio of the two
                                                        is the estimated share served within SLO
costscale_forecast_shadow_served_ratio{pool}   gauge    that ratio since the daemon started
=============================================  =======  ==========================================
"""
from __future__ import annotations

from typing import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from scaler.forecast.served import POOLS
from scaler.forecast.state import REACTIVE, ForecastState


def forecast_families(fc: ForecastState) -> Iterator[Metric]:
    g = GaugeMetricFamily("costscale_forecast_queries_per_second",
                          "upper quantile of the rate over the lead, as the last fleet tick read it",
                          labels=["model", "forecaster"])
    for m, f in sorted(fc.last.items()):
        if f is not None:
            g.add_metric([m, fc.chosen.get(m, REACTIVE)], float(f))
    yield g
    yield GaugeMetricFamily("costscale_forecast_lead_seconds", "the forecast's lead", value=float(fc.lead_s))
    yield CounterMetricFamily("costscale_forecast_held_back", "plans for a forecast not taken",
                              value=float(fc.held_back))
    led = fc.shadow
    if led.would_usd_per_hr is not None and led.applied_usd_per_hr is not None:
        g = GaugeMetricFamily("costscale_forecast_shadow_dollars_per_hour",
                              "shadow: $/hr of the pool planning ahead would hold, and of the one applied", labels=["pool"])
        g.add_metric(["ahead"], led.would_usd_per_hr)
        g.add_metric(["applied"], led.applied_usd_per_hr)
        yield g
        c = CounterMetricFamily("costscale_forecast_shadow_dollars", "shadow: those pools' planned dollars over time",
                                labels=["pool"])
        c.add_metric(["ahead"], led.would_usd)
        c.add_metric(["applied"], led.applied_usd)
        yield c
    yield from served_families(fc)


def served_families(fc: ForecastState) -> Iterator[Metric]:
    """``shadow``'s capacity estimate of what each pool would have served (none until a minute is counted)."""
    sv = fc.served
    if not any(sv.sums[p] for p in POOLS):
        return
    arrived = CounterMetricFamily("costscale_forecast_shadow_arrived_queries",
                                  "shadow: queries measured in the minutes counted for each pool", labels=["pool"])
    within = CounterMetricFamily("costscale_forecast_shadow_within_capacity_queries",
                                 "shadow: of those, within the pool's capacity (capacity estimate)", labels=["pool"])
    ratio = GaugeMetricFamily("costscale_forecast_shadow_served_ratio",
                              "shadow: estimated share of arrivals served within SLO, by capacity", labels=["pool"])
    for p in POOLS:
        a, w = sv.totals(p)
        arrived.add_metric([p], a)
        within.add_metric([p], w)
        share = sv.share(p)
        if share is not None:
            ratio.add_metric([p], share)
    yield arrived
    yield within
    yield ratio


class ForecastCollector(Collector):
    """A scrape's forecast families from the fleet state (read from the scrape's thread: a dict copy
    of floats, set whole by the fleet tick)."""

    def __init__(self, forecast: Callable[[], ForecastState]) -> None:
        self.forecast = forecast

    def collect(self) -> Iterator[Metric]:
        yield from forecast_families(self.forecast())


__all__ = ["ForecastCollector", "forecast_families", "served_families"]
