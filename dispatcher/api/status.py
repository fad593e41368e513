"""What the Status RPC says (``costscale status``; the daemon's Prometheus metrics are read from
the same reply, so the two agree): the pool by type and state and its $/hr against the budget,
each model's demand, SLO attainment and served accuracy over the last 1, 5 and 15 minutes
(:mod:`dispatcher.outcomes`), the variants on each worker, and -- from the daemon, when one runs
this dispatcher -- the dollars spent, the last fleet and model decisions with their reasons, the
last error, and the models it is profiling with the conservative pool each is served on meanwhile
(:class:`FleetFacts`, given by ``Dispatcher.status_source``).

Each instance is counted in its market (issue #28): ``on_demand``, or ``spot`` in one availability
zone, from the slot the cloud view lists it in (:mod:`scaler.cloud.slots`: ``TYPE@ZONE``). The pool's
$/hr is what the instances are billed now: a spot instance at its zone's spot price as the daemon's
market last priced it (``Dispatcher.set_spot_prices``; AWS bills spot at the spot price in effect,
not the bid: EC2 User Guide, "Spot Instance pricing"), an on-demand one at the catalog's price. A spot
slot the dispatcher has no price for (a dispatcher without a daemon) is priced at its type's
on-demand price, which overstates and never understates the cost.

An instance's state: ``parked`` (surplus kept warm, :mod:`scaler.fleet.parking`), ``draining``
(finishing its query before it retires), ``pending`` (booting on EC2) or ``running`` (serving,
or running and about to register). The pool and its $/hr count every live instance, registered
or not (the cloud view, :meth:`dispatcher.workers.registry.WorkerRegistry.set_cloud_view`).

The functions take the parts they read -- the worker registry, placement, the query book, the
outcome ledger -- and the daemon's :class:`FleetFacts`, never the Dispatcher.
"""
from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Mapping, Union

import grpc

from config.schema import Config
from dispatcher.outcomes import UNKNOWN_MODEL, OutcomeLedger
from dispatcher.workers.placement import VariantPlacement
from dispatcher.proto import costscale_pb2 as pb
from dispatcher.queries import QueryBook
from dispatcher.workers.registry import WorkerRegistry, WorkerState
from scaler.cloud.slots import base_type, market_of, pool_by_type, split_slot

#: the states an instance is counted in, in the order status shows them
INSTANCE_STATES = ("pending", "running", "parked", "draining")
#: how many of the newest decisions Status carries
DECISIONS_SHOWN = 10


@dataclass(frozen=True)
class Decision:
    """One decision of the fleet or the model loop, and why it was taken."""

    at_unix: float
    loop: str          # fleet | model
    kind: str          # plan, launch, terminate, park, unpark | load, unload, vm_add, vm_remove, ...
    summary: str
    reason: str = ""


@dataclass(frozen=True)
class Profiling:
    """A model the daemon is profiling (``daemon.profiling.self_profiling``) and the conservative pool it is
    served on until its profiles are measured (``pool`` None: planned from its local estimates)."""

    model: str
    pool: Mapping[str, int] | None = None
    reason: str = ""
    types_left: tuple[str, ...] = ()   # allowed types without a measured profile yet
    probing: bool = False              # probe instances are up measuring it


@dataclass(frozen=True)
class ReplicaFacts:
    """This dispatcher as one replica of a cluster (``daemon.replicas.role``): its id, whether it holds
    the lease, the live replicas, the published owners (instance id -> replica; those moving ->
    their next replica), where it forwards its queries ("" itself), the owners version applied."""

    id: str
    lease_holder: bool
    live: tuple[str, ...] = ()
    owners: Mapping[str, str] = field(default_factory=dict)
    releasing: Mapping[str, str] = field(default_factory=dict)
    forwarding_to: str = ""
    owners_version: int = 0


@dataclass(frozen=True)
class ShadowFacts:
    """``forecast.mode: shadow``'s comparison (issue #39): the planned $/hr of the pool planning ahead
    would hold and of the one applied, their planned dollars so far, and what each would serve within
    SLO by capacity, in percent (None: no minute counted yet)."""

    ahead_usd_per_hr: float
    applied_usd_per_hr: float
    ahead_usd: float
    applied_usd: float
    ahead_served_pct: float | None
    applied_served_pct: float | None


@dataclass(frozen=True)
class FleetFacts:
    """What only the daemon knows: money spent, decisions, errors (``daemon.observe.status_feed``)."""

    spent_usd_today: float = 0.0
    spent_usd_total: float = 0.0
    decisions: tuple[Decision, ...] = ()
    decision_counts: Mapping[tuple[str, str], int] = field(default_factory=dict)   # (loop, kind) -> count
    last_error: str = ""
    last_error_at_unix: float = 0.0
    capacity_hint: float = 1.0
    profiling: tuple[Profiling, ...] = ()
    #: per model, from the last fleet plan: (demand planned for, capacity planned, short) in q/s
    planned: Mapping[str, tuple[float, float, float]] = field(default_factory=dict)
    replica: ReplicaFacts | None = None
    #: forecast.mode, the lead, and per model (forecast q/s, forecaster) where one is made (issue #39)
    forecast_mode: str = ""
    forecast_lead_s: float = 0.0
    forecasts: Mapping[str, tuple[float, str]] = field(default_factory=dict)
    shadow: ShadowFacts | None = None


