"""The worker runtime: a grpc.aio server for the ``Worker`` service of ``costscale.proto``.

INFaaS §3.2 "Workers": a worker executes the queries the controller assigns to it through the
hardware executor of its machine, and loads/unloads variants on request (model-level scaling,
INFaaS §4.2.1). Kairos §5.1 assumes one query in service per instance at a time: a second
concurrent ``Infer`` waits on an ``asyncio.Lock`` (calls on ``InferStream`` too: :mod:`dispatcher.call_stream`).

Hardware emulation (DESIGN "Where it runs"): with a latency profile, each query's service time is
padded to ``max(compute, profile latency)`` (:func:`config.emulation.padded_service_ms`), so a
local process can stand for the instance type it was launched as; a model the profile CSV does not
know at all is padded to its compute time times the type's emulation factor (the rule
``costscale profile --local`` derives its estimates with).

Also serves grpc health checking (``grpc.health.v1``) and, given a dispatcher address, registers with ``Control.RegisterWorker``
(retried until the dispatcher answers; a refusal is final), again when none called it for ``rejoin_after_s`` (:mod:`worker.rejoin`).

This module decides the service's lifecycle and answers its RPCs; how it registers is
:mod:`worker.registration`, which loaded variant a query runs on :mod:`worker.loaded`, and what its
service time is padded to :mod:`worker.padding`.
"""
from __future__ import annotations

import asyncio
import logging
import signal
import socket
import threading
import time
from collections import deque
from pathlib import Path
from typing import Callable

import grpc
import numpy as np
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from config.hostport import split_hostport
from dispatcher.auth import BearerTokenInterceptor, TokenRing
from dispatcher.credentials import server_credentials
from dispatcher.proto import costscale_pb2 as pb, costscale_pb2_grpc as pbg
from config.files import write_atomic
from dispatcher.proto.tensors import array_to_tensor
from config.catalog import load_catalog
from variants.runtime import neuron_executor
from variants.runtime.builtin_models import input_signature, resolve_model
from config.emulation import padding_ms
from variants.runtime.executor import CPU, Executor, Hardware, choose_executor_kind, choose_providers
from variants.runtime.onnx_executor import OnnxExecutor
from dispatcher.call_stream import Refused, serve_calls
from worker.options import WorkerOptions
from worker.rejoin import Hearing, keep_registered
from worker.loaded import LoadedVariant, query_inputs, resolve_variant
from worker.padding import own_profiles, padding_profile, padding_table, type_factor_fn
from worker.registration import DispatcherLink
from worker.token import TokenKeeper

log = logging.getLogger(__name__)

WORKER_SERVICE = "costscale.v1.Worker"
MAX_MESSAGE_BYTES = 64 * 1024 * 1024


def hardware_of(opts: WorkerOptions) -> Hardware:
    if opts.hardware is not None:
        return opts.hardware
    catalog = load_catalog()
    if opts.instance_type not in catalog:
        raise ValueError(f"unknown instance type {opts.instance_type!r} (known: {', '.join(sorted(catalog))})")
    return catalog[opts.instance_type].hardware


