"""Spot capacity in the daemon (issue #28 phase 2): the fleet tick's market hooks, spot prices kept
fresh, and interruption notices (the workers' IMDS watch, and optionally EventBridge's warning from
SQS) turned into the same decisions the replay takes.

:class:`FleetMarket` is what ``daemon/app.py`` calls where the fleet tick prices, types, extends and
applies a target: :class:`scaler.spot.fleet.MarketHooks`, the very hooks the replay's fleet loop
calls (with no spot type in the config exactly what the daemon did before: the config as it is,
the types out of capacity, the actuator's apply; with one :class:`scaler.spot.fleet.SpotFleet`'s),
so the daemon and the replay take one set of spot decisions (:mod:`scaler.spot.market`). Around
them, the daemon's spot I/O:

* prices: ``scaler.pricing.spot.SpotPriceSource`` (describe_spot_price_history, cached beside the
  state store, the shipped table as fallback) at start and again every fleet interval (the cache
  asks EC2 once an hour); a price that moved reprices the slots and the next tick plans with it;
* a notice (``Control.SpotNotice`` from a worker, or an SQS message): under the fleet lock the
  instance is doomed and its zone out (:func:`scaler.spot.market.after_notice`), a fleet tick runs
  at once ("spot interruption": the placement puts the replacement in another zone, else on-demand,
  within the budget), and the worker is drained :data:`scaler.spot.market.DRAIN_LEAD_S` before EC2
  reclaims it (:func:`scaler.spot.market.drains_due`'s rule); a query still running on it then is
  re-run by the dispatcher, which requeues a failed call (DESIGN invariant 4). A rebalance
  recommendation is logged and counted; it changes nothing (the instance may run for hours).
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Awaitable, Callable, Mapping

from config.schema import Config
from config.sections.spot import spot_types
from scaler.fleet.actuator import FleetActuator
from scaler.cloud.provider import CloudProvider
from scaler.fleet.market_hooks import MarketHooks
from scaler.spot.fleet import SpotFleet
from scaler.spot.market import DRAIN_LEAD_S, SpotMarket
from scaler.pricing.spot import SpotPriceSource, cache_path_for
from scaler.cloud.slots import is_spot

log = logging.getLogger("costscale")

Drain = Callable[[str], Awaitable[bool]]


class FleetMarket(MarketHooks):
    """The fleet tick's market hooks (:class:`scaler.spot.fleet.MarketHooks`, the replay's too) and
    the daemon's spot I/O around them (module docstring)."""

    def __init__(self, actuator: FleetActuator, cloud: CloudProvider, spot: SpotFleet | None = None) -> None:
        super().__init__(actuator, spot)
        self.actuator: FleetActuator = actuator
        self.cloud = cloud
        self.prices: SpotPriceSource | None = None
        self._warned: str | None = None                     # the price lookup's last warning
        self.notices: list[tuple[float, str, str]] = []     # (monotonic time, instance id, kind)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._timers: list[asyncio.TimerHandle] = []
        self.handler: Callable[[str, str, float | None], None] | None = None
        #: told every slot's $/hr billed now, when the spot prices are set or move (the dispatcher's
        #: ``set_spot_prices``: Status, the metrics and the spend price spot instances at them)
        self.on_prices: Callable[[dict[str, float]], None] | None = None

    def reload(self, cfg: Config) -> None:
        """A reloaded config (SIGHUP): the actuator's budget and catalog; with spot, the market rebuilt
        from it (markets, on-demand prices, zones, max_price, overprovision, fallback) at the spot prices
        held now (a zone new to the config is priced by the next refresh) and the spot slots repriced.
        Spot turned on where the daemon started without it waits for a restart."""
        self.actuator.budget = cfg.budget_per_hour
        self.actuator.catalog = cfg.catalog()
        if self.spot is not None:
            self.spot.requota(cfg)
            self.spot.reprice(SpotMarket.from_config(cfg, self.spot.market.spot))
        elif cfg.spot is not None and spot_types(cfg.instance_types):
            log.warning("reload: spot capacity (market, spot) changed: restart to apply (the daemon runs on-demand)")
        self.publish_prices()

    def requota(self, cfg: Config) -> bool:
        """The vCPU quotas of ``cfg`` moved (``daemon.aws.quotas``): with spot, the placement keeps within them."""
        if self.spot is not None:
            self.spot.requota(cfg)
        return True

    def billed_prices(self) -> dict[str, float]:
        """Every slot's $/hr billed now (:meth:`scaler.spot.market.SpotMarket.slot_prices`); on-demand
        only: each allowed type's catalog price."""
        if self.spot is not None:
            return self.spot.market.slot_prices()
        return {t: it.price_per_hour for t, it in self.actuator.catalog.items()}

    def publish_prices(self) -> None:
        """Tell :attr:`on_prices` the prices billed now."""
        if self.on_prices is not None:
            self.on_prices(self.billed_prices())

    # ---- prices -------------------------------------------------------------------------------
    def _lookup(self, cfg: Config, fetch: bool = True) -> Mapping[str, Mapping[str, float]]:
        assert self.prices is not None
        if cfg.spot is None:                         # spot turned off by a reload: no spot price to ask
            return {}
        got, warning = self.prices.lookup(spot_types(cfg.instance_types), list(cfg.spot.zones), fetch=fetch)
        if warning and warning != self._warned:      # once, not every fleet interval while it stands
            log.warning("%s", warning)
        elif warning:
            log.debug("%s", warning)
        self._warned = warning
        return got

    async def refresh(self, cfg: Config, lock: asyncio.Lock) -> bool:
        """Spot prices again (the cache asks EC2 once its entries are an hour old); True when a
        price moved (the slots are repriced under the fleet lock)."""
        if self.spot is None or self.prices is None:
            return False
        got = await asyncio.to_thread(self._lookup, cfg)
        market = SpotMarket.from_config(cfg, got)
        if market.spot == self.spot.market.spot:
            return False
        async with lock:
            self.spot.reprice(market)
        self.publish_prices()
        log.info("spot prices moved: %s", ", ".join(f"{t}@{z} {p:g}" for t, zs in market.spot.items()
                                                      for z, p in zs.items()))
        return True

    # ---- notices ------------------------------------------------------------------------------
    def on_notice(self, lock: asyncio.Lock, drain: Drain, tick_soon: Callable[[str], None],
                  loop: asyncio.AbstractEventLoop) -> Callable[[str, str, float | None], None]:
        """The handler the dispatcher (and the SQS reader) calls with (instance id, kind, reclaim
        time in epoch s or None)."""
        def handle(instance_id: str, kind: str, reclaim_at: float | None) -> None:
            if loop.is_closed():
                return
            def go() -> None:
                self._spawn(loop, self._notice(instance_id, kind, reclaim_at, lock, drain, tick_soon, loop))
            try:
                here = asyncio.get_running_loop()
            except RuntimeError:
                here = None
            if here is loop:
                go()
            else:                                    # the SQS reader's thread
                loop.call_soon_threadsafe(go)
        self.handler = handle
        return handle

    def _spawn(self, loop: asyncio.AbstractEventLoop, coro: Awaitable[Any]) -> None:
        task = loop.create_task(coro)  # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _notice(self, instance_id: str, kind: str, reclaim_at: float | None, lock: asyncio.Lock,
                      drain: Drain, tick_soon: Callable[[str], None], loop: asyncio.AbstractEventLoop) -> None:
        now = time.monotonic()
        self.notices.append((now, instance_id, kind))
        if kind != "instance-action" or self.spot is None:
            log.info("spot %s notice for %s: noted", kind, instance_id)
            return
        if instance_id in self.spot.state.doomed:
            return                                   # told twice (the worker and SQS)
        listed = await asyncio.to_thread(self.cloud.list_managed)
        mine = {i.instance_id: i for i in listed if i.live}
        inst = mine.get(instance_id)
        if inst is None or not is_spot(inst.instance_type):
            log.warning("spot notice for %s: not a live spot instance of this cluster; ignored", instance_id)
            return
        at = None if reclaim_at is None else now + (reclaim_at - time.time())
        async with lock:
            gone_at = self.spot.notice(instance_id, inst.instance_type, now, at)
        delay = max(0.0, gone_at - DRAIN_LEAD_S - time.monotonic())
        log.warning("spot interruption notice for %s (%s): reclaimed in %.0f s; draining in %.0f s, replacing now",
                    instance_id, inst.instance_type, gone_at - time.monotonic(), delay)
        self._timers.append(loop.call_later(delay, lambda: self._spawn(loop, drain(instance_id))))
        tick_soon("spot interruption")

    def start(self, cfg_of: Callable[[], Config], lock: asyncio.Lock, tick_soon: Callable[[str], None],
              loop: asyncio.AbstractEventLoop, drain: Drain,
              set_handler: Callable[[Callable[[str, str, float | None], None]], None]) -> None:
        """With spot: take the workers' notices (``set_handler``: the dispatcher's), refresh the spot
        prices every fleet interval (a move plans again at once), and read the interruption queue
        when one is configured (``daemon.aws.spot_queue``)."""
        if self.spot is None:
            return
        set_handler(self.on_notice(lock, drain, tick_soon, loop))

        async def refresh() -> None:
            while True:
                await asyncio.sleep(cfg_of().intervals.fleet_s)      # a reload's interval from the next one on
                try:
                    if await self.refresh(cfg_of(), lock):
                        tick_soon("spot price")
                except Exception as exc:  # noqa: BLE001 - the table or cache stands in; next interval again
                    log.warning("spot prices: %s", exc)
        self._spawn(loop, refresh())
        cfg = cfg_of()
        if cfg.spot is not None and cfg.spot.interruption_queue:
            from daemon.aws.spot_queue import read_queue

            self._spawn(loop, read_queue(cfg, self.handler))

    async def close(self) -> None:
        for t in self._timers:
            t.cancel()
        for task in list(self._tasks):
            task.cancel()


async def open_market(cfg: Config, actuator: FleetActuator, cloud: CloudProvider,
                      on_prices: Callable[[dict[str, float]], None] | None = None) -> FleetMarket:
    """The daemon's :class:`FleetMarket`: on-demand only, or with the spot hooks over spot prices
    looked up now (EC2, the cache, else the shipped table); ``on_prices`` (the dispatcher's
    ``set_spot_prices``) is told the prices billed now, and again whenever they move."""
    fm = FleetMarket(actuator, cloud)
    fm.on_prices = on_prices
    if cfg.spot is not None and spot_types(cfg.instance_types):
        fm.prices = SpotPriceSource(cfg.region, cache_path_for(cfg.state_path), endpoint_url=cfg.aws.endpoint_url)
        got = await asyncio.to_thread(fm._lookup, cfg)
        fm.spot = SpotFleet(cfg, SpotMarket.from_config(cfg, got), actuator, cloud.list_managed)
    fm.publish_prices()
    return fm


__all__ = ["FleetMarket", "open_market"]
