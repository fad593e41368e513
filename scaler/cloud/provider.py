"""The cloud-provider interface: the only way decisions reach EC2 (DESIGN "Actuators are narrow").

Implementations: ``scaler.cloud.ec2.Ec2Cloud`` (boto3; run against moto in tests and the demo) and
``scaler.cloud.fake.FakeCloud`` (in memory, for unit tests). Cloud errors become the typed
exceptions below at this boundary (as Karpenter's CloudProvider does).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, Sequence

CLUSTER_TAG = "costscale:cluster"
MANAGED_BY_TAG = "costscale:managed-by"
MANAGED_BY_VALUE = "costscale"
INTENT_TAG = "costscale:intent"        # the ClientToken of the launch that created the instance


@dataclass(frozen=True)
class ManagedInstance:
    instance_id: str
    instance_type: str
    state: str                          # pending | running | shutting-down | terminated | stopping | stopped
    launch_time: float = 0.0            # epoch seconds
    private_ip: str | None = None
    tags: dict[str, str] = field(default_factory=dict)

    @property
    def intent(self) -> str | None:
        return self.tags.get(INTENT_TAG)

    @property
    def live(self) -> bool:
        """Pending or running: it costs money now."""
        return self.state in ("pending", "running")


def pool_of(instances: Sequence[ManagedInstance]) -> dict[str, int]:
    """Live instances counted by type."""
    out: dict[str, int] = {}
    for i in instances:
        if i.live:
            out[i.instance_type] = out.get(i.instance_type, 0) + 1
    return out


class CloudError(Exception):
    """A cloud call failed; ``retryable`` says whether the same call may succeed later."""

    retryable = False


class Throttled(CloudError):
    retryable = True


class InsufficientCapacity(CloudError):
    def __init__(self, instance_type: str, message: str = "") -> None:
        super().__init__(message or f"insufficient capacity for {instance_type}")
        self.instance_type = instance_type


class VcpuLimitExceeded(InsufficientCapacity):
    """EC2 refused a launch: the running vCPUs of the type's family would exceed the account's quota
    (``VcpuLimitExceeded``; a spot launch: ``MaxSpotInstanceCountExceeded``; config.quota_families). Not a
    want of capacity of the type: the actuator reports it (``ApplyReport.quota_refused``) without taking
    the type out, and the fleet lowers the family's known quota to what runs
    (``scaler.planner.quota.lowered_quotas``) until the next read of Service Quotas."""


class NotManaged(CloudError):
    """Refused: the instance does not carry this cluster's tag (DESIGN invariant 2)."""


class CloudConfigError(CloudError):
    """Bad launch settings or credentials: a user error, not retried."""


class CloudProvider(Protocol):
    cluster: str

    def launch(self, instance_type: str, count: int, client_token: str, tags: dict[str, str] | None = None) -> list[ManagedInstance]:
        """Launch ``count`` instances tagged with the cluster, managed-by and intent (= client_token) tags.
        Idempotent per client_token: instances already carrying that intent are returned instead."""
        ...

    def terminate(self, instance_ids: list[str]) -> None:
        """Terminate managed instances; raises NotManaged for any id without this cluster's tag."""
        ...

    def list_managed(self) -> list[ManagedInstance]:
        """Every instance with this cluster's tag that is not yet terminated."""
        ...

    def find_by_intent(self, client_token: str) -> list[ManagedInstance]:
        ...
