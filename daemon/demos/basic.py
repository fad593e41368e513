"""``costscale demo``: the whole product on one machine, against an embedded EC2 (moto) on 127.0.0.1.

Starts moto in server mode on a free loopback port, runs the real daemon (planner, EC2 provider via
boto3 ``endpoint_url``, gRPC dispatcher, fleet loop) against it, one local worker process per
running instance (real ONNX inference padded to the instance type's AWS latency profile), and drives
an open-loop Poisson load through the public gRPC API with a load step half-way. At the end (or on
Ctrl-C: exit 130) it terminates every instance and stops every process it started.

This module decides the run's course and its verdict: what is sampled each tick (the pool's
dollars, its peak, the targets), the summary's figures, the dollars of the hindsight reference for
the load sent (:func:`hindsight_cost`), and the exit status (0 only when every instance and worker
is gone and a query was served). Its parts: the cluster (:mod:`daemon.demos.demo_config`), the load
and how its answers count (:mod:`daemon.demos.load`: SLO misses are the queries served over the
QoS target and the dropped ones), and what is shown (:mod:`daemon.demos.display`: one live line on
a terminal, elsewhere one line per load phase, library chatter kept off).
"""
from __future__ import annotations

import asyncio
import json
import logging
import math
import signal
import sys
import time
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from config.profiles import ProfileTable
from config.schema import Config
from daemon.demos.demo_config import DEMO_MODEL, DEMO_QOS_MS, demo_config
from daemon.demos.display import LiveDisplay, fmt_ms, fmt_pct, json_num, summary_table
from daemon.demos.load import P99_WINDOW_S, LoadStats, send_load, trace_span_and_rate
from daemon.local.embedded import EmbeddedCloud
from scaler.planner.pools import pool_cost
from sim.replay.ledger import CostLedger
from sim.workload import Workload


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

        await send_load(target, DEMO_MODEL, duration, rate1, rate2, seed, stats, stop, tick, trace)
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
            "slo_misses": stats.misses, "slo_miss_pct": json_num(stats.miss_pct()),
            "errors": stats.errors, "p50_ms": json_num(stats.pct(50)), "p99_ms": json_num(stats.pct(99)),
            "qos_ms": DEMO_QOS_MS, "served_by_type": served_by, "providers": stats.providers,
            "pool_at_end": pool_end, "cost_per_hour_at_end": round(cost_end, 4),
            "peak_pool": dict(peak_pool), "peak_cost_per_hour": round(peak_cost, 4), "budget_per_hour": budget,
            "instances_launched": len(all_inst), "instances_live_after": live_after,
            "worker_pids": runner.started_pids, "workers_alive_after": runner.alive_pids(),
            "plans_applied": daemon.status.plans_applied, "interrupted": interrupted,
            "cost_usd": round(ledger.cost_usd, 6), "hindsight_cost_usd": json_num(hindsight),
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
            print(summary_table([
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
    model (the live side's validation, issue #12; ``tests/replay/test_live_vs_replay.py`` and
    ``bench/replay/live_vs_replay_bench.py``). Returns the ``sim.replay.run.ReplayRun``."""
    from config.profiles import load_profiles_csv
    from sim.replay.run import ReplaySpec, replay

    duration, rate1 = trace_span_and_rate(trace)
    cfg = demo_config(state_dir, "http://127.0.0.1:1", "ami-1", 2.5, rate1)
    return replay(cfg, load_profiles_csv(cfg.profiles), trace, duration,
                  ReplaySpec(boot_s={"gpu": 0.0, "cpu": 0.0, "inferentia": 0.0}, load_s=2.0))


__all__ = ["hindsight_cost", "replay_like_demo", "run_demo"]
