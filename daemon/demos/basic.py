"""``costscale demo``: the whole product on one machine, against an embedded EC2 (moto) on 127.0.0.1.

Starts moto in server mode on a free loopback port, runs the real daemon (planner, EC2 provider via
boto3 ``endpoint_url``, gRPC dispatcher, fleet loop) against it, one local worker process per
running instance (real ONNX inference padded to the instance type's AWS latency profile), and drives
an open-loop Poisson load through the public gRPC API with a load step half-way. At the end (or on
Ctrl-C: exit 130) it terminates every instance and stops every process it started.

What it shows: on a terminal one live line (p99 over the last ``P99_WINDOW_S`` seconds), elsewhere
one line per load phase; SLO misses count the queries served over the QoS target and the dropped
ones (``DROP_CODES``); a figure without a sample is "-". Library chatter that says nothing about
costscale is kept off the display (:func:`quiet_library_logs`).
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import secrets
import signal
import sys
import time
import warnings
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, TextIO

import grpc
import numpy as np

from config.profiles import ProfileTable
from config.schema import Config
from scaler.planner.batch_mix import sample_batches
from scaler.planner.pools import pool_cost
from sim.replay.ledger import CostLedger
from sim.metrics import nearest_rank
from sim.workload import Workload
from daemon.local.embedded import EmbeddedCloud

DEMO_MODEL = "rm2"          # Kairos rm2 profile, QoS 350 ms (Kairos §7): sleeps dominate, robust on 2 cores
DEMO_QOS_MS = 350.0
# the Kairos §7 types (the ones with AWS profiles), each with a cap on how many the demo may run
DEMO_TYPES = {"g4dn.xlarge": 3, "c5n.2xlarge": 3, "r5n.large": 4, "t3.xlarge": 3}
#: answers that drop a query (the dispatcher gave up on it): each one is an SLO miss
DROP_CODES = frozenset({"DEADLINE_EXCEEDED", "UNAVAILABLE", "RESOURCE_EXHAUSTED"})
#: the live display's p99 is over the queries answered in the last this many seconds
P99_WINDOW_S = 10.0
#: width of the live line on a terminal
LINE_WIDTH = 150


@dataclass
class LoadStats:
    sent: int = 0
    ok: int = 0
    violations: int = 0          # served over the QoS target
    dropped: int = 0             # answered with one of DROP_CODES
    errors: dict[str, int] = field(default_factory=dict)
    latencies_ms: list[float] = field(default_factory=list)
    served_by_type: dict[str, int] = field(default_factory=dict)
    providers: dict[str, int] = field(default_factory=dict)
    #: (monotonic time served, ms) of the last ``P99_WINDOW_S`` seconds, oldest first
    recent: deque[tuple[float, float]] = field(default_factory=deque)
    #: (s since the load began, batch) of every query sent: the load the hindsight reference prices
    sent_log: list[tuple[float, int]] = field(default_factory=list)
    qos_ms: float = DEMO_QOS_MS  # the SLO a served query is judged against

    def record_served(self, ms: float, now: float, instance_type: str = "", provider: str = "") -> None:
        self.ok += 1
        self.latencies_ms.append(ms)
        self.recent.append((now, ms))
        self._trim(now)
        if ms > self.qos_ms:
            self.violations += 1
        if instance_type:
            self.served_by_type[instance_type] = self.served_by_type.get(instance_type, 0) + 1
        if provider:
            self.providers[provider] = self.providers.get(provider, 0) + 1

    def record_error(self, code: str) -> None:
        self.errors[code] = self.errors.get(code, 0) + 1
        if code in DROP_CODES:
            self.dropped += 1

    @property
    def answered(self) -> int:
        """Queries served or dropped: what the SLO is judged on."""
        return self.ok + self.dropped

    @property
    def misses(self) -> int:
        return self.violations + self.dropped

    def miss_pct(self) -> float:
        """Percentage of answered queries that missed the SLO (nan before any answer)."""
        return 100.0 * self.misses / self.answered if self.answered else math.nan

    def pct(self, q: float) -> float:
        """Nearest-rank percentile since the start (nan without a sample), the definition the
        simulator and the SLO use."""
        return nearest_rank(np.asarray(self.latencies_ms), q)

    def recent_pct(self, q: float, now: float) -> float:
        """Nearest-rank percentile over the last ``P99_WINDOW_S`` seconds (nan without a sample)."""
        self._trim(now)
        return nearest_rank(np.fromiter((ms for _, ms in self.recent), dtype=float), q)

    def _trim(self, now: float) -> None:
        while self.recent and self.recent[0][0] < now - P99_WINDOW_S:
            self.recent.popleft()


def fmt_ms(x: float) -> str:
    """A latency for the display: "-" when there is no sample."""
    return "-" if math.isnan(x) else f"{x:.1f} ms"


def fmt_pct(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.1f}%"


def _json_num(x: float) -> float | None:
    """A figure for the JSON summary: null when there is no sample (JSON has no nan)."""
    return None if math.isnan(x) else round(x, 2)


class LiveDisplay:
    """The demo's live status line: rewritten in place on a terminal; when the output is not a
    terminal (a pipe, a file, CI), one line per load phase, printed when the phase ends."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        isatty = getattr(out, "isatty", None)
        self.tty = bool(isatty and isatty())
        self._rate: float | None = None
        self._last = ""
        self._phase = 0

    def show(self, rate: float, line: str) -> None:
        """The latest status ``line`` of the phase offering ``rate`` q/s."""
        if self.tty:
            print("\r" + line.ljust(LINE_WIDTH)[:LINE_WIDTH], end="", file=self.out, flush=True)
            return
        if self._rate is not None and rate != self._rate:
            self._emit()
        self._rate, self._last = rate, line

    def close(self) -> None:
        """End of the load: end the live line, or print the last phase's line."""
        if self.tty:
            print(file=self.out)
        elif self._last:
            self._emit()

    def _emit(self) -> None:
        self._phase += 1
        print(f"phase {self._phase}: {self._last}", file=self.out, flush=True)
        self._last = ""


