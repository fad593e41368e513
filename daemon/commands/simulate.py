"""``costscale simulate`` and ``costscale capacity``: the dispatcher policies on a virtual clock.

- ``simulate CONFIG --pool TYPE=N,... [--policy P] [--rate QPS | --trace CSV] [--duration S]``:
  one run; prints served, p50/p99, SLO violation ratio, throughput, $/hr and utilization.
- ``capacity CONFIG --pool ... [--policy P]``: the allowable throughput (Kairos §7): the highest
  Poisson rate with p99 <= QoS, beside the paper's oracle (Kairos §7 ORCL, ``sim.paper_oracle``:
  ``oracle_qps``) and the fluid LP bound (``sim.oracle``: ``fluid_bound_qps``) for the same pool
  and the same queries.
Both take the override flags of :mod:`daemon.commands.common.overrides`; ``--json`` prints one object.
"""
from __future__ import annotations

from config.numbers import finite_float

import argparse
import json
import math

import numpy as np

from daemon.commands.common.overrides import Resolved, add_override_flags, parse_pool, resolve
from scaler.planner.pools import pool_cost
from config.errors import UsageError
from sim.capacity import pool_capacity
from sim.engine import simulate
from sim.metrics import summarize
from sim.oracle import oracle_capacity
from sim.paper_oracle import paper_oracle
from sim.policies import SIM_POLICY_NAMES, policy_factory
from sim.workload import load_trace_csv, make_workload, unit_poisson_workload


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", metavar="CONFIG")
    p.add_argument("--pool", metavar="TYPE=N,...", required=True, help="the pool, e.g. g4dn.xlarge=2,r5n.large=3")
    p.add_argument("--policy", choices=SIM_POLICY_NAMES, help="query distribution (default: the config's)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--service", choices=("mean", "sampled"), default="mean",
                   help="service times: profile mean, or lognormal fitted to p50/p99 (default mean)")
    p.add_argument("--noise", type=finite_float, default=0.0, help="relative Gaussian noise on service times (default 0)")
    add_override_flags(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")


def register(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("simulate", help="simulate a pool and a policy on a workload")
    _common(s)
    src = s.add_mutually_exclusive_group()
    src.add_argument("--rate", type=finite_float, metavar="QPS", help="Poisson arrival rate (default: workload.expected_qps)")
    src.add_argument("--trace", metavar="CSV", help="replay a trace (columns timestamp, model, batch_size)")
    s.add_argument("--duration", type=finite_float, metavar="S", help="simulated seconds (default 60; a trace is cut here)")
    s.add_argument("--cv2", type=finite_float, default=1.0, help="squared CV of inter-arrivals (1 = Poisson)")
    s.set_defaults(func=run_simulate)

    c = sub.add_parser("capacity", help="allowable throughput of a pool (highest rate with p99 <= QoS)")
    _common(c)
    c.add_argument("--queries", type=int, default=4000, help="queries per tried rate (default 4000)")
    c.add_argument("--precision", type=finite_float, default=0.02, help="relative precision of the search (default 0.02)")
    c.set_defaults(func=run_capacity)


def _checks(args: argparse.Namespace, cmd: str) -> None:
    if not (math.isfinite(args.noise) and args.noise >= 0):
        raise UsageError(f"{cmd}: --noise must be >= 0")


#: a run is refused (one line, exit 2) when it would draw more queries than this: memory grows
#: with the query count (a few hundred bytes each), and 1e9 q/s for 1 s once took 24 GB
MAX_QUERIES = 5_000_000


def _num(x: float) -> float | None:
    return round(float(x), 6) if math.isfinite(x) else None


def _policy(args: argparse.Namespace, r: Resolved, pool: dict[str, int]):  # -> Callable[[], Policy]
    name = args.policy or r.cfg.dispatcher.policy
    return name, policy_factory(name, r.profiles, r.profile_model, pool)


def run_simulate(args: argparse.Namespace) -> int:
    cmd = "simulate"
    _checks(args, cmd)
    if args.rate is not None and not (math.isfinite(args.rate) and args.rate > 0):
        raise UsageError(f"{cmd}: --rate must be > 0")
    if args.duration is not None and not (math.isfinite(args.duration) and args.duration > 0):
        raise UsageError(f"{cmd}: --duration must be > 0")
    if not (math.isfinite(args.cv2) and args.cv2 > 0):
        raise UsageError(f"{cmd}: --cv2 must be > 0")
    r = resolve(args, cmd, one_model=True)
    pool = parse_pool(args.pool, r, cmd)
    name, make = _policy(args, r, pool)
    if args.trace:
        try:
            wl = load_trace_csv(args.trace, model=r.model)
        except ValueError as exc:
            raise UsageError(f"{cmd}: --trace: {exc}") from None
        arrivals, batches = wl.arrivals, np.minimum(wl.batches, r.max_batch)
        if args.duration is not None:
            keep = arrivals < args.duration
            arrivals, batches = arrivals[keep], batches[keep]
        if arrivals.size == 0:
            raise UsageError(f"{cmd}: --trace: no queries within --duration")
        source = f"trace {args.trace}"
    else:
        rate = args.rate if args.rate is not None else r.cfg.workload.expected_qps
        if not rate > 0:
            raise UsageError(f"{cmd}: give --rate QPS or --trace CSV (the config's workload.expected_qps is 0)")
        dur = args.duration if args.duration is not None else 60.0
        if rate * dur > MAX_QUERIES:
            raise UsageError(f"{cmd}: --rate {rate:g} for {dur:g} s is about {rate * dur:.3g} queries, over the "
                             f"limit of {MAX_QUERIES:,}; lower --rate or --duration")
        wl = make_workload(rate, dur, r.batch_dist, seed=args.seed, cv2=args.cv2, max_batch=r.max_batch)
        if len(wl) == 0:
            raise UsageError(f"{cmd}: no query arrives within --duration {dur:g} s at --rate {rate:g}")
        arrivals, batches = wl.arrivals, wl.batches
        source = f"Poisson {rate:g} q/s" if args.cv2 == 1.0 else f"Gamma {rate:g} q/s CV2 {args.cv2:g}"
    res = simulate(pool, r.profile_model, r.profiles, make(), arrivals, batches, r.qos_ms,
                   service=args.service, noise=args.noise, seed=args.seed, prices=r.prices)
    m = summarize(res)
    if args.json:
        print(json.dumps({
            "model": r.model, "policy": name, "pool": pool, "qos_ms": r.qos_ms,
            "queries": m.queries, "served": m.served, "dropped": m.dropped,
            "p50_ms": _num(m.p50_ms), "p99_ms": _num(m.p99_ms), "violation_ratio": _num(m.violation_ratio),
            "throughput_qps": _num(m.throughput_qps), "goodput_qps": _num(m.goodput_qps),
            "duration_s": _num(m.duration_s), "cost_per_hour": _num(m.cost_per_hour), "cost_usd": _num(m.cost_usd),
            "utilization": {w: round(u, 6) for w, u in m.utilization.items()},
        }))
        return 0
    p = lambda x: "inf" if not math.isfinite(x) else f"{x:.3f}"  # noqa: E731
    print(f"model {r.model} (QoS {r.qos_ms:g} ms), policy {name}, pool "
          f"{', '.join(f'{t} x{c}' for t, c in pool.items())} ({m.cost_per_hour:.4f} $/hr), {source}")
    print(f"queries {m.queries}, served {m.served}, dropped {m.dropped}; p50 {p(m.p50_ms)} ms, p99 {p(m.p99_ms)} ms; "
          f"violations {m.violation_ratio:.2%}")
    print(f"throughput {m.throughput_qps:.1f} q/s (within QoS {m.goodput_qps:.1f}) over {m.duration_s:.2f} s; "
          f"${m.cost_usd:.5f} spent")
    for w, u in m.utilization.items():
        print(f"  {w}: utilization {u:.1%}")
    return 0


def run_capacity(args: argparse.Namespace) -> int:
    cmd = "capacity"
    _checks(args, cmd)
    if args.queries < 100:
        raise UsageError(f"{cmd}: --queries must be >= 100")
    if args.queries > MAX_QUERIES:
        raise UsageError(f"{cmd}: --queries must be at most {MAX_QUERIES:,}")
    if not (math.isfinite(args.precision) and 0 < args.precision < 1):
        raise UsageError(f"{cmd}: --precision must be in (0, 1)")
    r = resolve(args, cmd, one_model=True)
    pool = parse_pool(args.pool, r, cmd)
    name, make = _policy(args, r, pool)
    wl = unit_poisson_workload(args.queries, r.batch_dist, seed=args.seed, max_batch=r.max_batch)
    cap = pool_capacity(pool, r.profile_model, r.profiles, r.qos_ms, make, workload=wl, seed=args.seed,
                        service=args.service, noise=args.noise, precision=args.precision)
    fluid = oracle_capacity(pool, r.profile_model, r.profiles, r.qos_ms, wl.batches, service=args.service,
                            noise=args.noise)
    orc = paper_oracle(pool, r.profile_model, r.profiles, r.qos_ms, wl.batches)
    cost = pool_cost(pool, r.prices)
    if args.json:
        print(json.dumps({
            "model": r.model, "policy": name, "pool": pool, "qos_ms": r.qos_ms,
            "allowable_qps": _num(cap.allowable_qps), "p99_ms": _num(cap.p99_ms), "cost_per_hour": _num(cost),
            "oracle_qps": _num(orc.allowable_qps), "fluid_bound_qps": _num(fluid.allowable_qps),
            "evaluations": len(cap.evaluations),
            "precision": args.precision, "queries": args.queries,
        }))
        return 0
    print(f"model {r.model} (QoS {r.qos_ms:g} ms), policy {name}, pool "
          f"{', '.join(f'{t} x{c}' for t, c in pool.items())} ({cost:.4f} $/hr)")
    p99 = "n/a" if not math.isfinite(cap.p99_ms) else f"{cap.p99_ms:.3f} ms"
    print(f"allowable throughput {cap.allowable_qps:.1f} q/s (p99 {p99}; {len(cap.evaluations)} runs of "
          f"{args.queries} queries, precision {args.precision:.0%}); paper oracle (Kairos §7) "
          f"{orc.allowable_qps:.1f} q/s, fluid LP bound {fluid.allowable_qps:.1f} q/s")
    return 0
