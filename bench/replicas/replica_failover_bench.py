"""Kill -9 of the lease holder under steady load at seeded kill points (issue #27 goal).

The scenario of ``costscale demo --replicas`` (``daemon.demos.replicas.run_point``): two (or
``--replicas``) real ``costscale run`` processes of one cluster (the workers apart, shared) against one moto
server (EC2 and DynamoDB), nginx ``grpc_pass`` in front (gRPC's health-checked round_robin without
nginx), rm2 Poisson load from a client that retries on UNAVAILABLE. At each kill point the lease
holder is SIGKILLed, after a seeded offset into the load and at a seeded moment relative to its
fleet loop (``daemon.demos.kill_point.seeded_points``): ``tick``, a seeded delay after the holder's
fleet tick line; ``launch``, a seeded delay after one instance of the pinned pool is terminated in
EC2, so that the kill lands before, during or after the holder's replacement launch. Processes are
reused: moto, the balancer and the surviving replicas stay; a fresh replica (new state store and id)
takes the dead one's port before the next point (``ReplicaDemoCluster.respawn``).

Per point: failed % (final answers: what a retrying client lost), the failed attempts (what a client
without retries would have seen; channelz), the share of those the retries recovered, the queries
sent from the kill until the fleet resumed and how many failed, the lease taken and the fleet's first
tick after the kill, the peak $/hr before/during/after against the budget, orphans, duplicates.
Goal: <= 1 % of queries fail during the handover and retrying clients lose none; the fleet acts
again within the lease TTL + 5 s; 0 orphans, 0 duplicates, budget held, at 30 seeded kill points.

Run: ``.venv/bin/python bench/replicas/replica_failover_bench.py [--points 30] [--seed 27] [--qps 8]
[--replicas 2] [--round-robin] [--json out.json]`` (a progress line per point, then the section;
``--write`` also writes the BENCHMARKS.md section "replicas-failover").
"""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench._report import machine, write_section  # noqa: E402
from daemon.demos.kill_point import KillPoint, PointResult, seeded_points  # noqa: E402
from daemon.demos.replicas import MAX_REPLICAS, MIN_REPLICAS, ReplicaDemoCluster, demo_spec, run_point  # noqa: E402

#: seconds into the load at which a point's kill (or its lost instance) comes, drawn uniformly
OFFSETS_S = (2.0, 6.0)
#: load kept after the pool settled at each point
POST_S = 1.0


def progress_line(k: int, n: int, r: PointResult) -> str:
    share = "-" if r.recovered_share is None else f"{100 * r.recovered_share:.0f}%"
    resumed = "never" if r.resumed_s is None else f"{r.resumed_s:.2f}s"
    return (f"[{k}/{n}] {r.point.moment:6s} offset {r.point.offset_s:4.1f}s delay {r.point.delay_s:4.2f}s "
            f"kill {r.killed}: {r.sent} sent, failed {r.failed_pct:.2f}% ({sum(r.failed.values())}), "
            f"failed attempts {r.failed_attempts} (recovered {share}), handover {r.handover_failed}/{r.handover_sent}, "
            f"resumed {resumed} (<= {r.ttl_s + 5:g}s: {'yes' if r.resumed_in_time else 'NO'}), orphans "
            f"{len(r.orphans)}, duplicates {r.duplicates}, budget {'held' if r.budget_held else 'OVER'} "
            f"(peak {max(r.peak_before, r.peak_during, r.peak_after):.3f}) -> {'ok' if r.passed else 'FAILED'}"
            + (f" [{'; '.join(r.notes)}]" if r.notes else ""))


async def run_points(n: int, seed: int, qps: float, replicas: int, use_nginx: bool | None,
                     root: Path, endpoint: str, ami: str) -> tuple[list[PointResult], str, float]:
    spec = demo_spec(endpoint, ami)
    points = seeded_points(n, seed, spec.fleet_s, OFFSETS_S)
    c = ReplicaDemoCluster(root, spec, replicas, use_nginx)
    out: list[PointResult] = []
    t0 = time.monotonic()
    try:
        await c.start()
        print(f"{replicas} replicas serving; balancer {c.balancer_name}; {n} kill points (seed {seed})", flush=True)
        for k, p in enumerate(points, 1):
            r = await run_point(c, p, qps=qps, seed=seed * 1000 + k, post_s=POST_S)
            out.append(r)
            print(progress_line(k, n, r), flush=True)
            dead = next(x for x in c.replicas if x.name == r.killed)
            if k < n:
                await c.respawn(dead)
    finally:
        await asyncio.to_thread(c.close)
    return out, c.balancer_name, time.monotonic() - t0


def unavailable_attempts(r: PointResult) -> int:
    """The attempts of a point that failed for want of a replica: every failed attempt but the
    queries the SLO policy refused (DEADLINE_EXCEEDED, each one attempt, never retried)."""
    return max(0, r.failed_attempts - r.failed.get("DEADLINE_EXCEEDED", 0))


