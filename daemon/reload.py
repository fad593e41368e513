"""SIGHUP: whether a reloaded config is taken, and what of it applies now. The config is read again
and checked (:func:`reloaded_config`: a refused one is logged and the running one kept), with the
settings read only at start kept at their running values (``config.sections.security.RESTART_ONLY``); the
scheduler's ticks move to changed intervals (:func:`daemon.loops.ticks.reschedule`), and each part the
daemon gives :func:`reload_parts` takes the new config (``reload(new)``: the model loop, the fleet
market with its actuator, the dispatcher). ``Daemon.reload`` then replans.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Protocol

from config.checks import checked_problems
from config.errors import ConfigError, UsageError
from config.schema import Config, load_config
from config.sections.security import restart_only_changes
from daemon.observe import sdnotify
from daemon.aws.cluster_token import with_cluster_token
from daemon.loops.ticks import reschedule
from daemon.processes.this_process import for_this_process

if TYPE_CHECKING:
    from apscheduler.schedulers.base import BaseScheduler

    from daemon.aws.wiring import AwsWiring

dlog = logging.getLogger("costscale")      # the daemon's own lines (as :mod:`daemon.app` logs them)


def reloaded_config(running: Config, path: str | Path, listen: str | None, aws: "AwsWiring | None",
                    adopt: Callable[[Config], Config] = lambda c: c) -> tuple[Config, list[str]]:
    """The config at ``path`` as the daemon would run it, and the restart-only settings it changes
    (kept at their running values; names only, a token is a secret). The restart-only values are
    merged in before the checks, so a change that will not apply cannot reject the reload, and the
    TLS and token files are not read again. UsageError (one line) when it is refused:
    invalid, failing a check (at the region's cached prices too), or naming another cluster or
    state_path."""
    new = for_this_process(load_config(path))   # dispatcher.processes: this process's part, as at start
    if new.cluster != running.cluster or new.state_path != running.state_path:
        raise ConfigError("cluster and state_path cannot change while running")
    # the generated token's file named as at start (so it is no "change"), not written: restart-only
    new = with_cluster_token(new, listen, create=False)
    new, unapplied = restart_only_changes(running, new)
    new = adopt(aws.priced(new, fetch=False, check=False) if aws is not None else new)   # the known vCPU quotas
    problems = checked_problems(new, path)       # once, on the config as it will run, at its prices
    if problems:
        raise ConfigError(problems[0], lines=problems)
    return new, unapplied


class Reloadable(Protocol):
    """A part of the daemon that takes a reloaded config."""

    def reload(self, cfg: Config) -> None: ...


def reload_parts(running: Config, path: str | Path | None, listen: str | None, aws: "AwsWiring | None",
                 scheduler: "BaseScheduler | None", parts: Iterable[Reloadable | None],
                 adopt: Callable[[Config], Config] = lambda c: c) -> Config | None:
    """SIGHUP: systemd told the daemon reloads; the config at ``path`` read again
    (:func:`reloaded_config`; None, logged and systemd told, when there is no file or it is refused:
    the running config is kept); the restart-only changes it leaves unapplied logged; the ticks moved
    to its intervals (:func:`daemon.loops.ticks.reschedule`); each part's ``reload(new)``; then ready again.
    ``adopt``: the config with the vCPU quotas known beside its own (``daemon.aws.quotas``).
    Returns the config now running."""
    if path is None:
        return None
    sdnotify.notify(f"RELOADING=1\nMONOTONIC_USEC={time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000}")
    try:
        new, unapplied = reloaded_config(running, path, listen, aws, adopt)
    except UsageError as exc:
        dlog.error("reload rejected, keeping the running config: %s", exc.lines[0])
        sdnotify.notify(f"READY=1\nSTATUS=reload rejected: {exc.lines[0]}")
        return None
    if unapplied:
        dlog.warning("reload: %s changed: restart to apply (the running values are kept)", ", ".join(unapplied))
    reschedule(scheduler, running.intervals, new.intervals)
    for part in parts:
        if part is not None:
            part.reload(new)
    dlog.info("reloaded %s (budget %.4g $/hr)", path, new.budget_per_hour)
    sdnotify.notify(f"READY=1\nSTATUS=reloaded, budget {new.budget_per_hour:g} $/hr"
                    + (f"; restart to apply {', '.join(unapplied)}" if unapplied else ""))
    return new


__all__ = ["Reloadable", "reload_parts", "reloaded_config"]
