"""The replay's report (``costscale replay --json``): dollars, SLO attainment, latency, decisions,
accuracy and the per-minute timeline the plot draws (issue #12 lists the fields).

Attainment counts every query of the trace: ``within_slo / queries``, so drops, rejections, expiries
and queries still waiting at the end are misses. ``p99_ms`` is the nearest-rank p99 over all
queries with those as infinitely late (``inf`` when more than 1 % missed; JSON ``null``).
"""
from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

import numpy as np

from sim.metrics import nearest_rank
from sim.replay.outcomes import SERVED

#: seconds per point of the timeline
TIMELINE_STEP_S = 60.0


def _finite(x: float) -> float | None:
    return None if not math.isfinite(x) else round(float(x), 6)


def application_accuracy(q: Any, duration_s: float, step_s: float = TIMELINE_STEP_S,
                         acc: np.ndarray | None = None) -> dict[str, Any]:
    """One application's served accuracy (:class:`sim.replay.variant_lane.VariantLoop`), in points (%):
    the mean over its served queries, the most accurate variant's, the largest drop of a 1-minute
    mean below it (``max_drop_points``; Proteus §6's "max accuracy drop"), the minutes whose mean
    is below it, and per minute the mean (null: nothing served). ``acc``: ``q.served_accuracy()``
    when the caller has it."""
    acc = q.served_accuracy() if acc is None else acc
    ok = ~np.isnan(acc)
    top = 100.0 * float(q.vaccuracy[0])
    n_steps = max(int(math.ceil(duration_s / step_s)), 1)
    k = np.minimum((q.arr[ok] // step_s).astype(np.int64), n_steps - 1)
    cnt = np.bincount(k, minlength=n_steps)
    tot = np.bincount(k, weights=acc[ok], minlength=n_steps)
    per_min = [round(100.0 * float(t) / c, 4) if c else None for t, c in zip(tot, cnt)]
    below = [m for m in per_min if m is not None and m < top - 1e-9]
    return {"mean": round(100.0 * float(acc[ok].mean()), 4) if ok.any() else None, "top": round(top, 4),
            "max_drop_points": round(float(max((top - m for m in below), default=0.0)), 4),
            "minutes_below_full": len(below), "swaps": int(q.swaps), "by_minute": per_min}


def served_accuracy(run: Any | None = None) -> dict[str, Any]:
    """Accuracy served. A model without variants is served by its one model (accuracy 1 relative to
    it); an application's variants are replayed (issue #25): ``applications`` holds each one's
    :func:`application_accuracy` (without the per-minute list), and the totals are over them:
    ``mean`` relative to the most accurate variant (every query of a plain model counts 1),
    ``max_drop_points`` the largest of theirs, ``minutes_below_full`` the minutes when any was."""
    apps = {m: q for m, q in (run.lanes.items() if run is not None else ()) if hasattr(q, "served_accuracy")}
    if not apps:
        return {"mean": 1.0, "max_drop": 0.0, "max_drop_points": 0.0, "minutes_below_full": 0,
                "relative_to": "the most accurate variant", "variants_replayed": False}
    accs = {m: q.served_accuracy() for m, q in apps.items()}
    per = {m: application_accuracy(q, run.duration_s, acc=accs[m]) for m, q in apps.items()}
    rel_sum, n = 0.0, 0
    for m, q in run.lanes.items():
        served = int((q.outcome == SERVED).sum())
        rel_sum += float(np.nansum(accs[m])) / float(q.vaccuracy[0]) if m in accs else served
        n += served
    minutes = set()
    for a in per.values():
        top = a["top"]
        minutes |= {i for i, x in enumerate(a["by_minute"]) if x is not None and x < top - 1e-9}
    drop = max(a["max_drop_points"] for a in per.values())
    return {"mean": round(rel_sum / n, 6) if n else 1.0, "max_drop": round(drop / 100.0, 6), "max_drop_points": drop,
            "minutes_below_full": len(minutes), "relative_to": "the most accurate variant", "variants_replayed": True,
            "applications": {m: {k: v for k, v in a.items() if k != "by_minute"} for m, a in per.items()}}


def _all(run: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every lane's queries together: arrival times, latency (inf unless served) and within-SLO."""
    lanes = list(run.lanes.values())
    arr = np.concatenate([q.arr for q in lanes]) if lanes else np.zeros(0)
    lat = np.concatenate([np.where(q.outcome == SERVED, q.latency, np.inf) for q in lanes]) if lanes else np.zeros(0)
    within = np.concatenate([(q.outcome == SERVED) & (q.latency <= q.qos_ms) for q in lanes]) if lanes \
        else np.zeros(0, dtype=bool)
    return arr, lat, within


def timeline(run: Any, step_s: float = TIMELINE_STEP_S) -> dict[str, Any]:
    """Per ``step_s`` from 0: arrival rate (in all, and per model when several have queries),
    goodput, $/hr at the step's start, p99 of the queries that arrived in it (null when none or
    more than 1 % missed), and the allowable capacity of the target in force (its upper bound;
    null for a pinned pool)."""
    arr, lat, within = _all(run)
    n_steps = max(int(math.ceil(run.duration_s / step_s)), 1)

    def step_of(a: np.ndarray) -> np.ndarray:
        return np.minimum((a // step_s).astype(np.int64), n_steps - 1) if a.size else np.zeros(0, dtype=np.int64)
    idx = step_of(arr)
    arrivals = np.bincount(idx, minlength=n_steps)
    good = np.bincount(idx, weights=within.astype(float), minlength=n_steps)
    p99: list[float | None] = []
    order = np.argsort(idx, kind="stable")
    bounds = np.searchsorted(idx[order], np.arange(n_steps + 1))
    for k in range(n_steps):
        sl = lat[order[bounds[k]:bounds[k + 1]]]
        p99.append(_finite(nearest_rank(sl, 99)) if sl.size else None)
    t = np.arange(n_steps) * step_s
    cap: list[float | None] = []
    ti = 0
    current: float | None = None
    for x in t:
        while ti < len(run.targets) and run.targets[ti].at_s <= x:
            ub = run.targets[ti].upper_bound_qps
            current = None if not math.isfinite(ub) else round(ub, 3)
            ti += 1
        cap.append(current)
    out: dict[str, Any] = {"t_s": [float(x) for x in t],
                           "demand_qps": [round(float(a) / step_s, 4) for a in arrivals],
                           "goodput_qps": [round(float(g) / step_s, 4) for g in good],
                           "cost_per_hour": [round(run.ledger.cost_per_hour_at(float(x)), 6) for x in t],
                           "p99_ms": p99, "capacity_qps": cap}
    if len(run.replayed) > 1:
        out["demand_by_model"], out["attainment_by_model"] = {}, {}
        for m in run.replayed:
            q = run.lanes[m]
            k = step_of(q.arr)
            n = np.bincount(k, minlength=n_steps)
            ok = np.bincount(k, weights=((q.outcome == SERVED) & (q.latency <= q.qos_ms)).astype(float),
                             minlength=n_steps)
            out["demand_by_model"][m] = [round(float(a) / step_s, 4) for a in n]
            out["attainment_by_model"][m] = [round(float(g) / a, 6) if a else None for g, a in zip(ok, n)]
    apps = {m: q for m, q in run.lanes.items() if hasattr(q, "served_accuracy") and q.n}
    if apps:   # each application's served accuracy per step (%), for the plot
        out["accuracy_by_model"] = {m: application_accuracy(q, run.duration_s, step_s)["by_minute"]
                                    for m, q in apps.items()}
    return out


def lane_figures(q: Any) -> dict[str, Any]:
    """One model's queries: how many, served, within its SLO, attainment and nearest-rank p99."""
    served = q.outcome == SERVED
    within = served & (q.latency <= q.qos_ms)
    lat = np.where(served, q.latency, np.inf)
    return {"queries": int(q.n), "served": int(served.sum()), "within_slo": int(within.sum()),
            "slo_attainment": round(float(within.sum()) / q.n, 6) if q.n else 1.0,
            "p99_ms": _finite(nearest_rank(lat, 99)) if q.n else None, "qos_ms": q.qos_ms}


def report(run: Any, *, with_timeline: bool = False) -> dict[str, Any]:
    """The replay's figures as one JSON-able object: the totals over every model's queries, and
    ``models`` (model → its own figures, :func:`lane_figures`) for each model with queries.
    ``model`` and ``qos_ms`` name the model replayed when one was ('+'-joined names and null QoS
    when several were)."""
    arr, lat, within = _all(run)
    n = int(arr.size)
    served = int(sum(int((q.outcome == SERVED).sum()) for q in run.lanes.values()))
    names = run.replayed or list(run.lanes)
    led = run.ledger
    out: dict[str, Any] = {
        "model": "+".join(names),
        "qos_ms": run.lanes[names[0]].qos_ms if len(names) == 1 else None,
        "hours": round(run.duration_s / 3600.0, 6),
        "cost_usd": round(led.cost_usd, 6),
        "queries": n,
        "served": served,
        "within_slo": int(within.sum()),
        "slo_attainment": round(float(within.sum()) / n, 6) if n else 1.0,
        "p99_ms": _finite(nearest_rank(lat, 99)) if n else None,
        "models": {m: lane_figures(run.lanes[m]) for m in names},
        "peak_cost_per_hour": round(led.peak_cost_per_hour, 6),
        "budget_per_hour": run.cfg.budget_per_hour,
        "budget_violations": len(led.violations),
        "instance_hours": {t: round(h, 6) for t, h in led.instance_hours.items()},
        "decisions": asdict(run.decisions),
        "accuracy": served_accuracy(run),
        "plans": run.plans,
        "target_changes": len(run.targets),
        "errors": len(run.errors),
        "wall_s": round(run.wall_s, 3),
    }
    if getattr(run, "pipelines", None):
        out["pipelines"] = run.pipelines
    if getattr(run, "quota_refusals", None) is not None:     # vCPU quotas (issue #38, sim.replay.fleet.quota_check)
        out["quota_refusals"] = run.quota_refusals
    if getattr(run, "forecast", None) is not None:     # forecast.mode shadow or on (issue #39)
        out["forecast"] = dict(run.forecast)
    if getattr(run, "forecast_shadow", None) is not None:    # shadow: what planning ahead would have planned
        out["forecast_shadow"] = dict(run.forecast_shadow)
    if getattr(run, "spot", None) is not None:     # spot markets (issue #28, sim.replay.spot)
        out["spot"] = dict(run.spot)
    if with_timeline:
        out["timeline"] = timeline(run)
    return out


__all__ = ["application_accuracy", "lane_figures", "report", "timeline", "served_accuracy", "TIMELINE_STEP_S"]