def _apscheduler_noise(record: logging.LogRecord) -> bool:
    """False for APScheduler warnings (a tick skipped while the previous one runs, a run time
    missed) and for its report of a job cancelled at shutdown."""
    if record.levelno < logging.ERROR:
        return False
    exc = record.exc_info[0] if record.exc_info else None
    return not (exc is not None and issubclass(exc, asyncio.CancelledError))


_QUANTIZATION_DIR = f"{os.sep}onnxruntime{os.sep}quantization{os.sep}"


def _quantization_advice(record: logging.LogRecord) -> bool:
    """False for ONNX Runtime quantization's warnings (it logs them on the root logger, e.g. "Please
    consider to run pre-processing before quantization" for every int8 variant generated)."""
    return record.levelno >= logging.ERROR or _QUANTIZATION_DIR not in record.pathname


@contextlib.contextmanager
def quiet_library_logs() -> Iterator[None]:
    """Keep library chatter off the demo's display while it runs: APScheduler's warnings and
    shutdown cancellations, ONNX Runtime quantization's log warnings and the Python warnings of
    ``onnxruntime.quantization``. Errors pass, and costscale's own records are untouched."""
    sched = logging.getLogger("apscheduler.scheduler")
    execs = logging.getLogger("apscheduler.executors.default")
    root = logging.getLogger()
    sched.addFilter(_apscheduler_noise)
    execs.addFilter(_apscheduler_noise)
    root.addFilter(_quantization_advice)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", module=r"onnxruntime\.quantization(\.|$)")
            yield
    finally:
        sched.removeFilter(_apscheduler_noise)
        execs.removeFilter(_apscheduler_noise)
        root.removeFilter(_quantization_advice)


def demo_config(state_dir: Path, endpoint: str, ami: str, budget: float, rate: float,
                policy: str = "kairos", pinned_pool: dict[str, int] | None = None) -> Config:
    return Config.model_validate({
        "cluster": f"demo-{secrets.token_hex(3)}",
        "region": "us-east-1",
        "budget_per_hour": budget,
        "objective": "min_cost",
        "headroom": 0.5,
        "models": [{"name": DEMO_MODEL, "onnx": "builtin:mlp", "qos_ms": DEMO_QOS_MS, "max_batch": 1000,
                    "profile": DEMO_MODEL}],
        "instance_types": [{"type": t, "max": n} for t, n in DEMO_TYPES.items()],
        "launch": {"ami_id": ami, "tags": {"purpose": "costscale-demo"}},
        "pinned_pool": pinned_pool,
        "dispatcher": {"listen": "127.0.0.1:0", "policy": policy, "on_deadline": "drop",
                       "cluster_token": secrets.token_hex(16)},
        "intervals": {"fleet_s": 4, "model_s": 1, "reconcile_s": 20},
        "workload": {"batch_dist": "deeprecsys", "expected_qps": rate},
        "state_path": str(state_dir / "state.db"),
        "on_shutdown": "terminate",
        "aws": {"endpoint_url": endpoint},
    })


