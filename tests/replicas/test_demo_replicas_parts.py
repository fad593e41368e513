"""The parts of ``costscale demo --replicas`` that need no cluster: the flag's checks (one line,
exit 2), the seeded kill points, the client's retry count from channelz against live gRPC servers
whose first attempt of some queries answers UNAVAILABLE (the exact retries known), the load
record's figures, the verdict of a kill point, and the JSON log lines the times are read from."""
from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from daemon.observe.audit import JsonFormatter
from daemon.demos.kill_point import KillPoint, PointResult, seeded_points
from daemon.demos.failover_load import INFERENCE_SERVICE, AttemptCounts, LoadRecord, service_config, steady_load
from daemon.demos.replica_cluster import first_line_after, json_log_lines, nginx_config
from dispatcher.proto import costscale_pb2 as pb, costscale_pb2_grpc as pbg


@pytest.mark.parametrize("argv, needle", [
    (["--replicas", "1"], "between 2 and 4 (got 1)"),
    (["--replicas", "5"], "between 2 and 4 (got 5)"),
    (["--replicas", "two"], "invalid int value"),
    (["--replicas", "2", "--spot"], "runs its own scenario"),
    (["--replicas", "2", "--pool", "r5n.large=2"], "runs its own scenario"),
    (["--replicas", "2", "--duration", "4"], "at least 8 s"),
    (["--replicas", "2", "--rate", "-1"], "--rate > 0"),
])
def test_demo_replicas_bad_values_are_one_line_and_exit_2(argv: list[str], needle: str,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    from daemon.cli import main

    assert main(["demo", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err


def test_seeded_kill_points_are_reproducible_and_within_their_ranges() -> None:
    pts = seeded_points(30, seed=27, fleet_s=2.0)
    assert pts == seeded_points(30, seed=27, fleet_s=2.0) and pts != seeded_points(30, seed=28, fleet_s=2.0)
    assert len(pts) == 30 and {p.moment for p in pts} == {"tick", "launch"}
    assert all(4.0 <= p.offset_s <= 10.0 for p in pts)
    assert all(0.0 <= p.delay_s <= (3.0 if p.moment == "launch" else 2.0) for p in pts)
    assert any(p.delay_s > 2.0 for p in pts if p.moment == "launch")   # some after the replacement's tick


def test_attempt_counts_take_the_health_watches_out() -> None:
    # 40 queries, 52 subchannel calls of which 3 watches (one per READY period), 1 watch ended with its
    # connection: 52 - 3 - 40 = 9 retries; 11 failed calls - 1 ended watch = 10 failed attempts
    a = AttemptCounts(queries=40, calls=52, failed_calls=11, watches=3, watches_ended=1)
    assert (a.retries, a.failed_attempts) == (9, 10)
    assert (AttemptCounts().retries, AttemptCounts().failed_attempts) == (0, 0)


def test_load_record_figures() -> None:
    rec = LoadRecord(sent_at=[10.0, 11.0, 12.0, 13.0, 14.0], outcome={0: "OK", 1: "UNAVAILABLE", 2: "OK", 3: "OK"},
                     ends={0: 1, 1: 1, 2: 2, 3: 1}, attempts=AttemptCounts(4, 9, 5, 0, 0))
    assert (rec.sent, rec.ok, rec.failed()) == (5, 3, {"UNAVAILABLE": 1})
    assert rec.failed_between(11.0, 13.0) == (1, 2)          # queries 1 and 2
    assert (rec.twice(), rec.unanswered()) == (1, 1)
    assert rec.recovered_share() == pytest.approx(4 / 5)      # 5 failed attempts, 1 query failed in the end
    assert LoadRecord().recovered_share() is None


def _passing() -> PointResult:
    return PointResult(point=KillPoint(5.0), killed="replica-1", new_holder="replica-2", sent=100, answered=99,
                       failed={"UNAVAILABLE": 1}, handover_sent=40, handover_failed=1, twice=0, unanswered=0,
                       retries=3, failed_attempts=3, recovered_share=2 / 3, lease_taken_s=5.1, resumed_s=11.0,
                       ttl_s=6.0, budget=1.0, peak_before=0.298, peak_during=0.298, peak_after=0.298,
                       over_budget_samples=0, samples=50, orphans=[], duplicates=0, pool={"r5n.large": 2},
                       live_after={"r5n.large": 2})


@pytest.mark.parametrize("change", [
    {"failed": {"INTERNAL": 1}}, {"twice": 1}, {"unanswered": 1}, {"resumed_s": 11.01}, {"resumed_s": None},
    {"over_budget_samples": 1}, {"samples": 0}, {"orphans": ["i-1"]}, {"duplicates": 1},
    {"live_after": {"r5n.large": 1}},
])
def test_a_kill_point_fails_on_any_broken_figure(change: dict[str, Any]) -> None:
    ok = _passing()
    assert ok.passed and ok.failed_pct == 1.0 and ok.handover_failed_pct == 2.5
    assert not dataclasses.replace(ok, **change).passed


def test_json_log_lines_read_the_daemons_own_format() -> None:
    fmt = JsonFormatter()
    lines = []
    for t, msg in ((1000.25, "replica r-2 took the lease of cluster c (generation 2)"),
                   (1001.5, "fleet (lease taken): demand rm2 1.0 q/s -> target r5n.large x2 (pinned); nothing to do")):
        rec = logging.LogRecord("costscale", logging.INFO, __file__, 1, msg, None, None)
        rec.created = t
        lines.append(fmt.format(rec))
    text = "\n".join(["not json", *lines])
    assert list(json_log_lines(text)) == [(1000.25, "replica r-2 took the lease of cluster c (generation 2)"),
                                          (1001.5, "fleet (lease taken): demand rm2 1.0 q/s -> target r5n.large x2 "
                                                   "(pinned); nothing to do")]
    assert first_line_after(text, "fleet (lease taken)", 1000.0) == 1001.5
    assert first_line_after(text, "took the lease", 1000.3) is None


def test_nginx_config_names_every_replica_once() -> None:
    from pathlib import Path

    text = nginx_config(Path("/tmp/x"), 9000, [9001, 9002, 9003])
    assert [line.strip() for line in text.splitlines() if line.strip().startswith("server 127")] == [
        "server 127.0.0.1:9001 max_fails=0;", "server 127.0.0.1:9002 max_fails=0;",
        "server 127.0.0.1:9003 max_fails=0;"]   # never marked down: a refused connect once left no live upstream
    assert "listen 127.0.0.1:9000 http2;" in text and "grpc_pass grpc://costscale;" in text


class _FlakyInference(pbg.InferenceServicer):
    """Submit that answers UNAVAILABLE to the first attempt of every query whose key ends in an even
    number, and answers every other attempt (gRPC's retry sends ``grpc-previous-rpc-attempts``)."""

    def __init__(self) -> None:
        self.first_attempts_refused = 0

    async def Submit(self, request: pb.SubmitRequest, context: grpc.aio.ServicerContext) -> pb.SubmitReply:
        retried = any(k == "grpc-previous-rpc-attempts" for k, _ in context.invocation_metadata() or ())
        if not retried and int(request.idempotency_key.rsplit("-", 1)[1]) % 2 == 0:
            self.first_attempts_refused += 1
            await context.abort(grpc.StatusCode.UNAVAILABLE, "try another replica")
        return pb.SubmitReply(instance_id="i-fake")


async def _server(svc: _FlakyInference) -> tuple[grpc.aio.Server, int]:
    server = grpc.aio.server()
    pbg.add_InferenceServicer_to_server(svc, server)
    hs = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(hs, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    await hs.set(INFERENCE_SERVICE, health_pb2.HealthCheckResponse.SERVING)
    return server, port


async def _load(target: str, round_robin: bool, n: int) -> LoadRecord:
    stop, rec = asyncio.Event(), LoadRecord()

    async def stop_after_n() -> None:
        while rec.sent < n:
            await asyncio.sleep(0.01)
        stop.set()
    watcher = asyncio.create_task(stop_after_n())
    await steady_load(target, round_robin, qps=400.0, seed=5, stop=stop, record=rec)
    await watcher
    return rec


@pytest.mark.parametrize("servers, round_robin", [(1, False), (2, True)])
def test_the_clients_retries_are_counted_exactly(servers: int, round_robin: bool) -> None:
    async def run() -> tuple[LoadRecord, int]:
        svcs = [_FlakyInference() for _ in range(servers)]
        started = [await _server(s) for s in svcs]
        try:
            ports = [p for _, p in started]
            target = ("ipv4:" + ",".join(f"127.0.0.1:{p}" for p in ports)) if round_robin else f"127.0.0.1:{ports[0]}"
            rec = await _load(target, round_robin, 60)
        finally:
            for server, _ in started:
                await server.stop(0)
        return rec, sum(s.first_attempts_refused for s in svcs)

    rec, refused = asyncio.run(run())
    evens = sum(1 for i in range(rec.sent) if i % 2 == 0)
    assert rec.sent >= 60 and rec.ok == rec.sent and rec.failed() == {} and rec.twice() == 0
    assert refused == evens
    assert rec.attempts.queries == rec.sent
    assert rec.attempts.retries == evens and rec.attempts.failed_attempts == evens
    assert rec.recovered_share() == 1.0
    assert service_config(round_robin).count("round_robin") == int(round_robin)
