"""``costscale demo --replicas N`` (issue #27 deliverable 7): N dispatcher replicas on this machine,
the real ``costscale run`` processes (:mod:`daemon.demos.replica_cluster`), one cluster lease in the
embedded moto's DynamoDB, the workers apart from every replica (``daemon.local.fleet``, registering
through the balancer; the replicas share them by the published owners), a balancer in front, a
steady load, and the lease holder killed with SIGKILL halfway.

* **Balancer**: the distribution's nginx with ``grpc_pass`` to an upstream of the replicas when
  ``/usr/sbin/nginx`` exists, else gRPC's own client-side ``round_robin`` over their addresses with
  health checks (``healthCheckConfig``). The demo says which.
* **Client**: Poisson queries through the balancer from a channel whose service config retries on
  UNAVAILABLE (:mod:`daemon.demos.failover_load`); its retries counted from channelz.
* **Kill point** (:class:`daemon.demos.kill_point.KillPoint`): after ``offset_s`` of load, either
  ``delay_s`` after the holder's next fleet tick (``tick``), or ``delay_s`` after one instance of the
  pool was lost (terminated in EC2) so that the holder's replacement launch is due or in flight
  (``launch``).
* **Figures** (:class:`daemon.demos.kill_point.PointResult`, which also says when they pass):
  queries sent / answered / failed (overall and in the handover, from the kill until the fleet
  resumed); the share of failed attempts the client's retries recovered; the time from the kill
  until a standby took the lease and until its fleet loop acted (its ``fleet (lease taken)`` tick
  line, read from its JSON log); the pool's $/hr sampled from EC2 against the budget before, during
  and after the handover; orphans (live instances the new holder's state store does not hold) and
  duplicates (live instances beyond the pinned pool).

This module runs the cluster (:class:`ReplicaDemoCluster`) and a kill (:func:`run_point`), and
measures the figures; :mod:`daemon.demos.kill_point` decides when to kill and whether a kill passed.
``bench/replicas/replica_failover_bench.py`` runs the same :func:`run_point` at 30 seeded kill points on one
cluster, starting a fresh replica in place of each killed one (:meth:`ReplicaDemoCluster.respawn`).
An adapter: the decisions are the daemons'.
"""
from __future__ import annotations

import asyncio
import secrets
import signal
import subprocess
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from config.budget import BUDGET_EPS
from config.pids import pid_running
from daemon.demos.failover_load import LoadRecord, steady_load
from daemon.demos.kill_point import KillPoint, PointResult
from daemon.demos.replica_cluster import (LEASE_TABLE, NGINX, BudgetSampler, ClusterSpec, ReplicaProcess, ec2_client,
                                    first_line_after, fleet_worker_pids, free_port, live_instances, serves,
                                    start_local_fleet, start_nginx, start_replica, stop_processes)

#: how many replicas ``demo --replicas`` runs (one machine)
MIN_REPLICAS, MAX_REPLICAS = 2, 4
#: the demo's load (q/s), and its length when not given: the kill at half of it
DEMO_QPS = 8.0
DEMO_DURATION_S = 24.0
#: load kept up after the fleet resumed and the pool settled
POST_RESUME_S = 3.0
#: how long the scenario waits for a replica to serve, a takeover, the pool to settle
START_LIMIT_S = 120.0
RESUME_LIMIT_S = 40.0
SETTLE_LIMIT_S = 30.0
#: the log lines the figures are read from (daemon.replicas.role, daemon.app)
TOOK_LINE = "took the lease"
RESUMED_LINE = "fleet (lease taken)"
TICK_LINE = "fleet ("


