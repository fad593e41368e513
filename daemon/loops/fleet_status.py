"""What the daemon's fleet loop last decided and did (:class:`FleetStatus`), and the small helpers
of its loops: a tick that shutdown cut short returns quietly, the fleet tick's log line, the plan's
workers that rest on estimated profiles, the profiles the daemon starts with."""
from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass, field
from typing import Awaitable, Callable, Protocol

from config.profiles import Estimate, ProfileTable, load_profiles_csv
from config.schema import Config
from config.type_estimates import with_type_estimates
from daemon.aws.wiring import DaemonError
from daemon.profiling.model_profiles import stored_profiles
from variants.families.applications import with_applications
from scaler.planner.pools import pool_text
from scaler.cloud.provider import ManagedInstance, pool_of
from scaler.planner.estimate_gate import estimates_line, share_estimates
from scaler.fleet.tick import FleetState
from scaler.planner.joint_plan import JointPlan
from scaler.planner.replan import DemandView


class Stoppable(Protocol):
    """What :func:`quiet_at_shutdown` asks of the object whose tick it wraps."""

    def stopping(self) -> bool: ...


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


def quiet_at_shutdown(tick: Callable[..., Awaitable[None]]) -> Callable[..., Awaitable[None]]:
    """A loop's tick cut short by shutdown (APScheduler cancels its task mid EC2 or worker call)
    returns quietly; a cancellation while running (``owner.stopping()`` false) still propagates."""
    @functools.wraps(tick)
    async def run(owner: Stoppable, *args: object) -> None:
        try:
            await tick(owner, *args)
        except asyncio.CancelledError:
            if not owner.stopping():
                raise
    return run


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


def load_profiles_for(cfg: Config) -> ProfileTable:
    """The profile CSV, the profiles measured since (a model without any is profiled at start), the
    configured applications' (issue #25: each at its most accurate variant, and every variant), and
    the estimates of the types nobody measured from their siblings (``config.type_estimates``, issue
    #29; tagged, planned on only where allowed)."""
    try:
        return with_type_estimates(with_applications(cfg, load_profiles_csv(cfg.profiles).merged(stored_profiles(cfg))))
    except ValueError as exc:
        raise DaemonError(str(exc)) from None


__all__ = ["FleetStatus", "Stoppable", "demand_text", "load_profiles_for", "plan_estimates", "quiet_at_shutdown", "tick_line"]