class WorkerServer(pbg.WorkerServicer):
    """The worker's gRPC server. In-process use (tests): ``port = ws.start()`` ... ``ws.stop()``
    (runs its own event loop in a thread); from asyncio: ``await start_async()`` / ``stop_async()``."""

    def __init__(self, opts: WorkerOptions, executor: Executor | None = None) -> None:
        self.opts = opts
        self.hardware: Hardware = hardware_of(opts)
        table = padding_table(opts)
        self.profile = padding_profile(opts, table)
        self._own_profiles = own_profiles(opts, table)   # read once: a variant load looks up its model here
        self.type_factor = type_factor_fn(opts, self.profile)
        self._model_paths = {name: resolve_model(spec, opts.cache_dir) for name, spec in opts.models.items()}
        if executor is None:
            kind = choose_executor_kind(self.hardware, neuron_executor.available(), list(self._model_paths.values()))
            if kind == "neuron":
                executor = neuron_executor.NeuronExecutor()
            elif kind == "emulated":
                executor = OnnxExecutor([CPU], threads=opts.threads, kind="emulated")
            else:
                executor = OnnxExecutor(choose_providers(self.hardware, opts.providers), threads=opts.threads)
        self.executor: Executor = executor
        self._variants: dict[str, LoadedVariant] = {}
        self._lock: asyncio.Lock | None = None  # created on the server's loop
        self._load_lock: asyncio.Lock | None = None
        self._rng = np.random.default_rng(opts.seed)
        self._server: grpc.aio.Server | None = None
        self._health: health.aio.HealthServicer | None = None
        self._ring: TokenRing | None = None                  # the cluster token (rotating: worker.token)
        self._keeper: TokenKeeper | None = None
        self._keeper_task: asyncio.Task[None] | None = None
        self.link = DispatcherLink(opts, lambda: self._ring, lambda: self._keeper)   # registration
        self._spot_task: asyncio.Task[None] | None = None     # the IMDS spot notice watch
        self.hearing = Hearing(opts.clock, WORKER_SERVICE)   # the last call a dispatcher made
        self.port: int | None = None
        self.served = 0
        self.in_flight = 0
        self.peak_in_flight = 0   # more than 1: two calls held at once (two dispatchers, or one breaking Kairos's rule)
        self.executing = 0
        self.max_executing = 0
        #: (start, end) perf_counter seconds of recent queries, in service order
        self.history: deque[tuple[float, float]] = deque(maxlen=4096)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- derived facts ---------------------------------------------------------------------------
    @property
    def emulated(self) -> bool:
        """True when service times are padded to a profile or the hardware is emulated."""
        return self.profile is not None or self.type_factor is not None or self.executor.kind == "emulated"

    @property
    def address(self) -> str:
        host, _ = split_hostport(self.opts.listen)
        return f"{host}:{self.port}"

    def advertised_address(self) -> str:
        if self.opts.advertise:
            return self.opts.advertise
        host, _ = split_hostport(self.opts.listen)
        if host in ("0.0.0.0", "::", "[::]", ""):
            host = socket.gethostbyname(socket.gethostname())
        return f"{host}:{self.port}"

    def _provider_of(self, variant: str) -> str:
        per = getattr(self.executor, "providers_for", None)
        provs = per(variant) if per is not None else self.executor.providers
        return provs[0] if provs else ""

    # -- lifecycle -------------------------------------------------------------------------------
    def _load(self, name: str, model: str, path: Path, speed_factor: float = 1.0) -> float:
        t0 = time.perf_counter()
        self.executor.load(name, path)
        self._variants[name] = LoadedVariant(model=model, path=path, signature=input_signature(path),
                                       speed_factor=speed_factor, profile=self._own_profiles.get(model))
        return (time.perf_counter() - t0) * 1000.0

    async def start_async(self) -> int:
        """Load the configured models, bind, start serving; returns the bound port."""
        self._lock = asyncio.Lock()
        self._load_lock = asyncio.Lock()
        for name, path in self._model_paths.items():
            await asyncio.to_thread(self._load, name, name, path)
        # with a cluster token, the Worker service answers only the dispatcher, which sends it as a
        # bearer token (dispatcher.workers.client); health checks stay open
        self._ring = TokenRing(self.opts.token) if self.opts.token else None
        if self._ring is not None and self.opts.token_fetch is not None:
            self._keeper = TokenKeeper(self._ring, self.opts.token_fetch, self.opts.token_refresh_s)
            self._keeper_task = asyncio.get_running_loop().create_task(self._keeper.run())
        interceptors: list[grpc.aio.ServerInterceptor] = \
            [BearerTokenInterceptor(self._ring, (WORKER_SERVICE,))] if self._ring is not None else []
        self.hearing.ring = self._ring        # only a dispatcher presenting the token counts
        interceptors.append(self.hearing)
        server = grpc.aio.server(interceptors=interceptors, options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ])
        pbg.add_WorkerServicer_to_server(self, server)
        self._health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        try:
            if self.opts.tls_cert and self.opts.tls_key:
                creds = server_credentials(self.opts.tls_cert, self.opts.tls_key, self.opts.tls_client_ca,
                                           ("--tls-cert", "--tls-key", "--tls-client-ca"))
                port = server.add_secure_port(self.opts.listen, creds)
            else:
                port = server.add_insecure_port(self.opts.listen)
        except RuntimeError as exc:
            raise OSError(f"cannot listen on {self.opts.listen} ({exc})") from None
        if port == 0:
            raise OSError(f"cannot listen on {self.opts.listen}")
        await server.start()
        self._server, self.port = server, port
        for svc in ("", WORKER_SERVICE):
            await self._health.set(svc, health_pb2.HealthCheckResponse.SERVING)
        log.info("worker %s (%s, %s) listening on %s: executor %s, providers %s, emulating %s",
                 self.opts.instance_id, self.opts.instance_type, self.hardware, self.address,
                 self.executor.kind, ",".join(self.executor.providers),
                 f"yes (profile {self.profile.model} on {self.profile.instance_type})" if self.profile is not None
                 else f"yes (compute x the emulation factor of {self.opts.instance_type})" if self.type_factor
                 else ("yes (no Neuron runtime; CPU speed)" if self.executor.kind == "emulated" else "no"))
        return port

    def start_spot_watch(self) -> None:
        """Poll IMDS for spot interruption notices and tell the dispatcher (``worker.spot_watch``)."""
        if self.opts.imds_endpoint and self.opts.dispatcher:
            from worker.spot_watch import start_watch

            self._spot_task = start_watch(self.opts.imds_endpoint, self.opts.spot_poll_s, self.opts.instance_id,
                                          self._dispatcher_channel,
                                          lambda: self._ring.outbound() if self._ring is not None else self.opts.token)

    async def stop_async(self, grace: float | None = 1.0) -> None:
        if self._spot_task is not None:
            self._spot_task.cancel()
        if self._keeper_task is not None:
            self._keeper_task.cancel()
        if self._health is not None:
            await self._health.enter_graceful_shutdown()
        if self._server is not None:
            await self._server.stop(grace)
            self._server = None

    async def wait_for_termination(self) -> None:
        if self._server is not None:
            await self._server.wait_for_termination()

    def start(self) -> int:
        """Start in a background thread with its own event loop; returns the bound port."""
        loop = asyncio.new_event_loop()
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(loop)
            ready.set()
            loop.run_forever()

        self._loop = loop
        self._thread = threading.Thread(target=run, name="costscale-worker", daemon=True)
        self._thread.start()
        ready.wait()
        return asyncio.run_coroutine_threadsafe(self.start_async(), loop).result()

    def stop(self) -> None:
        if self._loop is None:
            return
        asyncio.run_coroutine_threadsafe(self.stop_async(0.5), self._loop).result()
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._loop.close()
        self._loop = None

    # -- registration ----------------------------------------------------------------------------
    def _dispatcher_channel(self) -> grpc.aio.Channel:
        """The channel to the dispatcher (:meth:`worker.registration.DispatcherLink.channel`)."""
        return self.link.channel()

    async def register(self) -> pb.RegisterWorkerReply:
        """Control.RegisterWorker until the dispatcher answers (:mod:`worker.registration`).
        Raises RegistrationRefused / RegistrationFailed."""
        return await self.link.register(self.advertised_address(), self.executor.providers, self.executor.kind)

    # -- Worker service --------------------------------------------------------------------------
    def _resolve(self, model: str, variant: str) -> str:
        return resolve_variant(self._variants, model, variant)

    def _inputs(self, name: str, request: pb.InferRequest) -> tuple[dict[str, np.ndarray], int]:
        return query_inputs(self._variants[name].signature, request, self._rng)

    async def Infer(self, request: pb.InferRequest, context: grpc.aio.ServicerContext) -> pb.InferReply:
        try:
            return await self._infer(request, pb.InferReply)   # type: ignore[return-value]
        except Refused as exc:
            await context.abort(exc.code, exc.message)

    async def InferStream(self, request_iterator: object, context: grpc.aio.ServicerContext) -> None:
        await serve_calls(context, lambda call: self._infer(call, pb.InferResult), pb.InferResult)  # type: ignore[arg-type,return-value]

    async def _infer(self, request: pb.InferRequest | pb.InferCall, reply: type) -> pb.InferReply | pb.InferResult:
        """One query (``reply``: the message type to answer with); Refused: the status it ends with."""
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            try:
                name = self._resolve(request.model, request.variant)
                inputs, batch = self._inputs(name, request)
            except KeyError as exc:
                raise Refused(grpc.StatusCode.NOT_FOUND, str(exc.args[0])) from None
            except ValueError as exc:
                raise Refused(grpc.StatusCode.INVALID_ARGUMENT, str(exc)) from None
            assert self._lock is not None
            async with self._lock:  # one query at a time (Kairos §5.1)
                if name not in self._variants:   # unloaded while this query waited for the lock
                    raise Refused(grpc.StatusCode.NOT_FOUND, f"variant {name!r} is not loaded (unloaded)")
                t0 = time.perf_counter()
                self.executing += 1
                self.max_executing = max(self.max_executing, self.executing)
                try:
                    try:
                        outputs = await asyncio.to_thread(self.executor.run, name, inputs)
                    except Exception as exc:  # ORT raises its own InvalidArgument/Fail types
                        bad_input = isinstance(exc, (ValueError, KeyError)) or type(exc).__name__ in ("InvalidArgument", "Fail")
                        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                        code = grpc.StatusCode.INVALID_ARGUMENT if bad_input else grpc.StatusCode.INTERNAL
                        raise Refused(code, f"variant {name}: {msg}") from None
                    t1 = time.perf_counter()
                    compute_ms = (t1 - t0) * 1000.0
                    loaded = self._variants[name]
                    pad = padding_ms(loaded.profile or self.profile, batch, compute_ms, compute_ms,
                                     self.opts.profile_stat, loaded.speed_factor,
                                     self.type_factor(batch) if self.type_factor is not None else None)
                    if pad > 0:
                        await asyncio.sleep(pad / 1000.0)
                    t2 = time.perf_counter()
                finally:
                    self.executing -= 1
                self.history.append((t0, t2))
                self.served += 1
            return reply(
                outputs=[array_to_tensor(k, v) for k, v in outputs.items()],
                service_ms=(t2 - t0) * 1000.0, compute_ms=compute_ms,
                provider=self._provider_of(name), variant=name)
        finally:
            self.in_flight -= 1

    async def Health(self, request: pb.HealthRequest, context: grpc.aio.ServicerContext) -> pb.HealthReply:
        return pb.HealthReply(
            instance_id=self.opts.instance_id, instance_type=self.opts.instance_type,
            providers=self.executor.providers, executor=self.executor.kind, emulated=self.emulated,
            in_flight=self.in_flight, peak_in_flight=self.peak_in_flight, loaded_variants=sorted(self._variants), served=self.served)

    async def LoadVariant(self, request: pb.VariantRequest, context: grpc.aio.ServicerContext) -> pb.VariantReply:
        name = request.variant or request.model
        if not name:
            return pb.VariantReply(ok=False, message="give variant or model")
        try:
            if request.onnx:
                path = Path(self.opts.cache_dir) / "variants" / f"{name}.onnx"
                await asyncio.to_thread(write_atomic, path, request.onnx)
                path = await asyncio.to_thread(resolve_model, str(path), self.opts.cache_dir)
            elif request.onnx_path:
                path = await asyncio.to_thread(resolve_model, request.onnx_path, self.opts.cache_dir)
            elif name in self._model_paths:
                path = self._model_paths[name]
            else:
                return pb.VariantReply(ok=False, message=f"variant {name!r}: give onnx bytes or onnx_path")
            assert self._load_lock is not None
            async with self._load_lock:
                load_ms = await asyncio.to_thread(self._load, name, request.model or name, path,
                                                  request.speed_factor or 1.0)
        except Exception as exc:
            msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            return pb.VariantReply(ok=False, message=f"variant {name!r}: {msg}")
        log.info("loaded variant %s in %.1f ms (provider %s)", name, load_ms, self._provider_of(name))
        return pb.VariantReply(ok=True, message="loaded", load_ms=load_ms)

    async def UnloadVariant(self, request: pb.VariantRequest, context: grpc.aio.ServicerContext) -> pb.VariantReply:
        name = request.variant or request.model
        if name not in self._variants:
            return pb.VariantReply(ok=False, message=f"variant {name!r} is not loaded")
        assert self._lock is not None and self._load_lock is not None
        # never pull a session out from under a running query, nor between a load's two steps
        async with self._load_lock, self._lock:
            self.executor.unload(name)
            self._variants.pop(name, None)
        return pb.VariantReply(ok=True, message="unloaded")


