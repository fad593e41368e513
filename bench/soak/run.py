"""One soak run (issue #40 deliverable 1): moto and the real daemon as subprocesses, its wall clock sped
up (:mod:`bench.soak.wallclock`) and its intervals compressed, driven for ``duration_s``. Throughout:

- open-loop Poisson load through the public gRPC API (``Inference.Submit``), stepping between two rates;
- a local worker process killed (SIGKILL) every ``kill_every_s``;
- the config rewritten (the budget alternating) and SIGHUP sent every ``hup_every_s``;
- every ``sample_every_s``: ``/proc/PID`` (RSS, threads, fds, CPU), ``/metrics`` (series, asyncio tasks,
  worker channels, ticks), ``Status``, the state store, the audit log and EC2, with the invariants
  checked at each sample (:func:`check`).

Then SIGTERM: the daemon exits 0, every instance is terminated, every worker is gone, and each query
sent ended once, in the daemon's own count as in the client's."""
from __future__ import annotations

import asyncio
import json
import os
import random
import resource
import secrets
import signal
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import boto3
import grpc
import numpy as np

from bench.soak import observe, procs

#: the answers a query may end with besides OK: typed refusals of the dispatcher (no worker in time,
#: nothing to serve it, overload); anything else (UNKNOWN, INTERNAL, ...) is an invariant broken
TYPED = frozenset({"DEADLINE_EXCEEDED", "UNAVAILABLE", "RESOURCE_EXHAUSTED"})
#: after a reload lowered the budget, the pool may cost up to the one before this long (s): the surplus
#: drains (``daemon.app.DRAIN_TIMEOUT_S``, 30 s) before it is terminated
BUDGET_GRACE_S = 45.0


@dataclass
class SoakSpec:
    duration_s: float = 150.0
    warmup_s: float = 40.0
    rate: float = 20.0            # q/s, the base of the load
    step_rate: float = 40.0       # q/s, the step
    step_every_s: float = 30.0    # the rate flips between the two this often
    batch: int = 1                # each query's batch size
    fleet_s: float = 0.05
    model_s: float = 0.1
    reconcile_s: float = 5.0
    speed: float = 1200.0         # the daemon's wall clock: one fleet tick = one minute of calendar
    sample_every_s: float = 2.0
    kill_every_s: float = 30.0
    hup_every_s: float = 20.0
    budget: float = 2.5
    budget_low: float = 2.0       # the budget a reload alternates with
    retention_days: float = 1.0
    prune_every_s: float = 2.0
    prune_max_rows: int = 10_000
    demand_days: int = 1
    audit_max_bytes: int = 256 * 1024
    audit_backups: int = 3
    seed: int = 1
    #: the config a reload alternates: the budget (always), and this pinned pool on and off (None: never
    #: pinned), which launches and retires instances at each reload: the store's churn in a short run
    reload_pinned: dict[str, int] | None = None
    park_s: float | None = None          # model_scaling.vm_park_s (None: the default, 120 s)
    scale_in_s: float | None = None      # intervals.scale_in_s (None: the default, 300 s)
    generate_variants: bool = True       # model_scaling.generate_variants (int8/fp16 variants made at start)


@dataclass
class SoakResult:
    spec: SoakSpec
    samples: list[dict[str, Any]] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    sent: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    daemon_queries: dict[str, int] = field(default_factory=dict)
    exit_code: int | None = None
    live_after: list[str] = field(default_factory=list)
    workers_left: list[int] = field(default_factory=list)
    untyped: list[str] = field(default_factory=list)   # the first 50 queries that ended without a typed status
    kills: int = 0
    reloads: int = 0
    launched: int = 0
    cpu_s: dict[str, float] = field(default_factory=dict)
    wall_s: float = 0.0
    calendar_days: float = 0.0    # the daemon's own (sped-up) wall clock from the first sample to the last

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["outcomes"], d["spec"] = dict(self.outcomes), asdict(self.spec)
        return d


