"""Which of the Dispatcher's names live on which of its parts, and how they are forwarded.

The :class:`dispatcher.server.Dispatcher` composes its parts and keeps, for the daemon, the model
loop and the tests, the names they have always used: ``d.workers`` is
``d.worker_registry.workers``, ``d._variant_meta`` is ``d.placement.variant_meta``. :data:`PART_NAMES`
lists them per part; :func:`forward_part_names` sets one :class:`_Forwarded` descriptor per name on
the Dispatcher class, so a read or a write (a test's stub method too) goes to the part. This module
imports no part and not the Dispatcher (the contracts in pyproject.toml).
"""
from __future__ import annotations

from typing import Any


class _Forwarded:
    """A Dispatcher attribute that lives on one of its parts, read and set through the Dispatcher
    under the name the daemon and the tests use (e.g. ``d.workers`` is ``d.worker_registry.workers``,
    ``d._variant_meta`` is ``d.placement.variant_meta``). A method set this way (a test's stub)
    replaces the part's own, as the other parts call it."""

    def __init__(self, part: str, name: str) -> None:
        self.part, self.name = part, name

    def __get__(self, d: Any, owner: type | None = None) -> Any:
        if d is None:
            return self
        return getattr(getattr(d, self.part), self.name)

    def __set__(self, d: Any, value: Any) -> None:
        setattr(getattr(d, self.part), self.name, value)


#: the Dispatcher's names that live on a part: part attribute -> (Dispatcher name, or (its name,
#: the part's name))
PART_NAMES: dict[str, tuple[str | tuple[str, str], ...]] = {
    "queries": ("accepted", "served", "rejected", "redispatched", "query_timeout_s", "idempotency_capacity",
                "max_retries"),
    "worker_registry": ("workers", "serves", "parked_ids", "cloud_view", "health_interval_s",
                        "health_timeout_s", "health_failures", "utilization_horizon_s", "allow_instance",
                        "set_cloud_view", "set_spot_notice_handler", "booting", "forget_instance", "add_worker_direct",
                        "drain", "serving_by_type", "utilization", "online_utilization"),
    "roles": ("set_assignment", "mark_parked", "park", "unpark"),
    "routing": ("policy", "observe_batch", "observe_delay_s", "take_samples", "contract_broken"),
    "admission": ("window", "model_windows"),
    "tunables": ("xi", "view_factor"),
    "placement": ("registry", "variant_states", "load_ops", "unload_ops", ("_models", "models"),
                  ("_variant_meta", "variant_meta"), "refresh_variants", "variant_model", "speed_factor",
                  "loaded_on", "ensure_loaded", "load_variant", "unload_variant",
                  "list_variants", "register_model"),
    "offline": (("offline_jobs", "jobs"), ("offline_threshold", "threshold"), ("offline_chunk", "chunk"),
                ("offline_poll_s", "poll_s"), ("submit_offline", "submit")),
}


def forward_part_names(cls: type) -> None:
    """Set a :class:`_Forwarded` descriptor on ``cls`` (the Dispatcher) for every name in
    :data:`PART_NAMES`."""
    for part, names in PART_NAMES.items():
        for name in names:
            mine, theirs = name if isinstance(name, tuple) else (name, name)
            setattr(cls, mine, _Forwarded(part, theirs))


__all__ = ["PART_NAMES", "forward_part_names"]
