"""The live dispatcher on loopback: end-to-end serving, typed errors, registration, idempotency,
and worker failures (DESIGN invariant 4: every accepted query ends with a result or a typed error)."""
from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from dispatcher.latency_model import LatencyModel
from config.version import PROTOCOL_VERSION, costscale_version
from dispatcher.proto import costscale_pb2 as pb, costscale_pb2_grpc as pbg
from dispatcher.server import Dispatcher
from config.profiles import load_profiles_csv
from tests.dispatch_helpers import RunningWorker, make_config, run, start_worker

PROFILES = load_profiles_csv()
SC = grpc.StatusCode


async def setup(n_workers: int = 2, delay_s: float = 0.0, types: tuple[str, ...] = ("g4dn.xlarge", "c5n.2xlarge"),
                **dispatcher: Any) -> tuple[Dispatcher, list[RunningWorker], grpc.aio.Channel]:
    d = Dispatcher(make_config(**dispatcher), LatencyModel.from_profiles(PROFILES))
    port = await d.start("127.0.0.1:0")
    workers = []
    for i in range(n_workers):
        t = types[i % len(types)]
        w = await start_worker(f"i-{i}", t, delay_s)
        d.add_worker_direct(f"i-{i}", t, w.address)
        workers.append(w)
    ch = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    return d, workers, ch


async def teardown(d: Dispatcher, workers: list[RunningWorker], ch: grpc.aio.Channel) -> None:
    await ch.close()
    await d.stop(grace=1.0)
    for w in workers:
        await w.server.stop(0)


async def submit(ch: grpc.aio.Channel, **kw: Any) -> pb.SubmitReply | grpc.StatusCode:
    try:
        return await pbg.InferenceStub(ch).Submit(pb.SubmitRequest(**kw), timeout=15)
    except grpc.aio.AioRpcError as exc:
        return exc.code()


async def two_in_flight(d: Dispatcher, ch: grpc.aio.Channel, ws: list[RunningWorker]) -> list[asyncio.Future]:
    """Submit two queries of "big" and return once both run on workers. The workers hold each
    query until both are in flight (on a loaded machine the first could otherwise finish before
    the second is dispatched, and two would never be in flight at once), then serve them."""
    holds = [asyncio.Event() for _ in ws]
    for w, h in zip(ws, holds):
        w.servicer.hold = h
    fut = [asyncio.ensure_future(submit(ch, model="big", batch_size=1)) for _ in range(2)]
    while d.stats()["in_flight"] < 2:
        await asyncio.sleep(0.005)
    for w, h in zip(ws, holds):
        w.servicer.hold = None
        h.set()
    return fut


def test_serves_queries_end_to_end_one_per_worker() -> None:
    async def body() -> None:
        d, ws, ch = await setup(2, delay_s=0.002, on_deadline="best_effort")
        try:
            replies = await asyncio.gather(*(submit(ch, model="ncf", batch_size=10 * (i % 5 + 1)) for i in range(40)))
            assert all(isinstance(r, pb.SubmitReply) for r in replies)
            assert {r.instance_id for r in replies} <= {"i-0", "i-1"}
            assert all(r.model == "ncf" and r.total_ms >= r.service_ms > 0 for r in replies)
            assert replies[0].outputs[0].name == "y"
            # one query per worker at a time
            assert max(w.servicer.max_in_flight for w in ws) == 1
            s = d.stats()
            assert s["served"] == 40 and s["queued"] == 0 and s["workers"] == 2 and s["accepted"] == 40
            assert s["p99_ms"] >= s["p50_ms"] > 0
            snap = d.window_snapshot()
            assert snap.count == 40 and snap.mix.sizes.tolist() == [10, 20, 30, 40, 50]
            # application routing, Status, health, unimplemented RPCs
            r = await submit(ch, application="ranking", batch_size=5)
            assert isinstance(r, pb.SubmitReply) and r.model == "big"
            st = await pbg.InferenceStub(ch).Status(pb.StatusRequest())
            assert (st.served, st.workers, st.cluster) == (41, 2, "test")
            assert dict(st.pool) == {"g4dn.xlarge": 1, "c5n.2xlarge": 1}
            assert st.cost_per_hour == pytest.approx(0.526 + 0.432)
            h = await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service="costscale.v1.Inference"))
            assert h.status == health_pb2.HealthCheckResponse.SERVING
            with pytest.raises(grpc.aio.AioRpcError) as ei:
                await pbg.InferenceStub(ch).ListVariants(pb.ListVariantsRequest())
            assert ei.value.code() == SC.UNIMPLEMENTED
        finally:
            await teardown(d, ws, ch)
    run(body)


