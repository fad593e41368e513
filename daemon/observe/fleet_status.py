"""What the daemon's fleet loop last decided and did (:class:`FleetStatus`, read by Status, the status
feed, the self-profiler and the demo), the fleet tick's log line, and the plan's workers that rest
on estimated profiles."""
from __future__ import annotations

from dataclasses import dataclass, field

from config.profiles import Estimate, ProfileTable
from config.schema import Config
from scaler.planner.pools import pool_text
from scaler.cloud.provider import ManagedInstance, pool_of
from scaler.planner.estimate_gate import estimates_line, share_estimates
from scaler.fleet.tick import FleetState
from scaler.planner.joint_plan import JointPlan
from scaler.planner.replan import DemandView


@dataclass
class FleetStatus(FleetState):
    """What the fleet loop last decided and did (for logs, Status and the demo summary): the fleet
    tick's state (:class:`scaler.fleet.tick.FleetState`: plan, target, demand, plans applied, last
    error, ...) and what only the daemon shows."""

    instances: list[ManagedInstance] = field(default_factory=list)   # listed at the last worker sync
    #: model -> type -> estimate: the plan's workers that rest on an estimated profile (issue #29)
    estimated: dict[str, dict[str, Estimate]] = field(default_factory=dict)

    def pool(self) -> dict[str, int]:
        return pool_of(self.instances)


def demand_text(demand: dict[str, DemandView]) -> str:
    if len(demand) == 1:
        return f"{next(iter(demand.values())).qps:.1f} q/s"
    return ", ".join(f"{m} {d.qps:.1f}" for m, d in demand.items()) + " q/s"


def plan_estimates(cfg: Config, profiles: ProfileTable, plan: JointPlan | None) -> dict[str, dict[str, Estimate]]:
    """Model -> type -> estimate for each model's workers in ``plan`` planned from an estimated
    profile (:func:`scaler.planner.estimate_gate.share_estimates`; a held pool without a plan: none)."""
    return share_estimates(cfg, profiles, {m: s.pool for m, s in plan.models.items()}) if plan is not None else {}


def tick_line(reason: str, demand: dict[str, DemandView], target: dict[str, int], plan: JointPlan | None,
              pinned: bool, summary: str, estimated: dict[str, dict[str, Estimate]]) -> str:
    """The fleet tick's log line: the demand, the target and its rule, what was done, and the
    workers that rest on estimates (said, never taken for measurements)."""
    rule = plan.rule if plan else "pinned" if pinned else "conservative pool"
    est = estimates_line(estimated)
    return (f"fleet ({reason}): demand {demand_text(demand)} -> target {pool_text(target) or 'none'} ({rule}); {summary}"
            + (f"; {est}" if est else ""))


__all__ = ["FleetStatus", "demand_text", "plan_estimates", "tick_line"]
