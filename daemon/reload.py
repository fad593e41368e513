"""SIGHUP, the parts that do not touch the running daemon: the reloaded config, checked, with the
settings read only at start kept at their running values (``config.security.RESTART_ONLY``), and
the scheduler's ticks moved to changed intervals. :func:`reload_daemon` applies the rest to a running daemon.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING

from config.checks import checked_problems
from config.errors import ConfigError, UsageError
from config.schema import Config, IntervalsSpec, load_config
from config.security import restart_only_changes
from daemon import sdnotify
from daemon.cluster_token import with_cluster_token
from variants.model_decision import model_params_for

if TYPE_CHECKING:
    from apscheduler.schedulers.base import BaseScheduler

    from daemon.app import Daemon
    from daemon.aws_wiring import AwsWiring

log = logging.getLogger("costscale.daemon")
dlog = logging.getLogger("costscale")      # the daemon's own lines (as :mod:`daemon.app` logs them)

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


def reload_daemon(self: "Daemon") -> bool:
    """SIGHUP on ``self`` (:meth:`daemon.app.Daemon.reload`): load the config again
    (:func:`reloaded_config`); a refused one is logged and the running one kept. Changed tick
    intervals take effect now."""
    if self.cfg_path is None:
        return False
    sdnotify.notify(f"RELOADING=1\nMONOTONIC_USEC={time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000}")
    try:
        new, unapplied = reloaded_config(self.cfg, self.cfg_path, self._listen, self.aws)
    except UsageError as exc:
        dlog.error("reload rejected, keeping the running config: %s", exc.lines[0])
        sdnotify.notify(f"READY=1\nSTATUS=reload rejected: {exc.lines[0]}")
        return False
    if unapplied:
        dlog.warning("reload: %s changed: restart to apply (the running values are kept)", ", ".join(unapplied))
    reschedule(self._scheduler, self.cfg.intervals, new.intervals)
    self.cfg = new
    if self._explicit_params is None:
        self.model_params = model_params_for(new)
        if self.model_loop is not None:
            self.model_loop.params = self.model_params
            self.model_loop.interval_s = new.intervals.model_s
    if self.actuator is not None:
        self.actuator.budget = new.budget_per_hour
        if self.market is not None:
            self.market.reload(new)     # the actuator's catalog (and its spot slots)
        else:
            self.actuator.catalog = new.catalog()
    if self.dispatcher is not None:   # prices the model loop and Status use
        self.dispatcher.set_catalog(new.catalog())
    dlog.info("reloaded %s (budget %.4g $/hr)", self.cfg_path, new.budget_per_hour)
    sdnotify.notify(f"READY=1\nSTATUS=reloaded, budget {new.budget_per_hour:g} $/hr"
                    + (f"; restart to apply {', '.join(unapplied)}" if unapplied else ""))
    if self._loop is not None:
        self._loop.create_task(self.fleet_tick("config reloaded"))
    return True
