"""The accuracy planner (Proteus §4): which variant each worker hosts and how each model's queries
are split over the workers, so that the fleet serves the most demand and, among the placements
that do, the highest accuracy-weighted throughput; among those, the fewest swaps from the current
placement. Pure: the workers, profiles, demand and SLOs come in, an :class:`AccuracyPlan` goes out.

**Capacity** (Proteus §4, "Estimation of throughput capacity"): a variant on an instance type runs
batches of the largest profiled size whose latency is at most half the model's SLO (a query that
arrives just after a batch starts waits for the next one, so it answers within twice the batch
latency); its capacity is that batch over that latency, in queries per second (a query is one
request of the batch). A variant with no such batch on a type cannot go there, and a variant below
its model's ``min_accuracy`` goes nowhere.

**The MILP.** Proteus writes it per device d with binaries x_{d,m} (Eq. 1: at most one variant per
device), routing fractions y_{d,q} and served rates z_{d,q} (Eq. 4-5), and the accuracy of a query
type a_q = Σ_m A_m Σ_d x_{d,m} z_{d,q} s_q: a product of a binary and a continuous variable
(bilinear), as is Eq. 3's "the variant on d serves q". Linearised here:

- the served rate is indexed by what serves it, z_{t,m} >= 0 (q/s of variant m's model served by
  variant m on workers of type t), and Eq. 3-5 become one linear bound z_{t,m} <= P_{t,m} n_{t,m},
  the standard product linearisation with the capacity as its big-M (z = 0 unless m is placed);
- so a_q = Σ_{m of q} A_m Σ_t z_{t,m} is linear;
- workers of one type are interchangeable, so the integer n_{t,m} counts the type's workers that
  host m (Σ_m n_{t,m} <= N_t, Eq. 1 summed over the type's workers) instead of one binary per
  worker: the same optima without the symmetry that slows branch and bound. A per-type plan becomes
  a per-worker one with each (t, m) group's rate split evenly over its workers.

Served demand per model is at most its demand (Eq. 2 and 6: Proteus lowers s_q until the MILP is
feasible; here the served rate is a variable, so one solve finds the most that can be served).

**Pruning** (exact): on a type, a variant of a model is dominated by another of the same model at
least as accurate whose capacity there, capped at the model's demand, is at least as large
(strictly better in one of the two, or a twin earlier by name). Hosting the dominating variant
instead serves as much at least as accurately, so no optimum needs the dominated one; it is kept
only where a worker of the type hosts it now (it may be cheaper to keep than to swap). Variants
with no batch within SLO/2 on a type, or below ``min_accuracy``, never enter (Proteus §4).

**Objective**, lexicographic, as three solves (a single weighted sum would need a weight larger
than any accuracy/throughput trade-off can be, which no solver's tolerances survive):

1. the most demand served, Σ z, solved to optimality;
2. with that held (within ``accuracy_milp.REL_TOL``), the highest accuracy-weighted throughput
   Σ A_m z_{t,m}, to optimality or to the budget (``gap`` bounds how far below the optimum);
3. with that held, the most workers that keep what they host: keep_{t,v} <= n_{t,v} and
   keep_{t,v} <= the type's workers hosting v now, for every variant v and for "nothing" (a worker
   the plan does not need keeps what it has, nothing included; then "Idle workers" below).

:mod:`variants.accuracy.solve` solves them within the budget (issue #29: 1 s at 40 workers x 50
variants x 9 models): step 1 on each (type, model)'s fastest variant (exact), step 2 from a local
search's placement on the MILP in level form with cover rows (:mod:`variants.accuracy.levels`,
the same optima), step 3 on that form. The MILP as written above is kept as the reference,
:func:`variants.accuracy.milp.lexicographic_counts` (``reference=True``): the tests hold the two to
the same optimum on small cases and the bench measures one against the other.

**Idle workers.** A worker the placement routes nothing to (its model's demand is served, as
accurately as the placement can, by the others) hosts its model's most accurate variant that fits
its type, whatever step 3 kept: it costs no query (the worker is idle) and it is spare capacity at
full accuracy, which the routing then shares (a fall after a burst left one worker on the top
variant taking all of a low load and the other idle on a lower one, issue #25).

The MILP chooses the placement; the rates are then recomputed for that placement exactly (per
model, the most accurate placed variants fill the demand first, which is what steps 1-2 do for a
fixed placement), so the plan's numbers carry no solver tolerance.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from variants.accuracy.milp import lexicographic_counts
from variants.accuracy.solve import plan_counts

#: Tolerance for "all demand served" (q/s, relative to the model's demand).
FEASIBLE_TOL = 1e-6
#: Wall-clock budget of a call (s): the model loop's accuracy round runs it on its tick. Past it
#: the best placement found is returned (``status`` "time_limit", ``gap`` bounding its distance
#: from the most accurate). Small fleets are proven optimal in tens of ms. At 40 workers x 50
#: variants x 9 models (BENCHMARKS.md "accuracy-planner", 18 cases) 1 s serves as much as the
#: reference MILP does in 10 s, at 0.990-1.038 of its accuracy-weighted throughput: >= 0.995 on
#: every case where a call got ~0.8 s of CPU, down to 0.990 on one case where calls got ~0.5 s on
#: the shared 2-core bench machine; the reference at 1 s fell to 0.886 there.
DEFAULT_TIME_LIMIT_S = 1.0
#: Share of the budget the solves may use; the rest covers a solver's overrun of its own limit
#: and building the plan, so a call ends within its budget.
SOLVE_SHARE = 0.85


@dataclass(frozen=True)
class VariantProfile:
    """One variant of a model: its accuracy and its latency (ms) per instance type and batch size."""

    model: str
    variant: str
    accuracy: float
    latency_ms: Mapping[str, Mapping[int, float]]   # instance type -> batch size -> ms


@dataclass(frozen=True)
class AccuracyPlan:
    """The planner's answer. ``placement``: worker id -> variant (None: the worker hosts nothing);
    ``routing``: model -> worker id -> fraction of the model's served queries (sums to 1 for a
    model served at all); ``effective_accuracy``: accuracy averaged over the served queries (None
    when nothing is served); ``feasible``: every model's demand is served."""

    placement: dict[str, str | None]
    worker_types: dict[str, str]
    routing: dict[str, dict[str, float]]
    served_qps: dict[str, float]
    demand_qps: dict[str, float]
    accuracy: dict[str, float | None]            # per model, over its served queries
    effective_accuracy: float | None
    feasible: bool
    swaps: int                                   # workers whose variant changes
    solve_ms: float
    status: str                                  # "optimal"; "time_limit": the best found by then
    batch: dict[str, int] = field(default_factory=dict)   # variant@type -> batch it runs
    #: relative distance of the accuracy-weighted throughput from the solver's bound on the best
    #: at the served demand (0: proven optimal; inf: no bound; nan: the solver (CBC) gives none)
    gap: float = 0.0

    @property
    def total_served_qps(self) -> float:
        return sum(self.served_qps.values())

    @property
    def accuracy_weighted_qps(self) -> float:
        return sum((self.accuracy[m] or 0.0) * q for m, q in self.served_qps.items())


