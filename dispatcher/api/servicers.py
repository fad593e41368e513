"""The dispatcher's gRPC servicers (costscale.v1 ``Inference`` and ``Control``): they only parse a
request, call the API they serve (:class:`InferenceApi`, the Dispatcher's; ``register`` and
``spot_notice``, the worker registry's checks of a worker), and render its answer as a reply or a
typed gRPC status (moto's responses/models split); every decision is the dispatcher's.

``SubmitStream`` (issue #41) answers each message of the stream as a unary ``Submit`` would answer
it (the same admission, SLO policy and forwarding; the bearer token checked once, at the stream's
open), by its ``call_id``, within its own ``timeout_ms`` (:func:`dispatcher.call_stream.serve_calls`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Mapping, Protocol, TypeVar, Union

import asyncio
from typing import Any

import grpc

from dispatcher.call_stream import Refused, serve_calls
from dispatcher.forwarding import Forwarder
from dispatcher.offline import OfflineJob
from dispatcher.proto import costscale_pb2 as pb, costscale_pb2_grpc as pbg
from dispatcher.queries import SC

if TYPE_CHECKING:
    from variants.registry import VariantRegistry

Reply = TypeVar("Reply")
Refusal = tuple[grpc.StatusCode, str]


class InferenceApi(Protocol):
    """What the ``Inference`` service calls (:class:`dispatcher.server.Dispatcher` has it)."""

    @property
    def registry(self) -> VariantRegistry | None: ...   # None: the model-less calls are UNIMPLEMENTED

    @property
    def offline_jobs(self) -> Mapping[str, OfflineJob]: ...

    @property
    def forwarder(self) -> Forwarder | None: ...   # replicas: where a replica without workers sends a query

    async def submit(self, r: pb.SubmitRequest, record_demand: bool = True,
                     best_effort: bool = False) -> Union[pb.SubmitReply, Refusal]: ...

    def status_reply(self) -> pb.StatusReply: ...

    async def register_model(self, r: pb.RegisterModelRequest) -> Union[pb.RegisterModelReply, Refusal]: ...

    def list_variants(self, model: str = "", application: str = "") -> list[pb.VariantInfo]: ...

    async def submit_offline(self, r: pb.OfflineJobRequest) -> Union[pb.OfflineJobReply, Refusal]: ...


async def _render(out: Reply | tuple[grpc.StatusCode, str], context: grpc.aio.ServicerContext) -> Reply:
    """The reply, or the call ended with the typed status (code, message) the Dispatcher answered."""
    if isinstance(out, tuple):
        await context.abort(out[0], out[1])
    return out  # type: ignore[return-value]


class _MessageContext:
    """What forwarding sees of one SubmitStream message: the stream's metadata, the message's own
    deadline, and an abort that ends that message (not the stream) with the code."""

    def __init__(self, stream: grpc.aio.ServicerContext, deadline: float | None) -> None:
        self._stream, self._deadline = stream, deadline

    def invocation_metadata(self) -> Any:
        return self._stream.invocation_metadata()

    def time_remaining(self) -> float | None:
        return None if self._deadline is None else max(0.0, self._deadline - asyncio.get_running_loop().time())

    async def abort(self, code: grpc.StatusCode, details: str = "") -> None:
        raise Refused(code, details)


class _InferenceServicer(pbg.InferenceServicer):
    def __init__(self, api: InferenceApi) -> None:
        self.api = api

    async def _submit(self, request: pb.SubmitRequest, context: Any) -> Union[pb.SubmitReply, Refusal]:
        """A Submit's answer: admitted here, or forwarded (replicas)."""
        fwd = self.api.forwarder
        if fwd is None:
            return await self.api.submit(request)
        h = await fwd.handle(request, context)
        if h.reply is not None:
            return h.reply
        return await self.api.submit(request, record_demand=not h.counted, best_effort=h.held)

    async def Submit(self, request: pb.SubmitRequest, context: grpc.aio.ServicerContext) -> pb.SubmitReply:
        return await _render(await self._submit(request, context), context)

    async def SubmitStream(self, request_iterator: Any, context: grpc.aio.ServicerContext) -> None:
        async def one(call: pb.SubmitCall) -> pb.SubmitResult:
            ctx = context
            if self.api.forwarder is not None:
                ctx = _MessageContext(context, asyncio.get_running_loop().time() + call.timeout_ms / 1000.0
                                      if call.timeout_ms > 0 else None)
            out = await self._submit(call.request, ctx)
            if isinstance(out, tuple):
                raise Refused(out[0], out[1])
            return pb.SubmitResult(reply=out)
        await serve_calls(context, one, pb.SubmitResult)

    async def Status(self, request: pb.StatusRequest, context: grpc.aio.ServicerContext) -> pb.StatusReply:
        return self.api.status_reply()

    async def _no_registry(self, context: grpc.aio.ServicerContext, name: str) -> None:
        if self.api.registry is None:
            await context.abort(SC.UNIMPLEMENTED, f"{name}: this dispatcher runs without a variant registry")

    async def RegisterModel(self, request: pb.RegisterModelRequest, context: grpc.aio.ServicerContext) -> pb.RegisterModelReply:
        await self._no_registry(context, "RegisterModel")
        return await _render(await self.api.register_model(request), context)

    async def ListVariants(self, request: pb.ListVariantsRequest, context: grpc.aio.ServicerContext) -> pb.ListVariantsReply:
        await self._no_registry(context, "ListVariants")
        return pb.ListVariantsReply(variants=self.api.list_variants(request.model, request.application))

    async def SubmitOffline(self, request: pb.OfflineJobRequest, context: grpc.aio.ServicerContext) -> pb.OfflineJobReply:
        await self._no_registry(context, "SubmitOffline")
        return await _render(await self.api.submit_offline(request), context)

    async def GetOfflineJob(self, request: pb.OfflineJobReply, context: grpc.aio.ServicerContext) -> pb.OfflineJobReply:
        job = self.api.offline_jobs.get(request.job_id)
        if job is None:
            await context.abort(SC.NOT_FOUND, f"no offline job {request.job_id!r}")
        return job.reply()


class _ControlServicer(pbg.ControlServicer):
    def __init__(self, register: Callable[[pb.RegisterWorkerRequest], pb.RegisterWorkerReply],
                 spot_notice: Callable[[pb.SpotNoticeRequest], pb.SpotNoticeReply]) -> None:
        self.register = register
        self.spot_notice = spot_notice

    async def RegisterWorker(self, request: pb.RegisterWorkerRequest, context: grpc.aio.ServicerContext) -> pb.RegisterWorkerReply:
        return self.register(request)

    async def SpotNotice(self, request: pb.SpotNoticeRequest, context: grpc.aio.ServicerContext) -> pb.SpotNoticeReply:
        return self.spot_notice(request)