def test_invalid_arguments() -> None:
    async def body() -> None:
        d, ws, ch = await setup(1, max_payload_bytes=1000)
        try:
            cases = [
                dict(model="nope", batch_size=1),
                dict(batch_size=1),
                dict(model="ncf", batch_size=0),
                dict(model="ncf", batch_size=-3),
                dict(model="ncf", batch_size=1001),
                dict(model="big", batch_size=101),
                dict(model="ncf", batch_size=1, inputs=[pb.Tensor(name="x", shape=[1, 2000], dtype="uint8", data=b"\0" * 2000)]),
                dict(model="ncf", batch_size=1, latency_slo_ms=-1),
            ]
            for kw in cases:
                assert await submit(ch, **kw) == SC.INVALID_ARGUMENT, kw
            # batch taken from the inputs' first dimension
            r = await submit(ch, model="ncf", inputs=[pb.Tensor(name="x", shape=[7, 4], dtype="uint8", data=b"\0" * 28)])
            assert isinstance(r, pb.SubmitReply) and len(r.outputs[0].data) == 4 * 7
            assert d.stats()["rejected_INVALID_ARGUMENT"] == len(cases)
        finally:
            await teardown(d, ws, ch)
    run(body)


def test_queue_full_is_resource_exhausted() -> None:
    async def body() -> None:
        d, ws, ch = await setup(1, delay_s=0.3, queue_limit=2, on_deadline="best_effort")
        try:
            first = [asyncio.ensure_future(submit(ch, model="big", batch_size=1)) for _ in range(3)]
            while d.stats()["accepted"] < 3:
                await asyncio.sleep(0.005)
            # one in flight, two waiting: the queue is full
            assert await submit(ch, model="big", batch_size=1) == SC.RESOURCE_EXHAUSTED
            assert all(isinstance(r, pb.SubmitReply) for r in await asyncio.gather(*first))
        finally:
            await teardown(d, ws, ch)
    run(body)


def test_drop_mode_rejects_queries_that_cannot_meet_their_slo() -> None:
    async def body() -> None:
        d, ws, ch = await setup(2, on_deadline="drop")
        try:
            # ncf batch 1000: 2.46 ms on g4dn, 6.5 ms on c5n; an SLO of 2 ms is out of reach anywhere
            assert await submit(ch, model="ncf", batch_size=1000, latency_slo_ms=2) == SC.DEADLINE_EXCEEDED
            r = await submit(ch, model="ncf", batch_size=1000, latency_slo_ms=200)
            assert isinstance(r, pb.SubmitReply)
            assert d.stats()["rejected_DEADLINE_EXCEEDED"] == 1
        finally:
            await teardown(d, ws, ch)
    run(body)

    async def best_effort() -> None:
        d, ws, ch = await setup(2, on_deadline="best_effort")
        try:
            r = await submit(ch, model="ncf", batch_size=1000, latency_slo_ms=2)
            assert isinstance(r, pb.SubmitReply)
        finally:
            await teardown(d, ws, ch)
    run(best_effort)


def test_overall_deadline_ends_a_query_with_no_workers() -> None:
    async def body() -> None:
        d, ws, ch = await setup(0)
        d.query_timeout_s = 0.2
        try:
            assert await submit(ch, model="ncf", batch_size=1) == SC.DEADLINE_EXCEEDED
            assert d.stats()["queued"] == 0
        finally:
            await teardown(d, ws, ch)
    run(body)