def capacity(latency_ms: Mapping[int, float], slo_ms: float) -> tuple[int, float] | None:
    """Proteus §4: (the largest batch whose latency is <= slo/2, that batch over its latency in
    q/s), or None when not even the smallest batch fits."""
    fits = [b for b, lat in latency_ms.items() if lat <= slo_ms / 2.0]
    if not fits:
        return None
    b = max(fits)
    return b, b * 1000.0 / latency_ms[b]


def profiles_from_rows(rows: Iterable[Any]) -> list[VariantProfile]:
    """Profiles from family CSV rows (anything with ``model, variant, instance_type, batch_size,
    latency_ms, accuracy``, e.g. :class:`variants.families.profiles.ProfileRow`). ValueError when a
    variant has two accuracies, belongs to two models, or has a (type, batch) twice."""
    lat: dict[str, dict[str, dict[int, float]]] = {}
    meta: dict[str, tuple[str, float]] = {}
    for r in rows:
        model, acc = meta.setdefault(r.variant, (r.model, float(r.accuracy)))
        if model != r.model:
            raise ValueError(f"variant {r.variant} belongs to two models ({model}, {r.model})")
        if acc != float(r.accuracy):
            raise ValueError(f"variant {r.variant} has two accuracies ({acc:g}, {float(r.accuracy):g})")
        by_batch = lat.setdefault(r.variant, {}).setdefault(r.instance_type, {})
        if int(r.batch_size) in by_batch:
            raise ValueError(f"variant {r.variant} on {r.instance_type}: batch {int(r.batch_size)} twice")
        by_batch[int(r.batch_size)] = float(r.latency_ms)
    return [VariantProfile(meta[v][0], v, meta[v][1], lat[v]) for v in meta]


def workers_from_counts(pool: Mapping[str, int]) -> dict[str, str]:
    """``{type: N}`` -> ``{"TYPE-0": type, ..., "TYPE-(N-1)": type}`` (types in sorted order)."""
    return {f"{t}-{i}": t for t in sorted(pool) for i in range(int(pool[t]))}


@dataclass(frozen=True)
class _Option:
    """A variant that may go on a type: its capacity there (q/s) and the batch it runs."""

    itype: str
    variant: str
    model: str
    accuracy: float
    qps: float
    batch: int


