"""The live dispatcher (Kairos §6: a central controller that predicts latencies, matches queries to
instances and calls them over gRPC, one query per instance at a time): :class:`Dispatcher` composes
the parts below, runs the gRPC server (public ``Inference`` front end, ``Control`` for worker
registration, gRPC health) and reports what it sees.

Where a change belongs:

* :mod:`dispatcher.admission` -- request validation, admission, the queue, overall deadlines, and
  how every accepted query ends (DESIGN invariant 4);
* :mod:`dispatcher.workers` -- the worker registry: registration, health checks, drain, park and
  unpark, utilization;
* :mod:`dispatcher.routing` -- the routing round: which idle worker serves which waiting query
  (Kairos §5.1), the worker call, re-dispatch, the latency model's measurements;
* :mod:`dispatcher.placement` -- variant metadata and placement: the models and variants known,
  where each is loaded, Load/Unload, RegisterModel and ListVariants (INFaaS §3-4);
* :mod:`dispatcher.offline` -- offline jobs (INFaaS §3.1, §5);
* :mod:`dispatcher.servicers` -- the gRPC servicers: parse, call the Dispatcher, render;
  :mod:`dispatcher.oip_servicer` -- the Open Inference Protocol (KServe v2 / Triton) on the same port;
* :mod:`dispatcher.status` -- what Status reports; :mod:`dispatcher.outcomes` -- how queries ended.

Admission, the worker registry and the routing round act on the same queries and workers at every
event, so they are mixins of the one Dispatcher (each module's docstring lists the attributes it
owns and those it reads from the others). Placement and offline jobs have state of their own: they
are parts (``d.placement``, ``d.offline``), and the Dispatcher forwards their API and state under
the names the daemon, the model loop and the tests use. Underscored names are internal to the
dispatcher package and shared by its modules.
"""
from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any, Callable, Mapping

import grpc
import numpy as np
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from config.catalog import InstanceType
from config.errors import ConfigError
from config.schema import Config
from config.security import client_auth_missing, read_token
from dispatcher.auth import BearerTokenInterceptor, TokenRing
from dispatcher.credentials import PLAINTEXT, WorkerChannelSecurity, dispatcher_server_credentials
from dispatcher.accuracy_routing import AccuracyRouting
from dispatcher.admission import SC, Admission
from dispatcher.latency_model import LatencyModel
from dispatcher.object_store import ObjectStore, S3Objects
from dispatcher.offline import OfflineJobs
from dispatcher.oip_servicer import SERVICE_NAME as OIP_SERVICE_NAME, OipServicer
from dispatcher.outcomes import OutcomeLedger
from dispatcher.placement import VariantPlacement
from dispatcher.policies import make_policy
from dispatcher.policy import DISPATCH_VIEW_FACTOR, DISPATCH_XI, Policy, default_base_type
from dispatcher.proto import costscale_pb2 as pb, costscale_pb2_grpc as pbg, oip_pb2_grpc as oipg
from dispatcher.pipeline_exec import PipelineRunner
from dispatcher.routing import RoutingRound
from dispatcher.servicers import _ControlServicer, _InferenceServicer
from dispatcher.status import FleetFacts, build_status_reply, record_outcome, record_pipeline
from dispatcher.window import DemandWindow, WindowSnapshot
from dispatcher.workers import WorkerRegistry, WorkerState
from scaler.replan import STEADY_HORIZON_S

SERVICE_NAME = "costscale.v1.Inference"
_EMPTY_WINDOW = DemandWindow(capacity=1)


class _Forwarded:
    """A Dispatcher attribute that lives on one of its parts, read and set through the Dispatcher
    under the name the daemon and the tests use (e.g. ``d._variant_meta`` is
    ``d.placement.variant_meta``)."""

    def __init__(self, part: str, name: str) -> None:
        self.part, self.name = part, name

    def __get__(self, d: Dispatcher | None, owner: type | None = None) -> Any:
        if d is None:
            return self
        return getattr(getattr(d, self.part), self.name)

    def __set__(self, d: Dispatcher, value: Any) -> None:
        setattr(getattr(d, self.part), self.name, value)


