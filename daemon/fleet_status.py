"""What the daemon's fleet loop last decided and did, and the small helpers of its loops (kept
apart from ``daemon.app`` so that module stays the loops' I/O and timing)."""
from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Awaitable, Callable

from config.profiles import ProfileTable, load_profiles_csv
from config.schema import Config
from daemon.aws_wiring import DaemonError
from daemon.profiling import stored_profiles
from variants.families.applications import with_applications
from scaler.cloud import ManagedInstance, pool_of
from scaler.joint_plan import JointPlan
from scaler.replan import DemandView

if TYPE_CHECKING:
    from daemon.app import Daemon


@dataclass
class FleetStatus:
    """What the fleet loop last decided and did (for logs, Status and the demo summary)."""

    plan: JointPlan | None = None
    target: dict[str, int] = field(default_factory=dict)
    demand: dict[str, DemandView] | None = None     # each model's, as last planned
    instances: list[ManagedInstance] = field(default_factory=list)
    plans_applied: int = 0
    last_error: str | None = None

    def pool(self) -> dict[str, int]:
        return pool_of(self.instances)


def quiet_at_shutdown(tick: Callable[..., Awaitable[None]]) -> Callable[..., Awaitable[None]]:
    """A loop's tick cut short by shutdown (APScheduler cancels its task mid EC2 or worker call)
    returns quietly; a cancellation while running still propagates."""
    @functools.wraps(tick)
    async def run(self: Daemon, *args: object) -> None:
        try:
            await tick(self, *args)
        except asyncio.CancelledError:
            if not self._stop.is_set():
                raise
    return run


def demand_text(demand: dict[str, DemandView]) -> str:
    if len(demand) == 1:
        return f"{next(iter(demand.values())).qps:.1f} q/s"
    return ", ".join(f"{m} {d.qps:.1f}" for m, d in demand.items()) + " q/s"


def load_profiles_for(cfg: Config) -> ProfileTable:
    """The profile CSV, the profiles measured since (a model without any is profiled at start) and
    the configured applications' (issue #25: each at its most accurate variant, and every variant)."""
    try:
        return with_applications(cfg, load_profiles_csv(cfg.profiles).merged(stored_profiles(cfg)))
    except ValueError as exc:
        raise DaemonError(str(exc)) from None




__all__ = ["FleetStatus", "demand_text", "load_profiles_for", "quiet_at_shutdown"]
