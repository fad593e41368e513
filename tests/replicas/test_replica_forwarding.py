"""A replica that owns no worker forwards each Submit to an owning replica (issue #27 deliverable
2c): the target rule (``scaler.replicas.apply_owners.forward_targets``) hand-computed, and the hop
(``dispatcher.forwarding``) between two grpc.aio servers: the caller's deadline and token carried,
never forwarded twice, the target's status passed through; a query whose target died, or that
arrives while no owner is live, held and tried again within its deadline (answered once the
target serves or this replica owns workers; UNAVAILABLE when its deadline runs out), counted."""
from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from dispatcher.forwarding import FORWARDED, HELD, Forwarder
from dispatcher.proto import costscale_pb2 as pb, costscale_pb2_grpc as pbg
from dispatcher.api.servicers import _InferenceServicer
from scaler.replicas.handoff import Published, Release
from scaler.replicas.apply_owners import forward_targets, no_live_owner
from tests.conftest import free_port


def test_forward_targets_are_every_live_owner_in_id_order() -> None:
    pub = Published(3, {"i-1": "c", "i-2": "a"}, {"i-3": Release("a", 3, "e")})
    live = {"a": "ha:1", "b": "hb:1", "c": "hc:1", "d": "hd:1"}
    # owners a, c, e (e gets i-3; e is dead): every non-owner goes to a then c
    assert [forward_targets(pub, r, live, False) for r in "bd"] == [("ha:1", "hc:1")] * 2
    assert forward_targets(pub, "a", live, False) == ()                # an owner serves
    assert forward_targets(pub, "b", live, True) == ()                 # holds a worker (draining one)
    assert forward_targets(None, "b", live, False) == ()               # nothing published yet
    assert forward_targets(Published(1, {"i-1": "a"}), "b", {"b": "hb:1"}, False) == ()   # owner dead


def test_each_query_starts_one_target_further_and_a_dead_one_is_skipped() -> None:
    fwd = Forwarder()
    fwd.targets = ("ha:1", "hb:1", "hc:1")
    assert [fwd._order()[0] for _ in range(4)] == ["ha:1", "hb:1", "hc:1", "ha:1"]
    assert fwd._order() == ("hb:1", "hc:1", "ha:1")
    fwd.targets = ()
    assert fwd._order() == ()

    async def one_dead() -> tuple[Any, Target, Forwarder]:   # the first target's port is closed
        live_port, dead_port, fport = free_port(), free_port(), free_port()
        target = Target()
        ts = await _server(target, live_port)
        f = Forwarder()
        f.targets = (f"127.0.0.1:{dead_port}", f"127.0.0.1:{live_port}")
        f.on_hop_failed = told.append    # the role checks whether that replica's process is gone
        fs = await _server(_InferenceServicer(Api(f)), fport)   # type: ignore[arg-type]
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{fport}") as ch:
                out = await pbg.InferenceStub(ch).Submit(pb.SubmitRequest(model="m", batch_size=1), timeout=5.0)
        finally:
            await fs.stop(0)
            await ts.stop(0)
            await f.close()
        return out, target, f
    told: list[str] = []
    out, target, f = asyncio.run(one_dead())
    assert out.instance_id == "from-target" and len(target.seen) == 1
    assert f.failed == 1 and f.held == 0 and f.forwarded == 1        # the other owner at once, not held
    assert told == [f.targets[0]]                                     # the dead one named, once


def test_no_live_owner_only_while_every_owner_is_dead_and_nothing_is_held_or_given() -> None:
    pub = Published(3, {"i-1": "a"}, {"i-2": Release("a", 3, "c")})
    assert no_live_owner(pub, "b", {"b": "hb:1"}, False)               # a and c dead
    assert not no_live_owner(pub, "b", {"b": "hb:1", "c": "hc:1"}, False)
    assert not no_live_owner(pub, "b", {"b": "hb:1"}, True)            # still holds one
    assert not no_live_owner(pub, "c", {"c": "hc:1"}, False)            # given one
    assert not no_live_owner(None, "b", {"b": "hb:1"}, False)          # nothing published: admission decides


class Target(pbg.InferenceServicer):
    def __init__(self, code: grpc.StatusCode | None = None) -> None:
        self.code = code
        self.seen: list[tuple[dict[str, str], float | None]] = []

    async def Submit(self, request: pb.SubmitRequest, context: grpc.aio.ServicerContext) -> pb.SubmitReply:
        self.seen.append((dict(context.invocation_metadata() or ()), context.time_remaining()))
        if self.code is not None:
            await context.abort(self.code, "too late")
        return pb.SubmitReply(instance_id="from-target")