def _options(types: Iterable[str], variants: Sequence[VariantProfile], slo_ms: Mapping[str, float],
             min_accuracy: Mapping[str, float]) -> list[_Option]:
    out = []
    for t in sorted(set(types)):
        for v in variants:
            if v.model not in slo_ms or v.accuracy < min_accuracy.get(v.model, 0.0) or t not in v.latency_ms:
                continue
            cap = capacity(v.latency_ms[t], slo_ms[v.model])
            if cap is not None:
                out.append(_Option(t, v.variant, v.model, v.accuracy, cap[1], cap[0]))
    return out


def _undominated(options: Sequence[_Option], demand: Mapping[str, float],
                 hosted: set[tuple[str, str]]) -> list[_Option]:
    """The options no other option of the same (type, model) dominates (module docstring,
    "Pruning"), and those in ``hosted`` ((type, variant) pairs some worker of the type hosts now)."""
    groups: dict[tuple[str, str], list[_Option]] = {}
    for o in options:
        groups.setdefault((o.itype, o.model), []).append(o)
    keep = []
    for (_, model), group in groups.items():
        best = -1.0                                   # the largest capped capacity of a more accurate option
        for o in sorted(group, key=lambda o: (-o.accuracy, -o.qps, o.variant)):
            cap = min(o.qps, max(0.0, demand.get(model, 0.0)))
            if cap > best or (o.itype, o.variant) in hosted:
                keep.append(o)
            best = max(best, cap)
    return sorted(keep, key=lambda o: (o.itype, o.variant))


def _fill(options: Sequence[_Option], counts: Mapping[tuple[str, str], int],
          demand: Mapping[str, float]) -> dict[tuple[str, str], float]:
    """The best rates for a fixed placement: per model, the most accurate placed (type, variant)
    groups take the demand first, each up to its capacity times its workers. (type, variant) ->
    q/s served by the group."""
    rates: dict[tuple[str, str], float] = {}
    for model, want in demand.items():
        groups = sorted((o for o in options if o.model == model and counts.get((o.itype, o.variant), 0) > 0),
                        key=lambda o: (-o.accuracy, -o.qps, o.itype, o.variant))
        left = max(0.0, float(want))
        for o in groups:
            take = min(left, o.qps * counts[(o.itype, o.variant)])
            rates[(o.itype, o.variant)] = take
            left -= take
    return rates


def _idle_to_top(options: Sequence[_Option], counts: Mapping[tuple[str, str], int],
                 demand: Mapping[str, float]) -> dict[tuple[str, str], int]:
    """Workers the placement routes nothing to host their model's most accurate variant that fits
    their type (module docstring, "Idle workers"). (type, variant) -> count."""
    rates = _fill(options, counts, demand)
    top: dict[tuple[str, str], _Option] = {}
    for o in sorted(options, key=lambda o: (-o.accuracy, -o.qps, o.variant)):
        top.setdefault((o.itype, o.model), o)
    by_key = {(o.itype, o.variant): o for o in options}
    out = dict(counts)
    for (t, v), c in counts.items():
        o = by_key.get((t, v))
        if c <= 0 or o is None or rates.get((t, v), 0.0) > 0.0:
            continue
        best = top[(t, o.model)]
        if best.accuracy > o.accuracy:
            out[(t, v)] -= c
            out[(t, best.variant)] = out.get((t, best.variant), 0) + c
    return {k: c for k, c in out.items() if c > 0}


def _assign(workers: Mapping[str, str], counts: Mapping[tuple[str, str], int],
            current: Mapping[str, str | None]) -> dict[str, str | None]:
    """Per-type counts -> worker ids: a worker keeps its variant while the type's count of it lasts
    (workers in id order), the rest take the remaining slots (variants in name order)."""
    placement: dict[str, str | None] = {}
    for t in sorted(set(workers.values())):
        ids = sorted(w for w, wt in workers.items() if wt == t)
        left = {v: c for (tt, v), c in counts.items() if tt == t and c > 0}
        free = len(ids) - sum(left.values())
        rest = []
        for w in ids:
            cur = current.get(w)
            if cur is not None and left.get(cur, 0) > 0:
                placement[w] = cur
                left[cur] -= 1
            elif cur is None and free > 0:
                placement[w] = None
                free -= 1
            else:
                rest.append(w)
        slots = [v for v in sorted(left) for _ in range(left[v])] + [None] * free
        placement.update(zip(rest, slots))
    return placement


