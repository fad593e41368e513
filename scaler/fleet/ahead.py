"""Plan ahead, retire by what was measured (issue #39 deliverable 3; pure): the fleet tick's step
between the reactive demand (:func:`scaler.fleet.step.stabilized_demands`) and the plan.

- The **lead** (:func:`forecast_lead`): the longest of the allowed types' boot delays (measured per
  type, :class:`scaler.forecast.lead.BootDelays`; the config's ``forecast.boot_delay_s`` until then)
  plus one fleet tick: a launch decided now serves after that, so the forecast covers it.
- **The demand** (:func:`ahead_demands`): each model's forecast over the lead
  (:meth:`scaler.forecast.state.ForecastState.predict`, the model's capacity hint applied as to its
  measured demand). ``mode: on`` plans for ``max(reactive, forecast)``; ``shadow`` and ``off`` plan
  on the reactive demand (``shadow`` keeps the forecast to show it against what was measured).
- **Scale-in stays on the measured window** (:func:`keeps_measured`): the scale-in window holds
  measured values only (the raise never enters it), and a plan for the raised demand is taken only
  when it retires no instance the reactive plan would keep at the same instant: for every type,
  ``target[t] >= min(held[t], reactive[t])``. Otherwise the tick plans reactively (AWS EC2
  predictive scaling never scales in on a forecast either:
  https://docs.aws.amazon.com/autoscaling/ec2/userguide/ec2-auto-scaling-predictive-scaling.html).

The budget and the joint plan are untouched: the raise only feeds the decide port.

- **Shadow's price** (:func:`shadow_price`): with ``mode: shadow`` a tick that plans (or would plan
  under ``on``, :func:`shadow_due`) decides once more
  for the raised demand (the plan ``on`` would have asked for, never applied) and keeps that pool's
  $/hr beside the applied pool's (:class:`scaler.forecast.state.ShadowLedger`): what planning ahead
  would have cost, per hour and summed over time, before a user turns it on; and each model's
  capacity in both pools, for the estimate of what each would have served
  (:mod:`scaler.forecast.served`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Mapping

from config.schema import Config
from scaler.forecast.lead import BootDelays, configured_boot_s, lead_s
from scaler.forecast.served import plan_capacities
from scaler.forecast.state import ForecastState
from scaler.fleet.step import plan_due
from scaler.planner.replan import DemandView


@dataclass(frozen=True)
class ShadowPrice:
    """:func:`shadow_price`'s answer: each pool's $/hr and each model's capacity in it (q/s; None: no plan)."""

    would_usd_per_hr: float
    applied_usd_per_hr: float
    would_capacity: dict[str, float] | None = None
    applied_capacity: dict[str, float] | None = None


def forecast_lead(cfg: Config, boot: BootDelays) -> float:
    """The forecast's lead: the slowest allowed type's boot delay plus one fleet tick (module docstring)."""
    cat = cfg.catalog()
    fleet_s = cfg.intervals.fleet_s
    if not cat:
        return float(fleet_s) + 60.0
    return max(lead_s(boot, t, configured_boot_s(cfg.forecast.boot_delay_s, t, it.hardware), fleet_s)
               for t, it in cat.items())


def ahead_demands(cfg: Config, fc: ForecastState, demand: Mapping[str, DemandView], wall: float,
                  hints: Mapping[str, float]) -> tuple[dict[str, DemandView], dict[str, float | None]]:
    """The demand to plan for and each model's forecast over the lead (q/s, the capacity hint applied;
    None: none). ``off``: ``demand`` as given and no forecast read; ``shadow``: ``demand`` as given;
    ``on``: each model's ``max(reactive, forecast)``. ``fc.last`` and ``fc.lead_s`` keep what was read."""
    mode = cfg.forecast.mode
    if mode == "off":
        return dict(demand), {}
    memo = fc.lead_memo
    if memo is not None and memo[0] is cfg and memo[1] is fc.boot:
        lead = memo[2]
    else:   # the same config and boot delays give the same lead: computed once for them
        lead = forecast_lead(cfg, fc.boot)
        fc.lead_memo = (cfg, fc.boot, lead)
    q = cfg.forecast.quantile
    ahead: dict[str, float | None] = {}
    for m in demand:
        f = fc.predict(m, wall, lead, q)
        ahead[m] = None if f is None else f * hints.get(m, 1.0)
    fc.last, fc.lead_s = dict(ahead), lead
    if mode != "on":
        return dict(demand), ahead
    return raised_view(demand, ahead), ahead


