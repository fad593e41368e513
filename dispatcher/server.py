"""The live dispatcher (Kairos §6: a central controller that predicts latencies, matches queries to
instances and calls them over gRPC, one query per instance at a time): :class:`Dispatcher` composes
the parts below, runs the gRPC server (public ``Inference`` front end, ``Control`` for worker
registration, gRPC health) and reports what it sees.

Where a change belongs:

* :mod:`dispatcher.runtime` -- what the parts share: the clock, the loop and tasks, the stopping
  flag, the coalesced request for a matching round, the matching's tunables;
* :mod:`dispatcher.queries` -- the queues, the calls in flight, overall deadlines, re-dispatch, and
  how every accepted query ends (DESIGN invariant 4);
* :mod:`dispatcher.admission` -- request validation (getVariant, INFaaS §4.1), admission, the
  demand windows;
* :mod:`dispatcher.workers.registry` -- the worker registry: registration, health checks, drain,
  utilization, the cloud view; :mod:`dispatcher.workers.roles` -- park, unpark and the model each
  worker serves;
* :mod:`dispatcher.routing` -- the routing round: which idle worker serves which waiting query
  (Kairos §5.1), the worker call, the latency model's measurements; :mod:`dispatcher.call_outcome`
  -- what a call's reply or failure means for each of its queries;
* :mod:`dispatcher.workers.placement` -- variant metadata and placement: the models and variants known,
  where each is loaded, Load/Unload, RegisterModel and ListVariants (INFaaS §3-4);
* :mod:`dispatcher.accuracy.routing` -- the accuracy plan's routing and SlackFit's binding;
  :mod:`dispatcher.pipeline_exec` -- pipeline queries; :mod:`dispatcher.offline` -- offline jobs
  (INFaaS §3.1, §5);
* :mod:`dispatcher.api.servicers` -- the gRPC servicers: parse, call, render;
  :mod:`dispatcher.api.oip_servicer` -- the Open Inference Protocol (KServe v2 / Triton) on the same port;
* :mod:`dispatcher.api.status` -- what Status reports; :mod:`dispatcher.outcomes` -- how queries ended.

Each part takes the narrow collaborators it uses (each module's docstring says which), never this
Dispatcher: no module of the package imports this one (an import-linter contract in
pyproject.toml), so a shard -- a dispatcher over a subset of the workers -- is built from the same
parts. The Dispatcher builds them in dependency order, owns the server's lifecycle (listening,
credentials, the cluster token, stop) and forwards the parts' API and state under the names the
daemon, the model loop and the tests use (:data:`dispatcher.part_names.PART_NAMES`).
"""
from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping

import grpc
import numpy as np
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from config.catalog import InstanceType
from config.errors import ConfigError
from config.schema import Config
from config.sections.security import client_auth_missing, read_token
from dispatcher.accuracy.routing import AccuracyRouting
from dispatcher.admission import Admission
from dispatcher.auth import BearerTokenInterceptor, TokenRing
from dispatcher.credentials import PLAINTEXT, WorkerChannelSecurity, dispatcher_server_credentials
from dispatcher.latency_model import LatencyModel
from dispatcher.object_store import ObjectStore, S3Objects
from dispatcher.offline import OfflineJobs
from dispatcher.api.oip_servicer import SERVICE_NAME as OIP_SERVICE_NAME, OipServicer
from dispatcher.outcomes import OutcomeLedger
from dispatcher.overload import server_options
from dispatcher.part_names import forward_part_names
from dispatcher.pipeline_exec import PipelineRunner
from dispatcher.workers.placement import VariantPlacement
from dispatcher.policies import make_policy
from dispatcher.policy import Policy, default_base_type
from dispatcher.proto import costscale_pb2 as pb, costscale_pb2_grpc as pbg, oip_pb2_grpc as oipg
from dispatcher.queries import QueryBook
from dispatcher.routing import RoutingRound
from dispatcher.runtime import MatchTunables, RoundTrigger, Runtime
from dispatcher.forwarding import Forwarder
from dispatcher.api.malformed import MalformedIsInvalidArgument
from dispatcher.api.servicers import _ControlServicer, _InferenceServicer
from dispatcher.api.status import (FleetFacts, build_status_reply, pool_cost_per_hour, record_outcome, record_pipeline,
                               slot_pool)
from dispatcher.window import DemandWindow, WindowSnapshot
from dispatcher.workers.client import WorkerClient
from dispatcher.workers.roles import WorkerRoles
from dispatcher.workers.registry import WorkerRegistry
from scaler.planner.replan import STEADY_HORIZON_S
from scaler.cloud.slots import is_spot

