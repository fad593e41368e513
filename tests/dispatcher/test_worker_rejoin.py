"""A registered worker registers again when no dispatcher has called it for a while (worker.rejoin,
issue #27 deliverable 2a): the rule, the loop on a virtual clock, the interceptor that hears calls,
and a worker moving to a new dispatcher at the same address (the balancer) after the first dies."""
from __future__ import annotations

import argparse
import asyncio
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from daemon.cli import main as cli_main
from daemon.commands import worker as cmd
from daemon.commands.worker import build_options
from dispatcher.proto import costscale_pb2 as pb, costscale_pb2_grpc as pbg
from dispatcher.workers.registry import HEALTH_INTERVAL_S
from tests.conftest import free_port
from worker.rejoin import REJOIN_AFTER_S, Hearing, keep_registered, rejoin_due
from worker.options import WorkerOptions
from worker.server import WORKER_SERVICE, WorkerServer, serve_worker


class VirtualClock:
    """A clock whose ``sleep`` moves time on at once, marking the dispatcher calls due meanwhile."""

    def __init__(self, calls_at: list[float]) -> None:
        self.now = 0.0
        self.calls_at = sorted(calls_at)
        self.hearing: Hearing | None = None

    def __call__(self) -> float:
        return self.now

    async def sleep(self, dt: float) -> None:
        end = self.now + dt
        while self.calls_at and self.calls_at[0] <= end:
            self.now = self.calls_at.pop(0)
            assert self.hearing is not None
            self.hearing.heard()
        self.now = end


class _Stop(Exception):
    pass


def test_default_is_three_health_intervals() -> None:
    assert HEALTH_INTERVAL_S == 1.0 and REJOIN_AFTER_S == 3.0
    assert WorkerOptions(instance_id="i", instance_type="c5.2xlarge").rejoin_after_s == 3.0


def test_rejoin_due_hand_computed() -> None:
    assert not rejoin_due(last_heard=10.0, now=12.9, silence_s=3.0)
    assert rejoin_due(last_heard=10.0, now=13.0, silence_s=3.0)
    assert rejoin_due(last_heard=10.0, now=20.0, silence_s=3.0)


def _run_loop(calls_at: list[float], answers: list[object], registrations: int) -> list[float]:
    clock = VirtualClock(calls_at)
    hearing = Hearing(clock, WORKER_SERVICE)   # heard at 0 (the first registration)
    clock.hearing = hearing
    at: list[float] = []

    async def register() -> None:
        at.append(clock.now)
        answer = answers[min(len(at), len(answers)) - 1]
        if len(at) == registrations:
            raise _Stop
        if isinstance(answer, Exception):
            raise answer

    with pytest.raises(_Stop):
        asyncio.run(keep_registered(register, hearing, 3.0, sleep=clock.sleep))
    return at


def test_registers_again_three_seconds_after_the_last_call() -> None:
    # calls at 1 and 2.5, then silence: again at 5.5, and (still silent) at 8.5
    assert _run_loop([1.0, 2.5], [True], registrations=2) == [5.5, 8.5]


def test_calls_keep_it_from_registering_again() -> None:
    # a health check every second until 10: the first registration again at 13
    assert _run_loop([float(t) for t in range(1, 11)], [True], registrations=1) == [13.0]


def test_a_refusal_is_tried_again_after_another_silence() -> None:
    assert _run_loop([], [RuntimeError("unknown instance"), True], registrations=3) == [3.0, 6.0, 9.0]


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")


def test_only_authenticated_dispatcher_calls_count(cache: Path) -> None:
    now = [0.0]
    ws = WorkerServer(WorkerOptions(instance_id="i-h", instance_type="c5.2xlarge", cache_dir=cache, threads=1,
                                    token="s3cret", clock=lambda: now[0]))
    port = ws.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            stub = pbg.WorkerStub(ch)
            now[0] = 7.0
            with pytest.raises(grpc.RpcError) as err:
                stub.Health(pb.HealthRequest(), timeout=5)
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert ws.hearing.last == 0.0
            stub.Health(pb.HealthRequest(), timeout=5, metadata=(("authorization", "Bearer s3cret"),))
            assert ws.hearing.last == 7.0
            now[0] = 9.0
            stub.Infer(pb.InferRequest(model="mlp", batch_size=1), timeout=5,
                       metadata=(("authorization", "Bearer s3cret"),))
            assert ws.hearing.last == 9.0
    finally:
        ws.stop()


class Control(pbg.ControlServicer):
    def __init__(self) -> None:
        self.requests: list[pb.RegisterWorkerRequest] = []

    def RegisterWorker(self, request: pb.RegisterWorkerRequest, context: grpc.ServicerContext) -> pb.RegisterWorkerReply:
        self.requests.append(request)
        return pb.RegisterWorkerReply(accepted=True, message="registered")


def _control(port: int) -> tuple[Control, grpc.Server]:
    fake = Control()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    pbg.add_ControlServicer_to_server(fake, server)
    assert server.add_insecure_port(f"127.0.0.1:{port}") == port
    server.start()
    return fake, server


async def _until(cond: object, what: str) -> None:
    for _ in range(800):
        if cond():   # type: ignore[operator]
            return
        await asyncio.sleep(0.025)
    raise AssertionError(f"timed out waiting for {what}")


def test_worker_moves_to_the_dispatcher_that_replaces_a_dead_one(cache: Path) -> None:
    """The address stays (a balancer); the first dispatcher dies; the worker, hearing nothing,
    registers with the one now behind it."""
    port = free_port()
    first, server = _control(port)
    opts = WorkerOptions(instance_id="i-move", instance_type="c5.2xlarge", cache_dir=cache, threads=1,
                         dispatcher=f"127.0.0.1:{port}", register_backoff_s=0.05, rejoin_after_s=0.3)

    async def main() -> tuple[Control, grpc.Server]:
        stop = asyncio.Event()
        task = asyncio.create_task(serve_worker(opts, stop=stop))
        await _until(lambda: len(first.requests) >= 1, "the first registration")
        server.stop(0).wait()
        second, server2 = _control(port)
        await _until(lambda: len(second.requests) >= 1, "a registration with the new dispatcher")
        stop.set()
        await task
        return second, server2

    second, server2 = asyncio.run(main())
    server2.stop(0)
    assert second.requests[0].instance_id == "i-move" and second.requests[0].address.startswith("127.0.0.1:")


@pytest.mark.parametrize("value, needle", [("-1", "--rejoin-after-s: must be >= 0"), ("nan", "--rejoin-after-s")])
def test_bad_rejoin_flag_exits_2(value: str, needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    rc = cli_main(["worker", "--instance-id", "i-1", "--instance-type", "c5.2xlarge", "--rejoin-after-s", value])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and needle in err and "Traceback" not in err and len(err.splitlines()) == 1


def test_zero_disables_registering_again(cache: Path) -> None:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers()
    cmd.register(sub)
    args = p.parse_args(["worker", "--instance-id", "i-1", "--instance-type", "c5.2xlarge", "--rejoin-after-s", "0",
                         "--cache-dir", str(cache)])
    assert build_options(args).rejoin_after_s is None
    args = p.parse_args(["worker", "--instance-id", "i-1", "--instance-type", "c5.2xlarge", "--cache-dir", str(cache)])
    assert build_options(args).rejoin_after_s == REJOIN_AFTER_S

