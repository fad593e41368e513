"""The ``lease`` section: the cluster-wide owner lease in DynamoDB and the daemon's replicas
(issue #27; ``scaler.replicas.lease_holder``, ``daemon.replicas.role``)."""
from __future__ import annotations

import re
from typing import Annotated

from pydantic import Field, field_validator

from config.fields import Strict

_TABLE_RE = re.compile(r"^[A-Za-z0-9_.-]{3,255}$")


class LeaseSpec(Strict):
    """The cluster-wide owner lease (DynamoDB, conditional writes): one daemon acts on a cluster's
    fleet, whatever host it runs on; a second is refused until the holder's lease expires."""

    table: str = Field("costscale-leases", description="DynamoDB table of the leases (created when missing)")
    ttl_s: Annotated[float, Field(ge=3, le=3600)] = Field(
        60.0, description="lease length; the holder renews every ttl_s/3, a crashed holder's lease is free after it")
    replicas: bool = Field(
        False, description="a daemon that finds the lease held starts as a standby replica (serves queries, "
                           "heartbeats, publishes its demand, retries the lease every ttl_s/3) instead of exiting 1")
    replica_id: str = Field(
        "", description="this replica's id in the lease table (replicas: true; default HOST:PORT of its "
                           "listener, this host's name for HOST when it listens on loopback or every address)")

    unready_s: Annotated[float, Field(ge=0, le=300)] = Field(
        5.0, description="replicas: how long a stopping replica answers health checks NOT_SERVING while it still "
                         "serves, so a balancer moves new queries off it before it refuses them")

    @field_validator("replica_id")
    @classmethod
    def _replica_id(cls, v: str) -> str:
        if v and (len(v) > 200 or not re.match(r"^[A-Za-z0-9_.:@-]+$", v)):
            raise ValueError("must be 1-200 letters, digits, '_', '.', ':', '@' or '-'")
        return v

    @field_validator("table")
    @classmethod
    def _table(cls, v: str) -> str:
        if not _TABLE_RE.match(v):
            raise ValueError("must be a DynamoDB table name: 3-255 letters, digits, '_', '-' or '.'")
        return v


__all__ = ["LeaseSpec"]