if TYPE_CHECKING:
    from variants.registry import VariantRegistry

SERVICE_NAME = "costscale.v1.Inference"
_EMPTY_WINDOW = DemandWindow(capacity=1)


class Dispatcher:
    """See the module docstring. Tunables are plain attributes, settable after construction:
    ``query_timeout_s`` (30), ``max_retries`` (2 re-dispatches), ``health_interval_s`` (1),
    ``health_timeout_s`` (1), ``health_failures`` (2 in a row), ``idempotency_capacity`` (10,000),
    ``xi`` (0.98), ``view_factor`` (2), ``observe_batch`` (32 measurements fed to the latency model
    at once) and ``observe_delay_s`` (0.05: the longest a measurement waits for its batch). The policy built here (none given) gets ``xi`` and
    ``view_factor`` as its ξ and ``max_queue_factor``; a policy passed in keeps its own."""

    def __init__(self, cfg: Config, predictor: LatencyModel, *, clock: Callable[[], float] = time.monotonic,
                 policy: Policy | None = None, base_type: str | None = None, registry: VariantRegistry | None = None,
                 models_dir: str | Path | None = None, objects: ObjectStore | None = None) -> None:
        self.cfg = cfg
        #: where offline inputs and outputs and registered models' files are read and written (S3)
        self.objects: ObjectStore = objects or S3Objects(cfg.region, cfg.aws.endpoint_url)
        self.predictor = predictor
        self.clock = clock
        #: the base type of a matching that takes one (pipelines' fallback; the busiest model's once planned)
        self.base_type = base_type or self._default_base_type()
        #: each model's Kairos base type for its C_j: before a plan each model's own default
        #: (:func:`dispatcher.policy.default_base_type`), then the planner's (``set_base_type``); a
        #: ``base_type`` given here stands for every model
        self.base_types: dict[str, str] = {m.name: base_type or self._default_base_type(m.name) for m in cfg.models}
        #: the allowed types and their $/hr, updated in place on a reload (the parts hold the catalog)
        self._catalog: dict[str, InstanceType] = {}
        self._prices: dict[str, float] = {}
        #: spot slot (TYPE@ZONE) -> $/hr billed now, from the daemon's market (set_spot_prices)
        self._spot_prices: dict[str, float] = {}
        self.set_catalog(cfg.catalog())
        #: how queries ended, per model (Status and the metrics); what the daemon adds to Status
        self.outcomes = OutcomeLedger(clock())
        self.status_source: Callable[[], FleetFacts] | None = None
        #: dispatcher replicas: while this one owns no worker, where its queries go (dispatcher.forwarding)
        self.forwarder: Forwarder | None = None
        # lifecycle
        #: the cluster token workers register with and are called with (a ring: it may rotate)
        self._token: TokenRing | None = None
        #: how worker channels are dialled (dispatcher.worker_tls), read at start
        self.worker_security: WorkerChannelSecurity = PLAINTEXT
        self._server: grpc.aio.Server | None = None
        self.private_port: int | None = None   # dispatcher.processes > 1: this process's own port
        self._health: health.aio.HealthServicer | None = None
        # the parts, each given what it uses (the policy's tunables: one source, passed to the policy built here)
        self.rt = Runtime(clock)
        self.tunables = MatchTunables()
        self._given_policy = policy           # a policy passed in matches every model's queries
        self._policies: dict[str, Policy] = {}   # built here: one per base type
        policy = policy or self._policy_with_base(self.base_type)
        self.trigger = RoundTrigger(self.rt)
        self.queries = QueryBook(self.rt, self.trigger)
        self.worker_registry = WorkerRegistry(self.rt, self.trigger, self.queries, self._catalog, self._connect)
        self.placement = VariantPlacement(cfg.models, self.worker_registry, predictor, self._catalog, self.rt,
                                          self.trigger, self.objects, registry, models_dir)
        self.roles = WorkerRoles(self.worker_registry, self.placement, self.trigger)
        self.accuracy = AccuracyRouting(self.placement, self.worker_registry, self.queries.waiting, self.trigger.kick,
                                        clock, self.tunables)
        self.routing = RoutingRound(cfg.dispatcher, self.rt, self.trigger, self.queries, self.worker_registry,
                                    self.placement, self.accuracy, policy, predictor, self.tunables,
                                    policy_for=self.policy_for)
        self.admission = Admission(cfg.dispatcher, self.rt, self.trigger, self.queries, self.worker_registry,
                                   self.placement, self.accuracy, self.routing, predictor, self.tunables)
        self.pipelines = PipelineRunner(cfg.pipelines, self.submit, clock, self.worker_registry, self.placement,
                                        predictor, self._current_base_type)
        self.offline = OfflineJobs(self.admission, self.routing.eligible, self.worker_registry, self.objects, self.rt)

    # -- configuration -----------------------------------------------------------------------------
    def _default_base_type(self, model: str | None = None) -> str:
        """Before the first plan: :func:`dispatcher.policy.default_base_type` for ``model`` (None: the
        first model's, the fallback of a matching that takes one base type)."""
        return default_base_type(self.cfg, self.predictor.predict_ms, model)

    def _policy_with_base(self, base: str) -> Policy:
        """The configured policy with ``base`` as its Kairos base type (built once per base type)."""
        p = self._policies.get(base)
        if p is None:
            p = self._policies[base] = make_policy(self.cfg.dispatcher.policy, self.predictor, base,
                                                   xi=self.tunables.xi, max_queue_factor=self.tunables.view_factor)
        return p

    def policy_for(self, model: str) -> Policy:
        """The policy matching ``model``'s queries: the one passed in, else the configured policy with
        that model's base type (Kairos §5.1's C_j is relative to the model's base type, as each model's
        lane in the replay has it)."""
        if self._given_policy is not None:
            return self._given_policy
        return self._policy_with_base(self.base_types.get(model, self.base_type))

    def _current_base_type(self) -> str:
        return self.base_type

    def reload(self, cfg: Config) -> None:
        """A reloaded config (SIGHUP): the prices the model loop and Status use, and the budget Status
        shows (it showed the budget at start after a reload changed it: the soak, issue #40); the rest of
        the dispatcher section is read only at start (``config.sections.security.RESTART_ONLY``)."""
        self.set_catalog(cfg.catalog())
        self.cfg = self.cfg.model_copy(update={"budget_per_hour": cfg.budget_per_hour})

    def set_catalog(self, catalog: Mapping[str, InstanceType]) -> None:
        """The allowed instance types and their prices (at start and on a config reload)."""
        self._catalog.clear()
        self._catalog.update(catalog)
        self._prices.clear()
        self._prices.update({t: it.price_per_hour for t, it in self._catalog.items()})

    def set_spot_prices(self, slot_prices: Mapping[str, float]) -> None:
        """The spot slots' $/hr billed now (``daemon.aws.spot_wiring.FleetMarket`` at start, when spot
        prices move, on a reload); Status prices spot instances at them (:mod:`dispatcher.api.status`)."""
        self._spot_prices = {s: float(p) for s, p in slot_prices.items() if is_spot(s)}

    def billed_prices(self) -> dict[str, float]:
        """$/hr per type (the catalog's on-demand price) and per spot slot (its spot price)."""
        return {**self._prices, **self._spot_prices}

    def set_base_type(self, t: str, per_model: Mapping[str, str] | None = None) -> None:
        """The planner's base types: ``per_model`` (model -> its plan's base type; models it leaves
        out keep theirs), else ``t`` for every model; ``t`` is also the single base type a matching
        that takes one uses (pipelines' fallback, a policy passed in)."""
        self.base_type = t
        self.base_types.update(per_model if per_model is not None else dict.fromkeys(self.base_types, t))
        if self._given_policy is not None and hasattr(self._given_policy, "base_type"):
            self._given_policy.base_type = t  # type: ignore[attr-defined]
        self.trigger.kick()

    def _connect(self, address: str) -> WorkerClient:
        """A channel to the worker at ``address``, with the dispatcher's TLS and cluster token."""
        return WorkerClient(address, self.worker_security, self._token, streams=self.cfg.dispatcher.worker_streams)

    def register(self, req: pb.RegisterWorkerRequest) -> pb.RegisterWorkerReply:
        """A worker's RegisterWorker (:meth:`dispatcher.workers.registry.WorkerRegistry.register`)."""
        return self.worker_registry.register(req, self._token)
    def _read_token(self) -> str | None:
        return self.cfg.dispatcher.token()

    def cluster_token(self) -> str:
        """The token a worker registers with now ("" when there is none): what a local worker
        standing for an instance reads (a launched one reads it from the token's parameter)."""
        return self._token.outbound() if self._token is not None else (self._read_token() or "")

    def set_cluster_token(self, token: str) -> bool:
        """The cluster token as its parameter holds it now (read at start and every minute): a new
        one is used from now on, the one before still accepted for a grace period
        (:class:`dispatcher.auth.TokenRing`); True when it changed. Never logged."""
        if not token:
            return False
        if self._token is None:          # before start (the daemon read the parameter first), or none configured
            self._token = TokenRing(token)
            return True
        return self._token.set(token)

    # -- lifecycle ---------------------------------------------------------------------------------
    def _interceptors(self) -> list[grpc.aio.ServerInterceptor]:
        """Every call counted (:mod:`dispatcher.overload`), client authentication by bearer token
        (``dispatcher.auth_token_file``) on the Inference and OIP services (:mod:`dispatcher.auth`; none
        without one), then a malformed body answered INVALID_ARGUMENT (:mod:`dispatcher.api.malformed`)."""
        path = self.cfg.dispatcher.auth_token_file
        typed = MalformedIsInvalidArgument()     # after authentication: an unauthenticated body is never parsed
        if not path:
            return [self.admission.backlog, typed]
        return [self.admission.backlog, BearerTokenInterceptor(read_token(path, "dispatcher.auth_token_file"),
                                                               (SERVICE_NAME, OIP_SERVICE_NAME)), typed]

    async def start(self, listen: str | None = None) -> int:
        """Listen on ``listen`` (default ``dispatcher.listen``); ConfigError (one line, exit 2) when
        that is not loopback and no client authentication is configured (:mod:`config.sections.security`), or
        when a certificate, key or token file cannot be read."""
        spec = self.cfg.dispatcher
        address = listen or spec.listen
        refusal = client_auth_missing(address, spec.auth_token_file, spec.tls)
        if refusal:
            raise ConfigError(refusal)
        credentials = dispatcher_server_credentials(spec.tls)
        interceptors = self._interceptors()
        self.worker_security = WorkerChannelSecurity.from_spec(spec.worker_tls)
        self.rt.loop = asyncio.get_running_loop()
        if self._token is None:         # a token read from its parameter before start is kept
            token = self._read_token()
            self._token = TokenRing(token) if token else None
        limit = self.cfg.dispatcher.max_payload_bytes + 1024 * 1024
        shared = spec.process_count() > 1     # dispatcher.processes: the port shared by this host's processes
        server = self.admission.backlog.follow(lambda: grpc.aio.server(interceptors=interceptors, options=[
            ("grpc.max_receive_message_length", limit), ("grpc.max_send_message_length", 64 * 1024 * 1024),
            ("grpc.so_reuseport", int(shared)), *server_options(spec.max_pending_calls)]))
        pbg.add_InferenceServicer_to_server(_InferenceServicer(self), server)
        pbg.add_ControlServicer_to_server(_ControlServicer(
            self.register, lambda req: self.worker_registry.spot_notice(req, self._token)), server)
        oipg.add_GRPCInferenceServiceServicer_to_server(
            OipServicer(self.submit, self.placement, self.worker_registry, self.rt), server)
        self._health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        # server reflection: grpcurl and other generic clients list and call the services
        reflection.enable_server_reflection((SERVICE_NAME, "costscale.v1.Control", OIP_SERVICE_NAME,
                                             health.SERVICE_NAME, reflection.SERVICE_NAME), server)
        port = (server.add_secure_port(address, credentials) if credentials is not None
                else server.add_insecure_port(address))
        if port == 0:
            raise OSError(f"cannot listen on {address}")
        if shared:   # this process's own port, where the others forward to it (daemon.processes.split)
            own = f"{address.rpartition(':')[0]}:0"
            self.private_port = (server.add_secure_port(own, credentials) if credentials is not None
                                 else server.add_insecure_port(own))
        await server.start()
        self._server = server
        await self._health.set("", health_pb2.HealthCheckResponse.SERVING)
        await self._health.set(SERVICE_NAME, health_pb2.HealthCheckResponse.SERVING)
        await self._health.set(OIP_SERVICE_NAME, health_pb2.HealthCheckResponse.SERVING)
        self.worker_registry.start_health()
        return port

    async def unready(self) -> None:
        """NOT_SERVING on every service while queries are still admitted and served: a replica
        leaving its balancer (issue #27; ``daemon.replicas.role``) before :meth:`stop` refuses them."""
        if self._health is not None:
            await self._health.enter_graceful_shutdown()

    async def stop(self, grace: float = 5.0) -> None:
        """Refuse new queries, let queued and in-flight ones finish within ``grace`` seconds, end the
        rest with UNAVAILABLE, then shut the server and the worker channels."""
        self.rt.stopping = True
        end = self.clock() + grace
        if self._health is not None:
            await self._health.enter_graceful_shutdown()
        book = self.queries
        while (book.queue or book.retry or book.inflight) and self.clock() < end:
            await asyncio.sleep(0.01)
        book.end_all("dispatcher stopped before the query was served")
        self.routing.flush_observations()
        self.worker_registry.stop_health()
        if self._server is not None:
            await self._server.stop(max(0.0, min(1.0, end - self.clock())))
        self.rt.cancel_tasks()
        await self.worker_registry.close()
        if self.forwarder is not None:
            await self.forwarder.close()

    async def submit(self, r: pb.SubmitRequest, record_demand: bool = True,
                     best_effort: bool = False) -> pb.SubmitReply | tuple[grpc.StatusCode, str]:
        """Admission's submit (:meth:`dispatcher.admission.Admission.submit`), its outcome recorded
        once per query (:mod:`dispatcher.outcomes`; not again for a retry the idempotency cache answers);
        ``record_demand`` False: its arrival was counted by the replica that forwarded it;
        ``best_effort``: held through a replica failover, never dropped for its SLO."""
        repeat = bool(r.idempotency_key) and r.idempotency_key in self.queries.idem
        if self.pipelines.handles(r):        # a pipeline: its steps are queries of their own (issue #26)
            out = await self.pipelines.submit(r)
            record_pipeline(self.outcomes, r, out, self.clock())
            return out
        out = await self.admission.submit(r, record=record_demand, best_effort=best_effort)
        if not repeat:
            record_outcome(self.outcomes, self.placement, r, out, self.clock())
        return out

    def record_arrival(self, r: pb.SubmitRequest) -> bool:
        """A query this replica forwards, counted in its demand windows (``Forwarder.on_arrival``);
        a pipeline's is not (the replica that runs it counts its steps)."""
        return False if self.pipelines.handles(r) else self.admission.record_arrival(r)

    # -- reporting ---------------------------------------------------------------------------------
    def window_snapshot(self, model: str | None = None, steady_s: float = STEADY_HORIZON_S) -> WindowSnapshot:
        """The demand window of all queries, or of one model's or pipeline's (empty when it has had
        none); its steady rate over the last ``steady_s`` seconds."""
        a = self.admission
        if model is None:
            return a.window.snapshot(self.clock(), steady_s)
        w = a.model_windows.get(model)
        if w is None:
            w = self.pipelines.windows.get(model, _EMPTY_WINDOW)
        return w.snapshot(self.clock(), steady_s)

    def stats(self) -> dict[str, float | int]:
        book, workers = self.queries, self.worker_registry.workers
        lat = np.fromiter(book.recent, dtype=float) if book.recent else np.zeros(0)
        out: dict[str, float | int] = {
            "queued": book.waiting_count(),
            "in_flight": len(book.inflight),
            "accepted": book.accepted,
            "served": book.served,
            "redispatched": book.redispatched,
            "policy_contract_broken": self.routing.contract_broken,
            "rejected": int(sum(book.rejected.values())),
            "workers": len(workers),
            "idle_workers": sum(1 for w in workers.values() if w.idle and not w.draining),
            "arrival_qps": self.admission.window.arrival_rate(self.clock()),
            "p50_ms": float(np.percentile(lat, 50)) if lat.size else 0.0,
            "p99_ms": float(np.percentile(lat, 99)) if lat.size else 0.0,
        }
        for code, n in sorted(book.rejected.items()):
            out[f"rejected_{code}"] = n
        if self.forwarder is not None:
            out.update(self.forwarder.stats())
        return out

    def cost_per_hour(self) -> float:
        """$/hr of every live instance (pending or running, parked included) at the prices billed now
        (:meth:`billed_prices`)."""
        return pool_cost_per_hour(slot_pool(self.worker_registry), self.billed_prices())

    def status_reply(self) -> pb.StatusReply:
        """``pool`` and ``cost_per_hour``: every live instance, registered or still booting (the
        cloud view, :meth:`set_cloud_view`); ``workers`` and ``parked``: registered workers only;
        the rest: :func:`dispatcher.api.status.build_status_reply`."""
        now = self.clock()
        return build_status_reply(cfg=self.cfg, now=now, registry=self.worker_registry, placement=self.placement,
                                  book=self.queries, arrival_qps=self.admission.window.arrival_rate(now),
                                  outcomes=self.outcomes, prices=self.billed_prices(),
                                  facts=self.status_source() if self.status_source is not None else None)


forward_part_names(Dispatcher)
