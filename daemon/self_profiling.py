"""The daemon profiles its models on its own (INFaaS §3.2: every variant on every hardware type at
registration; Kairos §5.2 cannot plan without the profiles).

At start, for each configured model without a *measured* profile on some allowed type:

1. a model with no profile at all on some type (not even an estimate from ``costscale profile
   --local``) is measured on this machine, its types estimated (``daemon.profiling.profile_here``),
   and until the fleet has measured it the daemon holds a **conservative pool** for it
   (``variants.type_profiles.conservative_pool``: the cheapest allowed type that meets its SLO at
   its largest batch by the local estimate, else the configured minimum counts); the log and
   ``systemctl status`` say so;
2. each type still lacking a measured profile is measured on a running worker of that type, or on a
   probe launched through the fleet actuator within the budget (``daemon.probing.Prober``), under the
   fleet lock so the fleet loop does not retire the probes;
3. the profiles are stored in the variant registry, given to the latency model, and the fleet
   replans from them; a measurement replaces the estimate of its (model, type), and the estimates of
   the types nobody measured (``config/type_estimates.csv``) are derived again from their siblings'
   profiles (a probe of the sibling moves them; a probe of the type itself replaces them).

Every ``fleet_s`` the online latency model is compared with the profiles
(``variants.type_profiles.drift``); a drifted (model, type) is measured again on a worker of that type.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from config.profiles import ProfileTable, load_profiles_csv
from config.schema import ModelSpec
from config.type_estimates import sibling_estimates
from daemon.probing import ProbeOutcome, Prober
from daemon.profiling import ModelProfiles, measure_fn, measured_only, own_models, profile_here, record_measured
from dispatcher.status import Profiling
from scaler.transitions import pool_sum
from scaler.actuator import pool_text
from scaler.estimate_gate import allowed_estimate_types, split_types
from variants.profiler import VariantProfile
from variants.type_profiles import conservative_pool, drift, slo_verdict

if TYPE_CHECKING:
    from daemon.app import Daemon

log = logging.getLogger("costscale.profile")

REFRESH_COOLDOWN_S = 600.0   # a (model, type) measured again at most this often after a drift


class SelfProfiler:
    """See the module docstring. ``hold()`` is the fleet decision while a model is being profiled."""

    def __init__(self, daemon: "Daemon") -> None:
        self.d = daemon
        self.held: dict[str, tuple[dict[str, int], str]] = {}   # model -> (conservative pool, why)
        self.todo: dict[str, list[str]] = {}   # model -> types being profiled (until the round ends)
        self.refreshed: dict[tuple[str, str], float] = {}
        self.probes: ProbeOutcome | None = None   # the last probe round's outcome (logs, tests)
        self.probing = False                      # probes up: the fleet loop waits (daemon.app)
        self._csv = load_profiles_csv(daemon.cfg.profiles)   # models it names keep it as their source
        self._csv_models = set(self._csv.models())
        self._task: asyncio.Task | None = None

    def _types(self) -> list[str]:
        return [t.type for t in self.d.cfg.instance_types]

    def unmeasured(self) -> dict[str, list[str]]:
        """Model (of those the profile CSV does not name) -> allowed types without a measured
        profile (an estimate does not count)."""
        assert self.d.registry is not None
        have = measured_only(self.d.profiles, self.d.registry)
        mine = own_models(self.d.cfg, self._csv)
        out = {m.name: [t for t in self._types() if not have.has(m.profile_name, t)] for m in mine}
        return {m: ts for m, ts in out.items() if ts}

    def hold(self) -> dict[str, int] | None:
        """The pool the fleet holds while models are profiled: every model on its conservative pool
        (their sum); None when some model is planned (:meth:`held_pools` then names the held ones)."""
        pools = self.held_pools()
        if not pools or len(pools) < len(self.d.cfg.models):
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
        for m in self.d.cfg.models:
            if m.profile_name in self._csv_models:
                continue
            have = [t for t in types if self.d.profiles.has(m.profile_name, t)]
            if len(have) < len(types):
                out[m.name] = have
        return out

    def start(self) -> None:
        todo = self.unmeasured()
        mins = {t.type: t.min for t in self.d.cfg.instance_types if t.min}
        for name in todo:   # until the local estimate is in: the configured minimum counts
            spec = self.d.cfg.model(name)
            if any(not self.d.profiles.has(spec.profile_name, t) for t in self._types()):
                self.held[name] = (mins, "measuring it on this machine first: the configured minimum counts")
        if todo:
            self.todo = dict(todo)
            self._task = asyncio.get_running_loop().create_task(self._run(todo))
        sched = self.d._scheduler
        if sched is not None:
            sched.add_job(self.refresh_drifted, "interval", seconds=self.d.cfg.intervals.fleet_s, max_instances=1,
                          coalesce=True, id="profile-drift")

    async def stop(self) -> None:
        """Cancel profiling; a probe round under way terminates its probes before this returns."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    # ---- start: estimate, hold, measure ------------------------------------------------------------
    async def _run(self, todo: dict[str, list[str]]) -> None:
        d = self.d
        results: list[ModelProfiles] = []
        try:
            for name, types in todo.items():
                spec = d.cfg.model(name)
                res = ModelProfiles(spec, d.registry.variants(model=name) if d.registry else [])
                if any(not d.profiles.has(spec.profile_name, t) for t in types):
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
        if d._loop is not None and not d._stop.is_set():
            d._loop.create_task(d.fleet_tick("models profiled"))

    async def _estimate(self, spec: ModelSpec) -> ModelProfiles:
        """Measure here, estimate every type, hold the conservative pool (log and STATUS say so)."""
        from variants.builtin_models import resolve_model
        from worker.server import default_cache_dir

        d = self.d
        src = await asyncio.to_thread(resolve_model, spec.onnx, default_cache_dir())
        res = await asyncio.to_thread(profile_here, d.cfg, spec, d.registry, src, self._types(), None, 5, False)
        table = res.table()
        self._add(table)
        # the conservative pool never rests on an estimate by the type table the config does not allow
        types = split_types(table, spec.profile_name, self._types(), allowed_estimate_types(d.cfg)).planned
        check = slo_verdict(table, spec.profile_name, types, spec.qos_ms, spec.max_batch, spec.name)
        if check.line():
            log.warning("%s", check.line())
        prices = d.cfg.prices(allowed_only=True)
        mins = {t.type: t.min for t in d.cfg.instance_types}
        pool, why = conservative_pool(check, prices, mins, d.cfg.budget_per_hour)
        self.held[spec.name] = (pool, why)
        log.warning("model %s has no latency profiles: served on a conservative pool %s (%s) until it is profiled "
                    "on the fleet", spec.name, pool_text(pool) or "(empty)", why)
        if d._loop is not None:
            d._loop.create_task(d.fleet_tick("conservative pool"))
        return res

    async def _wait_for_pool(self, timeout_s: float) -> None:
        """Until the fleet holds a pool (the conservative one, or the planner's from estimates) and a
        worker of each of its types has registered: those are measured in place, not probed."""
        d = self.d
        end = time.monotonic() + timeout_s
        while time.monotonic() < end and not d._stop.is_set() and d.status.last_error is None:
            have = {w.instance_type for w in d.dispatcher.workers.values() if not w.removed}
            held = self.hold()
            applied = d.status.plans_applied and (held is None or d.status.target == {t: n for t, n in held.items() if n})
            if applied and set(d.status.target) <= have:
                return
            await asyncio.sleep(0.5)

    async def _measure(self, results: list[ModelProfiles]) -> None:
        d = self.d
        assert d.dispatcher is not None and d.actuator is not None and d.registry is not None
        await self._wait_for_pool(d.cfg.launch.pending_timeout_s)
        todo = self.unmeasured()
        fns = {r.spec.name: measure_fn(d.cfg, r.spec, d.registry.variants(model=r.spec.name), None) for r in results}

        async def measure(client, instance_type: str, loaded: set[str] | None = None) -> dict:  # noqa: ANN001
            out: dict = {}
            for name, fn in fns.items():
                if instance_type in todo.get(name, ()):
                    out.update(await fn(client, instance_type, loaded))
            return out

        types = [t for t in self._types() if any(t in ts for ts in todo.values())]
        running = {w.instance_type: w for w in d.dispatcher.workers.values() if not w.removed and not w.parked}
        # a worker that serves: only what it holds, nothing loaded or unloaded under the model loop
        by_type = {t: await measure(running[t].client, t, d.dispatcher.loaded_on(running[t])) for t in types
                   if t in running}
        # probed: types with no worker, or whose worker no longer holds the model itself
        rest = [t for t in types if t not in by_type or any(
            not isinstance(by_type[t].get(name), VariantProfile) for name, ts in todo.items() if t in ts)]
        if rest:
            async with d._fleet_lock:
                self.probing = True
                try:
                    prober = Prober(d.actuator, d.cloud, d.dispatcher, on_fleet_change=lambda _: d._sync_workers(),
                                    register_timeout_s=d.cfg.launch.pending_timeout_s)
                    outcome = self.probes = await prober.run(rest, measure)
                finally:
                    self.probing = False
            log.info("%s", outcome.cost_line())
            for t, why in outcome.failed.items():
                log.warning("not profiled on %s: %s", t, why)
            by_type.update(outcome.profiles)
        for r in results:
            names = {v.name for v in d.registry.variants(model=r.spec.name)}
            record_measured(r, {t: {v: p for v, p in per.items() if v in names} for t, per in by_type.items()},
                            d.registry)
            self._add(r.table())
            log.info("model %s profiled on %s", r.spec.name, ", ".join(sorted(r.base())) or "no type")

    def _add(self, table: ProfileTable) -> None:
        """``table`` into the daemon's profiles (a measurement replaces an estimate, and is no longer
        marked one), and the estimates of the types nobody measured derived again from their siblings'
        profiles as they now are (``config.type_estimates``), for ``table``'s models: no other
        model's profiles moved."""
        self.d.profiles.update(table)
        derived = sibling_estimates(self.d.profiles, models=table.models())
        self.d.profiles.update(derived)
        table = table.merged(derived)
        if getattr(self.d, "predictor", None) is not None:
            self.d.predictor.add_profiles(table)
        if self.d.dispatcher is not None:
            self.d.dispatcher.refresh_variants()

    # ---- drift --------------------------------------------------------------------------------------
    async def refresh_drifted(self) -> None:
        """Measure again each (model, type) whose online latency drifted from its profile (models
        the profile CSV names keep it: their ONNX file only stands in for them)."""
        d = self.d
        if d.dispatcher is None or d.registry is None or (self._task is not None and not self._task.done()):
            return
        now = time.monotonic()
        for m in own_models(d.cfg, self._csv):
            for t in self._types():
                if not d.profiles.has(m.profile_name, t) or now - self.refreshed.get((m.name, t), -1e18) < REFRESH_COOLDOWN_S:
                    continue
                r = drift(d.profiles.get(m.profile_name, t), d.predictor.observed_means(m.profile_name, t))
                w = next((w for w in d.dispatcher.workers.values() if w.instance_type == t and not w.removed), None)
                if r is None or w is None:
                    continue
                self.refreshed[(m.name, t)] = now
                log.warning("model %s on %s: queries take %.2fx its profile; measuring it again", m.name, t, r)
                res = ModelProfiles(m, [])
                fn = measure_fn(d.cfg, m, [v for v in d.registry.variants(model=m.name) if v.name == m.name], None)
                record_measured(res, {t: await fn(w.client, t, d.dispatcher.loaded_on(w))}, d.registry)
                self._add(res.table())