async def _load(target: str, model: str, duration: float, rate1: float, rate2: float, seed: int,
                stats: LoadStats, stop: asyncio.Event, on_tick, trace: Workload | None = None) -> None:
    """Open-loop Poisson arrivals: rate1 for the first half, rate2 for the second; or the
    ``trace``'s arrivals (s from the start) and batch sizes, in real time."""
    from dispatcher.proto import costscale_pb2 as pb
    from dispatcher.proto import costscale_pb2_grpc as pbg

    rng = np.random.default_rng(seed)
    batches = trace.batches if trace is not None else sample_batches("deeprecsys", 200_000, rng)
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pbg.InferenceStub(channel)
        pending: set[asyncio.Task[None]] = set()

        async def one(i: int) -> None:
            t0 = time.perf_counter()
            try:
                reply = await stub.Submit(pb.SubmitRequest(model=model, batch_size=int(batches[i % len(batches)]),
                                                           idempotency_key=f"demo-{seed}-{i}"), timeout=10.0)
            except grpc.aio.AioRpcError as exc:
                stats.record_error(exc.code().name)
                return
            stats.record_served((time.perf_counter() - t0) * 1000.0, time.monotonic(), reply.instance_type,
                                reply.provider)

        start = time.monotonic()
        next_t = float(trace.arrivals[0]) if trace is not None and len(trace) else 0.0
        i = 0
        last_tick = 0.0
        while not stop.is_set():
            elapsed = time.monotonic() - start
            if elapsed >= duration:
                break
            if elapsed - last_tick >= 0.5:
                last_tick = elapsed
                on_tick(elapsed, trace_rate(trace, elapsed) if trace is not None
                        else rate1 if elapsed < duration / 2 else rate2)
            if elapsed >= next_t and trace is not None and i >= len(trace):
                await asyncio.sleep(min(duration - elapsed, 0.05))
                continue
            if elapsed >= next_t:
                task = asyncio.create_task(one(i))
                pending.add(task)
                task.add_done_callback(pending.discard)
                stats.sent += 1
                stats.sent_log.append((elapsed, int(batches[i % len(batches)])))
                i += 1
                if trace is not None:
                    next_t = float(trace.arrivals[i]) if i < len(trace) else duration
                    continue
                rate = rate1 if next_t < duration / 2 else rate2
                next_t += float(rng.exponential(1.0 / rate))
                continue
            await asyncio.sleep(min(next_t - elapsed, 0.05))
        if pending:
            await asyncio.wait(pending, timeout=15.0)


def trace_rate(trace: Workload, t: float, window_s: float = 10.0) -> float:
    """The trace's arrival rate over the ``window_s`` before ``t`` (q/s), for the display."""
    a = trace.arrivals
    return float(np.searchsorted(a, t) - np.searchsorted(a, t - window_s)) / window_s


def _table(rows: list[tuple[str, str]]) -> str:
    w = max(len(k) for k, _ in rows)
    return "\n".join(f"  {k.ljust(w)}  {v}" for k, v in rows)