def test_registration_token_and_known_instances() -> None:
    async def body() -> None:
        d, ws, ch = await setup(0, cluster_token="s3cret")
        w = await start_worker("i-new", "g4dn.xlarge")
        try:
            ctl = pbg.ControlStub(ch)
            req = dict(instance_id="i-new", instance_type="g4dn.xlarge", address=w.address, token="s3cret",
                       costscale_version=costscale_version(), protocol_version=PROTOCOL_VERSION)
            r = await ctl.RegisterWorker(pb.RegisterWorkerRequest(**req))
            assert not r.accepted and "unknown instance" in r.message
            d.allow_instance("i-new", "g4dn.xlarge")
            r = await ctl.RegisterWorker(pb.RegisterWorkerRequest(**{**req, "token": "wrong"}))
            assert not r.accepted and "token" in r.message
            r = await ctl.RegisterWorker(pb.RegisterWorkerRequest(**{**req, "instance_type": "c5n.2xlarge"}))
            assert not r.accepted
            assert d.workers == {}
            r = await ctl.RegisterWorker(pb.RegisterWorkerRequest(**req))
            assert r.accepted and set(d.workers) == {"i-new"}
            assert isinstance(await submit(ch, model="ncf", batch_size=3), pb.SubmitReply)
            d.forget_instance("i-new")
            assert d.workers == {}
        finally:
            await teardown(d, ws + [w], ch)
    run(body)


def test_a_spot_notice_over_control_is_checked_like_a_registration_then_told_to_the_fleet_loop() -> None:
    async def body() -> None:
        d, ws, ch = await setup(0, cluster_token="s3cret")
        heard: list[tuple[str, str, float | None]] = []
        try:
            ctl = pbg.ControlStub(ch)
            req = dict(instance_id="i-spot", token="s3cret", kind="instance-action", reclaim_at_unix=1_700_000_120.0)
            r = await ctl.SpotNotice(pb.SpotNoticeRequest(**req))
            assert not r.accepted and "unknown instance" in r.message
            d.allow_instance("i-spot", "r5n.large")
            r = await ctl.SpotNotice(pb.SpotNoticeRequest(**{**req, "token": "wrong"}))
            assert not r.accepted and "token" in r.message
            r = await ctl.SpotNotice(pb.SpotNoticeRequest(**req))
            assert not r.accepted and r.message == "no fleet loop to tell"
            d.set_spot_notice_handler(lambda iid, kind, at: heard.append((iid, kind, at)))
            r = await ctl.SpotNotice(pb.SpotNoticeRequest(**req))
            assert r.accepted
            r = await ctl.SpotNotice(pb.SpotNoticeRequest(instance_id="i-spot", token="s3cret"))   # kind, time not given
            assert r.accepted
            assert heard == [("i-spot", "instance-action", 1_700_000_120.0), ("i-spot", "instance-action", None)]
        finally:
            await teardown(d, ws, ch)
    run(body)


def test_idempotency_key_runs_once_and_replays_the_answer() -> None:
    async def body() -> None:
        d, ws, ch = await setup(2, delay_s=0.05)
        try:
            a, b = await asyncio.gather(submit(ch, model="ncf", batch_size=10, idempotency_key="k1"),
                                        submit(ch, model="ncf", batch_size=10, idempotency_key="k1"))
            c = await submit(ch, model="ncf", batch_size=10, idempotency_key="k1")
            assert isinstance(a, pb.SubmitReply) and a == b == c
            assert sum(len(w.servicer.completed) for w in ws) == 1
            d2 = await submit(ch, model="ncf", batch_size=10, idempotency_key="k2")
            assert isinstance(d2, pb.SubmitReply)
            assert sum(len(w.servicer.completed) for w in ws) == 2
        finally:
            await teardown(d, ws, ch)
    run(body)