class Api:
    def __init__(self, forwarder: Forwarder) -> None:
        self.forwarder = forwarder
        self.registry = None
        self.offline_jobs: dict[str, Any] = {}
        self.local = 0
        self.recorded: list[bool] = []      # record_demand of each local admission
        self.best_effort: list[bool] = []   # best_effort of each local admission
        self.arrivals = 0                   # arrivals counted by the forwarder (on_arrival)

        def count(_r: pb.SubmitRequest) -> bool:
            self.arrivals += 1
            return True
        forwarder.on_arrival = count

    async def submit(self, r: pb.SubmitRequest, record_demand: bool = True, best_effort: bool = False) -> pb.SubmitReply:
        self.local += 1
        self.recorded.append(record_demand)
        self.best_effort.append(best_effort)
        return pb.SubmitReply(instance_id="local")


async def _server(servicer: pbg.InferenceServicer, port: int) -> grpc.aio.Server:
    s = grpc.aio.server()
    pbg.add_InferenceServicer_to_server(servicer, s)
    assert s.add_insecure_port(f"127.0.0.1:{port}") == port
    await s.start()
    return s


def _run(target_code: grpc.StatusCode | None, target_up: bool, metadata: tuple[tuple[str, str], ...] = (),
         refusal: str | None = None, with_target: bool = True, timeout: float = 5.0,
         later: Any = None) -> tuple[Any, Target, Api, Forwarder]:
    """One Submit through a forwarding replica; ``later(fwd, start_target)``, if given, runs
    0.6 s into the call (the owners move, or the target comes up)."""
    async def main() -> tuple[Any, Target, Api, Forwarder]:
        tport, fport = free_port(), free_port()
        target = Target(target_code)
        servers: list[grpc.aio.Server] = []
        if target_up:
            servers.append(await _server(target, tport))
        fwd = Forwarder()
        fwd.targets = (f"127.0.0.1:{tport}",) if with_target else ()
        fwd.refusal = refusal
        api = Api(fwd)
        fs = await _server(_InferenceServicer(api), fport)   # type: ignore[arg-type]

        async def start_target() -> None:
            servers.append(await _server(target, tport))

        async def move() -> None:
            await asyncio.sleep(0.6)
            await later(fwd, start_target)
        mover = asyncio.create_task(move()) if later is not None else None
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{fport}") as ch:
                try:
                    out: Any = await pbg.InferenceStub(ch).Submit(pb.SubmitRequest(model="m", batch_size=1),
                                                                 timeout=timeout, metadata=metadata)
                except grpc.aio.AioRpcError as exc:
                    out = exc
        finally:
            if mover is not None:
                await mover
            await fs.stop(0)
            for ts in servers:
                await ts.stop(0)
            await fwd.close()
        return out, target, api, fwd

    return asyncio.run(main())


def test_a_query_goes_to_the_target_with_the_callers_deadline_and_token() -> None:
    out, target, api, fwd = _run(None, True, (("authorization", "Bearer tok"), ("x-other", "no")))
    assert out.instance_id == "from-target" and api.local == 0
    md, remaining = target.seen[0]
    assert md["authorization"] == "Bearer tok" and md[FORWARDED] == "1" and "x-other" not in md
    # the caller's 5 s, not a fresh one; gRPC sends a deadline as a relative timeout rounded up
    # in its header units, so the hop may see a few ms more than the caller had left
    assert remaining is not None and 0 < remaining <= 5.0 + 0.05
    assert fwd.stats() == {"forwarded": 1, "forward_failed": 0, "forward_held": 0}


def test_a_forwarded_query_is_admitted_where_it_arrives() -> None:
    out, target, api, fwd = _run(None, True, ((FORWARDED, "1"),))
    assert out.instance_id == "local" and api.local == 1 and target.seen == [] and fwd.forwarded == 0


def test_the_targets_typed_status_is_the_callers() -> None:
    out, _, _, fwd = _run(grpc.StatusCode.DEADLINE_EXCEEDED, True)
    assert isinstance(out, grpc.aio.AioRpcError) and out.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert out.details() == "too late" and fwd.stats() == {"forwarded": 1, "forward_failed": 0, "forward_held": 0}