def set_forecast(reply: pb.StatusReply, facts: FleetFacts) -> None:
    """The reply's forecast fields from the daemon's facts: the mode, the lead and, in ``shadow``, the
    comparison of the ahead pool with the applied one (:class:`ShadowFacts`)."""
    reply.forecast_mode, reply.forecast_lead_s = facts.forecast_mode, facts.forecast_lead_s
    sh = facts.shadow
    if sh is None:
        return
    out = reply.forecast_shadow
    out.ahead_usd_per_hr, out.applied_usd_per_hr = sh.ahead_usd_per_hr, sh.applied_usd_per_hr
    out.ahead_usd, out.applied_usd = sh.ahead_usd, sh.applied_usd
    if sh.ahead_served_pct is not None:
        out.ahead_served_pct = sh.ahead_served_pct
    if sh.applied_served_pct is not None:
        out.applied_served_pct = sh.applied_served_pct


def worker_state(w: WorkerState) -> str:
    return "parked" if w.parked else "draining" if w.draining else "running"


def instance_states(registry: WorkerRegistry) -> dict[str, Counter[str]]:
    """Live instances, registered or not: slot (a type on-demand, ``TYPE@ZONE`` spot) -> state ->
    count (the cloud view at each instance's slot, and the registered workers it does not list --
    one added directly, or registered since the last listing -- at their type)."""
    out: dict[str, Counter[str]] = {}
    workers = registry.workers
    for iid, slot in registry.cloud_slots.items():
        w = workers.get(iid)
        if iid in registry.parked_ids or (w is not None and w.parked):
            state = "parked"
        elif w is not None and w.draining:
            state = "draining"
        elif iid in registry.cloud_pending:
            state = "pending"
        else:
            state = "running"
        out.setdefault(slot, Counter())[state] += 1
    for iid, w in workers.items():
        if iid not in registry.cloud_slots:
            out.setdefault(w.instance_type, Counter())[worker_state(w)] += 1
    return out


def slot_pool(registry: WorkerRegistry) -> Counter[str]:
    """Live instances by slot, registered or not (:func:`instance_states`, every state counted)."""
    return Counter({slot: sum(states.values()) for slot, states in instance_states(registry).items()})


def billed_price(slot: str, prices: Mapping[str, float]) -> float:
    """$/hr billed now for an instance in ``slot``: the slot's own price in ``prices`` (a spot slot's
    spot price), else its type's (the on-demand price; see the module docstring)."""
    return float(prices[slot]) if slot in prices else float(prices.get(base_type(slot), 0.0))


def pool_cost_per_hour(pool: Mapping[str, int], prices: Mapping[str, float]) -> float:
    """$/hr of a pool (slot or type -> live instances, parked included) at ``prices`` (type or slot
    -> $/hr; :func:`billed_price`)."""
    return float(sum(billed_price(s, prices) * n for s, n in pool.items()))


def cost_by_market(pool: Mapping[str, int], prices: Mapping[str, float]) -> dict[str, float]:
    """:func:`pool_cost_per_hour` split by market (``on_demand``, ``spot``); a market with no
    instance is left out."""
    out: dict[str, float] = {}
    for s, n in pool.items():
        if n:
            out[market_of(s)] = out.get(market_of(s), 0.0) + billed_price(s, prices) * n
    return out


def model_label(placement: VariantPlacement, r: pb.SubmitRequest) -> str:
    """The model a refused request is counted under: the model it names, its variant's or its
    application's; one ``(unknown)`` label for names the dispatcher does not know."""
    p = placement
    if r.model in p.models:
        return r.model
    meta = p.variant_meta.get(r.variant) if r.variant else None
    if meta is not None:
        return meta.model
    app = p.apps.get(r.application) if r.application else None
    return app.name if app is not None else UNKNOWN_MODEL


def record_outcome(outcomes: OutcomeLedger, placement: VariantPlacement, r: pb.SubmitRequest,
                   out: Union[pb.SubmitReply, tuple[grpc.StatusCode, str]], now: float) -> None:
    """Record how one Submit ended in the dispatcher's :class:`dispatcher.outcomes.OutcomeLedger`."""
    if isinstance(out, tuple):
        outcomes.record(model_label(placement, r), out[0].name, now)
        return
    meta = placement.variant_meta.get(out.variant)
    outcomes.record(out.model, "OK", now, slo_met=out.slo_met, latency_s=out.total_ms / 1000.0,
                    accuracy=meta.accuracy if meta is not None else None)


