"""The dispatcher's parts stand without the Dispatcher that composes them (issue #27): built from
their collaborators alone, two shards over disjoint workers each serve their own; the round trigger
coalesces the events of one loop iteration into one round; the query book re-dispatches a query
at most ``max_retries`` times and then ends it with UNAVAILABLE."""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import grpc

from config.profiles import load_profiles_csv
from config.schema import Config
from dispatcher.accuracy.routing import AccuracyRouting
from dispatcher.admission import Admission
from dispatcher.latency_model import LatencyModel
from dispatcher.workers.placement import VariantPlacement
from dispatcher.policies import make_policy
from dispatcher.policy import Assignment, QueryView, default_base_type
from dispatcher.proto import costscale_pb2 as pb
from dispatcher.queries import Query, QueryBook
from dispatcher.routing import RoutingRound
from dispatcher.runtime import MatchTunables, RoundTrigger, Runtime
from dispatcher.workers.client import WorkerClient
from dispatcher.workers.registry import WorkerRegistry
from tests.dispatch_helpers import make_config, run, start_worker

PROFILES = load_profiles_csv()
SC = grpc.StatusCode


@dataclass
class Shard:
    book: QueryBook
    registry: WorkerRegistry
    admission: Admission


def _shard(cfg: Config, predictor: LatencyModel) -> Shard:
    """A dispatcher's query path built from its parts, each given what it uses (no Dispatcher, no
    gRPC server): the parts a shard over a subset of the workers is made of."""
    rt = Runtime(time.monotonic)
    rt.loop = asyncio.get_running_loop()
    tunables = MatchTunables()
    trigger = RoundTrigger(rt)
    book = QueryBook(rt, trigger)
    catalog = cfg.catalog()
    registry = WorkerRegistry(rt, trigger, book, catalog, WorkerClient)
    placement = VariantPlacement(cfg.models, registry, predictor, catalog, rt, trigger, objects=None)  # type: ignore[arg-type]
    accuracy = AccuracyRouting(placement, registry, book.waiting, trigger.kick, rt.clock, tunables)
    policy = make_policy(cfg.dispatcher.policy, predictor, default_base_type(cfg, predictor.predict_ms),
                         xi=tunables.xi, max_queue_factor=tunables.view_factor)
    routing = RoutingRound(cfg.dispatcher, rt, trigger, book, registry, placement, accuracy, policy, predictor, tunables)
    return Shard(book, registry, Admission(cfg.dispatcher, rt, trigger, book, registry, placement, accuracy, routing,
                                           predictor, tunables))


def test_two_shards_built_from_the_parts_each_serve_their_own_workers() -> None:
    async def body() -> None:
        cfg, predictor = make_config(), LatencyModel.from_profiles(PROFILES)
        a, b = _shard(cfg, predictor), _shard(cfg, predictor)
        wa, wb = await start_worker("i-a", "g4dn.xlarge"), await start_worker("i-b", "c5n.2xlarge")
        a.registry.add_worker_direct("i-a", "g4dn.xlarge", wa.address)
        b.registry.add_worker_direct("i-b", "c5n.2xlarge", wb.address)
        try:
            got = {}
            for name, shard in (("a", a), ("b", b)):
                got[name] = [await shard.admission.submit(pb.SubmitRequest(model="big", batch_size=2)) for _ in range(3)]
            assert all(isinstance(r, pb.SubmitReply) for rs in got.values() for r in rs), got
            assert [r.instance_id for r in got["a"]] == ["i-a"] * 3
            assert [r.instance_id for r in got["b"]] == ["i-b"] * 3
            assert [(s.book.accepted, s.book.served, len(s.book.inflight)) for s in (a, b)] == [(3, 3, 0), (3, 3, 0)]
            assert len(wa.servicer.completed) == 3 and len(wb.servicer.completed) == 3
        finally:
            for s in (a, b):
                await s.registry.close()
            await wa.kill()
            await wb.kill()
    run(body)