def test_a_dead_target_holds_the_query_until_its_deadline_then_unavailable() -> None:
    out, _, api, fwd = _run(None, False, timeout=1.0)
    assert isinstance(out, grpc.aio.AioRpcError) and out.code() == grpc.StatusCode.UNAVAILABLE
    assert "forwarded to replica" in (out.details() or "") and api.local == 0
    assert fwd.forwarded == 0 and fwd.held == 1 and fwd.failed >= 2      # tried again while the deadline lasted


def test_a_held_query_is_admitted_here_once_this_replica_owns_the_workers() -> None:
    async def owners_moved(fwd: Forwarder, _start: Any) -> None:   # the rescue: this replica owns them now
        fwd.targets = ()
    out, target, api, fwd = _run(None, False, later=owners_moved)
    assert out.instance_id == "local" and api.local == 1 and target.seen == []
    assert fwd.held == 1 and fwd.failed >= 1 and fwd.forwarded == 0


def test_a_held_query_goes_to_the_target_once_it_serves() -> None:
    async def target_up(_fwd: Forwarder, start: Any) -> None:
        await start()
    out, target, api, fwd = _run(None, False, later=target_up)
    assert out.instance_id == "from-target" and api.local == 0 and len(target.seen) == 1
    assert fwd.held == 1 and fwd.forwarded == 1


def test_with_no_live_owner_a_query_waits_for_an_owner_and_a_forwarded_one_is_admitted() -> None:
    out, _, api, fwd = _run(None, False, refusal="no live replica owns a worker", with_target=False, timeout=0.8)
    assert isinstance(out, grpc.aio.AioRpcError) and out.code() == grpc.StatusCode.UNAVAILABLE
    assert out.details() == "no live replica owns a worker" and api.local == 0 and fwd.held == 1

    async def rescued(fwd: Forwarder, _start: Any) -> None:
        fwd.refusal = None
    out, _, api, fwd = _run(None, False, refusal="no live replica owns a worker", with_target=False, later=rescued)
    assert out.instance_id == "local" and api.local == 1 and fwd.held == 1
    out, _, api, _ = _run(None, False, ((FORWARDED, "1"),), refusal="x", with_target=False)
    assert out.instance_id == "local" and api.local == 1





def test_each_query_is_counted_once_in_the_demand_windows_where_it_arrived() -> None:
    """The forwarder counts what it forwards (its replica's window); the replica it forwarded to
    admits it without counting it again; a held query admitted here is counted once."""
    out, _, api, _ = _run(None, True)                                   # forwarded
    assert out.instance_id == "from-target" and api.arrivals == 1 and api.recorded == []
    out, _, api, _ = _run(None, True, ((FORWARDED, "1"),))              # the target's side
    assert out.instance_id == "local" and api.arrivals == 0 and api.recorded == [False]

    async def owners_moved(fwd: Forwarder, _start: Any) -> None:
        fwd.targets = ()
    out, _, api, _ = _run(None, False, later=owners_moved)              # held, then admitted here
    assert out.instance_id == "local" and api.arrivals == 1 and api.recorded == [False]
    out, _, api, _ = _run(None, True, with_target=False)                # an owner: admission counts it
    assert out.instance_id == "local" and api.arrivals == 0 and api.recorded == [True]


def test_a_held_query_is_admitted_best_effort_here_or_at_its_target() -> None:
    """Its wait was the failover's: ``on_deadline: drop`` must not refuse it for its SLO."""
    async def owners_moved(fwd: Forwarder, _start: Any) -> None:
        fwd.targets = ()
    out, _, api, _ = _run(None, False, later=owners_moved)               # held, admitted here
    assert out.instance_id == "local" and api.best_effort == [True]

    async def target_up(_fwd: Forwarder, start: Any) -> None:
        await start()
    out, target, _, _ = _run(None, False, later=target_up)              # held, then forwarded
    assert out.instance_id == "from-target" and target.seen[0][0][HELD] == "1"
    out, _, api, _ = _run(None, True, ((FORWARDED, "1"), (HELD, "1")))  # the target's side
    assert out.instance_id == "local" and api.best_effort == [True] and api.recorded == [False]
    out, target, api, _ = _run(None, True)                               # not held: no mark, no best effort
    assert HELD not in target.seen[0][0]
    out, _, api, _ = _run(None, True, with_target=False)
    assert api.best_effort == [False]
