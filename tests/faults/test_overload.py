"""The dispatcher past saturation (issue #40, the soak's "CANCELLED under overload"): a burst of
unary Submits larger than gRPC's own pending-call limit (1000 waiting: past it the core cancels
calls at random before any handler runs) ends every query with an answer or a typed costscale
status -- RESOURCE_EXHAUSTED "dispatcher overloaded" while more than ``dispatcher.overload_pending_calls``
calls wait in gRPC (``dispatcher.overload``), DEADLINE_EXCEEDED from the SLO rule -- never
CANCELLED, and the dispatcher's own counts (what ``costscale_queries_total`` exports) match the
client's code for code. Every answered query was served once. Then the backlog drains and queries
are answered again. ``bench/faults/overload_bench.py`` runs it as open-loop load on a saturated
dispatcher process, before and after the fix."""
from __future__ import annotations

import asyncio
import collections

import grpc
import pytest

from config.errors import ConfigError
from config.profiles import load_profiles_csv
from dispatcher.latency_model import LatencyModel
from dispatcher.overload import CoreBacklog
from dispatcher.proto import costscale_pb2 as pb, costscale_pb2_grpc as pbg
from dispatcher.server import Dispatcher
from config.schema import parse_config_text
from tests.dispatch_helpers import make_config, run, start_worker

#: Submits sent at once: past gRPC's default soft limit of pending calls (1000)
BURST = 1500
OVERLOADED = "dispatcher overloaded: "


async def _burst() -> None:
    d = Dispatcher(make_config(), LatencyModel.from_profiles(load_profiles_csv()))
    port = await d.start("127.0.0.1:0")
    backlog = d.admission.backlog
    workers = [await start_worker(f"i-{k}", "c5n.2xlarge", 0.002) for k in range(2)]
    for k, w in enumerate(workers):
        d.add_worker_direct(f"i-{k}", "c5n.2xlarge", w.address)
    ch = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    stub = pbg.InferenceStub(ch)
    codes: collections.Counter[str] = collections.Counter()
    untyped: list[str] = []

    async def one(key: str) -> str:
        try:
            await stub.Submit(pb.SubmitRequest(model="big", batch_size=4, idempotency_key=key), timeout=60)
            code = "OK"
        except grpc.aio.AioRpcError as exc:
            code, detail = exc.code().name, exc.details() or ""
            typed = ((code == "RESOURCE_EXHAUSTED" and detail.startswith(OVERLOADED))
                     or (code == "DEADLINE_EXCEEDED" and "SLO" in detail))
            if not typed:
                untyped.append(f"{code} {detail!r}")
        codes[code] += 1
        return code

    try:
        assert [await one(f"warm-{i}") for i in range(10)] == ["OK"] * 10
        assert backlog.refused == 0
        await asyncio.gather(*(one(f"burst-{i}") for i in range(BURST)))
        assert untyped == [], collections.Counter(untyped)  # never CANCELLED, never a status not costscale's
        print(dict(codes), "peak", backlog.peak)
        assert codes["RESOURCE_EXHAUSTED"] == backlog.refused > 0
        assert codes["OK"] > 10
        ledger: collections.Counter[str] = collections.Counter()
        for m in d.outcomes.models.values():
            ledger.update(m.queries)
        assert ledger == codes and sum(codes.values()) == BURST + 10      # counted once each, as the client saw it
        assert d.stats()["rejected_RESOURCE_EXHAUSTED"] == backlog.refused
        served = [q for w in workers for q in w.servicer.completed]
        assert len(served) == len(set(served)) == codes["OK"]            # every answer served once, no refusal served
        assert backlog.peak > d.cfg.dispatcher.overload_pending_calls
        while backlog.pending() > 0 or backlog.taken > 0:            # the backlog drains
            await asyncio.sleep(0.01)
        assert [await one(f"after-{i}") for i in range(10)] == ["OK"] * 10
    finally:
        await ch.close()
        await d.stop(grace=0.5)
        for w in workers:
            await w.server.stop(0)


def test_a_burst_past_grpcs_pending_limit_ends_answered_or_typed_and_counted_never_cancelled() -> None:
    run(_burst, timeout=60)


def test_the_refusal_comes_before_grpcs_own_limit_or_the_config_is_refused() -> None:
    d = make_config().dispatcher
    assert (d.overload_pending_calls, d.max_pending_calls) == (1000, 3000)
    text = """cluster: c
budget_per_hour: 1
models: [{name: m, qos_ms: 100}]
instance_types: [{type: c5n.2xlarge}]
launch: {ami_id: ami-0123456789abcdef0}
dispatcher: {overload_pending_calls: 3000, max_pending_calls: 3000}
"""
    with pytest.raises(ConfigError, match=r"overload_pending_calls \(3000\) must be below max_pending_calls \(3000\)"):
        parse_config_text(text)


class _Core(CoreBacklog):
    """The rule on a fake core: ``core`` calls held, a clock the test moves."""

    def __init__(self) -> None:
        self.now, self.core = 0.0, 0
        super().__init__(1000, clock=lambda: self.now)

    def held(self) -> int | None:
        return self.core

    def at(self, t: float, core: int, taken_total: int) -> CoreBacklog:
        self.now, self.core, self.taken_total = t, core, taken_total
        return self


def test_the_rule_refuses_on_a_standing_queue_never_on_calls_in_transit() -> None:
    b = _Core()
    slo = 0.350
    # a few calls in transit while the server takes what comes at 100/s: not a queue, even for a 5 ms SLO
    for k in range(10):
        assert b.at(0.02 * k, 3, 2 * k).refusal(0.005) is None
    assert b.wait_s() == pytest.approx(3 / 100.0)
    # a standing queue of 500 while the server takes 1000/s: about 0.5 s of wait, over half a 350 ms SLO
    for k in range(10, 20):
        b.at(0.02 * k, 500, 20 + 20 * (k - 10)).pending()
    assert 0.4 < b.wait_s() < 0.6
    assert b.refusal(None) is None                       # best effort: only the count refuses
    why = b.refusal(slo)
    assert why is not None and why.startswith("dispatcher overloaded: calls wait about ")
    assert why.endswith(" ms in gRPC for a handler, over half its 350 ms SLO; retry later or on another replica")
    b.at(0.5, 1500, 400)
    assert b.refusal(None) == ("dispatcher overloaded: 1500 calls wait in gRPC for a handler "
                               "(dispatcher.overload_pending_calls 1000); retry later or on another replica")
    assert (b.refused, b.peak) == (2, 1500)
    assert b.at(0.6, 0, 1900).refusal(slo) is None and b.pending() == 0   # drained
