"""The routing round: which idle worker serves which waiting query, the worker call, and what a
failed call means (Kairos §5.1 and §6: a matching round at every event, one query per instance at a
time, run by a :class:`dispatcher.policy.Policy`).

Events that trigger a matching round: a query arrives, a query completes or fails, a worker joins,
leaves or starts draining. Rounds triggered within one event-loop iteration are coalesced. Each
round passes the policy at most ``view_factor·n`` of the oldest waiting queries (n = workers that
may receive work; 2·n, the same bound the Kairos policy documents), re-dispatched ones first. A
variant's queries go only to workers where it is loaded (INFaaS §3.2): one matching per group of
queries with the same eligible workers.

With ``dispatcher.batching: work_conserving`` a dispatched query takes the waiting queries of its
group that fit with it into the same worker call (:mod:`dispatcher.batch_join`); each gets its own
rows of the outputs, and a failed call settles each of them as it would settle one.

A query whose worker dies (RPC UNAVAILABLE/CANCELLED) goes back to the head of the queue, at most
``max_retries`` times (what each call's outcome means for its queries: :mod:`dispatcher.call_outcome`).
A call that runs 3x its predicted time (at least 0.25 s) has its worker
probed (Health, 0.5 s; :mod:`dispatcher.stall_watch`): a worker that stopped answering without dying (SIGSTOP)
is removed and the call's queries re-dispatched then, within their SLO, not when the health loop
drops it (issue #40); a live worker that is only slow keeps its call.
Measured service times feed the latency model in batches (``observe_batch``, ``observe_delay_s``)
and the model loop's samples.

A policy that breaks its contract (matches a query to a worker that is not idle, is draining or
removed, or may not serve it) leaves that query queued for the next round; each such pair is
counted (``contract_broken``, in the dispatcher's stats) and logged, at most once per
:data:`dispatcher.runtime.CONTRACT_LOG_INTERVAL_S`. The round's tuning numbers have their one home
beside the matching's tunables (:mod:`dispatcher.runtime`).

:class:`RoutingRound` is a part of :class:`dispatcher.server.Dispatcher` (``d.routing``). Owns: the
caught dispatch (``_catch``, ``_caught``), the pending latency measurements, the count of
contract-breaking matches and the tunables ``observe_batch``, ``observe_delay_s``. Takes: the dispatcher's spec (``on_deadline``, ``batching``),
the :class:`dispatcher.runtime.Runtime` (clock, loop, tasks, stopping), the round trigger (it runs
the rounds the trigger coalesces), the query book (the queues, each query's end, re-dispatch), the
worker registry (workers, assignment, removal, utilization horizon), placement (what each worker
holds, a variant's model and accuracy), accuracy routing (SlackFit's binding, a plan's re-pinning),
the policy, the latency model and the matching's tunables.
"""
from __future__ import annotations

import asyncio
import itertools
import logging
from typing import Callable, Collection

import grpc

from config.sections.dispatcher import DispatcherSpec
from dispatcher import batch_join
from dispatcher.accuracy.routing import AccuracyRouting
from dispatcher.call_outcome import settle_answered, settle_failed
from dispatcher.workers.placement import VariantPlacement
from dispatcher.policies import infeasible
from dispatcher.latency_model import LatencyModel
from dispatcher.policy import Policy, WorkerView
from dispatcher.proto import costscale_pb2 as pb
from dispatcher.queries import SC, Query, QueryBook
from dispatcher.runtime import (CONTRACT_LOG_INTERVAL_S, HEAD_SCAN, OBSERVE_BATCH, OBSERVE_DELAY_S, MatchTunables,
                                RoundTrigger, Runtime)
from dispatcher.stall_watch import StallWatch
from dispatcher.workers.registry import WorkerRegistry, WorkerState

log = logging.getLogger("costscale")
#: what a query needs of a worker: ("v", variant), ("m", model) or ("a", application, min_accuracy)
#: (late-bound, SlackFit: any variant of the application at or above the floor)
GroupKey = tuple


def group_key(variant: str, model: str) -> GroupKey:
    """The group of a query (or an offline job) bound to ``variant``, or else to ``model``."""
    return ("v", variant) if variant else ("m", model)


