"""The dispatcher's gRPC servicers (costscale.v1 ``Inference`` and ``Control``): they only parse a
request, call the :class:`dispatcher.server.Dispatcher`, and render its answer as a reply or a typed
gRPC status (moto's responses/models split); every decision is the Dispatcher's.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

import grpc

from dispatcher.admission import SC
from dispatcher.proto import costscale_pb2 as pb, costscale_pb2_grpc as pbg

if TYPE_CHECKING:
    from dispatcher.server import Dispatcher

Reply = TypeVar("Reply")


async def _render(out: Reply | tuple[grpc.StatusCode, str], context: grpc.aio.ServicerContext) -> Reply:
    """The reply, or the call ended with the typed status (code, message) the Dispatcher answered."""
    if isinstance(out, tuple):
        await context.abort(out[0], out[1])
    return out  # type: ignore[return-value]


class _InferenceServicer(pbg.InferenceServicer):
    def __init__(self, d: Dispatcher) -> None:
        self.d = d

    async def Submit(self, request: pb.SubmitRequest, context: grpc.aio.ServicerContext) -> pb.SubmitReply:
        return await _render(await self.d.submit(request), context)

    async def Status(self, request: pb.StatusRequest, context: grpc.aio.ServicerContext) -> pb.StatusReply:
        return self.d.status_reply()

    async def _no_registry(self, context: grpc.aio.ServicerContext, name: str) -> None:
        if self.d.registry is None:
            await context.abort(SC.UNIMPLEMENTED, f"{name}: this dispatcher runs without a variant registry")

    async def RegisterModel(self, request: pb.RegisterModelRequest, context: grpc.aio.ServicerContext) -> pb.RegisterModelReply:
        await self._no_registry(context, "RegisterModel")
        return await _render(await self.d.register_model(request), context)

    async def ListVariants(self, request: pb.ListVariantsRequest, context: grpc.aio.ServicerContext) -> pb.ListVariantsReply:
        await self._no_registry(context, "ListVariants")
        return pb.ListVariantsReply(variants=self.d.list_variants(request.model, request.application))

    async def SubmitOffline(self, request: pb.OfflineJobRequest, context: grpc.aio.ServicerContext) -> pb.OfflineJobReply:
        await self._no_registry(context, "SubmitOffline")
        return await _render(await self.d.submit_offline(request), context)

    async def GetOfflineJob(self, request: pb.OfflineJobReply, context: grpc.aio.ServicerContext) -> pb.OfflineJobReply:
        job = self.d.offline_jobs.get(request.job_id)
        if job is None:
            await context.abort(SC.NOT_FOUND, f"no offline job {request.job_id!r}")
        return job.reply()


class _ControlServicer(pbg.ControlServicer):
    def __init__(self, d: Dispatcher) -> None:
        self.d = d

    async def RegisterWorker(self, request: pb.RegisterWorkerRequest, context: grpc.aio.ServicerContext) -> pb.RegisterWorkerReply:
        return self.d.register(request)