def test_drain_waits_for_in_flight_and_stops_new_work() -> None:
    async def body() -> None:
        d, ws, ch = await setup(2, delay_s=0.1, types=("g4dn.xlarge",))
        try:
            fut = await two_in_flight(d, ch, ws)
            assert await d.drain("i-0", timeout=5.0) is True
            assert d.workers["i-0"].idle
            before = len(ws[0].servicer.completed)
            more = await asyncio.gather(*(submit(ch, model="big", batch_size=1) for _ in range(3)))
            assert all(r.instance_id == "i-1" for r in more)
            assert len(ws[0].servicer.completed) == before
            assert all(isinstance(r, pb.SubmitReply) for r in await asyncio.gather(*fut))
        finally:
            await teardown(d, ws, ch)
    run(body)


def test_forget_instance_redispatches_its_in_flight_query() -> None:
    async def body() -> None:
        d, ws, ch = await setup(2, delay_s=0.2, types=("g4dn.xlarge",))
        try:
            fut = asyncio.ensure_future(submit(ch, model="big", batch_size=1))
            while d.stats()["in_flight"] < 1:
                await asyncio.sleep(0.005)
            victim = next(w.instance_id for w in d.workers.values() if not w.idle)
            d.forget_instance(victim)
            r = await fut
            assert isinstance(r, pb.SubmitReply) and r.instance_id != victim
        finally:
            await teardown(d, ws, ch)
    run(body)


def test_fault_two_of_four_workers_die_under_load() -> None:
    """4 workers, 200 concurrent queries; 2 workers are stopped abruptly mid-run. Every query ends
    exactly once with a result or a typed error; none hangs; survivors serve the rest."""
    async def body() -> None:
        d, ws, ch = await setup(4, delay_s=0.005, on_deadline="best_effort")
        d.health_interval_s = 0.1
        d.health_timeout_s = 0.2
        try:
            n = 200
            tasks = [asyncio.ensure_future(submit(ch, model="big", batch_size=1 + i % 50, idempotency_key=f"f{i}"))
                     for i in range(n)]
            while d.stats()["served"] < 20:
                await asyncio.sleep(0.002)
            await asyncio.gather(ws[0].kill(), ws[1].kill())
            results = await asyncio.wait_for(asyncio.gather(*tasks), 15)
            ok = [r for r in results if isinstance(r, pb.SubmitReply)]
            errors = Counter(r for r in results if not isinstance(r, pb.SubmitReply))
            assert set(errors) <= {SC.UNAVAILABLE, SC.DEADLINE_EXCEEDED}
            assert len(ok) + sum(errors.values()) == n
            assert len(ok) >= n - 10                      # re-dispatch saves the in-flight ones
            assert set(d.workers) == {"i-2", "i-3"}
            s = d.stats()
            assert s["served"] == len(ok) and s["queued"] == 0 and s["in_flight"] == 0
            # a query ran to completion twice only when its first run was on a killed worker whose
            # reply died with it (the kill can land between the worker's finish and its reply; on a
            # loaded machine it did): never twice on the survivors, never re-sent after a reply came
            done = [q for w in ws for q in w.servicer.completed]
            twice = {q for q in done if done.count(q) > 1}
            on_killed = set(ws[0].servicer.completed) | set(ws[1].servicer.completed)
            assert twice <= on_killed and all(done.count(q) == 2 for q in twice)
            survivors = [q for w in ws[2:] for q in w.servicer.completed]
            assert len(survivors) == len(set(survivors))
        finally:
            await teardown(d, ws, ch)
    run(body, timeout=25)


def test_stop_finishes_in_flight_then_refuses() -> None:
    """A query in flight when stop begins is served; one that arrives while the dispatcher stops is
    refused with UNAVAILABLE (and never reaches a worker); after the stop the port answers none."""
    async def body() -> None:
        d, ws, ch = await setup(1, delay_s=0.3)
        fut = asyncio.ensure_future(submit(ch, model="big", batch_size=1))
        while d.stats()["in_flight"] < 1:
            await asyncio.sleep(0.005)
        stopping = asyncio.ensure_future(d.stop(grace=2.0))
        while not d.rt.stopping:
            await asyncio.sleep(0.001)
        late = await submit(ch, model="big", batch_size=1)
        assert late == grpc.StatusCode.UNAVAILABLE
        assert not stopping.done() and d.stats()["in_flight"] == 1     # the first is still running
        await stopping
        r = await fut
        assert isinstance(r, pb.SubmitReply)
        assert d.stats()["accepted"] == 1 and d.stats()["served"] == 1
        assert await submit(ch, model="big", batch_size=1) == grpc.StatusCode.UNAVAILABLE
        await ch.close()
        for w in ws:
            await w.server.stop(0)
    run(body)