class ReplicaDemoCluster:
    """``n`` replicas of one cluster on this host, a balancer in front, a budget sampler on EC2."""

    def __init__(self, root: Path, spec: ClusterSpec, n: int, use_nginx: bool | None = None) -> None:
        from scaler.replicas.lease_table import DynamoLeaseTable, make_dynamodb_client

        self.root, self.spec, self.n = root, spec, n
        self.use_nginx = Path(NGINX).exists() if use_nginx is None else use_nginx
        self.replicas: list[ReplicaProcess] = []
        self.dead: list[ReplicaProcess] = []
        self.balancer: subprocess.Popen[bytes] | None = None
        self.front = free_port() if self.use_nginx else 0
        self.ports = [free_port() for _ in range(n)]    # known first: the workers' target names them all
        self.fleet: subprocess.Popen[bytes] | None = None
        self.table = DynamoLeaseTable(LEASE_TABLE, make_dynamodb_client("us-east-1", spec.endpoint))
        self.sampler = BudgetSampler(spec.endpoint, spec.cluster, spec.budget, period_s=0.1)
        self._started = 0

    @property
    def balancer_name(self) -> str:
        return "nginx grpc_pass" if self.use_nginx else "gRPC round_robin (health-checked)"

    @property
    def target(self) -> str:
        if self.use_nginx:
            return f"127.0.0.1:{self.front}"
        return "ipv4:" + ",".join(f"127.0.0.1:{p}" for p in self.ports)

    def _start_one(self, port: int) -> ReplicaProcess:
        self._started += 1
        r = start_replica(self.root, f"replica-{self._started}", self.spec, port, log_format="json")
        self.replicas.append(r)
        return r

    async def _serving(self, r: ReplicaProcess) -> None:
        if not await serves(r.port, START_LIMIT_S):
            raise RuntimeError(f"replicas demo: {r.name} did not serve within {START_LIMIT_S:g} s; its log ends: "
                               + r.log_text()[-600:].replace("\n", " | "))

    async def start(self) -> None:
        """The first replica (it takes the lease and launches the pool), then the others as standbys
        once its lease item is written; each serving; the balancer; the sampler."""
        self.sampler.start()
        if self.use_nginx:
            self.balancer = await asyncio.to_thread(start_nginx, self.root, self.front, self.ports)
        first = self._start_one(self.ports[0])
        self.fleet = start_local_fleet(self.root, first.dir / "costscale.yaml", self.target)
        await _until(lambda: self._holder_pid() == first.pid or not first.alive(), START_LIMIT_S)
        if not first.alive() or self._holder_pid() != first.pid:
            raise RuntimeError("replicas demo: the first replica did not take the lease; its log ends: "
                               + first.log_text()[-600:].replace("\n", " | "))
        for port in self.ports[1:]:
            self._start_one(port)
        for r in self.replicas:
            await self._serving(r)

    def _holder_pid(self) -> int | None:
        try:
            held = self.table.get(self.spec.cluster)
        except Exception:   # noqa: BLE001 - the table not created yet: no holder yet
            return None
        return held.pid if held is not None and not held.expired(time.time()) else None

    def holder(self) -> ReplicaProcess | None:
        pid = self._holder_pid()
        return next((r for r in self.replicas if r.pid == pid and r.alive()), None)

    async def respawn(self, dead: ReplicaProcess) -> ReplicaProcess:
        """A fresh replica (new directory, state store and id) on the dead one's port, serving: the
        balancer's upstream and the client's addresses stay as they were."""
        self.replicas.remove(dead)
        self.dead.append(dead)
        r = self._start_one(dead.port)
        await self._serving(r)
        return r

    def worker_pids(self) -> list[int]:
        """Every local worker process started for the cluster (``daemon.local.fleet``, apart from
        the replicas)."""
        return fleet_worker_pids(self.root)

    def close(self) -> None:
        self.sampler.stop.set()
        stop_processes(self.balancer, *(r.proc for r in self.replicas), self.fleet, grace_s=30.0)


async def _until(cond: Callable[[], bool], limit_s: float, step_s: float = 0.1) -> bool:
    """Poll ``cond`` (in a thread: it reads logs, EC2, SQLite) until true or ``limit_s``."""
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        if await asyncio.to_thread(cond):
            return True
        await asyncio.sleep(step_s)
    return False


