"""What a worker call's outcome means for each query in it (Kairos §6: one query per instance at a
time; INFaaS §3.2: a worker holds the variants it reports).

:func:`settle_answered`: the call answered: the worker's load, its samples and smoothed call
overhead, the measurement for the latency model, and each query's reply (a batch's outputs split
by query; outputs that cannot be split end every query of the call with INTERNAL, so none gets a
wrong slice).

:func:`settle_failed`: the call failed: a dead worker (RPC UNAVAILABLE/CANCELLED, or removed
meanwhile) is removed and its queries go back to the head of the queue; otherwise each query ends
(DEADLINE_EXCEEDED, INVALID_ARGUMENT) or is requeued by the code; NOT_FOUND means the worker no longer
holds what was routed there, so that variant is dropped from its placement first.

The routing round (:mod:`dispatcher.routing`) runs the call and hands its outcome here, with the
query book, the worker registry, placement and accuracy routing it holds.
"""
from __future__ import annotations

from typing import Callable

import grpc

from dispatcher import batch_join
from dispatcher.accuracy.routing import AccuracyRouting
from dispatcher.workers.placement import VariantPlacement
from dispatcher.proto import costscale_pb2 as pb
from dispatcher.queries import SC, Query, QueryBook
from dispatcher.runtime import OVERHEAD_EWMA
from dispatcher.workers.client import is_worker_failure
from dispatcher.workers.registry import WorkerRegistry, WorkerState

#: the queries of one worker call, each with the generation it was dispatched at
Members = list[tuple[Query, int]]
#: a measured service time for the latency model: (profile, instance type, batch, service ms)
Observe = Callable[[str, str, int, float], None]


def settle_answered(book: QueryBook, registry: WorkerRegistry, placement: VariantPlacement, observe: Observe,
                    q: Query, w: WorkerState, members: Members, batch: int, reply: pb.InferReply,
                    now: float) -> None:
    """The call headed by ``q`` answered: the worker's load and samples, the latency model, each
    query's result."""
    w.served += len(members)
    service_ms = reply.service_ms if reply.service_ms > 0 else 1000.0 * (now - q.dispatched_at)
    if not q.offline:
        w.busy.append((q.dispatched_at, now))
        # one call per worker at a time: end times only increase, so what ended before
        # the utilization horizon is at the left
        lo = now - registry.utilization_horizon_s
        while w.busy and w.busy[0][1] < lo:
            w.busy.popleft()
    w.samples.append((reply.variant or q.variant or q.model.name, batch, service_ms, q.offline))
    if reply.service_ms > 0:
        extra = max(1000.0 * (now - q.dispatched_at) - service_ms, 0.0)
        w.overhead_ms += OVERHEAD_EWMA * (extra - w.overhead_ms)
    observe(q.model.profile_name, w.instance_type, batch, service_ms)
    outputs: list = [list(reply.outputs)]
    if len(members) > 1:
        try:
            outputs = batch_join.split(reply.outputs, [m.batch for m, _ in members])
        except ValueError as exc:     # outputs not batch-major: no query gets a wrong slice
            for m, g in members:
                if m.gen == g and not m.future.done():
                    book.inflight.pop(m.query_id, None)
                    book.finish(m, (SC.INTERNAL, f"cannot split the batch's outputs by query: {exc}"))
            return
    for (m, g), out in zip(members, outputs):
        if m.gen != g or m.future.done():
            continue
        book.inflight.pop(m.query_id, None)
        total = 1000.0 * (now - m.arrival)
        variant = reply.variant or m.variant
        book.finish(m, pb.SubmitReply(
            outputs=out, model=m.model.name, variant=variant,
            instance_id=w.instance_id, instance_type=w.instance_type,
            queue_ms=1000.0 * (m.dispatched_at - m.arrival), service_ms=service_ms, total_ms=total,
            slo_met=total <= m.qos_ms, provider=reply.provider,
            accuracy=placement.variant_accuracy(variant)))


def settle_failed(book: QueryBook, registry: WorkerRegistry, placement: VariantPlacement, accuracy: AccuracyRouting,
                  w: WorkerState, members: Members, code: grpc.StatusCode | None, details: str) -> None:
    """The call failed: a dead worker is removed and its queries re-dispatched; otherwise each
    query ends or goes back to the queue by the code."""
    failed = w.removed or is_worker_failure(code)
    if failed:
        registry.remove_worker(w, f"Infer failed: {code.name if code else '?'} {details}")
    for m, g in members:
        if m.gen != g or m.future.done():
            continue
        book.inflight.pop(m.query_id, None)
        if failed:
            book.requeue(m, f"worker {w.instance_id} failed ({code.name if code else '?'})")
        elif code == SC.DEADLINE_EXCEEDED:
            book.finish(m, (SC.DEADLINE_EXCEEDED, f"no result within {book.query_timeout_s:g} s"))
        elif code == SC.INVALID_ARGUMENT:
            book.finish(m, (SC.INVALID_ARGUMENT, f"worker rejected the query: {details}"))
        elif code == SC.NOT_FOUND:
            # the worker does not hold what we routed (an unload raced with this query):
            # it is authoritative, so stop routing that variant there and try elsewhere
            gone = ({m.variant} if m.variant else
                    {v for v in placement.loaded_on(w) if placement.variant_model(v) == m.model.name})
            w.loaded = placement.loaded_on(w) - gone
            book.requeue(m, f"worker {w.instance_id} does not hold {m.variant or m.model.name}: {details}")
            accuracy.repin_if_unplaced(m)
        else:
            book.requeue(m, f"worker {w.instance_id} returned {code.name if code else '?'}: {details}")


__all__ = ["Members", "Observe", "settle_answered", "settle_failed"]