class Dispatcher(Admission, WorkerRegistry, RoutingRound):
    """See the module docstring. Tunables are plain attributes, settable after construction:
    ``query_timeout_s`` (30), ``max_retries`` (2 re-dispatches), ``health_interval_s`` (1),
    ``health_timeout_s`` (1), ``health_failures`` (2 in a row), ``idempotency_capacity`` (10,000),
    ``xi`` (0.98), ``view_factor`` (2), ``observe_batch`` (32 measurements fed to the latency model
    at once) and ``observe_delay_s`` (0.05: the longest a measurement waits for its batch). The policy built here (none given) gets ``xi`` and
    ``view_factor`` as its ξ and ``max_queue_factor``; a policy passed in keeps its own."""

    # state kept on the parts
    registry = _Forwarded("placement", "registry")
    variant_states = _Forwarded("placement", "variant_states")
    load_ops = _Forwarded("placement", "load_ops")
    unload_ops = _Forwarded("placement", "unload_ops")
    _models = _Forwarded("placement", "models")
    _variant_meta = _Forwarded("placement", "variant_meta")
    offline_jobs = _Forwarded("offline", "jobs")
    offline_threshold = _Forwarded("offline", "threshold")
    offline_chunk = _Forwarded("offline", "chunk")
    offline_poll_s = _Forwarded("offline", "poll_s")

    def __init__(self, cfg: Config, predictor: LatencyModel, *, clock: Callable[[], float] = time.monotonic,
                 policy: Policy | None = None, base_type: str | None = None, registry=None,
                 models_dir: str | Path | None = None, objects: ObjectStore | None = None) -> None:
        self.cfg = cfg
        #: where offline inputs and outputs and registered models' files are read and written (S3)
        self.objects: ObjectStore = objects or S3Objects(cfg.region, cfg.aws.endpoint_url)
        self.predictor = predictor
        self.clock = clock
        self.base_type = base_type or self._default_base_type()
        # the policy's tunables (one source: passed to the policy built here)
        self.xi = DISPATCH_XI
        self.view_factor = DISPATCH_VIEW_FACTOR
        self.policy: Policy = policy or make_policy(cfg.dispatcher.policy, predictor, self.base_type,
                                                    xi=self.xi, max_queue_factor=self.view_factor)
        self.window = DemandWindow()
        #: per model (after routing): the model loop sizes each model's variant instances from its own load
        self.model_windows: dict[str, DemandWindow] = {}
        self.set_catalog(cfg.catalog())
        #: how queries ended, per model (Status and the metrics); what the daemon adds to Status
        self.outcomes = OutcomeLedger(clock())
        self.status_source: Callable[[], FleetFacts] | None = None
        # lifecycle
        #: the cluster token workers register with and are called with (a ring: it may rotate)
        self._token: TokenRing | None = None
        #: how worker channels are dialled (dispatcher.worker_tls), read at start
        self.worker_security: WorkerChannelSecurity = PLAINTEXT
        self._server: grpc.aio.Server | None = None
        self._health: health.aio.HealthServicer | None = None
        self._tasks: set[asyncio.Task] = set()
        self._stopping = False
        self._loop: asyncio.AbstractEventLoop | None = None
        # the parts
        self._init_workers()
        self._init_admission()
        self._init_routing()
        self.placement = VariantPlacement(self, registry, models_dir)
        self.accuracy = AccuracyRouting(self)
        self.pipelines = PipelineRunner(self)
        self.offline = OfflineJobs(self)

    # -- configuration -----------------------------------------------------------------------------
    def _default_base_type(self) -> str:
        """Before the first plan: :func:`dispatcher.policy.default_base_type`."""
        return default_base_type(self.cfg, self.predictor.predict_ms)

    def set_catalog(self, catalog: Mapping[str, InstanceType]) -> None:
        """The allowed instance types and their prices (at start and on a config reload)."""
        self._catalog = dict(catalog)
        self._prices = {t: it.price_per_hour for t, it in self._catalog.items()}

    def set_base_type(self, t: str) -> None:
        self.base_type = t
        if hasattr(self.policy, "base_type"):
            self.policy.base_type = t  # type: ignore[attr-defined]
        self._kick()

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
        """Client authentication by bearer token (``dispatcher.auth_token_file``) on the Inference and
        OIP services (:mod:`dispatcher.auth`); none without one."""
        path = self.cfg.dispatcher.auth_token_file
        if not path:
            return []
        return [BearerTokenInterceptor(read_token(path, "dispatcher.auth_token_file"), (SERVICE_NAME, OIP_SERVICE_NAME))]

    async def start(self, listen: str | None = None) -> int:
        """Listen on ``listen`` (default ``dispatcher.listen``); ConfigError (one line, exit 2) when
        that is not loopback and no client authentication is configured (:mod:`config.security`), or
        when a certificate, key or token file cannot be read."""
        spec = self.cfg.dispatcher
        address = listen or spec.listen
        refusal = client_auth_missing(address, spec.auth_token_file, spec.tls)
        if refusal:
            raise ConfigError(refusal)
        credentials = dispatcher_server_credentials(spec.tls)
        interceptors = self._interceptors()
        self.worker_security = WorkerChannelSecurity.from_spec(spec.worker_tls)
        self._loop = asyncio.get_running_loop()
        if self._token is None:         # a token read from its parameter before start is kept
            token = self._read_token()
            self._token = TokenRing(token) if token else None
        limit = self.cfg.dispatcher.max_payload_bytes + 1024 * 1024
        server = grpc.aio.server(interceptors=interceptors, options=[("grpc.max_receive_message_length", limit),
                                          ("grpc.max_send_message_length", 64 * 1024 * 1024),
                                          ("grpc.so_reuseport", 0)])
        pbg.add_InferenceServicer_to_server(_InferenceServicer(self), server)
        pbg.add_ControlServicer_to_server(_ControlServicer(self), server)
        oipg.add_GRPCInferenceServiceServicer_to_server(OipServicer(self), server)
        self._health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        # server reflection: grpcurl and other generic clients list and call the services
        reflection.enable_server_reflection((SERVICE_NAME, "costscale.v1.Control", OIP_SERVICE_NAME,
                                             health.SERVICE_NAME, reflection.SERVICE_NAME), server)
        port = (server.add_secure_port(address, credentials) if credentials is not None
                else server.add_insecure_port(address))
        if port == 0:
            raise OSError(f"cannot listen on {address}")
        await server.start()
        self._server = server
        await self._health.set("", health_pb2.HealthCheckResponse.SERVING)
        await self._health.set(SERVICE_NAME, health_pb2.HealthCheckResponse.SERVING)
        await self._health.set(OIP_SERVICE_NAME, health_pb2.HealthCheckResponse.SERVING)
        self._health_task = asyncio.create_task(self._health_loop())
        return port

    async def stop(self, grace: float = 5.0) -> None:
        """Refuse new queries, let queued and in-flight ones finish within ``grace`` seconds, end the
        rest with UNAVAILABLE, then shut the server and the worker channels."""
        self._stopping = True
        end = self.clock() + grace
        if self._health is not None:
            await self._health.enter_graceful_shutdown()
        while (self._queue or self._retry or self._inflight) and self.clock() < end:
            await asyncio.sleep(0.01)
        for q in list(self._queue.values()) + list(self._retry.values()) + list(self._inflight.values()):
            self._finish(q, (SC.UNAVAILABLE, "dispatcher stopped before the query was served"))
        self._queue.clear()
        self._retry.clear()
        self._inflight.clear()
        self._deadlines.clear()
        self.flush_observations()
        if self._deadline_timer is not None:
            self._deadline_timer.cancel()
            self._deadline_timer = None
        if self._health_task is not None:
            self._health_task.cancel()
        if self._server is not None:
            await self._server.stop(max(0.0, min(1.0, end - self.clock())))
        for t in list(self._tasks):
            t.cancel()
        for w in list(self.workers.values()):
            await w.client.close()
        self.workers.clear()

    def _spawn(self, coro) -> None:  # type: ignore[no-untyped-def]
        t = (self._loop or asyncio.get_running_loop()).create_task(coro)
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    async def submit(self, r: pb.SubmitRequest) -> pb.SubmitReply | tuple[grpc.StatusCode, str]:
        """Admission's submit (:meth:`dispatcher.admission.Admission.submit`), its outcome recorded
        once per query (:mod:`dispatcher.outcomes`; not again for a retry the idempotency cache answers)."""
        repeat = bool(r.idempotency_key) and r.idempotency_key in self._idem
        if self.pipelines.handles(r):        # a pipeline: its steps are queries of their own (issue #26)
            out = await self.pipelines.submit(r)
            record_pipeline(self, r, out)
            return out
        out = await Admission.submit(self, r)
        if not repeat:
            record_outcome(self, r, out)
        return out

    # -- placement (dispatcher.placement) ----------------------------------------------------------
    def refresh_variants(self) -> None:
        self.placement.refresh_variants()

    def variant_model(self, variant: str) -> str:
        return self.placement.variant_model(variant)

    def speed_factor(self, variant: str) -> float:
        return self.placement.speed_factor(variant)

    def loaded_on(self, w: WorkerState) -> set[str]:
        return self.placement.loaded_on(w)

    def cfg_model_names(self) -> list[str]:
        return self.placement.cfg_model_names()

    def ensure_loaded(self, instance_id: str, variant: str) -> asyncio.Task | None:
        return self.placement.ensure_loaded(instance_id, variant)

    async def load_variant(self, instance_id: str, variant: str, allow_parked: bool = False) -> tuple[bool, str]:
        return await self.placement.load_variant(instance_id, variant, allow_parked)

    async def unload_variant(self, instance_id: str, variant: str) -> tuple[bool, str]:
        return await self.placement.unload_variant(instance_id, variant)

    def list_variants(self, model: str = "", application: str = "") -> list[pb.VariantInfo]:
        return self.placement.list_variants(model, application)

    async def register_model(self, r: pb.RegisterModelRequest) -> pb.RegisterModelReply | tuple[grpc.StatusCode, str]:
        return await self.placement.register_model(r)

    # -- offline jobs (dispatcher.offline) ---------------------------------------------------------
    async def submit_offline(self, r: pb.OfflineJobRequest) -> pb.OfflineJobReply | tuple[grpc.StatusCode, str]:
        return await self.offline.submit(r)

    # -- reporting ---------------------------------------------------------------------------------
    def window_snapshot(self, model: str | None = None, steady_s: float = STEADY_HORIZON_S) -> WindowSnapshot:
        """The demand window of all queries, or of one model's (empty when it has had none); its
        steady rate over the last ``steady_s`` seconds."""
        if model is None:
            return self.window.snapshot(self.clock(), steady_s)
        return self.model_windows.get(model, _EMPTY_WINDOW).snapshot(self.clock(), steady_s)

    def stats(self) -> dict[str, float | int]:
        lat = np.fromiter(self._recent, dtype=float) if self._recent else np.zeros(0)
        out: dict[str, float | int] = {
            "queued": len(self._queue) + len(self._retry),
            "in_flight": len(self._inflight),
            "accepted": self.accepted,
            "served": self.served,
            "redispatched": self.redispatched,
            "rejected": int(sum(self.rejected.values())),
            "workers": len(self.workers),
            "idle_workers": sum(1 for w in self.workers.values() if w.idle and not w.draining),
            "arrival_qps": self.window.arrival_rate(self.clock()),
            "p50_ms": float(np.percentile(lat, 50)) if lat.size else 0.0,
            "p99_ms": float(np.percentile(lat, 99)) if lat.size else 0.0,
        }
        for code, n in sorted(self.rejected.items()):
            out[f"rejected_{code}"] = n
        return out

    def status_reply(self) -> pb.StatusReply:
        """``pool`` and ``cost_per_hour``: every live instance, registered or still booting (the
        cloud view, :meth:`set_cloud_view`); ``workers`` and ``parked``: registered workers only;
        the rest: :func:`dispatcher.status.build_status_reply`."""
        return build_status_reply(self)
