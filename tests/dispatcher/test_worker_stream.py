"""The dispatcher's one InferStream per worker (issue #41, deliverable 1): call ids and results in
any order, a result nobody waits for, a stream closed with calls pending, deadlines and
cancellation through the stream, the unary fallback for a worker without it, the token checked
once per stream, and a worker killed with a call in flight on its stream (each query in it
re-dispatched exactly once)."""
from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable

import grpc
import pytest

from config.profiles import load_profiles_csv
from dispatcher import auth
from dispatcher.auth import BearerTokenInterceptor
from dispatcher.call_stream import ACCEPTED, INFER_STREAM
from dispatcher.latency_model import LatencyModel
from dispatcher.proto import costscale_pb2 as pb, costscale_pb2_grpc as pbg
from dispatcher.server import Dispatcher
from dispatcher.workers.client import WorkerClient, is_worker_failure
from tests.dispatch_helpers import make_config, run, start_worker


async def until(cond: Callable[[], bool]) -> None:
    while not cond():
        await asyncio.sleep(0.005)


class ScriptedWorker(pbg.WorkerServicer):
    """An InferStream whose answers a test scripts: ``script(calls, write)`` runs once ``expect``
    calls arrived (their InferCall messages, in arrival order); it may write results and return
    (ending the stream OK) or wait."""

    def __init__(self, expect: int, script: Callable[[list[pb.InferCall], Any], Awaitable[None]]) -> None:
        self.expect, self.script = expect, script
        self.calls: list[pb.InferCall] = []
        self.cancels: list[int] = []

    async def InferStream(self, request_iterator: Any, context: grpc.aio.ServicerContext) -> None:
        await context.send_initial_metadata((ACCEPTED,))     # the stream's protocol: accepted at once
        while len(self.calls) < self.expect:
            self.calls.append(await context.read())
        reader = asyncio.create_task(self._cancels(context))
        try:
            await self.script(self.calls, context.write)
        finally:
            reader.cancel()

    async def _cancels(self, context: grpc.aio.ServicerContext) -> None:
        while True:
            m = await context.read()
            if m is grpc.aio.EOF:
                return
            if m.cancel:
                self.cancels.append(m.call_id)


async def serve(servicer: pbg.WorkerServicer, interceptors: list[Any] | None = None) -> tuple[grpc.aio.Server, str]:
    server = grpc.aio.server(interceptors=interceptors)
    pbg.add_WorkerServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}"


def call(qid: str) -> pb.InferCall:
    return pb.InferCall(query_id=qid, model="m", batch_size=1)


def test_results_out_of_order_reach_their_calls_and_an_unknown_one_is_dropped() -> None:
    async def script(calls: list[pb.InferCall], write: Any) -> None:
        await write(pb.InferResult(call_id=999, variant="nobody"))      # no call has this id
        for c in reversed(calls):                                         # the last call answered first
            await write(pb.InferResult(call_id=c.call_id, variant=c.query_id))
        await asyncio.Event().wait()

    async def main() -> None:
        worker = ScriptedWorker(3, script)
        server, address = await serve(worker)
        client = WorkerClient(address)
        try:
            replies = await asyncio.gather(*(client.infer(call(q), 5.0) for q in ("a", "b", "c")))
            assert [r.variant for r in replies] == ["a", "b", "c"]
            assert sorted(c.call_id for c in worker.calls) == [1, 2, 3]
            assert client._stream is not None and client._stream.unknown == 1
        finally:
            await client.close()
            await server.stop(0)

    run(main)