async def run_demo(duration: float = 60.0, rate1: float = 12.0, rate2: float = 36.0, budget: float = 2.5,
                   seed: int = 1, as_json: bool = False, quiet: bool = False, policy: str = "kairos",
                   pinned_pool: dict[str, int] | None = None, trace: Workload | None = None) -> int:
    from daemon.app import Daemon
    from daemon.local.runner import LocalRunner

    out = sys.stderr if as_json else sys.stdout
    stop = asyncio.Event()
    signals: list[int] = []

    def on_signal(signum: int) -> None:
        signals.append(signum)
        stop.set()

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal, sig)

    cloud = EmbeddedCloud("demo")
    endpoint = cloud.endpoint
    daemon: Daemon | None = None
    runner: LocalRunner | None = None
    stats = LoadStats()
    peak_pool: dict[str, int] = {}
    peak_cost = 0.0
    result: dict[str, Any] = {}
    interrupted = False
    try:
        if trace is not None:
            duration, rate1 = trace_span_and_rate(trace)
        cfg = demo_config(cloud.state_dir, endpoint, cloud.ami, budget, rate1, policy, pinned_pool)
        load_text = (f"trace of {len(trace)} queries over {duration:.0f} s" if trace is not None
                     else f"load {rate1:g} -> {rate2:g} q/s at t={duration / 2:.0f}s")
        print(f"costscale demo: moto EC2 on {endpoint}, budget {budget:g} $/hr, model {DEMO_MODEL} "
              f"(QoS p99 {DEMO_QOS_MS:g} ms), {load_text}", file=out)

        holder: dict[str, LocalRunner] = {}

        async def on_fleet_change(instances):  # the local runner follows the fleet
            if "runner" in holder:
                await holder["runner"].sync(instances)

        daemon = Daemon(cfg, None, on_fleet_change=on_fleet_change, listen="127.0.0.1:0")
        await daemon.start()
        target = f"127.0.0.1:{daemon.port}"
        runner = LocalRunner(target, daemon.dispatcher.cluster_token(), [(DEMO_MODEL, "builtin:mlp", DEMO_MODEL)],
                             profiles_csv=cfg.profiles)
        holder["runner"] = runner
        await daemon.fleet_tick("start")

        # wait (bounded) for the first worker (a trace: the whole first pool, as a replay starts warm)
        t_wait = time.monotonic()
        while not stop.is_set() and time.monotonic() - t_wait < 30 + 30 * (trace is not None):
            if trace is None and len(daemon.dispatcher.workers) > 0:
                break
            serving = daemon.dispatcher.workers.values()
            if trace is not None and sum(1 for w in serving if not w.draining) >= sum(daemon.status.target.values()):
                break
            await asyncio.sleep(0.2)

        prices = cfg.prices(allowed_only=True)
        ledger = CostLedger(prices, budget)       # dollars: the pool's $/hr over the load, sampled each tick
        ledger.observe(0.0, daemon.status.pool())
        targets: list[tuple[float, dict[str, int]]] = [(0.0, dict(daemon.status.target))]
        display = LiveDisplay(out)

        def tick(elapsed: float, rate: float) -> None:
            nonlocal peak_cost
            pool = daemon.status.pool()
            ledger.observe(elapsed, pool)
            if daemon.status.target != targets[-1][1]:
                targets.append((round(elapsed, 3), dict(daemon.status.target)))
            cost = pool_cost(pool, prices)
            if cost >= peak_cost:
                peak_cost = cost
                peak_pool.clear()
                peak_pool.update(pool)
            if quiet or as_json:
                return
            p99 = fmt_ms(stats.recent_pct(99, time.monotonic()))
            pool_s = " ".join(f"{t}x{n}" for t, n in sorted(pool.items())) or "-"
            display.show(rate, f"t={elapsed:4.0f}s  load {rate:4.0f} q/s  sent {stats.sent:5d}  ok {stats.ok:5d}  "
                               f"missed {stats.misses:4d} ({fmt_pct(stats.miss_pct())})  "
                               f"p99 last {P99_WINDOW_S:g}s {p99:>9}  workers {len(daemon.dispatcher.workers):2d}  "
                               f"pool {pool_s}  ${cost:.3f}/hr")

        await _load(target, DEMO_MODEL, duration, rate1, rate2, seed, stats, stop, tick, trace)
        interrupted = stop.is_set()
        ledger.close(duration)
        hindsight = (hindsight_cost(cfg, daemon.profiles, {DEMO_MODEL: stats}, duration)
                     if stats.sent_log and not interrupted else math.nan)
        if not (quiet or as_json):
            display.close()
        pool_end = daemon.status.pool()
        cost_end = pool_cost(pool_end, prices)
        served_by = dict(sorted(stats.served_by_type.items()))
        # ---- teardown: terminate every instance, stop every process -----------------------------
        await daemon.stop(grace=5.0)
        await runner.stop_all()
        all_inst = cloud.instances(cfg.cluster)
        live_after = cloud.live_instances(cfg.cluster)
        result = {
            "sent": stats.sent, "served": stats.ok, "slo_violations": stats.violations, "dropped": stats.dropped,
            "slo_misses": stats.misses, "slo_miss_pct": _json_num(stats.miss_pct()),
            "errors": stats.errors, "p50_ms": _json_num(stats.pct(50)), "p99_ms": _json_num(stats.pct(99)),
            "qos_ms": DEMO_QOS_MS, "served_by_type": served_by, "providers": stats.providers,
            "pool_at_end": pool_end, "cost_per_hour_at_end": round(cost_end, 4),
            "peak_pool": dict(peak_pool), "peak_cost_per_hour": round(peak_cost, 4), "budget_per_hour": budget,
            "instances_launched": len(all_inst), "instances_live_after": live_after,
            "worker_pids": runner.started_pids, "workers_alive_after": runner.alive_pids(),
            "plans_applied": daemon.status.plans_applied, "interrupted": interrupted,
            "cost_usd": round(ledger.cost_usd, 6), "hindsight_cost_usd": _json_num(hindsight),
            "slo_attainment": round((stats.ok - stats.violations) / stats.sent, 6) if stats.sent else None,
            "targets": [{"t_s": t, "pool": p} for t, p in targets],
            "dispatcher": daemon.dispatcher.stats() if daemon.dispatcher else {},
        }
        if as_json:
            print(json.dumps(result))
        else:
            err = ", ".join(f"{k} {v}" for k, v in sorted(stats.errors.items())) or "none"
            p50, p99 = stats.pct(50), stats.pct(99)
            lat = "-" if math.isnan(p99) else f"{p50:.1f} / {p99:.1f} ms (client-side, end to end)"
            print("\ncostscale demo summary" + (" (interrupted)" if interrupted else ""), file=out)
            print(_table([
                ("queries sent / served", f"{stats.sent} / {stats.ok}   errors: {err}"),
                ("SLO misses", f"{stats.misses} of {stats.answered} answered ({fmt_pct(stats.miss_pct())}): "
                               f"{stats.violations} over {DEMO_QOS_MS:g} ms, {stats.dropped} dropped"),
                ("latency p50 / p99", lat),
                ("served by type", ", ".join(f"{t} {n}" for t, n in served_by.items()) or "-"),
                ("execution providers", ", ".join(f"{p} {n}" for p, n in stats.providers.items()) or "-"),
                ("peak pool", " ".join(f"{t}x{n}" for t, n in sorted(peak_pool.items())) or "-"),
                ("peak $/hr vs budget", f"{peak_cost:.4f} / {budget:g}"),
                ("dollars spent", f"${ledger.cost_usd:.4f}" + ("" if math.isnan(hindsight) else
                                  f" (hindsight reference for this load: ${hindsight:.4f}, "
                                  f"{ledger.cost_usd / hindsight:.2f}x; README \"Replay\")" if hindsight > 0 else "")),
                ("pool at end of load", " ".join(f"{t}x{n}" for t, n in sorted(pool_end.items())) or "-"),
                ("instances launched", f"{len(all_inst)} (all terminated: {'yes' if not live_after else 'NO ' + str(live_after)})"),
                ("worker processes", f"{len(runner.started_pids)} started, {len(runner.alive_pids())} left running"),
            ]), file=out)
        if interrupted:     # 128 + the signal's number, as a shell reports it (130 for Ctrl-C)
            return 128 + int(signals[0] if signals else signal.SIGINT)
        ok = not live_after and not runner.alive_pids() and stats.ok > 0
        return 0 if ok else 1
    finally:
        if daemon is not None and not daemon._stop.is_set():
            try:
                await daemon.stop(grace=2.0)
            except Exception:
                logging.getLogger("costscale").exception("demo: stopping the daemon failed")
        if runner is not None:
            await runner.stop_all()
        cloud.stop()