def plan_accuracy(workers: Mapping[str, str], variants: Sequence[VariantProfile], demand_qps: Mapping[str, float],
                  slo_ms: Mapping[str, float], min_accuracy: Mapping[str, float] | None = None,
                  current: Mapping[str, str | None] | None = None,
                  time_limit_s: float = DEFAULT_TIME_LIMIT_S, reference: bool = False) -> AccuracyPlan:
    """Proteus §4 over ``workers`` (worker id -> instance type; see :func:`workers_from_counts`).

    ``variants``: every variant of every model (:func:`profiles_from_rows`); ``demand_qps`` and
    ``slo_ms``: per model (a model with demand needs an SLO and at least one variant);
    ``min_accuracy``: per model, variants below it are never chosen; ``current``: worker id ->
    the variant it hosts now, to prefer among equal optima. ValueError for demand of a model with
    no variant or no SLO, a negative demand, or an SLO that is not positive. ``time_limit_s``: the
    budget of the call; past it the best placement found is returned (``status``
    "time_limit"). ``reference``: solve the MILP as first written
    (:func:`variants.accuracy.milp.lexicographic_counts`, its three solves within the whole
    budget), for tests and benches."""
    min_accuracy = dict(min_accuracy or {})
    current = dict(current or {})
    t0 = time.perf_counter()
    models = {v.model for v in variants}
    for m, q in demand_qps.items():
        if not (math.isfinite(q) and q >= 0):
            raise ValueError(f"demand for {m} must be a finite number >= 0, got {q!r}")
        if m not in models:
            raise ValueError(f"demand for {m}: no variant of it is profiled")
        if m not in slo_ms:
            raise ValueError(f"demand for {m}: no SLO given")
    for m, s in slo_ms.items():
        if not (math.isfinite(s) and s > 0):
            raise ValueError(f"SLO of {m} must be > 0 ms, got {s!r}")
    demand = {m: float(q) for m, q in demand_qps.items()}
    slo = {m: float(s) for m, s in slo_ms.items() if m in demand}
    type_counts: dict[str, int] = {}
    for t in workers.values():
        type_counts[t] = type_counts.get(t, 0) + 1
    options = _options(type_counts, variants, slo, min_accuracy)
    placeable = {(o.itype, o.variant) for o in options}
    current_counts: dict[tuple[str, str | None], int] = {}
    for w, t in workers.items():
        cur = current.get(w)
        key = (t, cur if (t, cur) in placeable else None) if cur is not None else (t, None)
        if cur is not None and key[1] is None:
            continue                                  # its variant cannot stay: it swaps whatever happens
        current_counts[key] = current_counts.get(key, 0) + 1
    gap = 0.0
    if options and any(q > 0 for q in demand.values()):
        hosted = {(t, v) for (t, v) in current_counts if v is not None}
        kept = _undominated(options, demand, hosted)
        if reference:
            counts, status, gap = lexicographic_counts(kept, type_counts, demand, current_counts, t0 + time_limit_s)
        else:
            counts, status, gap = plan_counts(kept, type_counts, demand, current_counts,
                                              t0 + time_limit_s * SOLVE_SHARE)
    else:                                             # nothing to serve or nothing to serve it with
        counts = {(t, v): c for (t, v), c in current_counts.items() if v is not None}
        status = "optimal"
    counts = _idle_to_top(options, counts, demand)
    placement = _assign(workers, counts, current)
    rates = _fill(options, counts, demand)
    by_key = {(o.itype, o.variant): o for o in options}
    served = {m: 0.0 for m in demand}
    acc_sum = {m: 0.0 for m in demand}
    for key, q in rates.items():
        served[by_key[key].model] += q
        acc_sum[by_key[key].model] += q * by_key[key].accuracy
    routing: dict[str, dict[str, float]] = {m: {} for m in demand}
    for w in sorted(placement):
        v = placement[w]
        key = (workers[w], v)
        if v is None or rates.get(key, 0.0) <= 0.0:
            continue
        model = by_key[key].model
        routing[model][w] = rates[key] / counts[key] / served[model]
    accuracy = {m: (acc_sum[m] / served[m] if served[m] > 0 else None) for m in demand}
    total = sum(served.values())
    feasible = all(served[m] >= demand[m] * (1.0 - FEASIBLE_TOL) - FEASIBLE_TOL for m in demand)
    swaps = sum(1 for w in workers if placement.get(w) != current.get(w))
    return AccuracyPlan(
        placement={w: placement.get(w) for w in sorted(workers)}, worker_types=dict(sorted(workers.items())),
        routing=routing, served_qps=served, demand_qps=demand, accuracy=accuracy,
        effective_accuracy=(sum(acc_sum.values()) / total if total > 0 else None), feasible=feasible,
        swaps=swaps, solve_ms=(time.perf_counter() - t0) * 1000.0, status=status,
        batch={f"{o.variant}@{o.itype}": o.batch for o in options if counts.get((o.itype, o.variant), 0) > 0},
        gap=gap)
