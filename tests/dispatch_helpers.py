"""Test helpers for the dispatcher: a no-op/sleep ``Worker`` servicer on 127.0.0.1, configs, and a
test's coroutine run under a timeout."""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

import grpc

from config.schema import Config
from dispatcher.proto import costscale_pb2 as pb, costscale_pb2_grpc as pbg
from dispatcher.call_stream import Refused, serve_calls


def run(coro_fn: Callable[[], Awaitable[Any]], timeout: float = 20.0) -> Any:
    """``coro_fn()`` on a fresh event loop, failed after ``timeout`` seconds (nothing hangs)."""
    async def main() -> Any:
        return await asyncio.wait_for(coro_fn(), timeout)
    return asyncio.run(main())


class SleepWorker(pbg.WorkerServicer):
    """Answers Infer after ``delay_s`` (no compute); records what it served. ``stream`` False: it
    offers no InferStream (UNIMPLEMENTED, as a worker from before issue #41)."""

    def __init__(self, instance_id: str, instance_type: str, delay_s: float = 0.0, fail_code: grpc.StatusCode | None = None,
                 stream: bool = True) -> None:
        self.instance_id = instance_id
        self.instance_type = instance_type
        self.delay_s = delay_s
        self.fail_code = fail_code
        self.stream = stream
        self.hold: asyncio.Event | None = None
        self.in_flight = 0
        self.max_in_flight = 0
        self.completed: list[str] = []
        self.variant_ops: list[tuple[str, str]] = []   # ("load" | "unload", variant)
        self.by_path = {"unary": 0, "stream": 0}       # Infer calls by how they came

    async def Infer(self, request: pb.InferRequest, context: grpc.aio.ServicerContext) -> pb.InferReply:
        self.by_path["unary"] += 1
        try:
            return await self._infer(request, pb.InferReply)
        except Refused as exc:
            await context.abort(exc.code, exc.message)
            raise

    async def InferStream(self, request_iterator: Any, context: grpc.aio.ServicerContext) -> None:
        if not self.stream:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not implemented!")

        own = type(self).Infer is SleepWorker.Infer       # a subclass's Infer answers its stream calls too

        async def one(call: pb.InferCall) -> pb.InferResult:
            self.by_path["stream"] += 1
            if own:
                return await self._infer(call, pb.InferResult)
            reply = await self.Infer(call, _StreamCallContext())   # type: ignore[arg-type]
            return pb.InferResult.FromString(reply.SerializeToString())
        await serve_calls(context, one, pb.InferResult)

    async def _infer(self, request: Any, reply: Any) -> Any:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.hold is not None:      # a test holds the query here until it has seen it running
                await self.hold.wait()
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            if self.fail_code is not None:
                raise Refused(self.fail_code, "injected failure")
            self.completed.append(request.query_id)
            return reply(service_ms=1000.0 * self.delay_s, compute_ms=0.0, provider="none",
                         variant=request.variant or request.model,
                         outputs=[pb.Tensor(name="y", shape=[request.batch_size], dtype="float32",
                                            data=b"\0" * 4 * request.batch_size)])
        finally:
            self.in_flight -= 1

    async def LoadVariant(self, request: pb.VariantRequest, context: grpc.aio.ServicerContext) -> pb.VariantReply:
        self.variant_ops.append(("load", request.variant))
        return pb.VariantReply(ok=True, message="loaded")

    async def UnloadVariant(self, request: pb.VariantRequest, context: grpc.aio.ServicerContext) -> pb.VariantReply:
        self.variant_ops.append(("unload", request.variant))
        return pb.VariantReply(ok=True, message="unloaded")

    async def Health(self, request: pb.HealthRequest, context: grpc.aio.ServicerContext) -> pb.HealthReply:
        return pb.HealthReply(instance_id=self.instance_id, instance_type=self.instance_type, executor="emulated",
                              emulated=True, in_flight=self.in_flight, served=len(self.completed))


class _StreamCallContext:
    """What a subclass's ``Infer`` sees of a stream call: its abort ends that call with the code."""

    async def abort(self, code: grpc.StatusCode, details: str = "") -> None:
        raise Refused(code, details)


@dataclass
class RunningWorker:
    servicer: SleepWorker
    server: grpc.aio.Server
    port: int
    address: str = field(init=False)

    def __post_init__(self) -> None:
        self.address = f"127.0.0.1:{self.port}"

    async def kill(self) -> None:
        """Stop abruptly: in-flight RPCs are cancelled, new connections refused."""
        await self.server.stop(0)


async def start_worker(instance_id: str, instance_type: str, delay_s: float = 0.0, **kw: Any) -> RunningWorker:
    servicer = SleepWorker(instance_id, instance_type, delay_s, **kw)
    server = grpc.aio.server()
    pbg.add_WorkerServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return RunningWorker(servicer, server, port)


def make_config(**dispatcher: Any) -> Config:
    """Two models (ncf: QoS 5 ms, profile ncf; big: QoS 1000 ms, max_batch 100, profile rm2) on
    g4dn.xlarge and c5n.2xlarge."""
    data = {
        "cluster": "test",
        "budget_per_hour": 2.5,
        "models": [
            {"name": "ncf", "qos_ms": 5, "max_batch": 1000},
            {"name": "big", "qos_ms": 1000, "max_batch": 100, "profile": "rm2", "application": "ranking"},
        ],
        "instance_types": [{"type": "g4dn.xlarge"}, {"type": "c5n.2xlarge"}],
        "launch": {"ami_id": "ami-0123456789abcdef0"},
        "dispatcher": {"listen": "127.0.0.1:0", **dispatcher},
    }
    return Config.model_validate(data)