async def serve_worker(opts: WorkerOptions, on_listening: Callable[[str], None] | None = None,
                       stop: asyncio.Event | None = None) -> None:
    """Run a worker until ``stop`` is set or SIGTERM/SIGINT arrives; registers with the dispatcher
    when one is given (a refusal raises RegistrationRefused after the server has stopped)."""
    server = WorkerServer(opts)
    await server.start_async()
    if on_listening is not None:
        on_listening(server.address)
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    installed: list[int] = []
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(sig, stop.set)
                installed.append(sig)
            except (NotImplementedError, RuntimeError):
                pass
    waiter = asyncio.create_task(stop.wait())
    reg = asyncio.create_task(server.register()) if opts.dispatcher else None
    server.start_spot_watch()
    try:
        if reg is not None:
            done, _ = await asyncio.wait({waiter, reg}, return_when=asyncio.FIRST_COMPLETED)
            if reg in done:
                reg.result()  # raises RegistrationRefused / RegistrationFailed
                if opts.rejoin_after_s is not None:
                    server.hearing.heard()
                    reg = asyncio.create_task(keep_registered(server.register, server.hearing, opts.rejoin_after_s))
        await waiter
        log.info("worker %s stopping", opts.instance_id)
    finally:
        for t in (waiter, reg):
            if t is not None and not t.done():
                t.cancel()
        for sig in installed:
            loop.remove_signal_handler(sig)
        await server.stop_async(grace=2.0)


__all__ = ["MAX_MESSAGE_BYTES", "WORKER_SERVICE", "WorkerServer", "hardware_of", "serve_worker"]
