"""The dispatcher's and the metrics endpoint's sections of the config (``dispatcher``, ``metrics``):
where each listens (HOST:PORT), the matching policy, queue and payload limits, the cluster token
and its parameter, TLS and client authentication (:mod:`config.sections.security` holds those models and
the rules for who may talk to the daemon).
"""
from __future__ import annotations

import os
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from config.fields import Strict
from config.hostport import split_hostport
from config.sections.security import TlsSpec, WorkerTlsSpec, read_token


def _optional_hostport(v: str | None, message: str) -> str | None:
    """A field validator's check: None, or a HOST:PORT :func:`config.hostport.split_hostport` accepts."""
    if v is not None:
        try:
            split_hostport(v)
        except ValueError:
            raise ValueError(message) from None
    return v


class DispatcherSpec(Strict):
    listen: str = "127.0.0.1:50051"
    policy: Literal["kairos", "kairos-strict", "fcfs", "drs", "clockwork"] = "kairos-strict"
    queue_limit: Annotated[int, Field(ge=1)] = 10_000
    on_deadline: Literal["drop", "best_effort"] = "drop"
    batching: Literal["none", "work_conserving"] = Field(
        "none", description="work_conserving: queries waiting for the same variant join a dispatched one in one "
                            "worker call while the batch fits every one's SLO (dispatcher.batch_join)")
    max_payload_bytes: Annotated[int, Field(ge=1)] = 4 * 1024 * 1024
    worker_streams: bool = Field(
        True, description="worker calls over one InferStream per worker (a worker without one: unary); "
                          "false: one unary Infer per call, as before issue #41")
    processes: Annotated[int, Field(ge=1, le=64)] | Literal["auto"] = Field(
        1, description="dispatcher processes on this host, all on listen's port (SO_REUSEPORT), replicas of one "
                       "host sharing the workers (config.processes); auto: one per core; more than 1 needs the lease "
                       "table (DynamoDB), as lease.replicas does")
    advertise: str | None = Field(None, description="HOST:PORT workers use to reach the dispatcher (default: listen)")
    worker_port: Annotated[int, Field(ge=1, le=65535)] = 50052
    cluster_token: str | None = Field(None, description="shared secret workers present when they register")
    cluster_token_file: str | None = None
    token_parameter: str | None = Field(
        "/costscale/{cluster}/cluster-token", description="SSM SecureString parameter holding the cluster token: "
        "launched workers read it with their instance profile (user data names it; rotate by overwriting it); "
        "'' or null: the token goes into user data (readable with ec2:DescribeInstanceAttribute)")
    tls: TlsSpec | None = Field(None, description="TLS on this port (config.sections.security); client_ca_file: mutual TLS")
    auth_token_file: str | None = Field(
        None, description="clients of Inference and OIP send this file's token as 'authorization: Bearer <token>'")
    worker_tls: WorkerTlsSpec | None = Field(None, description="TLS on the channels to the workers")
    overload_pending_calls: Annotated[int, Field(ge=1)] = Field(
        1000, description="while more calls than this wait in gRPC for a handler (the event loop saturated), or "
                          "(on_deadline: drop) they wait past half a query's SLO, each query is refused "
                          "RESOURCE_EXHAUSTED at once, counted (dispatcher.overload)")
    max_pending_calls: Annotated[int, Field(ge=1)] = Field(
        3000, description="calls gRPC's core holds for a handler at most; past it the core cancels new ones "
                          "unseen (grpc.server.max_pending_requests and its hard limit)")

    @field_validator("listen", "advertise")
    @classmethod
    def _hostport(cls, v: str | None) -> str | None:
        return _optional_hostport(v, "must be HOST:PORT")

    @model_validator(mode="after")
    def _shed_before_the_core(self) -> DispatcherSpec:
        if self.overload_pending_calls >= self.max_pending_calls:
            raise ValueError(f"overload_pending_calls ({self.overload_pending_calls}) must be below max_pending_calls "
                             f"({self.max_pending_calls}): past that gRPC cancels calls the dispatcher never sees")
        return self

    @field_validator("cluster_token")
    @classmethod
    def _blank_is_none(cls, v: str | None) -> str | None:
        """A blank inline token is no token (beyond loopback one is then generated), never "" to compare."""
        return (v or "").strip() or None

    def process_count(self, cpus: int | None = None) -> int:
        """``processes`` as a number: ``auto`` is one per core (``cpus``, default ``os.cpu_count()``)."""
        if self.processes == "auto":
            return max(1, cpus if cpus is not None else (os.cpu_count() or 1))
        return int(self.processes)

    def token(self) -> str | None:
        """The cluster token (from cluster_token_file when given); None when unset. An empty or
        unreadable token file is a ConfigError (an empty one once read as "no token", which left
        worker registration open beyond loopback)."""
        if self.cluster_token_file:
            return read_token(self.cluster_token_file, "dispatcher.cluster_token_file")
        return self.cluster_token


class MetricsSpec(Strict):
    """Prometheus metrics (``GET /metrics``, ``daemon.observe.metrics``): what ``costscale status`` shows,
    as time series."""

    listen: str | None = Field("127.0.0.1:9464", description="HOST:PORT of the metrics endpoint; null: none")
    public: bool = Field(False, description="allow a listen beyond loopback: the endpoint has no authentication "
                                            "(read-only figures: spend, pool, counts); scrape it through a "
                                            "proxy that authenticates, or set this to say you accept that")

    @field_validator("listen")
    @classmethod
    def _hostport(cls, v: str | None) -> str | None:
        return _optional_hostport(v, "must be HOST:PORT (or null for no metrics endpoint)")


__all__ = ["DispatcherSpec", "MetricsSpec"]
