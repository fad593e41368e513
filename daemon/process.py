"""The daemon process (``costscale run``): logging, signals (SIGTERM/SIGINT stop, SIGHUP reloads),
start and stop around :class:`daemon.app.Daemon`. A daemon that cannot start closes what it
opened and leaves one line: exit 2 for a config error, 1 for the environment."""
from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path

from config.schema import Config
from config.checks import load_checked_config
from daemon.app import Daemon

log = logging.getLogger("costscale")


async def _run(cfg: Config, cfg_path: Path) -> int:
    daemon = Daemon(cfg, cfg_path)
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, daemon.request_stop)
    loop.add_signal_handler(signal.SIGINT, daemon.request_stop)
    loop.add_signal_handler(signal.SIGHUP, daemon.reload)
    try:
        await daemon.start()
    except BaseException:
        await daemon.stop(grace=0.0)   # close what started (the listening port) before the one-line error
        raise
    try:
        await daemon.wait()
    finally:
        log.info("stopping")
        await daemon.stop()
    return 0


def run_daemon(cfg_path: str | Path, log_level: str = "INFO") -> int:
    logging.basicConfig(level=getattr(logging, log_level.upper(), logging.INFO),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # libraries' routine chatter (APScheduler logs every job run at INFO) stays out of the daemon's log
    for name in ("apscheduler", "botocore", "urllib3"):
        logging.getLogger(name).setLevel(logging.WARNING)
    cfg = load_checked_config(cfg_path)  # fail fast, one line, exit 2
    return asyncio.run(_run(cfg, Path(cfg_path)))
