"""SIGHUP, the parts that do not touch the running daemon: the reloaded config, checked, with the
settings read only at start kept at their running values (``config.security.RESTART_ONLY``), and
the scheduler's ticks moved to changed intervals. :meth:`daemon.app.Daemon.reload` applies the rest.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from config.checks import checked_problems
from config.errors import ConfigError
from config.schema import Config, IntervalsSpec, load_config
from config.security import restart_only_changes
from daemon.cluster_token import with_cluster_token

if TYPE_CHECKING:
    from apscheduler.schedulers.base import BaseScheduler

    from daemon.aws_wiring import AwsWiring

log = logging.getLogger("costscale.daemon")

#: scheduler job id -> the ``intervals`` field it runs at (the ids :meth:`Daemon.start` gives them)
TICKS = (("fleet", "fleet_s"), ("model", "model_s"), ("reconcile", "reconcile_s"))


def reloaded_config(running: Config, path: str | Path, listen: str | None, aws: "AwsWiring | None"
                    ) -> tuple[Config, list[str]]:
    """The config at ``path`` as the daemon would run it, and the restart-only settings it changes
    (kept at their running values; names only, a token is a secret). The restart-only values are
    merged in before the checks, so a change that will not apply cannot reject the reload, and the
    TLS and token files are not read again. UsageError (one line) when it is refused:
    invalid, failing a check (at the region's cached prices too), or naming another cluster or
    state_path."""
    new = load_config(path)
    if new.cluster != running.cluster or new.state_path != running.state_path:
        raise ConfigError("cluster and state_path cannot change while running")
    # the generated token's file named as at start (so it is no "change"), not written: restart-only
    new = with_cluster_token(new, listen, create=False)
    new, unapplied = restart_only_changes(running, new)
    new = aws.priced(new, fetch=False, check=False) if aws is not None else new
    problems = checked_problems(new, path)       # once, on the config as it will run, at its prices
    if problems:
        raise ConfigError(problems[0], lines=problems)
    return new, unapplied


def reschedule(scheduler: "BaseScheduler | None", old: IntervalsSpec, new: IntervalsSpec) -> None:
    """The fleet, model and reconcile ticks at the reloaded ``intervals`` (APScheduler keeps an
    interval job's trigger until told)."""
    if scheduler is None:
        return
    for job, field in TICKS:
        if getattr(new, field) != getattr(old, field):
            scheduler.reschedule_job(job, trigger="interval", seconds=getattr(new, field))
            log.info("reload: the %s tick now every %g s", job, getattr(new, field))
