"""Queries joined into one worker call (dispatcher.batch_join; issue #13 deliverable 4 live): which
queued queries join, and on a live dispatcher, one call whose outputs go back to each query."""
from __future__ import annotations

import asyncio

import grpc
import numpy as np
import pytest

from dispatcher import batch_join as bj
from dispatcher.latency_model import LatencyModel
from dispatcher.policy import QueryView
from dispatcher.proto import costscale_pb2 as pb, costscale_pb2_grpc as pbg
from dispatcher.proto.tensors import array_to_tensor, tensor_to_array
from dispatcher.server import Dispatcher
from config.profiles import load_profiles_csv
from tests.dispatch_helpers import SleepWorker, make_config


class TenPerRow:
    """10 ms per row of the batch, on any type."""

    def predict_ms(self, model: str, instance_type: str, batch_size: float) -> float:
        return 10.0 * batch_size


def view(qid: str, batch: int, arrival: float = 0.0, qos: float = 100.0) -> QueryView:
    return QueryView(qid, "m", batch, arrival, qos)


def test_followers_join_in_queue_order_while_every_slack_and_max_batch_allow() -> None:
    sig = (("x", "float32", (4,)),)
    other = (("x", "float32", (5,)),)
    waiting = [(view("a", 3), sig), (view("b", 4), other), (view("c", 2), sig), (view("d", 1), sig)]
    # head batch 2 at t=0, qos 100 ms, xi 1: 2+3 -> 50 ms, b cannot stack, +2 -> 70, +1 -> 80
    assert bj.followers(view("h", 2), sig, waiting, "T", TenPerRow(), 0.0, 100, 1.0) == [0, 2, 3]
    # max_batch 7: d (8 rows) does not fit, and ends the batch
    assert bj.followers(view("h", 2), sig, waiting, "T", TenPerRow(), 0.0, 7, 1.0) == [0, 2]
    # "a" has waited 60 ms: its slack is 40 ms < 50 ms, and the batch ends before it
    late = [(view("a", 3, arrival=-0.060), sig)] + waiting[1:]
    assert bj.followers(view("h", 2), sig, late, "T", TenPerRow(), 0.0, 100, 1.0) == []
    # the head's own slack counts too (xi 0.5: 50 ms), and a head that cannot stack joins nothing
    assert bj.followers(view("h", 2), sig, waiting, "T", TenPerRow(), 0.0, 100, 0.5) == [0]
    assert bj.followers(view("h", 2), None, waiting, "T", TenPerRow(), 0.0, 100, 1.0) == []


def test_signature_stack_and_split() -> None:
    x1, x2 = np.arange(4, dtype=np.float32).reshape(1, 4), np.arange(8, dtype=np.float32).reshape(2, 4) + 10
    t1, t2 = [array_to_tensor("x", x1)], [array_to_tensor("x", x2)]
    assert bj.signature(t1, 1) == bj.signature(t2, 2) == (("x", "float32", (4,)),)
    assert bj.signature(t2, 3) is None and bj.signature([], 5) == ()
    stacked = bj.stack([t1, t2])
    assert tensor_to_array(stacked[0]).tolist() == np.concatenate([x1, x2]).tolist()
    parts = bj.split([array_to_tensor("y", np.concatenate([x1, x2]) * 2)], [1, 2])
    assert [tensor_to_array(p[0]).tolist() for p in parts] == [(x1 * 2).tolist(), (x2 * 2).tolist()]
    with pytest.raises(ValueError):
        bj.split([array_to_tensor("y", np.zeros(3))], [1, 1])   # 3 rows for 2 queries of 1


class EchoWorker(SleepWorker):
    """Doubles its input "x" (or returns zeros for a batch without tensors); records each call's batch."""

    def __init__(self, refuse_joined: bool = False) -> None:
        super().__init__("i-0", "g4dn.xlarge")
        self.calls: list[int] = []
        self.refuse_joined = refuse_joined

    async def Infer(self, request: pb.InferRequest, context: grpc.aio.ServicerContext) -> pb.InferReply:
        if self.hold is not None:
            await self.hold.wait()
        self.calls.append(request.batch_size)
        if self.refuse_joined and request.batch_size == 8:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "refused")
        x = tensor_to_array(request.inputs[0]) if request.inputs else np.zeros((request.batch_size, 1), np.float32)
        return pb.InferReply(service_ms=1.0, provider="none", variant=request.model,
                             outputs=[array_to_tensor("y", x * 2)])