class Soak:
    def __init__(self, spec: SoakSpec, workdir: Path) -> None:
        self.spec, self.dir = spec, workdir
        self.res = SoakResult(spec)
        self.cluster = f"soak-{secrets.token_hex(3)}"
        self.cfg = workdir / "costscale.yaml"
        self.rng = random.Random(spec.seed)
        self._unknown: dict[str, int] = {}     # instance id -> consecutive samples EC2 had it and the store not
        self._intent_counts: dict[str, int] = {}
        self._odd = 0
        self._zombies: set[int] = set()
        self._beyond: set[str] = set()
        self._budgets: list[tuple[float, float]] = [(0.0, spec.budget)]   # (s into the run, budget written)

    # ---- the run ---------------------------------------------------------------------------------
    def run(self) -> SoakResult:
        s, t0 = self.spec, time.monotonic()
        self.dir.mkdir(parents=True, exist_ok=True)
        moto, endpoint = procs.start_moto(self.dir / "moto.log")
        daemon = None
        try:
            self.ec2 = boto3.client("ec2", region_name="us-east-1", endpoint_url=endpoint,
                                    aws_access_key_id="costscale-soak", aws_secret_access_key="costscale-soak")
            self.ami = self.ec2.describe_images()["Images"][0]["ImageId"]
            self.endpoint = endpoint
            procs.daemon_config(self.cfg, s, self.cluster, endpoint, self.ami, s.budget)
            daemon, port, mport = procs.start_daemon(self.cfg, s.speed, self.dir / "daemon.log")
            self.pid, self.mport = daemon.pid, mport
            asyncio.run(self._drive(f"127.0.0.1:{port}", daemon))
            self.res.cpu_s["daemon"] = procs.cpu_s(daemon.pid)
            self.res.exit_code = procs.stop(daemon, 90)
            insts = observe.ec2_instances(self.ec2, self.cluster)
            self.res.launched = len(insts)
            self.res.live_after = [i["id"] for i in insts if i["state"] in ("pending", "running")]
            self.res.workers_left = [p for p, st in self._workers_seen.items() if _alive(p) and _started(p) == st]
        finally:
            if daemon is not None and daemon.poll() is None:
                procs.stop(daemon, 30)
            self.res.cpu_s["daemon_and_workers"] = _children_cpu()
            self.res.cpu_s["bench"] = _self_cpu()
            procs.stop(moto, 10)
            self.res.wall_s = time.monotonic() - t0
        if len(self.res.samples) > 1:
            self.res.calendar_days = (self.res.samples[-1]["now_v"] - self.res.samples[0]["now_v"]) / 86400.0
        if self.res.exit_code != 0:
            self.res.violations.append(f"the daemon exited {self.res.exit_code} at SIGTERM")
        if self.res.live_after:
            self.res.violations.append(f"instances left running: {self.res.live_after}")
        if self.res.workers_left:
            self.res.violations.append(f"worker processes left: {self.res.workers_left}")
        return self.res

    async def _drive(self, target: str, daemon: Any) -> None:
        from dispatcher.proto import costscale_pb2 as pb
        from dispatcher.proto import costscale_pb2_grpc as pbg

        s = self.spec
        self._workers_seen: dict[int, str] = {}   # pid -> its start time (a pid is reused on a busy host)
        stop = asyncio.Event()
        async with grpc.aio.insecure_channel(target) as ch:
            stub = pbg.InferenceStub(ch)
            self.status = lambda: stub.Status(pb.StatusRequest(), timeout=20)
            tasks = [asyncio.create_task(self._load(stub, pb, stop)), asyncio.create_task(self._chaos(stop)),
                     asyncio.create_task(self._sampler(stop, daemon))]
            try:
                await asyncio.sleep(s.duration_s)
            finally:
                stop.set()
                await asyncio.gather(*tasks)
            # every query ended: the daemon counted each once, as the client did
            self.res.daemon_queries = dict((await asyncio.to_thread(observe.scrape, self.mport))["queries"])
        if sum(self.res.daemon_queries.values()) != self.res.sent:
            self.res.violations.append(f"the daemon counted {sum(self.res.daemon_queries.values())} queries ended, "
                                       f"the client sent {self.res.sent}")
        odd = {c: n for c, n in self.res.outcomes.items() if c != "OK" and c not in TYPED}
        if odd:
            self.res.violations.append(f"queries ended without a typed status: {odd}")

    async def _load(self, stub: Any, pb: Any, stop: asyncio.Event) -> None:
        """Open-loop Poisson arrivals, the rate flipping between ``rate`` and ``step_rate``."""
        s, rng = self.spec, np.random.default_rng(self.spec.seed)
        pending: set[asyncio.Task[None]] = set()

        async def one(i: int) -> None:
            t_sent = time.monotonic()
            try:
                reply = await stub.Submit(pb.SubmitRequest(model="rm2", batch_size=s.batch,
                                                           idempotency_key=f"soak-{s.seed}-{i}"), timeout=10.0)
                self.res.outcomes["OK" if reply.instance_type else "OK_WITHOUT_WORKER"] += 1
            except grpc.aio.AioRpcError as exc:
                self.res.outcomes[exc.code().name] += 1
                if exc.code().name not in TYPED and len(self.res.untyped) < 50:
                    self.res.untyped.append(f"t={t_sent - start:.1f}s query {i}: {exc.code().name} "
                                            f"{exc.details()!r} after {time.monotonic() - t_sent:.2f} s")

        start = time.monotonic()
        next_t = 0.0
        while not stop.is_set():
            el = time.monotonic() - start
            if el >= next_t:
                t = asyncio.create_task(one(self.res.sent))
                pending.add(t)
                t.add_done_callback(pending.discard)
                self.res.sent += 1
                rate = s.rate if int(el // s.step_every_s) % 2 == 0 else s.step_rate
                next_t += float(rng.exponential(1.0 / rate))
                continue
            await asyncio.sleep(min(next_t - el, 0.02))
        if pending:
            await asyncio.wait(pending, timeout=30.0)

    async def _chaos(self, stop: asyncio.Event) -> None:
        """A worker killed every ``kill_every_s``; the config reloaded (SIGHUP) every ``hup_every_s``."""
        s = self.spec
        next_kill, next_hup, low = s.kill_every_s, s.hup_every_s, True
        start = time.monotonic()
        while not stop.is_set():
            el = time.monotonic() - start
            if el >= next_kill:
                next_kill += s.kill_every_s
                workers = [p for p, st in procs.children(self.pid).items() if st != "Z" and _is_worker(p)]
                if workers:
                    os.kill(self.rng.choice(sorted(workers)), signal.SIGKILL)
                    self.res.kills += 1
            if el >= next_hup:
                next_hup += s.hup_every_s
                procs.daemon_config(self.cfg, s, self.cluster, self.endpoint, self.ami,
                                    s.budget_low if low else s.budget, s.reload_pinned if low else None)
                self._budgets.append((el, s.budget_low if low else s.budget))
                low = not low
                os.kill(self.pid, signal.SIGHUP)
                self.res.reloads += 1
            try:
                await asyncio.wait_for(stop.wait(), 0.5)
            except asyncio.TimeoutError:
                pass

    async def _sampler(self, stop: asyncio.Event, daemon: Any) -> None:
        start = time.monotonic()
        while not stop.is_set():
            if daemon.poll() is not None:
                self.res.violations.append(f"the daemon exited ({daemon.returncode}) during the run")
                return
            sample = await self._sample(time.monotonic() - start)
            self.res.samples.append(sample)
            with (self.dir / "samples.jsonl").open("a") as fh:   # to follow a long run as it goes
                fh.write(json.dumps(sample, default=str) + "\n")
            self.res.violations.extend(f"t={sample['t']:.0f}s: {v}" for v in sample["violations"])
            try:
                await asyncio.wait_for(stop.wait(), self.spec.sample_every_s)
            except asyncio.TimeoutError:
                pass

    async def _sample(self, t: float) -> dict[str, Any]:
        s = self.spec
        status = await self.status()
        m = await asyncio.to_thread(observe.scrape, self.mport)
        p = procs.proc_sample(self.pid)
        kids = procs.children(self.pid)
        for pid in kids:
            if pid not in self._workers_seen and _is_worker(pid):
                self._workers_seen[pid] = _started(pid)
        slack = 3 * s.prune_every_s * s.speed + 2 * s.sample_every_s * s.speed
        st = await asyncio.to_thread(observe.store_sample, self.dir / "state.db", status.now_unix, s.retention_days,
                                     slack, s.demand_days)
        audit = observe.audit_sample(self.dir / "audit" / "audit.log")
        insts = await asyncio.to_thread(observe.ec2_instances, self.ec2, self.cluster)
        known, counts = await asyncio.to_thread(observe.known_to_store, self.dir / "state.db")
        self._intent_counts.update(counts)
        sample = {"t": round(t, 2), **p, "tasks": m.get("asyncio_tasks"), "channels": m.get("grpc_worker_channels"),
                  "series": m["series"], "fleet_ticks": m["ticks"].get("fleet_run", 0),
                  "fleet_skipped": m["ticks"].get("fleet_skipped", 0), "model_ticks": m["ticks"].get("model_run", 0),
                  "store_bytes": st["size"], "rows": st["rows"], "store_beyond": len(st["beyond"]),
                  "demand_oldest": st["demand_oldest"],
                  "audit_bytes": audit["bytes"], "audit_files": audit["files"], "audit_largest": audit["largest"],
                  "sent": self.res.sent, "answered": sum(self.res.outcomes.values()),
                  "daemon_queries": sum(m["queries"].values()), "cost_per_hour": status.cost_per_hour,
                  "budget_per_hour": status.budget_per_hour, "workers": status.workers,
                  "pool": sum(status.pool.values()), "zombies": sorted(p for p, v in kids.items() if v == "Z"),
                  "now_v": status.now_unix}
        sample["violations"] = self.check(sample, insts, known, t, set(st["beyond"]))
        return sample

    def check(self, sample: dict[str, Any], insts: list[dict[str, str]], known: set[str], t: float,
              beyond: set[str] = frozenset()) -> list[str]:   # type: ignore[assignment]
        """The invariants at one sample: the budget (the pool's $/hr per Status within the budget the
        config says, and within the one before for ``BUDGET_GRACE_S`` after a reload lowered it: the
        surplus drains first), Status showing the budget written (once a reload had time to apply), no orphan (an instance EC2 runs that the
        store has not known for two samples in a row), no duplicate launch (more instances under one
        ClientToken than its intent asked for), no query ended without a typed status, the store and
        the audit log within their configured bounds."""
        s, bad = self.spec, []
        b = self._budgets    # each reload within the grace leaves the budget it replaced allowed
        allowed = max([b[-1][1]] + [b[i - 1][1] for i in range(1, len(b)) if b[i][0] >= t - BUDGET_GRACE_S])
        sample["budget_set"] = self._budgets[-1][1]
        if sample["cost_per_hour"] > allowed + 1e-9:
            bad.append(f"budget exceeded: {sample['cost_per_hour']:.4f} > {allowed:.4f} $/hr")
        if self._budgets[-1][0] < t - BUDGET_GRACE_S and abs(sample["budget_per_hour"] - sample["budget_set"]) > 1e-9:
            bad.append(f"Status shows the budget {sample['budget_per_hour']:g} $/hr, the config {sample['budget_set']:g}")
        live = {i["id"] for i in insts if i["state"] in ("pending", "running")}
        self._unknown = {i: self._unknown.get(i, 0) + 1 for i in live - known}
        orphans = sorted(i for i, n in self._unknown.items() if n >= 2)
        if orphans:
            bad.append(f"orphan instances (in EC2, not in the store): {orphans}")
        per_token = Counter(i["intent"] for i in insts)
        dup = {tok: n for tok, n in per_token.items() if n > self._intent_counts.get(tok, 1)}
        if dup:
            bad.append(f"duplicate launches (instances per ClientToken over the intent's count): {dup}")
        odd = sum(n for c, n in self.res.outcomes.items() if c != "OK" and c not in TYPED)
        if odd > self._odd:   # (each one once: at the first sample after it ended)
            bad.append(f"{odd - self._odd} queries ended without a typed status: {self.res.untyped[self._odd:odd]}")
            self._odd = odd
        kept = beyond & self._beyond     # kept over two samples: the pruner (every prune_every_s) missed them
        self._beyond = set(beyond)
        if kept:
            bad.append(f"state store: {len(kept)} rows kept beyond state_retention / forecast.retention_days: "
                       f"{sorted(kept)[:5]}")
        bound = s.audit_max_bytes * (s.audit_backups + 1)
        if sample["audit_bytes"] > bound or sample["audit_files"] > s.audit_backups + 1 \
                or sample["audit_largest"] > s.audit_max_bytes:
            bad.append(f"audit log over its bound: {sample['audit_files']} files, {sample['audit_bytes']} bytes")
        unreaped = set(sample["zombies"]) & self._zombies   # a killed worker is a zombie until the runner's next sync
        self._zombies = set(sample["zombies"])
        if unreaped:
            bad.append(f"worker processes not reaped over two samples: {sorted(unreaped)}")
        return bad


def _is_worker(pid: int) -> bool:
    try:
        return b"worker" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False


def _started(pid: int) -> str:
    """``pid``'s start time (clock ticks since boot; "" when gone): with the pid, which process it is."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _self_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


__all__ = ["Soak", "SoakResult", "SoakSpec", "TYPED"]
