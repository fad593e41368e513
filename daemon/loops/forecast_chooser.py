"""The daemon's daily choice of each model's forecaster by replayed dollars (issue #39 deliverable 2).

Once a day, with ``forecast.mode`` shadow or on and ``forecast.choose_days`` > 0, the daemon runs
``costscale forecast CONFIG --choose --json`` in a child process (the replays take minutes of CPU:
in a thread they would hold the GIL the query path needs) over the state store it writes (read
beside it, WAL), then takes the picks (:func:`apply_picks`): each model's ``ForecastState.picked``,
an audit event ``forecaster`` per model (the pick, its replayed saving and the figures), and a refit
at the next minute so the picks plan at once. A failed or refused run is one warning; the next day
tries again.
"""
from __future__ import annotations

import asyncio
import json
import logging
import sys
from pathlib import Path
from typing import Any, Mapping

from config.schema import Config
from daemon.observe import audit
from scaler.forecast.state import REACTIVE, ForecastState

log = logging.getLogger("costscale.forecast")

#: how often the choice is made again (s)
CHOOSE_EVERY_S = 86400.0


def apply_picks(fc: ForecastState, picks: Mapping[str, Mapping[str, Any]]) -> None:
    """Each model's pick into ``fc.picked`` (reactive: the pick forgotten, so the shape rule holds),
    an audit event each, and a refit due now."""
    for model, p in picks.items():
        name = str(p.get("picked", REACTIVE))
        if name == REACTIVE:
            fc.picked.pop(model, None)
        else:
            fc.picked[model] = name
        saving = p.get("saving")
        audit.emit("forecaster", f"{model} plans with {name}" + (
            f" (replayed saving {100 * float(saving):.2f} % over reactive)" if saving is not None else ""),
            str(p.get("reason", "")), model=model, forecaster=name, saving=saving,
            candidates=p.get("candidates", {}))
    fc.fitted_at = None


class DailyChooser:
    """Starts the child once a day (module docstring) and takes its picks."""

    def __init__(self, cfg_path: Path | None, every_s: float = CHOOSE_EVERY_S) -> None:
        self.cfg_path, self.every_s = cfg_path, every_s
        self.last: float | None = None
        self.task: asyncio.Task[None] | None = None

    def maybe_start(self, cfg: Config, fc: ForecastState, now: float) -> bool:
        """Start a choice when one is due (and none runs); whether one started."""
        if (self.cfg_path is None or cfg.forecast.mode == "off" or cfg.forecast.choose_days == 0
                or (self.task is not None and not self.task.done())
                or (self.last is not None and now - self.last < self.every_s)):
            return False
        self.last = now
        self.task = asyncio.get_running_loop().create_task(self._run(fc))
        return True

    async def _run(self, fc: ForecastState) -> None:
        cmd = [sys.executable, "-m", "daemon.cli", "forecast", str(self.cfg_path), "--choose", "--json"]
        try:
            proc = await asyncio.create_subprocess_exec(*cmd, stdout=asyncio.subprocess.PIPE,
                                                        stderr=asyncio.subprocess.PIPE)
            out, err = await proc.communicate()
        except OSError as exc:
            log.warning("forecast chooser: cannot start: %s", exc)
            return
        if proc.returncode != 0:
            lines = err.decode(errors="replace").strip().splitlines()
            log.warning("forecast chooser: exit %s: %s", proc.returncode, lines[-1] if lines else "no output")
            return
        try:
            picks = json.loads(out)["picks"]
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("forecast chooser: unreadable output: %s", exc)
            return
        apply_picks(fc, picks)


__all__ = ["CHOOSE_EVERY_S", "DailyChooser", "apply_picks"]
