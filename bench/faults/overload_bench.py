"""The dispatcher past saturation (issue #40, the soak's "CANCELLED under overload"): how every
unary Submit ends, counted at the client by status code and in the dispatcher's own outcome ledger
(what ``costscale_queries_total`` exports), which must agree query for query.

Three processes, as ``bench/dispatch/_loopback.py`` runs its parts: no-op workers (``_loopback
--role workers``), one dispatcher (this file's ``--role dispatcher``: the soak's model and policy,
``on_deadline: drop``), and one open-loop client (``--role load``: Poisson arrivals at ``--rate``
q/s for ``--seconds``, each a unary Submit with a ``--timeout`` deadline and an idempotency key, as
the soak sends them). ``--hog F`` stands for a contended host (the soak's 2 cores ran at load
15-23): a task in the dispatcher's event loop burns F of every 10 ms, so the loop saturates at a
rate one client process can offer.

Each run's dispatcher is either ``before`` (as before the fix: gRPC's own pending-call limits, 1000
soft / 3000 hard, and nothing refused for calls waiting in gRPC) or ``after`` (as configured:
``dispatcher.overload``), alternating in one invocation so both see the same host.

Usage: ``python bench/faults/overload_bench.py [--modes before,after] [--rounds 1] [--rate 1500]
[--seconds 6] [--hog 0.6] [--timeout 10] [--limit N] [--json]``; prints, per run, the client's and
the dispatcher's counts by code, the refusals' details, how long each code took at the client, the
answers within the SLO and the most calls seen waiting in gRPC. A run takes about ``--seconds`` + 5 s.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import argparse  # noqa: E402
import asyncio  # noqa: E402
import collections  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
from typing import Any, Sequence  # noqa: E402

import numpy as np  # noqa: E402

from bench.dispatch import _loopback  # noqa: E402
from bench.replicas.replica_tput_bench import _line  # noqa: E402

#: the dispatcher's model (the soak's: rm2 at a 350 ms SLO, its queries dropped when they cannot meet it)
QOS_MS = 350.0
#: the hog's period (s): it burns ``hog`` of each
HOG_PERIOD_S = 0.01
#: how long a part may take to start or to stop (s)
PART_TIMEOUT_S = 60.0
#: what a run's dispatcher is: ``before`` as it was before this fix (gRPC's own pending-call limits,
#: nothing refused for a backlog: ``dispatcher.overload`` switched off), ``after`` as configured
MODES = ("before", "after")


def overload_config(workers: int, limit: int | None = None) -> Any:
    """The soak's dispatcher (rm2 at 350 ms, kairos, ``on_deadline: drop``) on the no-op workers' types;
    ``limit``: its ``dispatcher.overload_pending_calls`` (None: the default)."""
    from config.schema import Config

    extra = {} if limit is None else {"overload_pending_calls": limit}
    return Config.model_validate({
        "cluster": "overload", "budget_per_hour": 10,
        "models": [{"name": "rm2", "qos_ms": QOS_MS, "max_batch": 1000}],
        "instance_types": [{"type": t} for t in _loopback.TYPES[:max(1, min(workers, 4))]],
        "launch": {"ami_id": "ami-0123456789abcdef0"},
        "dispatcher": {"listen": "127.0.0.1:0", "policy": "kairos", "on_deadline": "drop", **extra},
    })


async def _hog(share: float) -> None:
    """Burn ``share`` of every :data:`HOG_PERIOD_S` in this event loop (a contended host's stand-in)."""
    while True:
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < share * HOG_PERIOD_S:
            pass
        await asyncio.sleep((1.0 - share) * HOG_PERIOD_S)


async def _watch(backlog: Any) -> None:
    """Read the calls gRPC holds for a handler every 5 ms (its peak, also where nothing is refused for it)."""
    while True:
        backlog.pending()
        await asyncio.sleep(0.005)


async def dispatcher_main(workers: Sequence[Sequence[str]], hog: float, mode: str, limit: int | None) -> None:
    """The ``dispatcher`` role: prints ``{"port": P}``; when its stdin closes, its ledger and stats."""
    import dispatcher.server as server_module
    from config.profiles import load_profiles_csv
    from dispatcher.latency_model import LatencyModel

    if mode == "before":          # gRPC's defaults (1000 pending, random drops up to 3000), no refusal for a backlog
        server_module.server_options = lambda _n: []
    d = server_module.Dispatcher(overload_config(len(workers), limit), LatencyModel.from_profiles(load_profiles_csv()))
    backlog = d.admission.backlog
    port = await d.start("127.0.0.1:0")
    if mode == "before":              # nothing refused for the calls gRPC holds; still read for the peak below
        backlog.refusal = lambda slo_s=None: None  # type: ignore[method-assign]
    for iid, itype, address in workers:
        d.add_worker_direct(iid, itype, address)
    hogging = asyncio.ensure_future(_hog(hog)) if hog > 0 else None
    peak = asyncio.ensure_future(_watch(backlog))
    print(json.dumps({"port": port}), flush=True)
    cpu0, wall0 = time.process_time(), time.monotonic()
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    cpu_share = (time.process_time() - cpu0) / (time.monotonic() - wall0)
    peak.cancel()
    if hogging is not None:
        hogging.cancel()
    codes: collections.Counter[str] = collections.Counter()
    for m in d.outcomes.models.values():
        codes.update(m.queries)
    stats = {**d.stats(), "backlog_peak": backlog.peak}
    await d.stop(1.0)
    print(json.dumps({"codes": dict(codes), "stats": stats, "cpu_share": cpu_share}), flush=True)


async def load_main(target: str, rate: float, seconds: float, timeout: float, seed: int) -> None:
    """The ``load`` role: open-loop Poisson Submits; prints one JSON line of what they ended with."""
    import grpc

    from dispatcher.proto import costscale_pb2 as pb, costscale_pb2_grpc as pbg

    rng = np.random.default_rng(seed)
    codes: collections.Counter[str] = collections.Counter()
    details: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    took: dict[str, list[float]] = collections.defaultdict(list)
    async with grpc.aio.insecure_channel(target) as ch:
        stub = pbg.InferenceStub(ch)

        async def one(i: int, batch: int) -> None:
            t0 = time.monotonic()
            try:
                await stub.Submit(pb.SubmitRequest(model="rm2", batch_size=batch, idempotency_key=f"ov-{seed}-{i}"),
                                  timeout=timeout)
                code, detail = "OK", ""
            except grpc.aio.AioRpcError as exc:
                code, detail = exc.code().name, exc.details() or ""
            codes[code] += 1
            took[code].append(time.monotonic() - t0)
            if code != "OK":
                details[code][detail[:60]] += 1

        for i in range(20):                       # warm: the channel, the workers' streams
            await one(-1 - i, 1)
        warm = dict(codes)
        codes.clear(), details.clear(), took.clear()
        pending: set[asyncio.Task[None]] = set()
        start, next_t, sent = time.monotonic(), 0.0, 0
        while (el := time.monotonic() - start) < seconds:
            if el >= next_t:
                t = asyncio.ensure_future(one(sent, int(rng.integers(1, 101))))
                pending.add(t)
                t.add_done_callback(pending.discard)
                sent += 1
                next_t += float(rng.exponential(1.0 / rate))
                continue
            await asyncio.sleep(min(next_t - el, 0.01))
        if pending:
            await asyncio.wait(pending)
    in_slo = sum(1 for t in took.get("OK", []) if t <= QOS_MS / 1000.0)
    print(json.dumps({"sent": sent, "offered_qps": sent / seconds, "codes": dict(codes), "ok_in_slo": in_slo, "warm": warm,
                      "details": {c: dict(v.most_common(4)) for c, v in details.items()},
                      "took_s": {c: [round(float(np.min(v)), 4), round(float(np.median(v)), 4),
                                     round(float(np.max(v)), 4)] for c, v in took.items()}}), flush=True)


def _spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def one_run(mode: str, rate: float, seconds: float, hog: float, timeout: float, workers: int, seed: int,
            limit: int | None = None) -> dict[str, Any]:
    """One dispatcher (``mode``: one of :data:`MODES`) past saturation; the client's and the dispatcher's counts."""
    wp = _spawn(_loopback.__file__, "--role", "workers", "--workers", str(workers))
    dp = None
    try:
        addresses = json.loads(_line(wp))
        owned = [[f"i-{k}", _loopback.TYPES[k % 4], a] for k, a in enumerate(addresses)]
        dp = _spawn(__file__, "--role", "dispatcher", "--owned", json.dumps(owned), "--hog", str(hog), "--mode", mode,
                    *(["--limit", str(limit)] if limit is not None else []))
        port = json.loads(_line(dp))["port"]
        cp = subprocess.run([sys.executable, __file__, "--role", "load", "--target", f"127.0.0.1:{port}",
                             "--rate", str(rate), "--seconds", str(seconds), "--timeout", str(timeout),
                             "--seed", str(seed)], capture_output=True, text=True, timeout=seconds + timeout + 60)
        if cp.returncode != 0:
            raise RuntimeError(f"the client exited {cp.returncode}: {cp.stderr[-2000:]}")
        client = json.loads(cp.stdout.strip().splitlines()[-1])
        out, _ = dp.communicate(timeout=PART_TIMEOUT_S)
        daemon = json.loads(out.strip().splitlines()[-1])
    finally:
        for p in (dp, wp):
            if p is not None and p.poll() is None:
                p.communicate(timeout=PART_TIMEOUT_S)
    daemon_codes = collections.Counter(daemon["codes"])
    daemon_codes.subtract(client["warm"])          # the client's warm-up queries, counted by the dispatcher too
    return {"mode": mode, "rate": rate, "hog": hog, "timeout_s": timeout, "seconds": seconds, "client": client,
            "daemon_codes": {c: n for c, n in daemon_codes.items() if n}, "daemon_stats": daemon["stats"],
            "daemon_cpu_share": daemon["cpu_share"],
            "uncounted": client["sent"] - sum(daemon_codes.values())}


def show(r: dict[str, Any]) -> None:
    c = r["client"]
    print(f"{r['mode']}: offered {c['offered_qps']:.0f} q/s for {r['seconds']:g} s (hog {r['hog']:g}, timeout "
          f"{r['timeout_s']:g} s): {c['sent']} sent; most calls waiting in gRPC {r['daemon_stats']['backlog_peak']}")
    for code in sorted(set(c["codes"]) | set(r["daemon_codes"])):
        detail = "; ".join(f"{n}x {d!r}" for d, n in list(c["details"].get(code, {}).items())[:2])
        print(f"  {code:<18} client {c['codes'].get(code, 0):>6}  dispatcher {r['daemon_codes'].get(code, 0):>6}  "
              f"took min/median/max {c['took_s'].get(code, '-')} s  {detail}")
    print(f"  OK within the {QOS_MS:g} ms SLO at the client: {c['ok_in_slo']}; not counted by the dispatcher: "
          f"{r['uncounted']}; the dispatcher's CPU: {r['daemon_cpu_share']:.2f} cores")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--role", default="bench", choices=["bench", "dispatcher", "load"])
    ap.add_argument("--modes", default=",".join(MODES), help="dispatchers to run, alternating: before, after")
    ap.add_argument("--rounds", type=int, default=1, help="runs of each mode")
    ap.add_argument("--rate", type=float, default=1500.0, help="offered q/s (Poisson)")
    ap.add_argument("--seconds", type=float, default=6.0, help="how long the load runs")
    ap.add_argument("--hog", type=float, default=0.6, help="share of the dispatcher's loop burned by a hog (0: none)")
    ap.add_argument("--timeout", type=float, default=10.0, help="each Submit's deadline (s), the soak's 10")
    ap.add_argument("--limit", type=int, default=None, help="dispatcher.overload_pending_calls (default: its default)")
    ap.add_argument("--workers", type=int, default=4, help="no-op workers")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true", help="print each run as one JSON line")
    ap.add_argument("--mode", default="after", choices=MODES, help="(dispatcher) which one")
    ap.add_argument("--owned", default="[]", help="(dispatcher) JSON list of [id, type, address]")
    ap.add_argument("--target", default="", help="(load) the gRPC target")
    a = ap.parse_args()
    modes = [m for m in a.modes.split(",") if m]
    if (not 0 <= a.hog < 1 or min(a.rate, a.seconds, a.timeout) <= 0 or a.rounds < 1 or not modes
            or set(modes) - set(MODES) or (a.limit is not None and a.limit < 1)):
        print("overload_bench: --hog in [0, 1); --rate, --seconds, --timeout > 0; --rounds, --limit >= 1; "
              f"--modes of {', '.join(MODES)}", file=sys.stderr)
        sys.exit(2)
    if a.role == "dispatcher":
        asyncio.run(dispatcher_main(json.loads(a.owned), a.hog, a.mode, a.limit))
        return
    if a.role == "load":
        asyncio.run(load_main(a.target, a.rate, a.seconds, a.timeout, a.seed))
        return
    for k in range(a.rounds):
        for mode in modes:
            r = one_run(mode, a.rate, a.seconds, a.hog, a.timeout, a.workers, a.seed + k, a.limit)
            if a.json:
                print(json.dumps(r), flush=True)
            else:
                show(r)


if __name__ == "__main__":
    main()
