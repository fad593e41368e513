"""The plain round-robin proxy the dispatcher benchmarks compare against: a grpc.aio server with the
dispatcher's server options and its persistent worker channels (``dispatcher.workers.client.WorkerClient``,
one InferStream per worker when the worker offers one), no queue, no policy. Used in-process by
``bench/dispatch/dispatch_bench.py`` and as a process of its own (``bench/dispatch/_loopback.py --role
proxy``) by ``bench/dispatch/front_bench.py``."""
from __future__ import annotations

import asyncio
import itertools
import time


class RoundRobinProxy:
    """The baseline: Submit → next worker in turn, no queue, no policy, no limit per worker
    (``one_per_worker``: one query per worker at a time, FIFO over the idle ones, the dispatcher's
    rule by design, Kairos §6)."""

    def __init__(self, addresses: list[str], one_per_worker: bool = False) -> None:
        from dispatcher.workers.client import WorkerClient

        self.clients = [WorkerClient(a) for a in addresses]
        self._rr = itertools.cycle(range(len(self.clients)))
        self.one_per_worker = one_per_worker
        self._idle: asyncio.Queue[int] = asyncio.Queue()
        for k in range(len(self.clients)):
            self._idle.put_nowait(k)

    async def start(self) -> tuple[object, int]:
        """The proxy's server, listening on a free loopback port: (server, port)."""
        import grpc

        from dispatcher.proto import costscale_pb2 as pb, costscale_pb2_grpc as pbg

        proxy = self

        class Servicer(pbg.InferenceServicer):
            async def Submit(self, request: pb.SubmitRequest, context: grpc.aio.ServicerContext) -> pb.SubmitReply:
                k = await proxy._idle.get() if proxy.one_per_worker else next(proxy._rr)
                t0 = time.perf_counter()
                try:
                    r = await proxy.clients[k].infer(pb.InferRequest(query_id="x", model=request.model,
                                                                     batch_size=request.batch_size, inputs=request.inputs), 10.0)
                finally:
                    if proxy.one_per_worker:
                        proxy._idle.put_nowait(k)
                ms = 1000 * (time.perf_counter() - t0)
                return pb.SubmitReply(outputs=r.outputs, model=request.model, instance_id=f"i-{k}",
                                      service_ms=r.service_ms, total_ms=ms, provider=r.provider)

        server = grpc.aio.server(options=[("grpc.max_receive_message_length", 5 * 1024 * 1024),
                                          ("grpc.max_send_message_length", 64 * 1024 * 1024), ("grpc.so_reuseport", 0)])
        pbg.add_InferenceServicer_to_server(Servicer(), server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        return server, port

    async def close(self) -> None:
        for c in self.clients:
            await c.close()