def summarize(rs: list[PointResult]) -> dict[str, Any]:
    sent = sum(r.sent for r in rs)
    lost = sum(sum(r.failed.values()) for r in rs)
    fa = sum(r.failed_attempts for r in rs)
    codes: dict[str, int] = {}
    for r in rs:
        for c, n in r.failed.items():
            codes[c] = codes.get(c, 0) + n
    ua = [100 * unavailable_attempts(r) / r.handover_sent for r in rs if r.handover_sent]
    hs, hf = sum(r.handover_sent for r in rs), sum(r.handover_failed for r in rs)
    resumed = [r.resumed_s for r in rs if r.resumed_s is not None]
    took = [r.lease_taken_s for r in rs if r.lease_taken_s is not None]
    return {
        "points": len(rs), "passed": sum(r.passed for r in rs), "sent": sent, "lost_by_retrying_clients": lost,
        "failed_by_code": dict(sorted(codes.items())),
        "unavailable_attempts_pct_median": round(statistics.median(ua), 3) if ua else None,
        "points_unavailable_within_1pct": sum(1 for x in ua if x <= 1.0),
        "failed_attempts": fa, "failed_attempts_pct_of_handover": round(100 * fa / hs, 3) if hs else 0.0,
        "max_point_failed_attempts_pct_of_handover": round(max((100 * r.failed_attempts / r.handover_sent
                                                              for r in rs if r.handover_sent), default=0.0), 3),
        "recovered_share": round((fa - lost) / fa, 4) if fa else None,
        "handover_sent": hs, "handover_failed": hf,
        "resumed_median_s": round(statistics.median(resumed), 2) if resumed else None,
        "resumed_max_s": round(max(resumed), 2) if resumed else None,
        "lease_taken_median_s": round(statistics.median(took), 2) if took else None,
        "resumed_in_time": sum(r.resumed_in_time for r in rs), "orphans": sum(len(r.orphans) for r in rs),
        "duplicates": sum(r.duplicates for r in rs), "budget_held": sum(r.budget_held for r in rs),
        "peak_cost": round(max(max(r.peak_before, r.peak_during, r.peak_after) for r in rs), 4),
        "by_moment": {m: sum(1 for r in rs if r.point.moment == m) for m in ("tick", "launch")},
    }


