"""``costscale demo --serve``: a local sandbox, the way ``kind`` or ``serve run`` let people try
things on a laptop. The embedded cluster of ``costscale demo`` (moto EC2 on loopback, the real
daemon, one local worker process per running instance) stays up until Ctrl-C, without the
scripted load, for a user's own clients.

Once the first worker serves, it prints the endpoints, one per line -- ``api: HOST:PORT`` (the
costscale API), ``oip: HOST:PORT`` (the Open Inference Protocol, the same port), ``metrics:
http://HOST:PORT/metrics`` and ``ec2: URL`` -- then ``ready``, then a client example to paste. On
Ctrl-C (or SIGTERM) it terminates every instance and stops every process it started, and exits 0.
A port that cannot be bound, or a first worker that never registers, is one line and exit 1.
"""
from __future__ import annotations

import asyncio
import signal
import sys
import time
from typing import TextIO

from config.sections.dispatcher import MetricsSpec
from daemon.demos.demo_config import DEMO_MODEL, demo_config
from daemon.local.embedded import EmbeddedCloud

#: how long the sandbox waits for its first worker before it gives up (s)
READY_TIMEOUT_S = 120.0


def client_example(api: str, metrics_url: str | None) -> str:
    """Lines to paste into a shell (not indented: the Python goes through a here-document)."""
    lines = ["", "# try it (in another shell):", f"costscale status --dispatcher {api}",
             "python - <<'EOF'   # pip install 'tritonclient[grpc]>=2.41,<2.42'",
             "import numpy as np, tritonclient.grpc as g",
             f"c = g.InferenceServerClient(url={api!r})",
             'x = g.InferInput("x", [1, 64], "FP32"); x.set_data_from_numpy(np.random.rand(1, 64).astype(np.float32))',
             f'r = c.infer({DEMO_MODEL!r}, [x], parameters={{"latency_slo_ms": 500}})',
             'print(r.as_numpy("y"), r.get_response(as_json=True)["parameters"])',
             "EOF"]
    if metrics_url:
        lines.append(f"curl -s {metrics_url} | grep ^costscale_pool")
    lines.append("# Ctrl-C here stops it and terminates every instance.")
    return "\n".join(lines)


async def run_sandbox(budget: float = 2.5, listen: str = "127.0.0.1:50051", metrics: str | None = "127.0.0.1:9464",
                      rate: float = 5.0, pinned_pool: dict[str, int] | None = None, out: TextIO = sys.stdout) -> int:
    """The sandbox (see the module docstring); ``rate``: the demand the planner assumes until it
    measures one; ``pinned_pool``: hold this pool instead of planning."""
    from daemon.app import Daemon
    from daemon.aws.wiring import DaemonError
    from daemon.local.runner import LocalRunner

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)

    cloud = EmbeddedCloud("sandbox")   # moto on loopback, throwaway credentials
    endpoint = cloud.endpoint
    daemon: Daemon | None = None
    runner: LocalRunner | None = None
    holder: dict[str, LocalRunner] = {}

    async def on_fleet_change(instances) -> None:  # type: ignore[no-untyped-def]
        if "runner" in holder:
            await holder["runner"].sync(instances)

    try:
        cfg = demo_config(cloud.state_dir, endpoint, cloud.ami, budget, rate, pinned_pool=pinned_pool)
        cfg = cfg.model_copy(update={"metrics": MetricsSpec(listen=metrics)})
        daemon = Daemon(cfg, None, on_fleet_change=on_fleet_change, listen=listen)
        try:
            await daemon.start()
        except DaemonError as exc:
            print(f"costscale demo --serve: {exc}", file=sys.stderr)
            return 1
        api = f"{listen.rpartition(':')[0]}:{daemon.port}"
        runner = holder["runner"] = LocalRunner(f"127.0.0.1:{daemon.port}", daemon.dispatcher.cluster_token(),
                                                [(DEMO_MODEL, "builtin:mlp", DEMO_MODEL)], profiles_csv=cfg.profiles)
        await daemon.fleet_tick("start")
        start = time.monotonic()
        while not stop.is_set() and not (daemon.dispatcher and daemon.dispatcher.workers):
            if time.monotonic() - start > READY_TIMEOUT_S:
                print(f"costscale demo --serve: no worker registered within {READY_TIMEOUT_S:g} s", file=sys.stderr)
                return 1
            await asyncio.sleep(0.1)
        if stop.is_set():
            return 0
        mport = daemon.metrics.port if daemon.metrics is not None else 0
        metrics_url = f"http://{(metrics or '').rpartition(':')[0]}:{mport}/metrics" if mport else None
        print(f"api: {api}", file=out)
        print(f"oip: {api}", file=out)
        print(f"metrics: {metrics_url or 'none'}", file=out)
        print(f"ec2: {endpoint}", file=out)
        print("ready", file=out)
        print(client_example(api, metrics_url), file=out, flush=True)
        await stop.wait()
        return 0
    finally:
        live: list[str] = []
        if daemon is not None:
            await daemon.stop(grace=2.0)   # on_shutdown: terminate -- every instance goes
            try:
                live = cloud.live_instances(cfg.cluster)
            except Exception as exc:  # noqa: BLE001 - say so rather than claim a clean stop
                live = [f"(cannot list: {type(exc).__name__})"]
        if runner is not None:
            await runner.stop_all()
        cloud.stop()
        print("costscale demo --serve: stopped; " + (f"still live: {', '.join(live)}" if live
              else "every instance terminated, every worker stopped"), file=out, flush=True)