def test_the_kicks_of_one_loop_iteration_make_one_round() -> None:
    async def body() -> list[str]:
        rt = Runtime(time.monotonic)
        trigger = RoundTrigger(rt)
        rounds: list[str] = []
        ran = asyncio.Event()

        def round_() -> None:
            trigger.started()
            rounds.append("round")
            ran.set()

        trigger.attach(round_)
        trigger.kick()                       # no loop yet (before start): nothing is scheduled
        assert not trigger.pending
        rt.loop = asyncio.get_running_loop()
        for _ in range(3):
            trigger.kick()
        await ran.wait()                     # a second or third round would have run before this wakes
        assert rounds == ["round"] and not trigger.pending
        ran.clear()
        trigger.kick()                       # after the round started: the next event gets its own
        await ran.wait()
        return rounds
    assert run(body) == ["round", "round"]


def _query(qid: str, future: asyncio.Future) -> Query:
    return Query(qid, SimpleNamespace(name="m"), "", 1, 0.0, 100.0, 30.0, [], QueryView(qid, "m", 1, 0.0, 100.0),  # type: ignore[arg-type]
                 future)


def test_a_query_is_redispatched_at_most_max_retries_times_then_unavailable() -> None:
    async def body() -> tuple[Any, ...]:
        kicks: list[int] = []
        book = QueryBook(Runtime(lambda: 0.0), SimpleNamespace(kick=lambda: kicks.append(1)))  # type: ignore[arg-type]
        book.max_retries = 2
        q = _query("q1", asyncio.get_running_loop().create_future())
        book.inflight["q1"] = q
        book.requeue(q, "worker i-1 failed (UNAVAILABLE)")
        first = (list(book.retry), q.attempts, book.redispatched, len(kicks), q.future.done())
        book.take_waiting("q1")
        book.requeue(q, "worker i-2 failed (UNAVAILABLE)")
        book.take_waiting("q1")
        book.requeue(q, "worker i-3 failed (UNAVAILABLE)")
        return first, list(book.retry), book.redispatched, len(kicks), q.future.result(), dict(book.rejected)
    first, retry, redispatched, kicks, outcome, rejected = run(body)
    assert first == (["q1"], 1, 1, 1, False)
    assert (retry, redispatched, kicks) == ([], 2, 2)
    assert outcome == (SC.UNAVAILABLE, "gave up after 3 attempts: worker i-3 failed (UNAVAILABLE)")
    assert rejected == {"UNAVAILABLE": 1}


class _ContractBreaker:
    """A policy that matches every query to a worker that does not exist (it breaks its contract)."""

    def match(self, queue: Any, workers: Any, now: float) -> list[Assignment]:
        return [Assignment(q.query_id, "i-nowhere") for q in queue]


def test_a_policy_breaking_its_contract_is_counted_and_logged_once_per_interval_and_its_query_stays_queued(
        caplog) -> None:
    async def body() -> tuple[Any, ...]:
        cfg, predictor = make_config(), LatencyModel.from_profiles(PROFILES)
        rt = Runtime(time.monotonic)
        rt.loop = asyncio.get_running_loop()
        tunables, trigger = MatchTunables(), RoundTrigger(rt)
        book = QueryBook(rt, trigger)
        registry = WorkerRegistry(rt, trigger, book, cfg.catalog(), WorkerClient)
        placement = VariantPlacement(cfg.models, registry, predictor, cfg.catalog(), rt, trigger, objects=None)  # type: ignore[arg-type]
        accuracy = AccuracyRouting(placement, registry, book.waiting, trigger.kick, rt.clock, tunables)
        routing = RoutingRound(cfg.dispatcher, rt, trigger, book, registry, placement, accuracy, _ContractBreaker(),  # type: ignore[arg-type]
                               predictor, tunables)
        registry.add_worker_direct("i-a", "g4dn.xlarge", "127.0.0.1:1")
        now = rt.clock()
        q = Query("q1", SimpleNamespace(name="m"), "", 1, now, 100.0, now + 30.0, [],  # type: ignore[arg-type]
                  QueryView("q1", "m", 1, now, 100.0), asyncio.get_running_loop().create_future(), best_effort=True)
        book.queue["q1"] = q
        try:
            with caplog.at_level("WARNING", logger="costscale"):
                routing.round()
                first = (routing.contract_broken, list(book.retry), list(book.inflight))
                routing.round()              # broken again within the interval: counted, not logged again
        finally:
            await registry.close()
        lines = [r.getMessage() for r in caplog.records if "contract" in r.getMessage()]
        return first, routing.contract_broken, lines
    first, count, lines = run(body)
    assert first == (1, ["q1"], [])
    assert count == 2
    assert len(lines) == 1 and "_ContractBreaker" in lines[0] and "stays queued" in lines[0]
