"""The fleet tick's market hooks (:class:`MarketHooks`): what the tick asks the market around the
actuator, in order: the config a plan is made with and the types left out (:meth:`MarketHooks.deciding`),
what a plan rests on beyond demand (:meth:`~MarketHooks.plan_key`), the instances as the type-level
decisions and parking see them, the price a type is counted at, the target with any overprovision,
the apply itself, and whether to decide again at once.

On-demand only, the hooks are what the tick did before spot existed. With spot capacity they go to
a :class:`SpotHooks` (``scaler.spot.fleet.SpotFleet``, issue #28): the fleet layer names only the
protocol, so it never imports the spot layer above it. One copy for the daemon
(``daemon.aws.spot_wiring.FleetMarket``) and the replay (``sim.replay.fleet.ReplayFleet``)."""
from __future__ import annotations

from typing import Any, Callable, Mapping, Protocol, Sequence

from config.catalog import InstanceType
from config.schema import Config
from scaler.cloud.provider import ManagedInstance
from scaler.fleet.reports import ApplyReport
from scaler.fleet.step import replan_without_unavailable
from scaler.planner.joint_plan import JointPlan


class Actuator(Protocol):
    """What the hooks (and ``scaler.spot.fleet.SpotFleet``) use of :class:`scaler.fleet.actuator.FleetActuator`."""

    budget: float
    catalog: dict[str, InstanceType]
    store: Any
    clock: Callable[[], float]

    def unavailable_types(self) -> set[str]: ...

    def price(self, instance_type: str) -> float: ...

    def apply(self, target: Mapping[str, int], plan_id: str, retire_first: Sequence[str] = (),
              instances: Sequence[ManagedInstance] | None = None) -> ApplyReport: ...


class SpotHooks(Protocol):
    """The spot side of the hooks (``scaler.spot.fleet.SpotFleet``)."""

    def decided(self) -> None: ...

    def planning(self) -> tuple[Config, Any]: ...

    def plan_key(self) -> frozenset[str]: ...

    def replan_now(self, plan: JointPlan | None, target: Mapping[str, int]) -> bool: ...

    def typed(self, instances: list[ManagedInstance]) -> list[ManagedInstance]: ...

    def parking_view(self, instances: list[ManagedInstance]) -> list[ManagedInstance]: ...

    def type_price(self, instance_type: str) -> float: ...

    def extend_target(self, target: dict[str, int]) -> dict[str, int]: ...

    def actuate(self, target: dict[str, int], plan_id: str, retire: list[str],
                listed: list[ManagedInstance]) -> ApplyReport: ...

    def list_managed(self) -> list[ManagedInstance]: ...


class MarketHooks:
    """The fleet tick's market hooks, one copy for the daemon (``daemon.aws.spot_wiring.FleetMarket``)
    and the replay (``sim.replay.fleet.ReplayFleet``): with ``spot`` None, what the tick did before
    spot existed (the config as it is, the types out of capacity, the actuator's apply of a type
    target); with spot (:class:`scaler.spot.fleet.SpotFleet`, a :class:`SpotHooks`), its hooks (module docstring)."""

    def __init__(self, actuator: Actuator, spot: SpotHooks | None = None) -> None:
        self.actuator, self.spot = actuator, spot

    def deciding(self, cfg: Config) -> tuple[Config, list[str]]:
        """A plan is made now: the config priced at what each type can buy, the types left out."""
        if self.spot is None:
            return cfg, sorted(self.actuator.unavailable_types())
        self.spot.decided()
        priced, out = self.spot.planning()
        return priced, sorted(out)

    def plan_key(self) -> frozenset[str]:
        """What a plan rests on beyond demand (a change plans again): the types out of capacity; with
        spot, also the planning prices."""
        return self.spot.plan_key() if self.spot is not None else frozenset(self.actuator.unavailable_types())

    def replan_now(self, plan: JointPlan | None, target: Mapping[str, int]) -> bool:
        """After an apply: decide again at once (a type of the target ran out of capacity; with spot,
        also a type the plan priced at spot that has no zone left)."""
        if self.spot is None:
            return replan_without_unavailable(plan, dict(target), self.actuator.unavailable_types())
        return self.spot.replan_now(plan, target)

    def typed(self, instances: list[ManagedInstance]) -> list[ManagedInstance]:
        """The managed instances as the type-level decisions see them."""
        return self.spot.typed(instances) if self.spot is not None else instances

    def parking_view(self, instances: list[ManagedInstance]) -> list[ManagedInstance]:
        """The managed instances parking counts against the target (spot: not the doomed ones)."""
        return self.spot.parking_view(instances) if self.spot is not None else instances

    def type_price(self, instance_type: str) -> float:
        """$/hr parking and worker assignment price a type at."""
        return self.spot.type_price(instance_type) if self.spot is not None else self.actuator.price(instance_type)

    def extend_target(self, target: dict[str, int]) -> dict[str, int]:
        """The target parking and the actuator work towards (spot: with the overprovision)."""
        return self.spot.extend_target(target) if self.spot is not None else target

    def actuate(self, target: dict[str, int], plan_id: str, retire: list[str],
                listed: list[ManagedInstance] | None) -> ApplyReport:
        """The actuator moves the pool to the type ``target`` (spot: through the slot placement;
        ``listed`` None: listed now)."""
        if self.spot is None:
            return self.actuator.apply(target, plan_id, retire, listed)
        return self.spot.actuate(target, plan_id, retire, listed if listed is not None else self.spot.list_managed())


__all__ = ["Actuator", "MarketHooks", "SpotHooks"]
