"""Local workers that outlive any one dispatcher replica (the embedded default with
``lease.replicas``: ``costscale demo --replicas``, the replica end-to-end tests).

On AWS a worker runs on its instance: a control host that dies takes no worker with it, and the
worker registers through the one address it is given (``dispatcher.advertise``: the balancer in
front of the replicas). ``costscale run --local-workers`` cannot stand for that with replicas (its
workers die with the replica that started them, and each replica would start its own for the same
instance), so this process does it instead: it lists the cluster's instances in the emulated EC2
(the same ``Ec2Cloud.list_managed`` the fleet loop reads) every ``interval_s`` and keeps one local
worker per running instance (``daemon.local.runner.LocalRunner``), each registering at
``--dispatcher`` (a balancer, or ``ipv4:HOST:PORT,HOST:PORT``). An adapter: it decides nothing.

Run: ``python -m daemon.local.fleet CONFIG --dispatcher TARGET``; SIGTERM stops every worker.
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from config.errors import ConfigError, UsageError
from config.checks import load_checked_config
from daemon.local.runner import LocalRunner
from daemon.local.embedded import on_this_host
from scaler.cloud.provider import CloudError
from scaler.cloud.ec2 import Ec2Cloud

log = logging.getLogger("costscale.local")

#: how often the emulated cloud is listed (s)
INTERVAL_S = 0.5


async def follow(cloud: Ec2Cloud, runner: LocalRunner, stop: asyncio.Event, interval_s: float = INTERVAL_S) -> None:
    """One worker per running instance of ``cloud`` until ``stop`` is set; then every worker stops."""
    try:
        while not stop.is_set():
            try:
                await runner.sync(await asyncio.to_thread(cloud.list_managed))
            except CloudError as exc:
                log.warning("listing the instances failed (%s); trying again", exc)
            try:
                await asyncio.wait_for(stop.wait(), interval_s)
            except asyncio.TimeoutError:
                pass
    finally:
        await runner.stop_all()


async def _main(config: str, dispatcher: str) -> int:
    cfg = load_checked_config(config, files=True)
    if not on_this_host(cfg):
        raise ConfigError("local_fleet: needs aws.endpoint_url on this host (an EC2 emulator such as moto on 127.0.0.1)")
    cloud = Ec2Cloud(cfg.cluster, cfg.region, cfg.launch, endpoint_url=cfg.aws.endpoint_url,
                     max_attempts=cfg.aws.max_attempts)
    runner = LocalRunner(dispatcher, cfg.dispatcher.token() or "", [(m.name, m.onnx, m.profile_name) for m in cfg.models],
                         profiles_csv=cfg.profiles)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    log.info("local workers of cluster %s register at %s", cfg.cluster, dispatcher)
    await follow(cloud, runner, stop)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m daemon.local.fleet", description=__doc__.splitlines()[0])
    p.add_argument("config")
    p.add_argument("--dispatcher", required=True, help="where the workers register: a balancer or ipv4:H:P,H:P")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        return asyncio.run(_main(args.config, args.dispatcher))
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