def test_a_stream_closed_with_calls_pending_fails_each_call_once_as_a_worker_failure() -> None:
    async def script(calls: list[pb.InferCall], write: Any) -> None:
        await write(pb.InferResult(call_id=calls[0].call_id, variant="done"))   # one answered, two left

    async def main() -> None:
        server, address = await serve(ScriptedWorker(3, script))
        client = WorkerClient(address)
        try:
            out = await asyncio.gather(*(client.infer(call(q), 5.0) for q in ("a", "b", "c")), return_exceptions=True)
            assert out[0].variant == "done"
            assert [type(e) for e in out[1:]] == [grpc.aio.AioRpcError] * 2
            assert [e.code() for e in out[1:]] == [grpc.StatusCode.UNAVAILABLE] * 2
            assert all(is_worker_failure(e.code()) and "2 call(s) pending" in e.details() for e in out[1:])
            assert client._stream is None                 # the next call opens a new stream
        finally:
            await client.close()
            await server.stop(0)

    run(main)


def test_a_call_past_its_deadline_ends_deadline_exceeded_and_the_worker_is_told_to_cancel_it() -> None:
    async def script(calls: list[pb.InferCall], write: Any) -> None:
        await asyncio.Event().wait()             # never answers

    async def main() -> None:
        worker = ScriptedWorker(1, script)
        server, address = await serve(worker)
        client = WorkerClient(address)
        try:
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await client.infer(call("a"), 0.2)
            assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
            assert worker.calls[0].timeout_ms == pytest.approx(200.0)     # the deadline travels with the call
            await until(lambda: worker.cancels == [worker.calls[0].call_id])
        finally:
            await client.close()
            await server.stop(0)

    run(main)


def test_the_worker_ends_a_call_past_its_own_deadline_and_a_cancelled_one() -> None:
    """The worker's side (SleepWorker serves calls as the worker runtime does): a call whose
    ``timeout_ms`` passes ends DEADLINE_EXCEEDED there; a cancel message stops a running call."""
    async def main() -> None:
        w = await start_worker("i-0", "g4dn.xlarge", 0.0)
        w.servicer.hold = asyncio.Event()
        try:
            async with grpc.aio.insecure_channel(w.address) as ch:
                s = ch.stream_stream(INFER_STREAM, request_serializer=pb.InferCall.SerializeToString,
                                     response_deserializer=pb.InferResult.FromString)()
                await s.write(pb.InferCall(call_id=7, query_id="q", model="m", batch_size=1, timeout_ms=100))
                res = await s.read()
                assert (res.call_id, res.code) == (7, grpc.StatusCode.DEADLINE_EXCEEDED.value[0])
                await s.write(pb.InferCall(call_id=8, query_id="r", model="m", batch_size=1))
                await until(lambda: w.servicer.in_flight == 1)
                await s.write(pb.InferCall(call_id=8, cancel=True))
                await until(lambda: w.servicer.in_flight == 0)
                w.servicer.hold.set()
                await s.write(pb.InferCall(call_id=9, query_id="s", model="m", batch_size=2))
                res = await s.read()
                assert (res.call_id, res.code, res.variant) == (9, 0, "m")   # no result for 8: it was cancelled
                await s.done_writing()
                assert await s.read() is grpc.aio.EOF
            assert w.servicer.completed == ["s"]
        finally:
            await w.kill()

    run(main)


def test_a_cancelled_caller_cancels_its_call_on_the_worker() -> None:
    async def main() -> None:
        w = await start_worker("i-0", "g4dn.xlarge", 0.0)
        w.servicer.hold = asyncio.Event()
        client = WorkerClient(w.address)
        try:
            t = asyncio.create_task(client.infer(call("a"), 10.0))
            await until(lambda: w.servicer.in_flight == 1)
            t.cancel()
            await until(lambda: w.servicer.in_flight == 0)      # the cancel message reached the worker
            assert t.cancelled() and w.servicer.completed == []
            w.servicer.hold.set()
            assert (await client.infer(call("b"), 5.0)).variant == "m"       # the stream lives on
            assert w.servicer.by_path == {"unary": 0, "stream": 2}
        finally:
            await client.close()
            await w.kill()

    run(main)


