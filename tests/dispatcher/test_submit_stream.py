"""SubmitStream (issue #41, deliverable 2): many queries on one stream, each answered by its call id
as a unary Submit would answer it (the same admission and SLO policy), with its own deadline and
cancellation; the bearer token checked once per stream, over TLS; the client helper
(:class:`dispatcher.api.client.InferenceClient`) falls back to unary Submit where a dispatcher has
no stream; unary clients lose nothing."""
from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Callable

import grpc
import pytest

from config.profiles import load_profiles_csv
from dispatcher import auth
from dispatcher.api.client import InferenceClient
from dispatcher.latency_model import LatencyModel
from dispatcher.proto import costscale_pb2 as pb, costscale_pb2_grpc as pbg
from dispatcher.server import Dispatcher
from tests.dispatch_helpers import RunningWorker, make_config, run, start_worker
from tests.tls_helpers import TestCa


async def until(cond: Callable[[], bool]) -> None:
    while not cond():
        await asyncio.sleep(0.005)


async def dispatcher(cfg: Any = None, workers: int = 1) -> tuple[Dispatcher, int, list[RunningWorker]]:
    d = Dispatcher(cfg or make_config(), LatencyModel.from_profiles(load_profiles_csv()))
    port = await d.start("127.0.0.1:0")
    ws = [await start_worker(f"i-{k}", "g4dn.xlarge", 0.0) for k in range(workers)]
    for k, w in enumerate(ws):
        d.add_worker_direct(f"i-{k}", "g4dn.xlarge", w.address)
    return d, port, ws


async def close(d: Dispatcher, ws: list[RunningWorker]) -> None:
    await d.stop(grace=1.0)
    for w in ws:
        await w.kill()


def big(batch: int = 2, **kw: Any) -> pb.SubmitRequest:
    return pb.SubmitRequest(model="big", batch_size=batch, **kw)


def test_many_queries_on_one_stream_each_answered_by_its_id_and_unary_alongside() -> None:
    async def main() -> None:
        d, port, ws = await dispatcher(workers=2)
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
                c = InferenceClient(ch)
                replies = await asyncio.gather(*(c.stream(big(b), timeout=10) for b in range(1, 31)))
                assert [r.outputs[0].shape[0] for r in replies] == list(range(1, 31))   # each its own rows
                assert all(r.model == "big" and r.instance_id in ("i-0", "i-1") and r.slo_met for r in replies)
                unary = await c.submit(big(5), timeout=10)
                assert unary.outputs[0].shape == [5]
                stream = c._stream
                assert stream is not None and stream.unknown == 0
            assert d.stats()["served"] == 31
        finally:
            await close(d, ws)

    run(main)


@pytest.mark.parametrize("request_kw, code", [
    ({"model": "nope", "batch_size": 1}, grpc.StatusCode.INVALID_ARGUMENT),                 # unknown model
    ({"model": "big", "batch_size": 0}, grpc.StatusCode.INVALID_ARGUMENT),                  # no rows
    ({"model": "big", "batch_size": 2, "latency_slo_ms": 0.01}, grpc.StatusCode.DEADLINE_EXCEEDED),  # SLO policy
])
def test_a_refused_query_gets_what_a_unary_submit_gets(request_kw: dict, code: grpc.StatusCode) -> None:
    async def main() -> None:
        d, port, ws = await dispatcher(make_config(on_deadline="drop"))
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
                c = InferenceClient(ch)
                got = []
                for send in (c.submit, c.stream):
                    with pytest.raises(grpc.aio.AioRpcError) as e:
                        await send(pb.SubmitRequest(**request_kw), timeout=10)
                    got.append((e.value.code(), e.value.details()))
                assert got[0] == got[1] and got[0][0] == code
                assert (await c.stream(big(), timeout=10)).model == "big"     # the stream lives on
        finally:
            await close(d, ws)

    run(main)


def test_a_message_past_its_deadline_ends_alone_and_a_cancelled_one_leaves_the_queue() -> None:
    async def main() -> None:
        d, port, ws = await dispatcher()
        ws[0].servicer.hold = asyncio.Event()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
                c = InferenceClient(ch)
                head = asyncio.create_task(c.stream(big(), timeout=10))        # on the held worker
                await until(lambda: ws[0].servicer.in_flight == 1)
                with pytest.raises(grpc.aio.AioRpcError) as e:
                    await c.stream(big(), timeout=0.2)                           # queued behind it
                assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
                await until(lambda: d.queries.waiting_count() == 0)             # the dispatcher let it go
                waiting = asyncio.create_task(c.stream(big(), timeout=10))
                await until(lambda: d.queries.waiting_count() == 1)
                waiting.cancel()
                await until(lambda: d.queries.waiting_count() == 0)             # the cancel reached the dispatcher
                ws[0].servicer.hold.set()
                assert (await head).instance_id == "i-0"
                assert (await c.stream(big(3), timeout=10)).outputs[0].shape == [3]
            st = d.stats()
            assert st["served"] == 2
        finally:
            await close(d, ws)

    run(main)


def test_the_client_helper_falls_back_to_unary_submit_on_a_dispatcher_without_the_stream() -> None:
    class Old(pbg.InferenceServicer):       # a dispatcher from before issue #41: Submit only
        async def Submit(self, request: pb.SubmitRequest, context: grpc.aio.ServicerContext) -> pb.SubmitReply:
            return pb.SubmitReply(model=request.model, variant="old")

    async def main() -> None:
        server = grpc.aio.server()
        pbg.add_InferenceServicer_to_server(Old(), server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
                c = InferenceClient(ch)
                assert [(await c.stream(big(), timeout=5)).variant for _ in range(3)] == ["old"] * 3
                assert c.streams is False
        finally:
            await server.stop(0)

    run(main)


def test_submit_stream_over_tls_with_the_bearer_token_checked_once_per_stream(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    checks: list[str | None] = []
    real = auth.presented_token

    def counting(md: Any) -> str | None:
        checks.append(real(md))
        return checks[-1]
    monkeypatch.setattr(auth, "presented_token", counting)
    ca = TestCa(tmp_path / "ca")
    server = ca.issue("dispatcher")
    (tmp_path / "token").write_text("tok-123\n")
    cfg = make_config(tls={"cert_file": str(server.cert), "key_file": str(server.key)},
                      auth_token_file=str(tmp_path / "token"))

    async def main() -> None:
        d, port, ws = await dispatcher(cfg)
        creds = grpc.ssl_channel_credentials(root_certificates=ca.ca_file.read_bytes())
        try:
            async with grpc.aio.secure_channel(f"localhost:{port}", creds) as ch:
                good = InferenceClient(ch, token="tok-123")
                replies = await asyncio.gather(*(good.stream(big(), timeout=10) for _ in range(20)))
                assert len(replies) == 20 and all(r.model == "big" for r in replies)
                assert checks == ["tok-123"]                         # one stream, one check
                for token, code in ((None, "missing"), ("wrong", "bad")):
                    with pytest.raises(grpc.aio.AioRpcError) as e:
                        await InferenceClient(ch, token=token).stream(big(), timeout=10)
                    assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED and code in e.value.details()
                    assert "tok-123" not in e.value.details()
            async with grpc.aio.insecure_channel(f"localhost:{port}") as plain:     # TLS is required
                with pytest.raises(grpc.aio.AioRpcError) as e:
                    await InferenceClient(plain, token="tok-123").stream(big(), timeout=5)
                assert e.value.code() == grpc.StatusCode.UNAVAILABLE
            assert d.stats()["served"] == 20
        finally:
            await close(d, ws)

    run(main)