def _by_type(live: list[tuple[str, str]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for _, t in live:
        out[t] = out.get(t, 0) + 1
    return out


def store_view(r: ReplicaProcess) -> set[str]:
    """The instances a replica's state store holds as live (what its fleet loop owns)."""
    from scaler.fleet.state import StateStore

    if not r.state.exists():
        return set()
    store = StateStore.open(r.state, lock=False)
    try:
        return set(store.known_instances())
    finally:
        store.close()


async def run_point(c: ReplicaDemoCluster, point: KillPoint, *, qps: float, seed: int,
                    min_load_s: float = 0.0, post_s: float = POST_RESUME_S) -> PointResult:
    """One kill of the lease holder under load (module docstring); the load runs at least
    ``min_load_s`` and ``post_s`` past the settled pool."""
    holder = c.holder()
    if holder is None:
        raise RuntimeError("replicas demo: no live replica holds the lease")
    spec, ec2 = c.spec, ec2_client(c.spec.endpoint)
    stop, rec = asyncio.Event(), LoadRecord()
    notes: list[str] = []
    t_start = time.time()
    load = asyncio.create_task(steady_load(c.target, not c.use_nginx, qps, seed, stop, rec))
    lost = None
    try:
        await asyncio.sleep(point.offset_s)
        if point.moment == "launch":
            lost = (await asyncio.to_thread(live_instances, ec2, spec.cluster))[0][0]
            await asyncio.to_thread(ec2.terminate_instances, InstanceIds=[lost])
            await asyncio.sleep(point.delay_s)
        else:
            t_now, tick = time.time(), None

            def ticked() -> bool:
                nonlocal tick
                tick = first_line_after(holder.log_text(), TICK_LINE, t_now)
                return tick is not None
            if not await _until(ticked, 3 * spec.fleet_s + 5):
                notes.append("no fleet tick line from the holder before the kill")
            await asyncio.sleep(max(0.0, (tick or time.time()) + point.delay_s - time.time()))
        holder.proc.send_signal(signal.SIGKILL)
        t_kill = time.time()
        survivors = [r for r in c.replicas if r is not holder]
        seen: dict[str, tuple[float | None, float | None, str]] = {}

        def resumed() -> bool:
            for r in survivors:
                text = r.log_text()
                took, acted = first_line_after(text, TOOK_LINE, t_kill), first_line_after(text, RESUMED_LINE, t_kill)
                if acted is not None:
                    seen["new"] = (took, acted, r.name)
                    return True
            return False
        await _until(resumed, spec.ttl_s + RESUME_LIMIT_S)
        took, acted, new_name = seen.get("new", (None, None, ""))
        new = next((r for r in survivors if r.name == new_name), None)

        def settled() -> bool:
            live = live_instances(ec2, spec.cluster)
            view = store_view(new) if new is not None else set()
            return (_by_type(live) == spec.pool and {i for i, _ in live} <= view
                    and (lost is None or lost not in {i for i, _ in live}))
        if new is not None and not await _until(settled, SETTLE_LIMIT_S, step_s=0.25):
            notes.append(f"the pool did not settle within {SETTLE_LIMIT_S:g} s")
        t_resumed = acted if acted is not None else time.time()
        await asyncio.sleep(max(post_s, t_start + min_load_s - time.time()))
    finally:
        stop.set()
        await load
    await asyncio.to_thread(holder.proc.wait, 30)
    t_end = time.time()
    live = await asyncio.to_thread(live_instances, ec2, spec.cluster)
    view = await asyncio.to_thread(store_view, new) if new is not None else set()
    live_by = _by_type(live)
    hf, hs = rec.failed_between(t_kill, t_resumed)
    before, during, after = (c.sampler.peak_between(t_start, t_kill), c.sampler.peak_between(t_kill, t_resumed),
                             c.sampler.peak_between(t_resumed, t_end))
    window = [cost for t, cost in c.sampler.samples if t_start <= t < t_end]
    for why in sorted({d for i, d in rec.details.items() if rec.outcome.get(i, "OK") != "OK"})[:3]:
        notes.append(f"a query failed: {why}")
    return PointResult(
        point=point, killed=holder.name, new_holder=new_name, sent=rec.sent, answered=rec.ok, failed=rec.failed(),
        handover_sent=hs, handover_failed=hf, twice=rec.twice(), unanswered=rec.unanswered(),
        retries=rec.attempts.retries, failed_attempts=rec.attempts.failed_attempts,
        recovered_share=rec.recovered_share(),
        lease_taken_s=None if took is None else round(took - t_kill, 3),
        resumed_s=None if acted is None else round(acted - t_kill, 3), ttl_s=spec.ttl_s, budget=spec.budget,
        peak_before=before[0], peak_during=during[0], peak_after=after[0],
        over_budget_samples=sum(1 for x in window if x > spec.budget + BUDGET_EPS), samples=len(window),
        orphans=sorted(i for i, _ in live if i not in view), duplicates=sum(max(0, n - spec.pool.get(t, 0))
                                                                           for t, n in live_by.items()),
        pool=dict(spec.pool), live_after=live_by, lost=lost, notes=notes)


def demo_spec(endpoint: str, ami: str) -> ClusterSpec:
    """The demo's cluster: 2 x r5n.large pinned within 1 $/hr, lease ttl 6 s, ticks every 2 s."""
    return ClusterSpec(cluster=f"demo-ha-{secrets.token_hex(3)}", endpoint=endpoint, ami=ami, unready_s=1.0)


async def replicas_scenario(endpoint: str, ami: str, root: Path, n: int = 2, duration_s: float = DEMO_DURATION_S,
                            qps: float = DEMO_QPS, seed: int = 1, use_nginx: bool | None = None,
                            on_ready: Callable[[ReplicaDemoCluster], None] | None = None) -> dict[str, Any]:
    """The demo's scenario against moto at ``endpoint``: ``n`` replicas, the holder killed at half
    of ``duration_s`` of load, ``delay_s`` after its fleet tick drawn from ``seed``; the figures as
    a dict (:meth:`PointResult.to_json`, the balancer, the workers left running)."""
    c = ReplicaDemoCluster(root, demo_spec(endpoint, ami), n, use_nginx)
    try:
        await c.start()
        if on_ready is not None:
            on_ready(c)
        delay = float(np.random.default_rng(seed).uniform(0.0, c.spec.fleet_s))
        res = await run_point(c, KillPoint(duration_s / 2, "tick", round(delay, 2)), qps=qps, seed=seed,
                              min_load_s=duration_s)
    finally:
        await asyncio.to_thread(c.close)
    pids = c.worker_pids()
    out = res.to_json()
    out.update(replicas=n, balancer=c.balancer_name, cluster=c.spec.cluster,
               worker_processes=len(pids), workers_left_running=sum(1 for p in pids if pid_running(p)))
    return out


def _dollars(x: float) -> str:
    return f"{x:.3f}"


def summary_text(o: dict[str, Any]) -> str:
    """The demo's summary (the figures of :func:`replicas_scenario`), one figure a line."""
    failed = sum(o["failed"].values())
    codes = ", ".join(f"{k} {v}" for k, v in o["failed"].items()) or "none"
    share = "-" if o["recovered_share"] is None else f"{100 * o['recovered_share']:.0f} %"
    p = o["point"]
    took = "-" if o["lease_taken_s"] is None else f"{o['lease_taken_s']:.2f} s"
    acted = "never" if o["resumed_s"] is None else f"{o['resumed_s']:.2f} s"
    pool = " ".join(f"{t}x{n}" for t, n in sorted(o["live_after"].items())) or "none"
    rows = [
        ("balancer", o["balancer"]),
        ("queries sent / answered / failed", f"{o['sent']} / {o['answered']} / {failed} ({codes}); each ended once: "
                                             + ("yes" if o["answered_once"] else "NO")),
        ("failed in the handover", f"{o['handover_failed']} of {o['handover_sent']} sent from the kill until the "
                                   f"fleet resumed ({o['handover_failed_pct']:.1f} %)"),
        ("client retries on UNAVAILABLE", f"{o['retries']} retries; {o['failed_attempts']} attempts failed, "
                                          f"{share} of them recovered by a retry"),
        ("kill -9 of the lease holder", f"{o['killed']} after {p['offset_s']:g} s of load, {p['delay_s']:g} s after "
                                        f"its fleet tick"),
        ("lease taken / fleet acted again", f"{took} / {acted} after the kill by {o['new_holder'] or 'none'} "
                                            f"(limit: ttl {o['ttl_s']:g} s + 5 s)"),
        ("pool $/hr vs budget", f"before {_dollars(o['peak_before'])}, during {_dollars(o['peak_during'])}, after "
                                f"{_dollars(o['peak_after'])} of {o['budget']:g} (peaks; "
                                + ("held" if o["budget_held"] else f"OVER in {o['over_budget_samples']}")
                                + f" over {o['samples']} samples)"),
        ("orphans / duplicates", f"{len(o['orphans'])} / {o['duplicates']} (EC2 after: {pool}; pinned "
                                 + " ".join(f"{t}x{n}" for t, n in sorted(o["pool"].items())) + ")"),
        ("worker processes", f"{o['worker_processes']} started, {o['workers_left_running']} left running"),
    ] + [("note", n) for n in o["notes"]]
    w = max(len(k) for k, _ in rows)
    verdict = "passed" if o["passed"] and not o["workers_left_running"] else "FAILED"
    return (f"costscale demo --replicas {o['replicas']} summary ({verdict})\n"
            + "\n".join(f"  {k.ljust(w)}  {v}" for k, v in rows))


async def run_replicas_demo(n: int = 2, duration_s: float = DEMO_DURATION_S, qps: float = DEMO_QPS, seed: int = 1,
                            as_json: bool = False) -> int:
    """``costscale demo --replicas N`` on the embedded cloud: the summary (or one JSON object);
    exit 0 when the kill point passed (:attr:`PointResult.passed`) and no worker was left running."""
    import json
    import sys

    from daemon.local.embedded import EmbeddedCloud

    out = sys.stderr if as_json else sys.stdout
    cloud = EmbeddedCloud("demo")
    try:
        print(f"costscale demo --replicas {n}: {n} `costscale run` processes of one cluster, moto EC2 and DynamoDB "
              f"on {cloud.endpoint}; {qps:g} q/s for {duration_s:g} s, the lease holder killed halfway",
              file=out, flush=True)

        def ready(c: ReplicaDemoCluster) -> None:
            holder = c.holder()
            print(f"  replicas serving on {', '.join(str(r.port) for r in c.replicas)}; balancer: {c.balancer_name}"
                  f"{f' on {c.front}' if c.use_nginx else ''}; lease holder {holder.name if holder else '?'}",
                  file=out, flush=True)
        o = await replicas_scenario(cloud.endpoint, cloud.ami, cloud.state_dir, n, duration_s, qps, seed,
                                    on_ready=ready)
    finally:
        cloud.stop()
    print(json.dumps(o, sort_keys=True) if as_json else summary_text(o), flush=True)
    return 0 if o["passed"] and not o["workers_left_running"] else 1


__all__ = ["DEMO_DURATION_S", "DEMO_QPS", "MAX_REPLICAS", "MIN_REPLICAS", "run_replicas_demo", "summary_text",
           "ReplicaDemoCluster", "demo_spec", "replicas_scenario", "run_point", "store_view"]