def test_killed_worker_in_flight_query_is_redispatched() -> None:
    async def body() -> None:
        d, ws, ch = await setup(2, delay_s=0.3, types=("g4dn.xlarge",), on_deadline="best_effort")
        try:
            fut = asyncio.ensure_future(submit(ch, model="big", batch_size=1))
            while d.stats()["in_flight"] < 1:
                await asyncio.sleep(0.005)
            victim = next(w.instance_id for w in d.workers.values() if not w.idle)
            await ws[int(victim[-1])].kill()
            r = await fut
            assert isinstance(r, pb.SubmitReply) and r.instance_id != victim
            assert d.stats()["redispatched"] == 1 and victim not in d.workers
        finally:
            await teardown(d, ws, ch)
    run(body)


def test_worker_that_keeps_failing_ends_with_unavailable() -> None:
    async def body() -> None:
        d = Dispatcher(make_config(on_deadline="best_effort"), LatencyModel.from_profiles(PROFILES))
        port = await d.start("127.0.0.1:0")
        w = await start_worker("i-0", "g4dn.xlarge", fail_code=SC.INTERNAL)
        d.add_worker_direct("i-0", "g4dn.xlarge", w.address)
        ch = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
        try:
            assert await submit(ch, model="ncf", batch_size=1) == SC.UNAVAILABLE
            assert d.stats()["redispatched"] == d.max_retries
        finally:
            await teardown(d, [w], ch)
    run(body)


def test_busy_intervals_keep_only_the_utilization_horizon() -> None:
    """Each served online query appends its (start, end) to the worker's busy deque; intervals
    that ended before ``now - utilization_horizon_s`` are dropped then (utilization unchanged)."""
    async def body() -> None:
        d, ws, ch = await setup(1, on_deadline="best_effort")
        try:
            w = d.workers["i-0"]
            now = d.clock()
            old = [(now - 100.0 + i, now - 99.5 + i) for i in range(10)]   # long before the horizon
            w.busy.extend(old)
            before = d.utilization(w)
            r = await submit(ch, model="big", batch_size=1)
            assert isinstance(r, pb.SubmitReply), r
            assert len(w.busy) == 1 and w.busy[0][1] >= now
            assert d.utilization(w) >= before
        finally:
            await teardown(d, ws, ch)
    run(body)


def test_demand_window_per_model() -> None:
    """The window the model loop sizes each model from counts only that model's queries."""
    async def body() -> None:
        d, workers, ch = await setup(on_deadline="best_effort")
        try:
            got = await asyncio.gather(*(submit(ch, model="ncf", batch_size=10) for _ in range(3)),
                                       *(submit(ch, model="big", batch_size=40) for _ in range(5)))
            assert all(isinstance(r, pb.SubmitReply) for r in got)
            ncf, big, every = d.window_snapshot("ncf"), d.window_snapshot("big"), d.window_snapshot()
            assert (ncf.count, ncf.mean_batch) == (3, 10.0)
            assert (big.count, big.mean_batch) == (5, 40.0)
            assert every.count == 8 and d.window_snapshot("nobody").count == 0
        finally:
            await teardown(d, workers, ch)
    run(body)


