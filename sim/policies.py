"""Building the dispatcher's policies for a simulated pool (the same objects the daemon uses).

The base type of a pool (Kairos §5.1 Definition 1 / §7) is the type in the pool with the lowest
mean latency for the largest query (batch ``max_batch``); ties go to the name order.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Mapping

from dispatcher.policy import (DISPATCH_VIEW_FACTOR, DISPATCH_XI, FirstIdlePolicy, Policy, default_base_type,
                              pick_base_type)
from config.sections.batch_dist import DEFAULT_MAX_BATCH
from config.profiles import ProfileTable

if TYPE_CHECKING:
    from config.schema import Config
    from dispatcher.latency_model import LatencyModel

SIM_POLICY_NAMES: tuple[str, ...] = ("kairos", "kairos-strict", "fcfs", "drs", "clockwork", "first-idle")


def base_type_of(pool: Mapping[str, int], profiles: ProfileTable, model: str,
                 max_batch: int = DEFAULT_MAX_BATCH) -> str:
    types = [t for t, c in pool.items() if c > 0]
    if not types:
        raise ValueError("the pool has no instances")
    return pick_base_type(types, lambda t: float(profiles.latency_ms(model, t, float(max_batch))))


def policy_factory(name: str, profiles: ProfileTable, model: str, pool: Mapping[str, int], *,
                   xi: float = DISPATCH_XI, drs_threshold: int | None = None,
                   base_type: str | None = None) -> Callable[[], Policy]:
    """A function returning a *fresh* policy (policies may keep state: one per run).

    ``base_type``: the base the daemon's dispatcher would use (the planner's, Kairos §5.2); when
    None or not in the pool, :func:`base_type_of` picks one.

    ``first-idle`` is :class:`dispatcher.policy.FirstIdlePolicy`; the others come from
    ``dispatcher.policies.make_policy`` with a ``LatencyModel`` seeded from ``profiles``."""
    if name == "first-idle":
        return FirstIdlePolicy
    if name not in SIM_POLICY_NAMES:
        raise ValueError(f"unknown policy {name!r} (known: {', '.join(SIM_POLICY_NAMES)})")
    from dispatcher.latency_model import LatencyModel
    from dispatcher.policies import make_policy

    base = base_type if base_type is not None and pool.get(base_type, 0) > 0 else base_type_of(pool, profiles, model)
    predictor = LatencyModel.from_profiles(profiles, stat="mean")

    def make() -> Policy:
        return make_policy(name, predictor, base, xi=xi, drs_threshold=drs_threshold)

    return make


def dispatcher_policy(cfg: "Config", predictor: "LatencyModel", model: str | None = None) -> Policy:
    """The policy ``dispatcher.server.Dispatcher`` matches ``model``'s queries with before the first
    plan (``Dispatcher.policy_for``): the configured one with the dispatcher's tunables and that
    model's :func:`dispatcher.policy.default_base_type`; the fleet loop then sets the planner's base."""
    from dispatcher.policies import make_policy

    base = default_base_type(cfg, predictor.predict_ms, model)
    return make_policy(cfg.dispatcher.policy, predictor, base, xi=DISPATCH_XI, max_queue_factor=DISPATCH_VIEW_FACTOR)
