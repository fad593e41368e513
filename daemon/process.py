"""The daemon process (``costscale run``): logging, signals (SIGTERM/SIGINT stop, SIGHUP reloads),
start and stop around :class:`daemon.app.Daemon`, the audit events' own file (``audit_log``,
reopened on SIGHUP: :mod:`daemon.observe.audit_file`). A daemon that cannot start closes what it
opened and leaves one line: exit 2 for a config error, 1 for the environment. When the config's
EC2 is an emulator on this host (``aws.endpoint_url`` on loopback: the embedded default) and
``--local-workers`` is given, a local worker process stands for each running instance, as in
``costscale demo``. Before anything starts, the fast pre-flight (``daemon.doctor.checks.preflight``:
credentials, a DryRun of one launch, the image's architecture) stops a start that would fail at its
first launch with the line ``costscale doctor`` prints, exit 1."""
from __future__ import annotations

import asyncio
import logging
import os
import signal
from pathlib import Path

from config.schema import Config
from config.checks import load_checked_config
from config.errors import UsageError
from daemon.app import Daemon
from daemon.doctor.checks import preflight
from daemon.observe.audit import configure_logging
from daemon.observe.audit_file import AuditFile, on_hangup
from daemon.local.embedded import on_this_host
from daemon.local.runner import LocalRunner
from daemon.aws.cluster_token import with_cluster_token
from daemon.processes.this_process import for_this_process, tag_lines, this_slot
from daemon.processes.supervisor import supervise
from scaler.cloud.provider import ManagedInstance

log = logging.getLogger("costscale")


async def _run(cfg: Config, cfg_path: Path, audit_file: AuditFile, local_workers: bool = False) -> int:
    runner: LocalRunner | None = None

    async def follow(instances: list) -> None:   # the embedded default: a local worker per running instance
        if runner is not None:
            await runner.sync(instances)

    daemon = Daemon(cfg, cfg_path, on_fleet_change=follow if local_workers else None)
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, daemon.request_stop)
    loop.add_signal_handler(signal.SIGINT, daemon.request_stop)
    # SIGHUP: the config reloaded, then the audit file reopened (logrotate moved it: daemon.observe.audit_file)
    loop.add_signal_handler(signal.SIGHUP, on_hangup(daemon.reload, audit_file, lambda: daemon.cfg.audit_log))
    try:
        await daemon.start()
    except BaseException:
        await daemon.stop(grace=0.0)   # close what started (the listening port) before the one-line error
        raise
    if local_workers:
        runner = LocalRunner(f"127.0.0.1:{daemon.port}", daemon.dispatcher.cluster_token(),
                             [(m.name, m.onnx, m.profile_name) for m in cfg.models], profiles_csv=cfg.profiles)
        log.info("EC2 is an emulator on this host (%s): local worker processes serve its instances",
                 cfg.aws.endpoint_url)
    try:
        await daemon.wait()
    finally:
        log.info("stopping")
        try:
            await daemon.stop()
        finally:
            if runner is not None:
                await runner.stop_all()
    return 0


#: what the daemon creates is its own: no group or other bits (issue #14; the systemd unit sets the same)
DAEMON_UMASK = 0o077

#: libraries whose routine chatter (APScheduler logs every job run at INFO) stays out of the log
CHATTY_LIBRARIES = ("apscheduler", "botocore", "urllib3")


def quiet_libraries() -> None:
    """Keep :data:`CHATTY_LIBRARIES` at WARNING: 386 of 428 INFO lines in three minutes were
    APScheduler's "Running job" / "executed successfully" (issue #17 item 9)."""
    for name in CHATTY_LIBRARIES:
        logging.getLogger(name).setLevel(logging.WARNING)


def run_daemon(cfg_path: str | Path, log_level: str = "INFO", local_workers: bool = False,
               log_format: str | None = None) -> int:
    """``costscale run``; ``local_workers``: a local worker process per running instance (only with
    an EC2 emulator on this host, the embedded default); ``log_format``: ``text`` or ``json`` (one
    object per line, the audit events of :mod:`daemon.observe.audit` with their fields), default the
    config's ``log_format``."""
    os.umask(DAEMON_UMASK)   # the state store, tokens, generated variants, caches: 0600 files, 0700 folders
    cfg = load_checked_config(cfg_path, files=True)  # fail fast, one line, exit 2
    configure_logging(log_level, log_format or cfg.log_format)
    quiet_libraries()
    if local_workers and (cfg.dispatcher.tls is not None or cfg.dispatcher.worker_tls is not None):
        raise UsageError("run: --local-workers starts its workers without TLS files: leave dispatcher.tls and "
                         "dispatcher.worker_tls unset (the embedded cloud listens on loopback only)")
    if local_workers and cfg.lease.replicas:
        raise UsageError("run: --local-workers with lease.replicas: the replicas share the workers, which must outlive "
                         "any one of them: run them apart, python -m daemon.local.fleet CONFIG --dispatcher TARGET")
    if local_workers and not on_this_host(cfg):
        raise UsageError("run: --local-workers needs aws.endpoint_url on this host (an EC2 emulator such as "
                         "moto on 127.0.0.1): real instances run their own workers")
    slot, count = this_slot(), cfg.dispatcher.process_count()
    if slot is None and count > 1:   # the supervisor of N processes of this config
        if local_workers:
            raise UsageError("run: --local-workers with dispatcher.processes > 1: the processes share the workers, "
                             "which must outlive any one of them: run them apart, python -m daemon.local.fleet CONFIG "
                             "--dispatcher TARGET")
        with_cluster_token(cfg)    # a generated token written once, before the processes read it
        args = ["--log-level", log_level] + (["--log-format", log_format] if log_format else [])
        return supervise(str(cfg_path), count, args)
    if slot is not None:           # one of them: its own files, replica id and port; its lines tagged pI
        cfg = for_this_process(cfg)
        tag_lines(f"p{slot[0]}")
    audit_file = AuditFile()
    audit_file.start(cfg.audit_log)   # the audit events' own file (0600), when the config names one (exit 2 when it cannot)
    # credentials, a DryRun launch, the image: its one line and exit 1 on a verdict (a start refused
    # later leaves one line too, so what passed is logged at DEBUG; no answer at all: the start names it)
    for finding in preflight(cfg):
        log.log(logging.WARNING if finding.status == "warn" else logging.DEBUG, "pre-flight: %s", finding.line())
    try:
        return asyncio.run(_run(cfg, Path(cfg_path), audit_file, local_workers))
    finally:
        audit_file.close()


async def start_with_local_workers(cfg: Config, models: list[tuple[str, str, str]],
                                   profiles_csv: str | None = None, imds: str | None = None,
                                   **daemon_kw: object) -> tuple[Daemon, LocalRunner]:
    """A started :class:`daemon.app.Daemon` on ``cfg`` listening on a free loopback port, with a
    :class:`LocalRunner` that follows its fleet (one worker process per running instance serving
    ``models``: (name, onnx spec, profile name)): what the demos and the end-to-end tests run."""
    holder: dict[str, LocalRunner] = {}

    async def follow(instances: list[ManagedInstance]) -> None:
        if "r" in holder:
            await holder["r"].sync(instances)

    daemon = Daemon(cfg, None, on_fleet_change=follow, listen="127.0.0.1:0", **daemon_kw)  # type: ignore[arg-type]
    await daemon.start()
    holder["r"] = LocalRunner(f"127.0.0.1:{daemon.port}", daemon.dispatcher.cluster_token(), models,
                              profiles_csv=profiles_csv, imds=imds)
    return daemon, holder["r"]
