"""The demand of every dispatcher replica, summed for the fleet loop (pure; issue #27, deliverable 3).

With several dispatcher replicas behind one address, each one's demand window
(``dispatcher.window``) sees only the queries the balancer sent it. The fleet loop on the lease
holder plans for the whole service (Kairos §5.2 works from the arrival rate and the batch-size
mix; DESIGN "three loops": the fleet loop works from what the query loops measure), so each replica
publishes its per-model windows (``scaler.replicas.demand_table``) and the holder plans for their sum:

* only the replicas alive by heartbeat count (``scaler.replicas.membership.live_replicas``), and
  only a publication younger than ``max_age_s``: a dead replica's last numbers, or a stuck one's,
  are dropped, never summed (the balancer has sent its share of the traffic elsewhere);
* rates add: ``arrival_qps`` (the 10 s rate), ``steady_qps`` (the steady horizon's), and so do the
  query counts (``count``, the samples ``scaler.fleet.step.planning_demand`` trusts the window by);
* the batch-size mix of the sum is the replicas' mixes weighted by their share of the traffic
  (``steady_qps``; by ``count`` when no replica has a rate yet): at size ``s``,
  ``sum_r w_r f_r(s) / sum_r w_r``; the mean batch likewise; ``span_s`` is the longest span.

The merged :class:`ModelWindow` has the fields of ``dispatcher.window.WindowSnapshot`` that the
fleet tick reads (``arrival_qps``, ``steady_qps``, ``mix``, ``count``), so
``fleet_step.planning_demand`` takes it as it takes one window.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Collection, Mapping, Protocol, Sequence

import numpy as np

from scaler.planner.batch_mix import BatchMix
from scaler.replicas.membership import REPLICA_TTL_S

#: a replica's published windows older than this are dropped (it publishes with every heartbeat,
#: every third of the replica ttl, so this is three missed publications)
DEMAND_MAX_AGE_S = REPLICA_TTL_S


class WindowLike(Protocol):
    """What a demand window's snapshot holds (``dispatcher.window.WindowSnapshot``)."""

    arrival_qps: float
    steady_qps: float
    count: int
    total: int
    mean_batch: float
    mix: BatchMix
    span_s: float


@dataclass(frozen=True)
class ModelWindow:
    """One model's demand window as a replica measured it (or the sum over the replicas)."""

    arrival_qps: float
    steady_qps: float
    count: int
    total: int
    mean_batch: float
    mix: BatchMix
    span_s: float


@dataclass(frozen=True)
class ReplicaDemand:
    """What one replica published: its windows per model, at ``at`` (epoch s, its clock)."""

    replica: str
    at: float
    windows: Mapping[str, ModelWindow]


@dataclass(frozen=True)
class MergedDemand:
    """The summed windows per model, the replicas summed, and those dropped with why."""

    windows: dict[str, ModelWindow]
    replicas: tuple[str, ...]
    dropped: dict[str, str] = field(default_factory=dict)


def window_of(snapshot: WindowLike) -> ModelWindow:
    """A window snapshot as the plain data a replica publishes."""
    return ModelWindow(arrival_qps=float(snapshot.arrival_qps), steady_qps=float(snapshot.steady_qps),
                       count=int(snapshot.count), total=int(snapshot.total), mean_batch=float(snapshot.mean_batch),
                       mix=snapshot.mix, span_s=float(snapshot.span_s))


def sum_windows(windows: Sequence[ModelWindow]) -> ModelWindow:
    """One model's windows from several replicas, summed (module docstring)."""
    if not windows:
        return ModelWindow(0.0, 0.0, 0, 0, 0.0, BatchMix(np.array([], dtype=np.int64), np.array([], dtype=float)), 0.0)
    weights = np.array([w.steady_qps for w in windows], dtype=float)
    if not weights.sum() > 0:
        weights = np.array([w.count for w in windows], dtype=float)
    has_mix = np.array([len(w.mix.sizes) > 0 for w in windows])
    weights = np.where(has_mix, weights, 0.0)
    sizes = np.unique(np.concatenate([np.asarray(w.mix.sizes, dtype=np.int64) for w in windows]))
    if weights.sum() > 0:
        weights = weights / weights.sum()           # shares first: a tiny rate times a fraction underflows
        frac = np.zeros(len(sizes))
        for wt, w in zip(weights, windows):
            if wt > 0:
                frac[np.searchsorted(sizes, w.mix.sizes)] += wt * np.asarray(w.mix.fractions, dtype=float)
        mean = float(sum(wt * w.mean_batch for wt, w in zip(weights, windows)))
        keep = frac > 0
        mix = BatchMix(sizes[keep], frac[keep])
    else:
        mean, mix = 0.0, BatchMix(np.array([], dtype=np.int64), np.array([], dtype=float))
    return ModelWindow(arrival_qps=float(sum(w.arrival_qps for w in windows)),
                       steady_qps=float(sum(w.steady_qps for w in windows)),
                       count=int(sum(w.count for w in windows)), total=int(sum(w.total for w in windows)),
                       mean_batch=mean, mix=mix, span_s=float(max(w.span_s for w in windows)))


def merge_demand(published: Sequence[ReplicaDemand], live: Collection[str], now: float,
                 max_age_s: float = DEMAND_MAX_AGE_S) -> MergedDemand:
    """Every model's window summed over the live replicas' publications younger than
    ``max_age_s`` at ``now`` (epoch s); the others dropped, with the reason. A replica that
    published twice counts once, with its latest publication."""
    live_set = set(live)
    latest: dict[str, ReplicaDemand] = {}
    for p in published:
        if p.replica not in latest or p.at > latest[p.replica].at:
            latest[p.replica] = p
    dropped: dict[str, str] = {}
    used: list[ReplicaDemand] = []
    for name in sorted(latest):
        p = latest[name]
        if name not in live_set:
            dropped[name] = "not live (heartbeat expired or never written)"
        elif now - p.at > max_age_s:
            dropped[name] = f"published {now - p.at:.1f} s ago (older than {max_age_s:g} s)"
        else:
            used.append(p)
    for name in sorted(live_set - set(latest)):
        dropped[name] = "nothing published"
    models = sorted({m for p in used for m in p.windows})
    windows = {m: sum_windows([p.windows[m] for p in used if m in p.windows]) for m in models}
    return MergedDemand(windows, tuple(p.replica for p in used), dropped)


__all__ = ["DEMAND_MAX_AGE_S", "MergedDemand", "ModelWindow", "ReplicaDemand", "WindowLike", "merge_demand",
           "sum_windows", "window_of"]