def record_pipeline(outcomes: OutcomeLedger, r: pb.SubmitRequest,
                    out: Union[pb.SubmitReply, tuple[grpc.StatusCode, str]], now: float) -> None:
    """A pipeline query's outcome under the pipeline's name (its steps are recorded under their models)."""
    if isinstance(out, tuple):
        outcomes.record(r.application, out[0].name, now)
    else:
        outcomes.record(r.application, "OK", now, slo_met=out.slo_met, latency_s=out.total_ms / 1000.0,
                        accuracy=out.accuracy if out.accuracy > 0 else None)


def _model_status(outcomes: OutcomeLedger, registry: WorkerRegistry, name: str, now: float,
                  facts: FleetFacts | None) -> pb.ModelStatus:
    m = outcomes.models.get(name)
    serving = sum(1 for iid, w in registry.workers.items()
                  if not (w.draining or w.removed) and registry.serves_model(iid, name))
    ms = pb.ModelStatus(name=name, queries=dict(m.queries) if m else {}, slo_violations=m.slo_violations if m else 0,
                        workers=serving)
    if facts is not None and name in facts.planned:
        ms.planned = True
        ms.planned_qps, ms.capacity_qps, ms.short_qps = facts.planned[name]
    if facts is not None and name in facts.forecasts:
        ms.forecast_qps, ms.forecaster = facts.forecasts[name]
    for w in outcomes.windows(name, now):
        mw = ms.windows.add(seconds=w.seconds, demand_qps=w.demand_qps, queries=w.queries, slo_met=w.slo_met)
        if w.attainment is not None:
            mw.attainment = w.attainment
        if w.served_accuracy is not None:
            mw.served_accuracy = w.served_accuracy
    return ms


def build_status_reply(*, cfg: Config, now: float, registry: WorkerRegistry, placement: VariantPlacement,
                       book: QueryBook, arrival_qps: float, outcomes: OutcomeLedger, prices: Mapping[str, float],
                       facts: FleetFacts | None) -> pb.StatusReply:
    """The Status RPC's reply (see the module docstring): ``arrival_qps`` is every query's arrival
    rate now, ``prices`` the $/hr billed per type and spot slot, ``facts`` what the daemon adds
    (None without one)."""
    states = instance_states(registry)
    slots = {slot: sum(by_state.values()) for slot, by_state in states.items()}
    workers = registry.workers
    reply = pb.StatusReply(
        cluster=cfg.cluster, budget_per_hour=cfg.budget_per_hour, cost_per_hour=pool_cost_per_hour(slots, prices),
        cost_per_hour_by_market=cost_by_market(slots, prices), pool=pool_by_type(slots), queued=book.waiting_count(),
        served=book.served,
        rejected=int(sum(book.rejected.values())), arrival_qps=arrival_qps,
        workers=len(workers), parked=sum(1 for w in workers.values() if w.parked),
        in_flight=len(book.inflight), now_unix=time.time(), capacity_hint=1.0)
    for slot, by_state in sorted(states.items()):
        itype, zone = split_slot(slot)
        for state in INSTANCE_STATES:
            if by_state.get(state):
                reply.instances.add(instance_type=itype, state=state, count=by_state[state], market=market_of(slot),
                                    zone=zone or "")
    names = list(placement.cfg_models) + sorted((set(placement.models) | set(outcomes.models))
                                                - set(placement.cfg_models))
    reply.models.extend(_model_status(outcomes, registry, n, now, facts) for n in names)
    for iid, w in sorted(workers.items()):
        reply.worker_list.add(instance_id=iid, instance_type=w.instance_type, state=worker_state(w),
                              variants=sorted(placement.loaded_on(w)), utilization=registry.utilization(w, now),
                              served=w.served, model=registry.serves.get(iid, ""))
    if facts is not None:
        reply.daemon = True
        reply.spent_usd_today = facts.spent_usd_today
        reply.spent_usd_total = facts.spent_usd_total
        reply.capacity_hint = facts.capacity_hint
        reply.last_error = facts.last_error
        reply.last_error_at_unix = facts.last_error_at_unix
        set_forecast(reply, facts)
        for x in facts.decisions[-DECISIONS_SHOWN:]:
            reply.decisions.add(at_unix=x.at_unix, loop=x.loop, kind=x.kind, summary=x.summary, reason=x.reason)
        for (loop, kind), n in sorted(facts.decision_counts.items()):
            reply.decision_counts.add(loop=loop, kind=kind, count=n)
        if facts.replica is not None:
            r = facts.replica
            reply.replica.CopyFrom(pb.ReplicaStatus(id=r.id, lease_holder=r.lease_holder, live=list(r.live),
                                                    owners=dict(r.owners), releasing=dict(r.releasing),
                                                    forwarding_to=r.forwarding_to, owners_version=r.owners_version))
        for p in facts.profiling:
            reply.profiling.add(model=p.model, conservative_pool=dict(p.pool or {}), reason=p.reason,
                                types_left=list(p.types_left), probing=p.probing,
                                on_conservative_pool=p.pool is not None)
    return reply
