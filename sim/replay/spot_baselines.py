"""What costscale's spot capacity is judged against (issue #28), on the same trace, query loop,
cloud, actuator and boot delays:

- ``on_demand_only``: costscale itself with every type on-demand (the config's spot settings off);
- ``spothedge``: SpotHedge's policy as its paper describes it (EuroSys '25, "SpotHedge: Serving AI
  Models on Spot Instances", §4; the SkyServe system), as a replay baseline: one replica type (the
  one whose homogeneous pool costs least at the trace's peak minute at spot prices, the choice most
  favourable to it), ``N_tar`` replicas from costscale's own planner restricted to that type (its
  QPS autoscaler's role), ``N_tar + N_extra`` spot replicas (:data:`SPOTHEDGE_EXTRA`, §4.2) spread
  over the active zones, the zones with fewest replicas first (§4.1; a zone that preempted is
  inactive for the cooldown), and on-demand replicas ``min(N_tar, N_tar + N_extra - ready spot)``
  (§4.3 "dynamic fallback": launched while spot replicas are missing or still booting, retired
  when they are ready). It does not look at prices across zones and plans no heterogeneous pool.
  Like every baseline here it runs without parking and without the model loop; the budget holds
  at billed prices for it too (:func:`scaler.spot.market.place`'s last step). Left out: its
  safety net (keep ``N_min`` on-demand once availability fell below the SLO) and the paper's
  random tie-break between zones (here: by name).
"""
from __future__ import annotations

from typing import Collection, Mapping, Sequence

from config.profiles import ProfileTable
from config.schema import Config
from config.sections.spot import spot_types
from scaler.fleet import step as fleet_step
from scaler.cloud.provider import ManagedInstance
from scaler.planner.model_plan import SloCheck
from scaler.planner.joint_plan import JointPlan, declared_demands, plan_joint
from scaler.planner.replan import DemandView
from scaler.spot.fleet import priced_config
from scaler.spot.market import Placement, SpotMarket, keep_n, drop_order, within_budget, planning_prices
from scaler.cloud.slots import base_type, is_spot, slot_of
from sim.replay.run import ReplayRun, ReplaySpec, replay, workloads_by_model
from sim.replay.baselines import _grid_rate, _no_parking, minute_peaks
from sim.replay.spot import spot_prices_for
from sim.slo_check import slo_check as default_slo_check
from sim.workload import Workload

SPOT_BASELINES = ("on_demand_only", "spothedge")
#: SpotHedge's overprovision, N_extra (§4.2: 1 or 2 by default; the cheaper one here)
SPOTHEDGE_EXTRA = 1


def on_demand_only(cfg: Config) -> Config:
    """``cfg`` with every type on-demand and no spot section."""
    types = [t.model_copy(update={"market": "on_demand"}) for t in cfg.instance_types]
    return cfg.model_copy(update={"instance_types": types, "spot": None})


def spot_enabled(cfg: Config) -> bool:
    """Some type of ``cfg`` may run spot."""
    return bool(spot_types(cfg.instance_types))


class SpotHedgePolicy:
    """SpotHedge's placement (module docstring): spot ``N_tar + N_extra`` spread, on-demand fallback
    ``min(N_tar, N_tar + N_extra - ready spot)``."""

    name = "spothedge"

    def __init__(self, extra: int) -> None:
        self.extra = extra

    def extras(self, market: SpotMarket, target: Mapping[str, int], prices: Mapping[str, float], budget: float,
               unavailable: Collection[str]) -> dict[str, int]:
        return {}

    def place(self, market: SpotMarket, target: Mapping[str, int], instances: Sequence[ManagedInstance],
              budget: float, *, unavailable: Collection[str], doomed: Collection[str],
              retire_first: Sequence[str], extra: Mapping[str, int]) -> Placement:
        key = drop_order(market, {iid: k for k, iid in enumerate(retire_first)})
        live = [i for i in instances if i.live]
        out: dict[str, int] = {}
        short: dict[str, int] = {}
        fallback: dict[str, int] = {}
        held: list[ManagedInstance] = []
        for t in sorted(set(target) | {base_type(i.instance_type) for i in live}):
            n_tar = int(target.get(t, 0))
            mine = [i for i in live if base_type(i.instance_type) == t]
            held += [i for i in mine if i.instance_id in doomed and n_tar > 0 and market.keepable(i.instance_type)]
            alive = [i for i in mine if i.instance_id not in doomed and market.keepable(i.instance_type)]
            n_prov = n_tar + (self.extra if n_tar and market.spot_allowed(t) else 0)
            spot = keep_n([i for i in alive if is_spot(i.instance_type)], n_prov, key) if market.spot_allowed(t) else []
            placed: dict[str, int] = {}
            for i in spot:
                placed[i.instance_type] = placed.get(i.instance_type, 0) + 1
            zones = market.open_zones(t, unavailable)
            for _ in range(n_prov - len(spot)):
                if not zones:
                    break
                z = min(zones, key=lambda z: (placed.get(slot_of(t, z), 0), z))
                placed[slot_of(t, z)] = placed.get(slot_of(t, z), 0) + 1
            ready = sum(1 for i in spot if i.state == "running")
            od = min(n_tar, max(0, n_prov - ready)) if market.on_demand_allowed(t) else 0
            if od:
                placed[t] = od
                fallback[t] = od
            if sum(placed.values()) < n_tar:
                short[t] = n_tar - sum(placed.values())
            for s, k in placed.items():
                out[s] = out.get(s, 0) + k
        return within_budget(market, out, held, short, fallback, budget, unavailable, retire_first)