def raised_view(demand: Mapping[str, DemandView], ahead: Mapping[str, float | None]) -> dict[str, DemandView]:
    """Each model's ``max(reactive, forecast)`` (its mix and measured flag kept)."""
    out = {}
    for m, d in demand.items():
        f = ahead.get(m)
        out[m] = DemandView(f, d.mix, d.measured) if f is not None and f > d.qps else d
    return out


def pool_usd(target: Mapping[str, int], price: Callable[[str], float]) -> float:
    """A pool's $/hr at ``price``."""
    return float(sum(n * price(t) for t, n in target.items() if n > 0))


async def shadow_price(measured: Mapping[str, DemandView], ahead: Mapping[str, float | None],
                       applied: Mapping[str, int],
                       decide: Callable[[Mapping[str, DemandView]], Awaitable[tuple[Mapping[str, int], Any]]],
                       price: Callable[[str], float], applied_plan: Any = None) -> ShadowPrice:
    """The pool ``on`` would have planned and the applied pool, priced and with each model's capacity
    (:func:`scaler.forecast.served.plan_capacities`): the raised demand decided once more when a
    forecast raised some model's, else the applied pool itself (module docstring)."""
    would = raised_view(measured, ahead)
    applied_caps = plan_capacities(applied_plan)
    if raised(measured, would):
        target, plan = await decide(would)
        caps = plan_capacities(plan)
    else:
        target, caps = applied, applied_caps
    return ShadowPrice(pool_usd(target, price), pool_usd(applied, price), caps, applied_caps)


def shadow_due(cfg: Config, fc: ForecastState, measured: Mapping[str, DemandView], ahead: Mapping[str, float | None],
               now: float, moved: bool) -> bool:
    """Between the ticks that plan, shadow decides again when the demand ``on`` would plan for moved as
    :func:`scaler.fleet.step.plan_due` reads it (a forecast rise before the measured one: the pool
    planning ahead would have launched then), so the ahead pool is priced and its capacity noted when
    ``on`` would have planned it."""
    led = fc.shadow
    return plan_due(cfg, led.demand, led.decided_at, raised_view(measured, ahead), now, moved)  # type: ignore[arg-type]


async def shadow_note(fc: ForecastState, now: float, wall: float, measured: Mapping[str, DemandView],
                      ahead: Mapping[str, float | None], applied: Mapping[str, int], applied_plan: Any,
                      decide: Callable[[Mapping[str, DemandView]], Awaitable[tuple[Mapping[str, int], Any]]],
                      price: Callable[[str], float]) -> None:
    """:func:`shadow_price` kept: both pools' $/hr in the dollar ledger (fleet clock ``now``), each model's
    capacity in the served ledger (history clock ``wall``, :mod:`scaler.forecast.served`), and the
    demand decided for (:func:`shadow_due`)."""
    got = await shadow_price(measured, ahead, applied, decide, price, applied_plan)
    fc.shadow.note(now, got.would_usd_per_hr, got.applied_usd_per_hr)
    fc.shadow.demand, fc.shadow.decided_at = raised_view(measured, ahead), now
    fc.served.note(wall, {"ahead": got.would_capacity, "applied": got.applied_capacity}, list(measured))


def raised(reactive: Mapping[str, DemandView], planned: Mapping[str, DemandView]) -> bool:
    """Some model's demand was raised by its forecast."""
    return any(planned[m].qps > d.qps for m, d in reactive.items() if m in planned)


def retires(target: Mapping[str, int], held: Mapping[str, int]) -> bool:
    """``target`` holds fewer of some type than ``held``."""
    return any(target.get(t, 0) < n for t, n in held.items())


def keeps_measured(target: Mapping[str, int], held: Mapping[str, int], reactive: Mapping[str, int]) -> bool:
    """``target`` retires no instance the reactive target would keep: every type at least
    ``min(held, reactive)``."""
    return all(target.get(t, 0) >= min(n, reactive.get(t, 0)) for t, n in held.items())


__all__ = ["ahead_demands", "forecast_lead", "keeps_measured", "pool_usd", "raised", "raised_view", "retires",
           "ShadowPrice", "shadow_due", "shadow_note", "shadow_price"]
