"""What sharding the workers over dispatcher replicas costs in matching quality (issue #27,
deliverable 2).

With several dispatcher replicas each replica matches (Kairos §5.1) only the workers it owns
(``scaler.replicas.owner_assignment.assign``: each type split evenly, the totals too), and the balancer in
front of them sends each replica every S-th query (round robin, as gRPC's round_robin or an NLB
would). Each matching round sees a smaller pool, so fewer (query, worker) pairs to choose from.

Measured: the allowable throughput (Kairos §7 "Metrics": the highest Poisson rate at which the p99
latency of *all* queries stays within the QoS; ``sim.capacity.allowable_throughput``) of the
Kairos pool at 2.5 and 10 $/hr for each model (the pick confirmed by Kairos+ with the simulator, as
``bench/planner/kairos_repro.py``'s "ours": ``scaler.planner.confirm.confirm_pick``), served by ``kairos-strict``
(the default policy), with 1, 2 and 4 shards. Each shard is one ``sim.engine.simulate`` run over
its own workers and its own queries; the latencies are pooled for the p99. Common random numbers:
one seeded unit-rate workload (DeepRecSys batch sizes), scaled for each rate tried, the same for
every shard count. Goal: 2 shards >= 0.97x one shard.

The owning-replica rows (``bench/replicas/_shard_owning.py``) are the replicas as the daemon runs them: of
``R`` = 2 or 4 live replicas only ``k = owner_count(R, base)`` own workers
(``scaler.replicas.owning_replicas``: each keeps >= 2 base-type workers), the others forward their queries
to every owner in turn (rule 3), so ``k`` shards match, each owner the queries of its own replica
and its turns of the forwarders' (``arrival_shares``: ``1 / k`` each). The forwarding hop itself is not modelled (no measured
replica-to-replica hop in BENCHMARKS.md); the rows say which share of the queries would pay it.

Run: ``.venv/bin/python bench/replicas/shard_bench.py [--models rm2,dien] [--budgets 2.5,10] [--queries 4000]
[--precision 0.01] [--quick]`` (``--quick``: 1000 queries a rate, 3% precision)
(prints the table; ``--write`` also writes the BENCHMARKS.md section "shard-matching").
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Mapping, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402

from bench._report import machine, write_section  # noqa: E402
from bench.replicas._shard_owning import REPLICAS, canonical, owner_dealing, owning_table, replica_names, round_robin  # noqa: E402
from config.profiles import ProfileTable, load_profiles_csv  # noqa: E402
from dispatcher.policy import DISPATCH_XI  # noqa: E402
from scaler.planner.batch_mix import mix_from_batches  # noqa: E402
from scaler.planner.confirm import confirm_pick  # noqa: E402
from scaler.planner.plan_inputs import PlanInputs  # noqa: E402
from scaler.replicas.owner_assignment import assign  # noqa: E402
from sim.capacity import allowable_throughput  # noqa: E402
from sim.engine import simulate, worker_ids_for  # noqa: E402
from sim.metrics import nearest_rank  # noqa: E402
from sim.oracle import oracle_capacity  # noqa: E402
from sim.pick_eval import capacity_evaluator  # noqa: E402
from sim.policies import policy_factory  # noqa: E402
from sim.workload import Workload, unit_poisson_workload  # noqa: E402

#: Kairos §7: the models and their QoS (ms), the four instance types of Table 3 at catalog prices
MODELS = {"ncf": 5.0, "rm2": 350.0, "wnd": 25.0, "mtwnd": 25.0, "dien": 35.0}
TYPES = ("g4dn.xlarge", "c5n.2xlarge", "r5n.large", "t3.xlarge")
BUDGETS = (2.5, 10.0)   # Kairos §8.1's budget, and §8.6 Fig. 15a's 4x
POLICY = "kairos-strict"
SHARDS = (1, 2, 4)
GOAL = 0.97          # 2 shards / 1 shard

Pool = dict[str, int]


def pool_text(pool: Mapping[str, int]) -> str:
    return " ".join(f"{n}{t.split('.')[0]}" for t, n in sorted(pool.items()) if n) or "(none)"


def kairos_pool(model: str, prof: ProfileTable, budget: float) -> tuple[Pool, str, PlanInputs]:
    """The Kairos pool at ``budget``, as ``bench/planner/kairos_repro.py``'s "ours" (the pick confirmed by
    Kairos+ with the simulator), and its base type."""
    from config.catalog import load_catalog

    cat = load_catalog()
    prices = {t: cat[t].price_per_hour for t in TYPES}
    qos = MODELS[model]
    mix = mix_from_batches(unit_poisson_workload(20_000, "deeprecsys", seed=2).batches)
    inputs = PlanInputs(model=model, profiles={t: prof.get(model, t) for t in TYPES}, mix=mix, qos_ms=qos,
                        budget_per_hour=budget, prices=prices, xi=DISPATCH_XI)
    from scaler.planner.choose import choose_pool

    base = choose_pool(inputs).base_type
    conf = confirm_pick(inputs, capacity_evaluator(model, prof, qos, mix, policy=POLICY, base_type=base))
    return {t: int(n) for t, n in conf.plan.chosen.items() if n}, conf.plan.base_type, inputs


def base_multiple_pools(inputs: PlanInputs, pool: Mapping[str, int], base: str, shards: int) -> list[Pool]:
    """What a planner that knows the shard count could hold instead of ``pool`` when its base
    count is not a multiple of ``shards``: the pools with the best Kairos §5.2 upper bound whose
    base count is the multiple of ``shards`` just below and just above (none below when that is
    0); ``[pool]`` when its base count already is a multiple."""
    from scaler.planner.choose import rank_inputs

    have = pool.get(base, 0)
    if have % shards == 0:
        return [dict(pool)]
    _, ranking = rank_inputs(inputs)
    col = ranking.types.index(base)
    out = []
    for want in (have - have % shards, have - have % shards + shards):
        hit = np.flatnonzero(ranking.counts[:, col] == want) if want > 0 else np.array([], dtype=int)
        if hit.size:
            out.append({t: n for t, n in ranking.pool(int(hit[0])).items() if n})
    return out


def shard_pools(pool: Mapping[str, int], shards: int, names: Sequence[str] | None = None) -> list[Pool]:
    """Each shard's workers, as ``scaler.replicas.owner_assignment.assign`` deals them (no owners yet) over
    ``names`` (default ``s0 .. s{shards-1}``), in the order of ``names``."""
    names = [f"s{k}" for k in range(shards)] if names is None else list(names)
    owner = assign(worker_ids_for(pool), names, {})
    out: list[Pool] = [{} for _ in names]
    for w, t in worker_ids_for(pool):
        k = names.index(owner[w])
        out[k][t] = out[k].get(t, 0) + 1
    return out


Dealing = tuple[int, tuple[tuple[int, ...], ...]]   # (period, each shard's residues of the query index)


def sharded_p99(pools: Sequence[Pool], model: str, prof: ProfileTable, qos: float, base: str,
                arrivals: np.ndarray, batches: np.ndarray, dealing: Dealing | None = None) -> float:
    """p99 (ms) of every query when shard k gets the queries whose index mod the period is in its
    residues (default round robin: queries k, k + S, ...) and matches them over its own pool; a
    shard without workers misses all of its queries."""
    period, residues = round_robin(len(pools)) if dealing is None else dealing
    lat = []
    for k, pool in enumerate(pools):
        idx = np.flatnonzero(np.isin(np.arange(len(arrivals)) % period, residues[k]))
        if not pool:
            lat.append(np.full(idx.size, np.inf))
            continue
        policy = policy_factory(POLICY, prof, model, pool, xi=DISPATCH_XI, base_type=base)()
        res = simulate(pool, model, prof, policy, arrivals[idx], batches[idx], qos, seed=1)
        lat.append(res.latency_ms)
    return nearest_rank(np.concatenate(lat), 99)


def shard_capacity(pools: Sequence[Pool], model: str, prof: ProfileTable, base: str, wl: Workload,
                   precision: float, start_qps: float, dealing: Dealing | None = None) -> float:
    qos = MODELS[model]
    return allowable_throughput(
        lambda rate: sharded_p99(pools, model, prof, qos, base, wl.arrivals / rate, wl.batches, dealing),
        qos, start_qps, precision=precision).allowable_qps


def owning_rows(pool: Pool, model: str, prof: ProfileTable, base: str, wl: Workload, precision: float,
                start: float, measured: dict) -> dict:
    """For each ``R`` in ``REPLICAS``: the owners' dealing (``bench.replicas._shard_owning.owner_dealing``),
    their pools and allowable throughput; where their shares are uneven, also the throughput with
    the queries spread evenly over the same owners (``even_qps``). ``measured``: capacity by
    (pools, canonical dealing), filled here, so a dealing the shard rows already measured (R = 4,
    k = 2 is 2 shards round robin) is not searched again."""
    def capacity(pools: list[Pool], dealing: Dealing) -> float:
        key = (tuple(tuple(sorted(p.items())) for p in pools), canonical(*dealing))
        if key not in measured:
            measured[key] = shard_capacity(pools, model, prof, base, wl, precision, start, dealing)
        return measured[key]

    out = {}
    for rep in REPLICAS:
        d = owner_dealing(rep, pool.get(base, 0))
        k = len(d.owning.owners)
        pools = shard_pools(pool, k, replica_names(rep)[:k])
        got = {"dealing": d, "pools": pools, "qps": capacity(pools, (d.period, d.residues)), "even_qps": None}
        if len(set(d.shares)) > 1:
            got["even_qps"] = capacity(pools, round_robin(k))
        out[rep] = got
    return out


def run_model(model: str, budget: float, prof: ProfileTable, wl: Workload, precision: float) -> dict:
    t0 = time.perf_counter()
    pool, base, inputs = kairos_pool(model, prof, budget)
    qos = MODELS[model]
    start = oracle_capacity(pool, model, prof, qos, wl.batches, drain_s=qos / 1000).allowable_qps / 2
    row: dict = {"model": model, "budget": budget, "pool": pool, "base": base, "shards": {}}
    measured: dict = {}
    for s in SHARDS:
        pools = shard_pools(pool, s)
        qps = shard_capacity(pools, model, prof, base, wl, precision, start)
        measured[(tuple(tuple(sorted(p.items())) for p in pools), canonical(*round_robin(s)))] = qps
        row["shards"][s] = (qps, pools)
        if s == 1:
            start = qps
    row["owning"] = owning_rows(pool, model, prof, base, wl, precision, start, measured)
    row["planned"] = {}
    for s in SHARDS[1:]:                     # the pool planned for s shards (base count a multiple of s)
        best = None
        for cand in base_multiple_pools(inputs, pool, base, s):
            pools = shard_pools(cand, s)
            qps = row["shards"][s][0] if cand == pool else shard_capacity(pools, model, prof, base, wl, precision, start)
            if best is None or qps > best[0]:
                best = (qps, cand, pools)
        row["planned"][s] = best
    row["wall_s"] = time.perf_counter() - t0
    return row


def table(rows: list[dict]) -> str:
    head = "| model (QoS) | budget $/hr | Kairos pool | " + " | ".join(f"{s} shard{'s' if s > 1 else ''} q/s" for s in SHARDS) \
        + " | " + " | ".join(f"{s} ÷ 1" for s in SHARDS[1:]) + " | shards' pools (2; 4) |"
    lines = [head, "|" + "---|" * (4 + 2 * len(SHARDS) - 1)]
    for r in rows:
        one = r["shards"][1][0]
        q = [r["shards"][s][0] for s in SHARDS]
        ratio = [f"{x / one:.3f}" if one > 0 else "-" for x in q[1:]]
        split = "; ".join(" / ".join(pool_text(p) for p in r["shards"][s][1]) for s in SHARDS[1:])
        lines.append(f"| {r['model']} ({MODELS[r['model']]:g} ms) | {r['budget']:g} | {pool_text(r['pool'])} | "
                     + " | ".join(f"{x:.0f}" for x in q) + " | " + " | ".join(ratio) + f" | {split} |")
    return "\n".join(lines)


def planned_table(rows: list[dict]) -> str:
    lines = ["| model | budget $/hr | 1 shard: Kairos pool, q/s | "
             + " | ".join(f"{s} shards: pool (base count a multiple of {s}), q/s | ÷ 1 shard" for s in SHARDS[1:]) + " |",
             "|" + "---|" * (3 + 2 * len(SHARDS[1:]))]
    for r in rows:
        one = r["shards"][1][0]
        cells = []
        for s in SHARDS[1:]:
            got = r["planned"][s]
            cells.append(f"{pool_text(got[1])}, {got[0]:.0f} | {got[0] / one:.3f}" if got is not None and one > 0
                         else "(none) | -")
        lines.append(f"| {r['model']} | {r['budget']:g} | {pool_text(r['pool'])}, {one:.0f} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def owning_section(rows: list[dict]) -> str:
    """The owning-replica rows and the goal judged on them (what the product does)."""
    def ratios(rep: int, budget: float | None) -> list[tuple[float, int, str]]:
        return [(r["owning"][rep]["qps"] / r["shards"][1][0], len(r["owning"][rep]["dealing"].owning.owners), r["model"])
                for r in rows if r["shards"][1][0] > 0 and (budget is None or r["budget"] == budget)]

    notes = []
    for budget in sorted({r["budget"] for r in rows}):
        for rep in REPLICAS:
            got = ratios(rep, budget)
            if not got:
                continue
            ks = ", ".join(f"{m} {k}" for _, k, m in got)
            sharded = [x for x in got if x[1] > 1]
            notes.append(f"R = {rep} at {budget:g} $/hr (k: {ks}): "
                         + ("k = 1 on every pool, ratio 1: one replica matches everything and the others forward, "
                            "so this shows the design choice, not a matching result" if not sharded else
                            f"worst where k > 1 **{min(sharded)[0]:.3f}** ({min(sharded)[2]}, k = {min(sharded)[1]}; "
                            f"{GOAL:.2f}x {'met' if min(sharded)[0] >= GOAL else 'not met'})"))
    two = ratios(2, 2.5)
    verdict = (f"{min(two)[0]:.3f} ({'met' if min(two)[0] >= GOAL else 'not met'}"
               + (", by k = 1 on every pool" if all(k == 1 for _, k, _ in two) else "") + ")") if two else "(2.5 $/hr not run)"
    return "\n".join([
        "Owning replicas, as the daemon runs them (`scaler.replicas.owning_replicas`): of R live replicas (r0 the lease holder) "
        "only k = owner_count(R, base) = max(1, min(R, base // 2)) own workers, split between them by "
        "`replica_assignment.assign`; the others forward their queries to every owner in turn (rule 3), so owner j "
        "matches the queries of its own replica and its turns of the forwarders' (`arrival_shares`: 1/k each; the balancer deals "
        "round robin over the R replicas). *Forwarded*: the share of the queries that take one more replica-to-replica "
        "hop; that hop is **not modelled** (BENCHMARKS.md has no measured forward hop: \"dispatch\" measures the "
        "dispatcher against a proxy, not a replica forwarding to a replica), so these rows are the matching's cost "
        "only. The last column: the ratio with the queries dealt round robin over the k owners (k shards), where the "
        "owners' dealing differs from it.", "",
        f"Goal (issue #27) judged on these rows, R = 2 at 2.5 $/hr: {verdict}. " + "; ".join(notes) + ".", "",
        owning_table(rows, MODELS, pool_text)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated subset of " + ", ".join(MODELS))
    ap.add_argument("--budgets", default=",".join(f"{b:g}" for b in BUDGETS), help="comma-separated $/hr")
    ap.add_argument("--queries", type=int, default=4000, help="queries per tried rate (all shards together)")
    ap.add_argument("--precision", type=float, default=0.01, help="relative bisection precision")
    ap.add_argument("--quick", action="store_true", help="1000 queries a rate, 3%% precision (a short check)")
    ap.add_argument("--write", action="store_true", help="write the BENCHMARKS.md section shard-matching")
    args = ap.parse_args()
    if args.quick:
        args.queries, args.precision = 1000, 0.03
    models = [m for m in args.models.split(",") if m]
    bad = [m for m in models if m not in MODELS]
    try:
        budgets = [float(b) for b in args.budgets.split(",") if b]
    except ValueError:
        budgets = []
    problem = (f"unknown model {', '.join(bad)} (known: {', '.join(MODELS)})" if bad
               else "--budgets: positive numbers, comma-separated" if not budgets or min(budgets) <= 0
               else "--queries must be >= 100" if args.queries < 100
               else "--precision must be in (0, 1)" if not 0 < args.precision < 1 else "")
    if problem:
        print(f"shard_bench: {problem}", file=sys.stderr)
        raise SystemExit(2)
    prof = load_profiles_csv()
    wl = unit_poisson_workload(args.queries, "deeprecsys", seed=1)
    t0 = time.perf_counter()
    rows = [run_model(m, b, prof, wl, args.precision) for b in budgets for m in models]
    wall = time.perf_counter() - t0
    worst = min(r["shards"][2][0] / r["shards"][1][0] for r in rows if r["shards"][1][0] > 0)
    worst_planned = min(r["planned"][2][0] / r["shards"][1][0] for r in rows
                        if r["shards"][1][0] > 0 and r["planned"][2] is not None)
    cmd = ".venv/bin/python bench/replicas/shard_bench.py" + (f" --models {args.models}" if args.models != ",".join(MODELS) else "") \
        + (f" --budgets {args.budgets}" if budgets != list(BUDGETS) else "") \
        + (" --quick" if args.quick else (f" --queries {args.queries}" if args.queries != 4000 else "")
           + (f" --precision {args.precision:g}" if args.precision != 0.01 else ""))
    md = "\n".join([
        "## shard-matching", "",
        f"Machine: {machine()}. Command: `{cmd}` ({wall:.0f} s wall, one process). Allowable throughput (highest "
        f"Poisson rate with the p99 of all queries <= QoS; {args.queries} queries per rate, common random numbers, "
        f"{args.precision:.1%} bisection precision, DeepRecSys batch sizes, service = profile mean) of the Kairos pool "
        f"at each budget ({POLICY}, the pick confirmed as in kairos-repro's *ours*), its workers split over S "
        "dispatcher shards by `scaler.replicas.owner_assignment.assign` (each type and the totals even), the queries "
        "dealt round robin; each shard matches its own queries over its own workers. "
        f"Goal (issue #27): 2 shards >= {GOAL:.2f}x one shard; worst measured: **{worst:.3f}** "
        f"({'met' if worst >= GOAL else 'not met'}); with the pool planned for 2 shards (below): "
        f"**{worst_planned:.3f}**.", "", table(rows), "",
        "The same, with the pool planned for the shard count: where the Kairos pool's base count is not a multiple "
        "of S, the best-bounded pools (Kairos §5.2 upper bound) with the multiple of S just below and above it, the "
        "better one as measured (the same queries and search), against one shard on the Kairos pool.", "",
        planned_table(rows), "", owning_section(rows)])
    print(md)
    print("wall s: " + ", ".join(f"{r['model']}@{r['budget']:g} {r['wall_s']:.0f}" for r in rows))
    if args.write:
        write_section("shard-matching", md)


if __name__ == "__main__":
    main()