class RoutingRound:
    """The matching round, the worker call and re-dispatch (see the module docstring)."""

    def __init__(self, spec: DispatcherSpec, rt: Runtime, trigger: RoundTrigger, book: QueryBook,
                 registry: WorkerRegistry, placement: VariantPlacement, accuracy: AccuracyRouting,
                 policy: Policy, predictor: LatencyModel, tunables: MatchTunables,
                 policy_for: Callable[[str], Policy] | None = None) -> None:
        self.spec = spec
        self.rt = rt
        self.trigger = trigger
        self.book = book
        self.registry = registry
        self.placement = placement
        self.accuracy = accuracy
        self.policy = policy
        #: the policy matching a model's queries (each model's own Kairos base type); None: ``policy``
        self.policy_for = policy_for
        self.predictor = predictor
        self.tunables = tunables
        # a round run by a coroutine that serves what it dispatches itself: the query or worker it
        # catches, and the dispatch caught (see round_catching)
        self._catch: Query | WorkerState | None = None
        self._caught: tuple[Query, WorkerState, int] | None = None
        self.observe_batch = OBSERVE_BATCH
        self.observe_delay_s = OBSERVE_DELAY_S
        self.stall = StallWatch(rt, registry)    # a stopped worker's call (dispatcher.stall_watch)
        #: matches a policy returned that break its contract (the query stayed queued), since start
        self.contract_broken = 0
        self._contract_logged_at: float | None = None   # when the last such line was logged
        self._contract_unlogged = 0                     # broken matches since that line
        self._pending_obs: list[tuple[str, str, int, float]] = []
        self._views: dict[str, WorkerView] = {}          # each worker's last view (_view)
        self._obs_timer: asyncio.TimerHandle | None = None
        trigger.attach(self.round)

    def round(self) -> None:
        """One matching round over the waiting queries and the idle workers, now."""
        self.trigger.started()
        book = self.book
        if not (book.queue or book.retry):
            return
        live = [w for w in self.registry.workers.values() if not w.draining]
        if not any(w.idle for w in live):
            return
        now = self.rt.clock()
        k = self.tunables.view_factor * len(live)
        if self.registry.serves:     # several models on their own workers: each model's own head of the queue
            qs = self._heads_by_model(live, k)
        else:
            qs = list(itertools.islice(book.waiting(), k))
        if self.spec.on_deadline == "drop":
            wviews = [WorkerView(w.instance_id, w.instance_type, w.busy_until, w.idle) for w in live]
            bad = infeasible([q.view for q in qs if not q.best_effort], wviews, self.predictor, now, self.tunables.xi)
            if bad:
                for qid in bad:
                    q = book.retry.pop(qid, None) or book.queue.pop(qid)
                    book.finish(q, (SC.DEADLINE_EXCEEDED, f"waited {1000 * (now - q.arrival):.1f} ms: can no longer meet its {q.qos_ms:g} ms SLO"))
                badset = set(bad)
                qs = [q for q in qs if q.query_id not in badset]
        if not qs:
            if book.queue or book.retry:
                self.trigger.kick()
            return
        # A variant's queries go only to workers where it is loaded (INFaaS §3.2): one matching
        # round per group of queries with the same eligible workers (usually a single group).
        key0 = self._group_key(qs[0])
        groups: dict[str, list[Query]] = {key0: qs}
        if any(self._group_key(q) != key0 for q in qs):
            groups = {}
            for q in qs:
                groups.setdefault(self._group_key(q), []).append(q)
        taken: set[str] = set()
        workers = self.registry.workers
        broken, breaker = 0, self.policy
        for gkey, gqs in groups.items():
            view = self._view
            gw = [view(w, w.idle and w.instance_id not in taken) for w in live if self.eligible(w, gkey)]
            if not any(x.idle for x in gw):
                continue
            policy = self.policy_for(gqs[0].model.name) if self.policy_for is not None else self.policy
            matches = policy.match([q.view for q in gqs], gw, now)
            reserved = {a.query_id for a in matches}   # matched to their own workers: none joins another call
            for a in matches:
                w = workers.get(a.worker_id)
                q = book.take_waiting(a.query_id)
                if q is None:
                    continue
                if w is None or not w.idle or w.draining or w.removed or not self.eligible(w, gkey):
                    book.retry[q.query_id] = q   # policy broke the contract: keep it queued
                    broken, breaker = broken + 1, policy
                    continue
                taken.add(w.instance_id)
                self._dispatch(q, w, now, reserved)
        if broken:
            self._contract_breaks(broken, now, breaker)

    def _view(self, w: WorkerState, idle: bool) -> WorkerView:
        """``w`` as the policy sees it: the view built at an earlier round while it still holds (views
        are immutable; most workers do not change between two rounds, and a round sees every one)."""
        v = self._views.get(w.instance_id)
        if v is None or v.idle is not idle or v.busy_until != w.busy_until or v.instance_type != w.instance_type:
            if len(self._views) > 2 * len(self.registry.workers) + 64:     # workers that left
                self._views.clear()
            v = self._views[w.instance_id] = WorkerView(w.instance_id, w.instance_type, w.busy_until, idle)
        return v

    def _contract_breaks(self, n: int, now: float, policy: Policy) -> None:
        """``n`` matches of this round broke the policy's contract: counted, and logged with the
        count since the last line, at most once per :data:`CONTRACT_LOG_INTERVAL_S`."""
        self.contract_broken += n
        self._contract_unlogged += n
        last = self._contract_logged_at
        if last is not None and now - last < CONTRACT_LOG_INTERVAL_S:
            return
        k = self._contract_unlogged
        log.warning("routing: the policy %s broke its contract %d time(s) (%d since start): a match to a worker "
                    "that is not idle, is draining or removed, or may not serve the query; the query stays queued",
                    type(policy).__name__, k, self.contract_broken)
        self._contract_logged_at = now
        self._contract_unlogged = 0

    def _heads_by_model(self, live: list[WorkerState], k: int) -> list[Query]:
        """The round's view when models have workers of their own (the fleet's joint plan): up to
        ``view_factor`` queries per worker of each model, from the head of the queue, so that one
        model's backlog never hides another model's queries from its idle workers (looked for among
        the first :data:`HEAD_SCAN` waiting, or ``k`` if more)."""
        serves = self.registry.serves
        per_worker = self.tunables.view_factor
        cap: dict[str | None, int] = {}
        for w in live:
            m = serves.get(w.instance_id)
            cap[m] = cap.get(m, 0) + per_worker
        taken: dict[str | None, int] = {}
        out = []
        for q in itertools.islice(self.book.waiting(), max(k, HEAD_SCAN)):
            m = q.model.name if q.model.name in cap else None
            if taken.get(m, 0) < cap.get(m, 0):
                taken[m] = taken.get(m, 0) + 1
                out.append(q)
        return out

    def _group_key(self, q: Query) -> GroupKey:
        if q.late:      # an application's queries, by the floor the variant must meet (exact: a float)
            return ("a", q.application, q.min_accuracy)
        return group_key(q.variant, q.model.name)

    def eligible(self, w: WorkerState, gkey: GroupKey) -> bool:
        """Whether ``w`` may serve the queries (or the offline job) of group ``gkey``: it serves their
        model (the assignment) and holds their variant, one of their model's, or (late-bound) one of
        their application's at or above their floor."""
        kind, name = gkey[0], gkey[1]
        p = self.placement
        if self.registry.serves and kind in ("m", "v") and not self.registry.serves_model(
                w.instance_id, name if kind == "m" else p.variant_model(name)):
            return False     # the worker serves another model (the fleet's joint plan)
        if w.loaded is None:  # not reported yet: it serves the config's models (no variant is known there)
            return kind == "m" or (kind == "v" and name in p.cfg_models)
        if kind == "v":
            return name in w.loaded
        if kind == "a":
            return self.accuracy.holds(w, name, gkey[2])
        variant_model = p.variant_model
        return any(variant_model(x) == name for x in w.loaded)

    def _waiting_like(self, q: Query, reserved: Collection[str] = ()) -> list[Query]:
        """The queries of ``q``'s group still waiting, in queue order, looked for beyond the round's
        view among the first batch_join.JOIN_SCAN waiting (at most batch_join.MAX_QUERIES), but for those the
        round already matched to a worker (``reserved``)."""
        key = self._group_key(q)
        scan = itertools.islice(self.book.waiting(), batch_join.JOIN_SCAN)
        return list(itertools.islice((x for x in scan if x is not q and not x.offline and x.query_id not in reserved
                                      and self._group_key(x) == key), batch_join.MAX_QUERIES))

    def _join(self, q: Query, w: WorkerState, now: float, reserved: Collection[str]) -> list[Query]:
        """The queries of ``q``'s group still waiting that join it in one call (dispatcher.batch_join)."""
        sig = q.sig
        waiting = self._waiting_like(q, reserved) if sig is not None else []
        if not waiting:
            return []
        picks = batch_join.followers(q.view, sig, [(x.view, x.sig) for x in waiting],
                                     w.instance_type, self.predictor, now, q.model.max_batch, self.tunables.xi)
        return [waiting[i] for i in picks]

    def _dispatch(self, q: Query, w: WorkerState, now: float, reserved: Collection[str] = ()) -> None:
        joined: list[Query] = []
        if q.late:     # SlackFit: the variant and the batch from the head's slack, on this worker
            joined = self.accuracy.bind(q, w, now, self._waiting_like(q, reserved))
        elif not q.offline and self.spec.batching == "work_conserving":
            joined = self._join(q, w, now, reserved)
        book = self.book
        for x in (q, *joined):
            if x is not q:
                book.take_waiting(x.query_id)
            x.dispatched_at = now
            x.gen += 1
            book.inflight[x.query_id] = x
        # the call is fixed now: who is in it (at which generation) and what it sends
        members = [(x, x.gen) for x in (q, *joined)]
        w.call = (members, q.inputs if not joined else batch_join.stack([x.inputs for x in (q, *joined)]))
        pred = self.predictor.predict_ms(q.model.profile_name, w.instance_type, q.batch + sum(f.batch for f in joined))
        w.idle = False
        w.idle_event.clear()
        w.busy_until = now + (pred + w.overhead_ms) / 1000.0
        if self._catch is q or self._catch is w:
            self._caught = (q, w, q.gen)    # the coroutine running this round serves it itself
        else:
            self.rt.spawn(self._serve(q, w, q.gen))

    def round_catching(self, target: Query | WorkerState) -> tuple[Query, WorkerState, int] | None:
        """A matching round whose dispatch of ``target`` (the caller's own query, or the worker
        whose task runs the round) comes back to the caller instead of starting a task."""
        self._catch, self._caught = target, None
        try:
            self.round()
        finally:
            self._catch = None
        caught, self._caught = self._caught, None
        return caught

    async def _serve(self, q: Query, w: WorkerState, gen: int) -> None:
        """Serve ``q`` on ``w``, then run the matching round for the completion event at once
        (Kairos §5.1: a round at each completion); when that round gives ``w`` its next query, serve
        it in this same task (no task per query under load)."""
        while True:
            await self.run(q, w, gen)
            nxt = self.completed(w, take_next=True)
            if nxt is None:
                return
            q, _, gen = nxt

    def completed(self, w: WorkerState, take_next: bool = False) -> tuple[Query, WorkerState, int] | None:
        """The completion event on ``w``: its matching round, now. With ``take_next`` (the caller
        is ``w``'s serving task) a query the round gives ``w`` is returned instead of spawned."""
        if w.removed or self.rt.stopping or self.rt.loop is None:
            self.trigger.kick()
            return None
        if take_next:
            return self.round_catching(w)
        self.round()
        return None

    def release(self, w: WorkerState, qid: str) -> None:
        """``w``'s call headed by ``qid`` is over: ``w`` is idle again (unless removed)."""
        if w.in_flight == qid:
            w.call = None
        if not w.removed:
            w.idle = True
            w.busy_until = self.rt.clock()
            w.idle_event.set()

    async def run(self, q: Query, w: WorkerState, gen: int) -> None:
        """One worker call for ``q`` and the queries that joined it (dispatcher.batch_join), then each
        one's outcome."""
        call = w.call
        if call is None or call[0][0] != (q, gen):   # abandoned meanwhile (worker removed): its queries requeued
            self.release(w, q.query_id)
            return
        members, inputs = call
        batch = sum(m.batch for m, _ in members)
        req = pb.InferCall(query_id=q.query_id, model=q.model.name, variant=q.variant, batch_size=batch,
                           inputs=inputs)
        code: grpc.StatusCode | None = None
        details = ""
        reply: pb.InferResult | pb.InferReply | None = None
        timer = self.stall.watch(w, call, w.busy_until - q.dispatched_at)
        try:
            reply = await w.client.infer(req, q.deadline - self.rt.clock())
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise
            code, details = SC.CANCELLED, "worker channel closed"
        except grpc.aio.AioRpcError as exc:
            code, details = exc.code(), exc.details() or ""
        except Exception as exc:  # noqa: BLE001 - any client failure is a worker failure
            code, details = SC.UNKNOWN, repr(exc)
        finally:
            if timer is not None:
                timer.cancel()
        now = self.rt.clock()
        self.release(w, q.query_id)
        if reply is not None:
            settle_answered(self.book, self.registry, self.placement, self._observe, q, w, members, batch, reply, now)
        else:
            settle_failed(self.book, self.registry, self.placement, self.accuracy, w, members, code, details)

    def _observe(self, model: str, instance_type: str, batch: int, service_ms: float) -> None:
        """Feed a measured service time to the latency model, in batches of ``observe_batch`` (or
        after ``observe_delay_s``): the model learns within milliseconds, and the per-query path
        stays an append."""
        self._pending_obs.append((model, instance_type, batch, service_ms))
        if len(self._pending_obs) >= self.observe_batch:
            self.flush_observations()
        elif self._obs_timer is None and self.rt.loop is not None:
            self._obs_timer = self.rt.loop.call_later(self.observe_delay_s, self.flush_observations)

    def flush_observations(self) -> None:
        if self._obs_timer is not None:
            self._obs_timer.cancel()
            self._obs_timer = None
        pending, self._pending_obs = self._pending_obs, []
        observe = self.predictor.observe
        for o in pending:
            observe(*o)

    def take_samples(self) -> dict[str, list]:
        """Per worker: (variant, batch, service_ms, offline) served since the last call."""
        self.flush_observations()
        out: dict[str, list] = {}
        for iid, w in self.registry.workers.items():
            out[iid] = list(w.samples)
            w.samples.clear()
        return out