def test_a_worker_without_the_stream_is_called_unary() -> None:
    async def main() -> None:
        w = await start_worker("i-0", "g4dn.xlarge", 0.0, stream=False)
        client = WorkerClient(w.address)
        try:
            replies = [await client.infer(call(q), 5.0) for q in ("a", "b", "c")]
            assert [r.variant for r in replies] == ["m"] * 3 and isinstance(replies[0], pb.InferReply)
            assert client.streams is False
            assert w.servicer.by_path == {"unary": 3, "stream": 0} and w.servicer.completed == ["a", "b", "c"]
        finally:
            await client.close()
            await w.kill()

    run(main)


def test_worker_streams_off_calls_unary_as_before() -> None:
    async def main() -> None:
        w = await start_worker("i-0", "g4dn.xlarge", 0.0)
        client = WorkerClient(w.address, streams=False)
        try:
            assert (await client.infer(pb.InferRequest(query_id="a", model="m", batch_size=1), 5.0)).variant == "m"
            assert w.servicer.by_path == {"unary": 1, "stream": 0}
        finally:
            await client.close()
            await w.kill()

    run(main)


def test_the_token_is_checked_once_per_stream_not_per_call(monkeypatch: pytest.MonkeyPatch) -> None:
    checks: list[str | None] = []
    real = auth.presented_token

    def counting(md: Any) -> str | None:
        checks.append(real(md))
        return checks[-1]
    monkeypatch.setattr(auth, "presented_token", counting)

    async def main() -> None:
        from tests.dispatch_helpers import SleepWorker
        server, address = await serve(SleepWorker("i-0", "g4dn.xlarge"),
                                      [BearerTokenInterceptor("tok-1", ("costscale.v1.Worker",))])
        good, bad = WorkerClient(address, token="tok-1"), WorkerClient(address, token="other")
        try:
            for q in range(20):
                assert (await good.infer(call(str(q)), 5.0)).variant == "m"
            assert checks == ["tok-1"]                                   # one stream, one check
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await bad.infer(call("x"), 5.0)
            assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED     # as a unary call is refused
            assert checks == ["tok-1", "other"]
        finally:
            await good.close()
            await bad.close()
            await server.stop(0)

    run(main)


def test_a_worker_killed_with_a_call_in_flight_on_its_stream_has_each_query_redispatched_once() -> None:
    """Worker A holds a call of three joined queries (work_conserving) on its stream and is killed:
    each query goes back to the queue once and is served by worker B, none twice, none lost."""
    async def main() -> None:
        d = Dispatcher(make_config(batching="work_conserving"), LatencyModel.from_profiles(load_profiles_csv()))
        port = await d.start("127.0.0.1:0")
        a = await start_worker("i-a", "g4dn.xlarge", 0.0)
        b = await start_worker("i-b", "g4dn.xlarge", 0.0)
        first = a.servicer.hold = asyncio.Event()
        d.add_worker_direct("i-a", "g4dn.xlarge", a.address)
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
                stub = pbg.InferenceStub(ch)

                async def submit() -> pb.SubmitReply:
                    return await stub.Submit(pb.SubmitRequest(model="big", batch_size=2), timeout=15)

                def send() -> asyncio.Task:
                    return asyncio.create_task(submit())
                q1 = send()
                await until(lambda: a.servicer.in_flight == 1)
                rest = [send() for _ in range(3)]
                await until(lambda: d.queries.waiting_count() == 3)
                a.servicer.hold = asyncio.Event()         # the next call on A is held
                first.set()
                await until(lambda: len(d.queries.inflight) == 3 and a.servicer.in_flight == 1)
                d.add_worker_direct("i-b", "g4dn.xlarge", b.address)
                await a.kill()
                replies = await asyncio.gather(q1, *rest)
            assert replies[0].instance_id == "i-a"
            assert [r.instance_id for r in replies[1:]] == ["i-b"] * 3
            st = d.stats()
            assert (st["redispatched"], st["served"]) == (3, 4)
            assert a.servicer.by_path == {"unary": 0, "stream": 2}
            assert sum(b.servicer.by_path.values()) >= 1 and b.servicer.by_path["unary"] == 0
        finally:
            await d.stop(grace=1.0)
            await b.kill()

    run(main)