@pytest.mark.parametrize("batching, calls, refuse", [("work_conserving", [1, 8, 2], False),
                                                     ("none", [1, 1, 2, 1, 3, 1, 2], False),
                                                     ("work_conserving", [1, 8, 2], True)])
def test_a_live_dispatcher_joins_waiting_queries_into_one_call(batching: str, calls: list[int], refuse: bool) -> None:
    """One held query, six behind it: work-conserving sends the five that stack as one call of 8 rows
    (the one without tensors alone), and each reply carries its own rows; a refused joined call
    ends every query in it with the worker's error (none is lost or answered twice)."""
    async def main() -> None:
        d = Dispatcher(make_config(batching=batching), LatencyModel.from_profiles(load_profiles_csv()))
        port = await d.start("127.0.0.1:0")
        echo = EchoWorker(refuse_joined=refuse)
        server = grpc.aio.server()
        pbg.add_WorkerServicer_to_server(echo, server)
        wport = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        echo.hold = asyncio.Event()
        d.add_worker_direct("i-0", "g4dn.xlarge", f"127.0.0.1:{wport}")
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
                stub = pbg.InferenceStub(ch)
                xs = [np.full((b, 4), i, np.float32) for i, b in enumerate((1, 1, 2, 1, 3, 1))]

                async def call(req: pb.SubmitRequest) -> pb.SubmitReply:
                    return await stub.Submit(req, timeout=15)

                def send(x: np.ndarray | None) -> asyncio.Task:
                    req = (pb.SubmitRequest(model="big", inputs=[array_to_tensor("x", x)]) if x is not None
                           else pb.SubmitRequest(model="big", batch_size=2))
                    return asyncio.create_task(call(req))

                first = send(xs[0])
                while not d.queries.inflight:                       # the first query is on the held worker
                    await asyncio.sleep(0.01)
                rest = [send(x) for x in xs[1:]] + [send(None)]   # a batch without tensors joins none
                while len(d.queries.queue) < 6:
                    await asyncio.sleep(0.01)
                echo.hold.set()
                replies = await asyncio.gather(first, *rest, return_exceptions=True)
            if refuse:
                codes = [r.code() if isinstance(r, grpc.aio.AioRpcError) else "ok" for r in replies]
                assert codes == ["ok"] + [grpc.StatusCode.INVALID_ARGUMENT] * 5 + ["ok"]
                replies = [replies[0]] + [None] * 5 + [replies[-1]]
            for x, r in zip(xs, replies):                   # each query gets its own rows back
                if r is not None:
                    assert tensor_to_array(r.outputs[0]).tolist() == (x * 2).tolist()
            assert tensor_to_array(replies[-1].outputs[0]).shape == (2, 1)
            assert echo.calls == calls
        finally:
            await d.stop(grace=1.0)
            await server.stop(0)

    asyncio.run(asyncio.wait_for(main(), 30))


def test_queries_the_round_matched_to_other_workers_do_not_join_a_call() -> None:
    """Three queries wait and three workers join in one event-loop turn: the matching gives each
    worker a query, and none of those is taken into another worker's call (each worker serves one)."""
    async def main() -> None:
        d = Dispatcher(make_config(batching="work_conserving"), LatencyModel.from_profiles(load_profiles_csv()))
        port = await d.start("127.0.0.1:0")
        echoes, servers = [], []
        for i in range(3):
            e = EchoWorker()
            srv = grpc.aio.server()
            pbg.add_WorkerServicer_to_server(e, srv)
            echoes.append((e, srv.add_insecure_port("127.0.0.1:0")))
            await srv.start()
            servers.append(srv)
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
                stub = pbg.InferenceStub(ch)

                async def call(i: int) -> pb.SubmitReply:
                    x = np.full((1, 4), i, np.float32)
                    return await stub.Submit(pb.SubmitRequest(model="big", inputs=[array_to_tensor("x", x)]), timeout=15)

                tasks = [asyncio.create_task(call(i)) for i in range(3)]
                while len(d.queries.queue) < 3:                    # no worker yet: all three wait
                    await asyncio.sleep(0.01)
                for i, (_, wport) in enumerate(echoes):     # one turn: one matching round for all three
                    d.add_worker_direct(f"i-{i}", "g4dn.xlarge", f"127.0.0.1:{wport}")
                replies = await asyncio.gather(*tasks)
            assert sorted(r.instance_id for r in replies) == ["i-0", "i-1", "i-2"]
            assert [e.calls for e, _ in echoes] == [[1], [1], [1]]
        finally:
            await d.stop(grace=1.0)
            for srv in servers:
                await srv.stop(0)

    asyncio.run(asyncio.wait_for(main(), 30))
