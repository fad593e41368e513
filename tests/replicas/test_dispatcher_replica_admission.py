"""A dispatcher that is one of several replicas (issue #27): a query it forwards counts in its own
demand window and not again where it is admitted; a query held through a failover is admitted
best effort (``on_deadline: drop`` does not refuse it for its SLO)."""
from __future__ import annotations

from dispatcher.proto import costscale_pb2 as pb
from dispatcher.queries import SC
from tests.dispatch_helpers import run
from tests.dispatcher.test_dispatcher_live import setup, teardown


def test_a_forwarded_query_counts_once_in_the_demand_windows() -> None:
    """Dispatcher replicas (issue #27): a query this replica forwards is counted by
    ``record_arrival`` and not admitted; one a replica forwarded here is admitted and served
    without being counted again; an unknown model is not counted."""
    async def go() -> None:
        d, ws, ch = await setup()
        try:
            assert d.window_snapshot("ncf").total == 0
            assert d.record_arrival(pb.SubmitRequest(model="ncf", batch_size=4))
            assert not d.record_arrival(pb.SubmitRequest(model="nope", batch_size=4))
            assert d.window_snapshot("ncf").total == 1 and d.queries.accepted == 0
            out = await d.submit(pb.SubmitRequest(model="ncf", batch_size=4), record_demand=False)
            assert isinstance(out, pb.SubmitReply), out
            assert d.window_snapshot("ncf").total == 1 and d.queries.served == 1
            await d.submit(pb.SubmitRequest(model="ncf", batch_size=4))
            assert d.window_snapshot("ncf").total == 2 and d.window_snapshot().total == 2
        finally:
            await teardown(d, ws, ch)

    run(go)


def test_a_query_held_through_a_failover_is_served_best_effort_not_dropped() -> None:
    """``on_deadline: drop`` refuses a query no worker can serve within its SLO; one a replica
    held through a failover (``best_effort``, ``dispatcher.forwarding``) is served however late."""
    async def go() -> None:
        d, ws, ch = await setup()
        try:
            hopeless = pb.SubmitRequest(model="ncf", batch_size=1000, latency_slo_ms=2)
            refused = await d.submit(hopeless)
            assert isinstance(refused, tuple) and refused[0] == SC.DEADLINE_EXCEEDED, refused
            served = await d.submit(hopeless, best_effort=True)
            assert isinstance(served, pb.SubmitReply), served
            assert d.stats()["rejected_DEADLINE_EXCEEDED"] == 1 and d.queries.served == 1
        finally:
            await teardown(d, ws, ch)

    run(go)