def test_park_finishes_the_running_query_unloads_and_unpark_loads_back() -> None:
    async def body() -> None:
        d, ws, ch = await setup(2, delay_s=0.1, types=("g4dn.xlarge",))
        try:
            fut = await two_in_flight(d, ch, ws)
            res = await d.park("i-0")
            # both config models were (assumed) loaded: both unloaded, after the running query
            assert sorted(v for v, ok, _ in res if ok) == ["big", "ncf"]
            assert sorted(v for op, v in ws[0].servicer.variant_ops if op == "unload") == ["big", "ncf"]
            assert d.status_reply().parked == 1 and d.loaded_on(d.workers["i-0"]) == set()
            assert all(isinstance(r, pb.SubmitReply) for r in await asyncio.gather(*fut))   # none lost
            before = len(ws[0].servicer.completed)
            more = await asyncio.gather(*(submit(ch, model="big", batch_size=1) for _ in range(3)))
            assert all(r.instance_id == "i-1" for r in more)          # nothing goes to the parked one
            assert len(ws[0].servicer.completed) == before
            res = await d.unpark("i-0")
            assert sorted(v for v, ok, _ in res if ok) == ["big", "ncf"]
            assert d.status_reply().parked == 0 and d.loaded_on(d.workers["i-0"]) == {"big", "ncf"}
            ws[1].servicer.delay_s = 0.5                               # i-1 busy: the next goes to i-0
            got = await asyncio.gather(*(submit(ch, model="big", batch_size=1) for _ in range(2)))
            assert {r.instance_id for r in got} == {"i-0", "i-1"}
        finally:
            await teardown(d, ws, ch)
    run(body)


def test_a_worker_that_registers_while_parked_gets_no_queries() -> None:
    async def body() -> None:
        d, ws, ch = await setup(1, delay_s=0.01, types=("g4dn.xlarge",))
        try:
            await d.park("i-9")                                        # not registered yet
            w9 = await start_worker("i-9", "g4dn.xlarge", 0.01)
            ws.append(w9)
            d.add_worker_direct("i-9", "g4dn.xlarge", w9.address)
            assert d.workers["i-9"].parked
            got = await asyncio.gather(*(submit(ch, model="big", batch_size=1) for _ in range(4)))
            assert {r.instance_id for r in got} == {"i-0"}
            await d.park("i-9")                                        # now it unloads what it holds
            assert sorted(v for op, v in w9.servicer.variant_ops if op == "unload") == ["big", "ncf"]
        finally:
            await teardown(d, ws, ch)
    run(body)


def test_each_models_queries_are_matched_with_its_own_base_type() -> None:
    """Kairos §5.1's C_j is relative to a model's base type, and the planner picks one per model
    (``JointPlan.base_types``): each model's queries go to the policy with its own base type, as
    each model's lane in the replay has it; a model the plan leaves out keeps its base type."""
    async def go() -> None:
        d, ws, ch = await setup()
        try:
            assert d.base_types == {"ncf": "g4dn.xlarge", "big": "g4dn.xlarge"}   # each model's default
            d.set_base_type("g4dn.xlarge", {"big": "c5n.2xlarge"})
            assert d.policy_for("big").base_type == "c5n.2xlarge"                 # type: ignore[attr-defined]
            assert d.policy_for("ncf").base_type == "g4dn.xlarge"                 # type: ignore[attr-defined]
            assert d.policy_for("big") is d.policy_for("big")                      # built once per base type
            d.set_base_type("c5n.2xlarge", {"ncf": "c5n.2xlarge"})
            assert d.base_types == {"ncf": "c5n.2xlarge", "big": "c5n.2xlarge"}
            d.set_base_type("g4dn.xlarge", {"big": "c5n.2xlarge"})
            asked: list[tuple[str, str]] = []
            policy_for = d.routing.policy_for
            assert policy_for is not None

            def recorded(model: str):  # type: ignore[no-untyped-def]
                p = policy_for(model)
                asked.append((model, p.base_type))
                return p

            d.routing.policy_for = recorded
            for model in ("big", "ncf"):
                r = await submit(ch, model=model, batch_size=1)
                assert isinstance(r, pb.SubmitReply), r
            assert ("big", "c5n.2xlarge") in asked and ("ncf", "c5n.2xlarge") in asked
        finally:
            await teardown(d, ws, ch)

    run(go)

