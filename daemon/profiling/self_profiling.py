"""The daemon profiles its models on its own (INFaaS §3.2: every variant on every hardware type at
registration; Kairos §5.2 cannot plan without the profiles).

At start, for each configured model without a *measured* profile on some allowed type:

1. a model with no profile at all on some type (not even an estimate from ``costscale profile
   --local``) is measured on this machine, its types estimated (``daemon.profiling.model_profiles.profile_here``),
   and until the fleet has measured it the daemon holds a **conservative pool** for it
   (``variants.type_profiles.conservative_pool``: the cheapest allowed type that meets its SLO at
   its largest batch by the local estimate, else the configured minimum counts); the log and
   ``systemctl status`` say so;
2. each type still lacking a measured profile is measured on a running worker of that type, or on a
   probe launched through the fleet actuator within the budget (``daemon.profiling.probing.Prober``), under the
   fleet lock so the fleet loop does not retire the probes;
3. the profiles are stored in the variant registry, given to the latency model, and the fleet
   replans from them; a measurement replaces the estimate of its (model, type), and the estimates of
   the types nobody measured (``config/type_estimates.csv``) are derived again from their siblings'
   profiles (a probe of the sibling moves them; a probe of the type itself replaces them).

Every ``fleet_s`` the online latency model is compared with the profiles
(``variants.type_profiles.drift``); a drifted (model, type) is measured again on a worker of that type.

The profiler is given what it uses, never the daemon: the config, the profiles and the variant
registry, the workers (:class:`WorkerView`), the fleet loop's status and lock, a prober factory, a
profile sink (the latency model and routing, :func:`profile_sink`), ``request_tick`` (a replan), and
the online latency model's observed means.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol

from config.profiles import ProfileTable, load_profiles_csv
from config.schema import ModelSpec
from config.type_estimates import sibling_estimates
from daemon.profiling.probing import ProbeOutcome, Prober
from daemon.profiling.model_profiles import ModelProfiles, measure_fn, measured_only, own_models, profile_here, record_measured
from dispatcher.api.status import Profiling
from scaler.planner.pools import pool_sum
from scaler.planner.pools import pool_text
from scaler.planner.estimate_gate import allowed_estimate_types, split_types
from variants.profiler import VariantProfile
from variants.type_profiles import conservative_pool, drift, slo_verdict

if TYPE_CHECKING:
    from apscheduler.schedulers.base import BaseScheduler

    from config.schema import Config
    from daemon.observe.fleet_status import FleetStatus
    from dispatcher.latency_model import LatencyModel
    from variants.registry import VariantRegistry

log = logging.getLogger("costscale.profile")

REFRESH_COOLDOWN_S = 600.0   # a (model, type) measured again at most this often after a drift


#: a profile table the daemon's latency model and routing take in (:func:`profile_sink`)
ProfileSink = Callable[[ProfileTable], None]
#: (model, instance type) -> the online latency model's observed means per batch
ObservedMeans = Callable[[str, str], Mapping[int, tuple[int, float]]]


class WorkerView(Protocol):
    """The registered workers (``dispatcher.server.Dispatcher``'s view) a profile is measured on."""

    @property
    def workers(self) -> Mapping[str, Any]: ...

    def loaded_on(self, w: Any) -> set[str]: ...


class Refreshes(Protocol):
    """Routing that reads the profiles again (``Dispatcher.refresh_variants``)."""

    def refresh_variants(self) -> None: ...


def profile_sink(predictor: LatencyModel | None, routing: Refreshes | None) -> ProfileSink:
    """New profiles to the latency model (``add_profiles``) and to routing (``refresh_variants``)."""
    def sink(table: ProfileTable) -> None:
        if predictor is not None:
            predictor.add_profiles(table)
        if routing is not None:
            routing.refresh_variants()
    return sink


class SelfProfiler:
    """See the module docstring. ``hold()`` is the fleet decision while a model is being profiled."""

    def __init__(self, cfg: Callable[[], Config], profiles: ProfileTable, registry: VariantRegistry,
                 workers: WorkerView, fleet: Callable[[], FleetStatus], fleet_lock: asyncio.Lock,
                 prober: Callable[[], Prober], request_tick: Callable[[str], None], stopping: Callable[[], bool],
                 sink: ProfileSink, observed: ObservedMeans) -> None:
        self.cfg = cfg
        self.profiles = profiles
        self.registry = registry
        self.view = workers
        self.fleet = fleet
        self.fleet_lock = fleet_lock
        self.prober = prober
        self.request_tick = request_tick
        self.stopping = stopping
        self.sink = sink
        self.observed = observed
        self.held: dict[str, tuple[dict[str, int], str]] = {}   # model -> (conservative pool, why)
        self.todo: dict[str, list[str]] = {}   # model -> types being profiled (until the round ends)
        self.refreshed: dict[tuple[str, str], float] = {}
        self.probes: ProbeOutcome | None = None   # the last probe round's outcome (logs, tests)
        self.probing = False                      # probes up: the fleet loop waits (daemon.app)
        self._csv = load_profiles_csv(cfg().profiles)   # models it names keep it as their source
        self._csv_models = set(self._csv.models())
        self._task: asyncio.Task | None = None

    def _types(self) -> list[str]:
        return [t.type for t in self.cfg().instance_types]

    def unmeasured(self) -> dict[str, list[str]]:
        """Model (of those the profile CSV does not name) -> allowed types without a measured
        profile (an estimate does not count)."""
        have = measured_only(self.profiles, self.registry)
        mine = own_models(self.cfg(), self._csv)
        out = {m.name: [t for t in self._types() if not have.has(m.profile_name, t)] for m in mine}
        return {m: ts for m, ts in out.items() if ts}

    def hold(self) -> dict[str, int] | None:
        """The pool the fleet holds while models are profiled: every model on its conservative pool
        (their sum); None when some model is planned (:meth:`held_pools` then names the held ones)."""
        pools = self.held_pools()
        if not pools or len(pools) < len(self.cfg().models):
            return None
        return pool_sum(pools.values())

    def held_pools(self) -> dict[str, dict[str, int]]:
        """Model -> the conservative pool it is served on while it is profiled (the joint plan
        plans the other models in what these leave of the budget)."""
        return {m: dict(p) for m, (p, _) in self.held.items()}

    def note(self) -> str:
        return "".join(f"; {m} not profiled yet: conservative pool {pool_text(p) or 'empty'}" for m, (p, _) in self.held.items())

    def status(self) -> tuple[Profiling, ...]:
        """What ``costscale status`` says: each model being profiled, the conservative pool it is
        served on meanwhile and why, the types left, and whether probes are up."""
        out = []
        for m, types in self.todo.items():
            held = self.held.get(m)
            pool = {t: n for t, n in held[0].items() if n} if held is not None else None
            why = held[1] if held is not None else "planned from its local estimates"
            out.append(Profiling(m, pool, why, tuple(types), self.probing))
        return tuple(out)

    def plan_types(self) -> dict[str, list[str]]:
        """Model -> the allowed types it has a profile on, for each model costscale profiles itself
        of which some type could not be profiled (logged: no factor, no probe in the budget)."""
        out = {}
        types = self._types()
        for m in self.cfg().models:
            if m.profile_name in self._csv_models:
                continue
            have = [t for t in types if self.profiles.has(m.profile_name, t)]
            if len(have) < len(types):
                out[m.name] = have
        return out

    def start(self, scheduler: BaseScheduler | None) -> None:
        """Profile the models without measured profiles (on the running loop); check for drift every
        ``fleet_s`` on ``scheduler``."""
        cfg = self.cfg()
        todo = self.unmeasured()
        mins = {t.type: t.min for t in cfg.instance_types if t.min}
        for name in todo:   # until the local estimate is in: the configured minimum counts
            spec = cfg.model(name)
            if any(not self.profiles.has(spec.profile_name, t) for t in self._types()):
                self.held[name] = (mins, "measuring it on this machine first: the configured minimum counts")
        if todo:
            self.todo = dict(todo)
            self._task = asyncio.get_running_loop().create_task(self._run(todo))
        if scheduler is not None:
            scheduler.add_job(self.refresh_drifted, "interval", seconds=cfg.intervals.fleet_s, max_instances=1,
                              coalesce=True, id="profile-drift")

    async def stop(self) -> None:
        """Cancel profiling; a probe round under way terminates its probes before this returns."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    # ---- start: estimate, hold, measure ------------------------------------------------------------
    async def _run(self, todo: dict[str, list[str]]) -> None:
        results: list[ModelProfiles] = []
        try:
            for name, types in todo.items():
                spec = self.cfg().model(name)
                res = ModelProfiles(spec, self.registry.variants(model=name))
                if any(not self.profiles.has(spec.profile_name, t) for t in types):
                    res = await self._estimate(spec)
                results.append(res)
            await self._measure(results)
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - keep serving on the conservative pool; logged
            log.exception("profiling on the fleet failed")
        finally:
            self.held.clear()
            self.todo = {}
        self.request_tick("models profiled")   # (none once the daemon stops)

    async def _estimate(self, spec: ModelSpec) -> ModelProfiles:
        """Measure here, estimate every type, hold the conservative pool (log and STATUS say so)."""
        from variants.runtime.builtin_models import resolve_model
        from worker.options import default_cache_dir

        src = await asyncio.to_thread(resolve_model, spec.onnx, default_cache_dir())
        res = await asyncio.to_thread(profile_here, self.cfg(), spec, self.registry, src, self._types(), None, 5, False)
        table = res.table()
        self._add(table)
        # the conservative pool never rests on an estimate by the type table the config does not allow
        cfg = self.cfg()   # as it is now (a reload may have come while it measured)
        types = split_types(table, spec.profile_name, self._types(), allowed_estimate_types(cfg)).planned
        check = slo_verdict(table, spec.profile_name, types, spec.qos_ms, spec.max_batch, spec.name)
        if check.line():
            log.warning("%s", check.line())
        prices = cfg.prices(allowed_only=True)
        mins = {t.type: t.min for t in cfg.instance_types}
        pool, why = conservative_pool(check, prices, mins, cfg.budget_per_hour)
        self.held[spec.name] = (pool, why)
        log.warning("model %s has no latency profiles: served on a conservative pool %s (%s) until it is profiled "
                    "on the fleet", spec.name, pool_text(pool) or "(empty)", why)
        self.request_tick("conservative pool")
        return res

    async def _wait_for_pool(self, timeout_s: float) -> None:
        """Until the fleet holds a pool (the conservative one, or the planner's from estimates) and a
        worker of each of its types has registered: those are measured in place, not probed."""
        end = time.monotonic() + timeout_s
        while time.monotonic() < end and not self.stopping() and self.fleet().last_error is None:
            st = self.fleet()
            have = {w.instance_type for w in self.view.workers.values() if not w.removed}
            held = self.hold()
            applied = st.plans_applied and (held is None or st.target == {t: n for t, n in held.items() if n})
            if applied and set(st.target) <= have:
                return
            await asyncio.sleep(0.5)

    async def _measure(self, results: list[ModelProfiles]) -> None:
        view = self.view
        await self._wait_for_pool(self.cfg().launch.pending_timeout_s)
        todo = self.unmeasured()
        fns = {r.spec.name: measure_fn(self.cfg(), r.spec, self.registry.variants(model=r.spec.name), None) for r in results}

        async def measure(client, instance_type: str, loaded: set[str] | None = None) -> dict:  # noqa: ANN001
            out: dict = {}
            for name, fn in fns.items():
                if instance_type in todo.get(name, ()):
                    out.update(await fn(client, instance_type, loaded))
            return out

        types = [t for t in self._types() if any(t in ts for ts in todo.values())]
        running = {w.instance_type: w for w in view.workers.values() if not w.removed and not w.parked}
        # a worker that serves: only what it holds, nothing loaded or unloaded under the model loop
        by_type = {t: await measure(running[t].client, t, view.loaded_on(running[t])) for t in types
                   if t in running}
        # probed: types with no worker, or whose worker no longer holds the model itself
        rest = [t for t in types if t not in by_type or any(
            not isinstance(by_type[t].get(name), VariantProfile) for name, ts in todo.items() if t in ts)]
        if rest:
            async with self.fleet_lock:
                self.probing = True
                try:
                    prober = self.prober()
                    outcome = self.probes = await prober.run(rest, measure)
                finally:
                    self.probing = False
            log.info("%s", outcome.cost_line())
            for t, why in outcome.failed.items():
                log.warning("not profiled on %s: %s", t, why)
            by_type.update(outcome.profiles)
        for r in results:
            names = {v.name for v in self.registry.variants(model=r.spec.name)}
            record_measured(r, {t: {v: p for v, p in per.items() if v in names} for t, per in by_type.items()},
                            self.registry)
            self._add(r.table())
            log.info("model %s profiled on %s", r.spec.name, ", ".join(sorted(r.base())) or "no type")

    def _add(self, table: ProfileTable) -> None:
        """``table`` into the daemon's profiles (a measurement replaces an estimate, and is no longer
        marked one), and the estimates of the types nobody measured derived again from their siblings'
        profiles as they now are (``config.type_estimates``), for ``table``'s models: no other
        model's profiles moved."""
        self.profiles.update(table)
        derived = sibling_estimates(self.profiles, models=table.models())
        self.profiles.update(derived)
        self.sink(table.merged(derived))

    # ---- drift --------------------------------------------------------------------------------------
    async def refresh_drifted(self) -> None:
        """Measure again each (model, type) whose online latency drifted from its profile (models
        the profile CSV names keep it: their ONNX file only stands in for them)."""
        if self._task is not None and not self._task.done():
            return
        now = time.monotonic()
        for m in own_models(self.cfg(), self._csv):
            for t in self._types():
                if not self.profiles.has(m.profile_name, t) or now - self.refreshed.get((m.name, t), -1e18) < REFRESH_COOLDOWN_S:
                    continue
                r = drift(self.profiles.get(m.profile_name, t), self.observed(m.profile_name, t))
                w = next((w for w in self.view.workers.values() if w.instance_type == t and not w.removed), None)
                if r is None or w is None:
                    continue
                self.refreshed[(m.name, t)] = now
                log.warning("model %s on %s: queries take %.2fx its profile; measuring it again", m.name, t, r)
                res = ModelProfiles(m, [])
                fn = measure_fn(self.cfg(), m, [v for v in self.registry.variants(model=m.name) if v.name == m.name], None)
                record_measured(res, {t: await fn(w.client, t, self.view.loaded_on(w))}, self.registry)
                self._add(res.table())