def section(rs: list[PointResult], s: dict[str, Any], cmd: str, balancer: str, wall: float, qps: float) -> str:
    r0 = rs[0]
    rows = ["| # | moment | offset s | delay s | sent | failed (final) | failed attempts | recovered | handover failed / sent "
            "| lease taken s | fleet acted s | peak $/hr before / during / after | orphans | duplicates | ok |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for k, r in enumerate(rs, 1):
        share = "-" if r.recovered_share is None else f"{100 * r.recovered_share:.0f} %"
        rows.append(f"| {k} | {r.point.moment} | {r.point.offset_s:g} | {r.point.delay_s:g} | {r.sent} | "
                    f"{sum(r.failed.values())} ({r.failed_pct:.2f} %) | {r.failed_attempts} | {share} | "
                    f"{r.handover_failed} / {r.handover_sent} | {r.lease_taken_s if r.lease_taken_s is not None else '-'} | "
                    f"{r.resumed_s if r.resumed_s is not None else 'never'} | {r.peak_before:.3f} / {r.peak_during:.3f} / "
                    f"{r.peak_after:.3f} | {len(r.orphans)} | {r.duplicates} | {'yes' if r.passed else 'NO'} |")
    share = "-" if s["recovered_share"] is None else f"{100 * s['recovered_share']:.0f} %"
    n = s["points"]
    return "\n".join([
        "## replicas-failover", "",
        f"Machine: {machine()}. Command: `{cmd}` ({wall:.0f} s wall). The scenario of `costscale demo --replicas` "
        f"(`daemon.demos.replicas.run_point`): real `costscale run "
        f"` replicas of one cluster, the workers apart (`daemon.local.fleet`) and shared by the published owners (`lease.replicas: true`, `lease.ttl_s: {r0.ttl_s:g}`, fleet tick "
        f"2 s, pinned 2 x r5n.large, budget {r0.budget:g} $/hr) on one moto server, {balancer} in front; Poisson "
        f"{qps:g} q/s of rm2 (batch 1-49) from a client retrying UNAVAILABLE (gRPC retry policy, up to 5 attempts; "
        "retries counted from channelz). At each seeded kill point the lease holder is SIGKILLed: `tick` = a seeded "
        "delay after its fleet tick, `launch` = a seeded delay after one pool instance was terminated in EC2 (the "
        "kill before, during or after the replacement launch). Processes reused: a fresh replica takes the dead "
        "one's port before the next point. *failed (final)*: the queries that ended with an error after the client's "
        "retries (UNAVAILABLE: no replica took them; DEADLINE_EXCEEDED: `on_deadline: drop` refused them for their "
        "SLO); *failed attempts*: what a client without retries would have seen (channelz); *handover*: queries sent "
        "from the kill until the new holder's first "
        "fleet tick. Orphans: live instances the new holder's state store does not hold; duplicates: live instances "
        "beyond the pinned pool, after the pool settled.", "",
        *rows, "",
        f"Over the {n} points ({s['by_moment']['tick']} tick, {s['by_moment']['launch']} launch): {s['passed']}/{n} "
        f"passed; {s['sent']} queries, {s['lost_by_retrying_clients']} ended with an error after the client's retries ("
        + (", ".join(f"{c} {n}" for c, n in s["failed_by_code"].items()) or "none") + "); "
        f"{s['failed_attempts']} failed attempts = {s['failed_attempts_pct_of_handover']:.2f} % of the "
        f"{s['handover_sent']} queries sent during the handovers (worst point "
        f"{s['max_point_failed_attempts_pct_of_handover']:.2f} %), {share} recovered by the retries; lease taken "
        f"{s['lease_taken_median_s']} s after the kill (median), the fleet acted again after {s['resumed_median_s']} s "
        f"(median), {s['resumed_max_s']} s (max; {s['resumed_in_time']}/{n} within TTL + 5 s = {r0.ttl_s + 5:g} s); "
        f"orphans {s['orphans']}, duplicates {s['duplicates']}, budget held at {s['budget_held']}/{n} points (peak "
        f"{s['peak_cost']:.3f} of {r0.budget:g} $/hr). Attempts that failed for want of a replica (failed attempts "
        f"less the SLO refusals) per point, as a share of the handover's queries: median "
        f"{s['unavailable_attempts_pct_median']} %, within 1 % at {s['points_unavailable_within_1pct']}/{n} points.",
        "",
        "The workers run apart from the replicas (`daemon.local.fleet`, standing for workers on their instances) and "
        "the pool has one owner (2 base-type workers): the standby forwards to the holder and holds its queries from "
        "the kill until the holder's workers move, then serves them best effort. The replicas share this host, so "
        "the holder's death is proven at once (its pid exited, its port refusing: a failed forwarding hop or the "
        "standby's lease retry), and the standby takes the lease and the workers then; across hosts they wait for "
        "the heartbeat and the lease to expire (about 6 s). The SLO refusals come from the backlog a failover "
        "leaves, with half the pool gone at the `launch` points.",
    ])


def point_of(d: dict[str, Any]) -> PointResult:
    """A point as ``--json`` saved it (``PointResult.to_json``), read back."""
    fields = {f.name for f in dataclasses.fields(PointResult)}
    kw = {k: v for k, v in d.items() if k in fields}
    kw["point"] = KillPoint(**d["point"])
    return PointResult(**kw)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=30, help="seeded kill points (default 30)")
    ap.add_argument("--seed", type=int, default=27)
    ap.add_argument("--qps", type=float, default=8.0, help="the client's Poisson rate (default 8)")
    ap.add_argument("--replicas", type=int, default=2, help=f"{MIN_REPLICAS}-{MAX_REPLICAS} (default 2)")
    ap.add_argument("--round-robin", action="store_true", help="gRPC round_robin even where nginx is installed")
    ap.add_argument("--json", metavar="PATH", help="also write every point's figures as JSON")
    ap.add_argument("--write", action="store_true", help="write the BENCHMARKS.md section replicas-failover")
    ap.add_argument("--from-json", metavar="PATH", help="print (and --write) the section of a run saved with --json, "
                                                           "without running again")
    args = ap.parse_args()
    if args.from_json:
        saved = json.loads(Path(args.from_json).read_text())
        rs = [point_of(p) for p in saved["points"]]
        md = section(rs, summarize(rs), saved["command"], saved["balancer"], saved["wall_s"], saved["qps"])
        print(md)
        if args.write:
            write_section("replicas-failover", md)
        return
    problem = ("--points must be >= 1" if args.points < 1 else "--qps must be > 0" if not args.qps > 0
               else f"--replicas must be {MIN_REPLICAS}-{MAX_REPLICAS}"
               if not MIN_REPLICAS <= args.replicas <= MAX_REPLICAS else "")
    if problem:
        print(f"replica_failover_bench: {problem}", file=sys.stderr)
        raise SystemExit(2)
    from daemon.local.embedded import EmbeddedCloud

    logging.getLogger("werkzeug").setLevel(logging.ERROR)   # moto server's request log
    cloud = EmbeddedCloud("bench")
    try:
        rs, balancer, wall = asyncio.run(run_points(args.points, args.seed, args.qps, args.replicas,
                                                    False if args.round_robin else None, cloud.state_dir,
                                                    cloud.endpoint, cloud.ami))
    finally:
        cloud.stop()
    s = summarize(rs)
    cmd = ".venv/bin/python bench/replicas/replica_failover_bench.py" + "".join(
        f" {flag} {v}" for flag, v, d in (("--points", args.points, 30), ("--seed", args.seed, 27),
                                          ("--qps", f"{args.qps:g}", "8"), ("--replicas", args.replicas, 2)) if v != d) \
        + (" --round-robin" if args.round_robin else "")
    md = section(rs, s, cmd, balancer, wall, args.qps)
    print()
    print(md)
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": s, "points": [r.to_json() for r in rs], "command": cmd,
                                               "balancer": balancer, "wall_s": wall, "qps": args.qps}, indent=1))
    if args.write:
        write_section("replicas-failover", md)


if __name__ == "__main__":
    main()