class HomogeneousPlanner:
    """``N_tar`` of one type: the fleet's demand planned with only ``itype`` allowed (min_cost),
    memoised on each model's rate rounded up to a 2 % grid."""

    def __init__(self, cfg: Config, profiles: ProfileTable, slo_check: SloCheck, itype: str) -> None:
        self.cfg, self.profiles, self.slo_check, self.itype = cfg, profiles, slo_check, itype
        self._memo: dict[tuple[float, ...], tuple[dict[str, int], JointPlan | None]] = {}

    def __call__(self, now: float, demand: Mapping[str, DemandView]) -> tuple[dict[str, int], JointPlan | None]:
        grid = {m: DemandView(_grid_rate(d.qps), d.mix, d.measured) for m, d in demand.items()}
        key = tuple(grid[m].qps for m in sorted(grid))
        if key not in self._memo:
            self._memo[key] = fleet_step.fleet_target(self.cfg, self.profiles, grid, slo_check=self.slo_check,
                                                      types=[self.itype])
        return self._memo[key]


def spothedge_type(cfg: Config, profiles: ProfileTable, peak: Mapping[str, float], market: SpotMarket,
                   slo_check: SloCheck) -> str:
    """The type whose homogeneous min_cost pool for the ``peak`` rates costs least at spot prices
    (all zones open: each type at its cheapest zone's price, :func:`scaler.spot.market.planning_prices`);
    ties by name."""
    priced = priced_config(cfg, planning_prices(market).prices)
    declared = declared_demands(cfg)
    demand = {m: DemandView(float(peak.get(m, 0.0)), declared[m].mix, False) for m in declared}
    best: tuple[float, str] | None = None
    for t in sorted(market.markets):
        try:
            plan = plan_joint(priced, profiles, demand, slo_check=slo_check, types=[t], objective="min_cost")
        except Exception:  # noqa: BLE001 - a type that cannot serve the peak is no candidate
            continue
        cost = sum(priced.prices()[x] * n for x, n in plan.pool.items())
        if best is None or (cost, t) < best:
            best = (cost, t)
    if best is None:
        raise ValueError("spothedge: no single instance type serves the peak within the budget")
    return best[1]


def run_spot_baseline(name: str, cfg: Config, profiles: ProfileTable, workload: Workload | Mapping[str, Workload],
                      duration_s: float, spec: ReplaySpec, *, slo_check: SloCheck = default_slo_check) -> ReplayRun:
    """One spot baseline's replay (module docstring) on ``spec``'s trace and prices."""
    if name == "on_demand_only":
        return replay(on_demand_only(cfg), profiles, workload, duration_s, spec, slo_check=slo_check)
    if name != "spothedge":
        raise ValueError(f"unknown spot baseline {name!r} (known: {', '.join(SPOT_BASELINES)})")
    if not spot_enabled(cfg):
        raise ValueError("spothedge: no instance type may run spot")
    market = SpotMarket.from_config(cfg, spot_prices_for(cfg, spec.spot_prices))
    loads = workloads_by_model(cfg, workload, spec)
    peak = {m: float(minute_peaks(wl.arrivals, duration_s).max()) if len(wl) else 0.0 for m, wl in loads.items()}
    itype = spothedge_type(cfg, profiles, peak, market, slo_check)
    base = _no_parking(cfg)
    planner = HomogeneousPlanner(priced_config(base, planning_prices(market).prices), profiles, slo_check, itype)
    run = replay(base, profiles, loads, duration_s, spec, slo_check=slo_check, decide_fn=planner,
                 spot_policy=SpotHedgePolicy(SPOTHEDGE_EXTRA))
    if run.spot is not None:
        run.spot["replica_type"] = itype
    return run


def figures(run: ReplayRun) -> dict[str, object]:
    """A baseline's figures for the report: dollars, attainment, served, hours, and its spot section."""
    from sim.replay.report import report

    rep = report(run)
    out = {k: rep[k] for k in ("cost_usd", "slo_attainment", "served", "queries", "p99_ms", "peak_cost_per_hour",
                               "budget_violations", "instance_hours")}
    if run.spot is not None:
        out["spot"] = {k: run.spot[k] for k in ("policy", "preemptions", "spot_share", "fallback_hours",
                                                "queries_lost_to_preemption") if k in run.spot}
        if "replica_type" in run.spot:
            out["spot"]["replica_type"] = run.spot["replica_type"]
    return out


__all__ = ["HomogeneousPlanner", "SPOT_BASELINES", "SPOTHEDGE_EXTRA", "SpotHedgePolicy", "figures", "on_demand_only",
           "run_spot_baseline", "spot_enabled", "spothedge_type"]