def trace_span_and_rate(trace: Workload) -> tuple[float, float]:
    """A trace's length (to a second past its last query) and its first minute's rate, which the
    demo declares as its expected demand (at least 0.1 q/s)."""
    duration = float(trace.arrivals[-1]) + 1.0
    return duration, max(float(np.searchsorted(trace.arrivals, 60.0)) / min(60.0, duration), 0.1)


def hindsight_cost(cfg: Config, profiles: ProfileTable, sent: Mapping[str, LoadStats], duration: float) -> float:
    """What the replay's hindsight reference (``sim.replay.baselines``, every model planned jointly)
    spends on the load sent (model → its stats' ``sent_log``), with the daemon's own profiles."""
    from sim.replay.run import ReplaySpec
    from sim.replay.baselines import run_baseline

    wl = {}
    for model, stats in sent.items():
        if stats.sent_log:
            t, b = zip(*stats.sent_log)
            wl[model] = Workload(np.asarray(t, dtype=float), np.asarray(b, dtype=np.int64))
    try:
        return run_baseline("hindsight", cfg, profiles, wl, duration, ReplaySpec()).ledger.cost_usd
    except Exception:  # noqa: BLE001 - a reference only; the summary says "-" without it
        return math.nan


def replay_like_demo(trace: Workload, state_dir: Path) -> Any:
    """``trace`` through ``costscale replay`` as ``costscale demo --trace`` runs it live: the demo's
    config, no boot delay (the embedded cloud's instances run at once), 2 s for a worker to load its
    model (the live side's validation, issue #12; ``tests/test_live_vs_replay.py`` and
    ``bench/live_vs_replay_bench.py``). Returns the ``sim.replay.run.ReplayRun``."""
    from config.profiles import load_profiles_csv
    from sim.replay.run import ReplaySpec, replay

    duration, rate1 = trace_span_and_rate(trace)
    cfg = demo_config(state_dir, "http://127.0.0.1:1", "ami-1", 2.5, rate1)
    return replay(cfg, load_profiles_csv(cfg.profiles), trace, duration,
                  ReplaySpec(boot_s={"gpu": 0.0, "cpu": 0.0, "inferentia": 0.0}, load_s=2.0))
