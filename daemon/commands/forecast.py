"""``costscale forecast CONFIG [--model M] [--hours N]``: what planning ahead would read now (issue #39
deliverable 4): per model, the demand history held in the state store, whether its daily shape
repeats (:func:`scaler.forecast.repeat.shape_correlation`), the forecaster it plans with
(:func:`scaler.forecast.state.choose`: reactive without a repeating day, else the first of
``forecast.forecasters``), the lead (:func:`scaler.fleet.ahead.forecast_lead`, the config's boot
delays: the measured ones live in the running daemon), and the upper ``forecast.quantile`` of its
rate for each of the next ``--hours`` hours, as the fleet tick would read it from a fit made now.

With ``--choose``, each model's forecaster is chosen by replayed dollars
(:func:`sim.replay.chooser.choose_by_replay`: the last ``forecast.choose_days`` days of its history
replayed per candidate; minutes per model) and the line says the pick, its replayed saving over
reactive and the figures; ``--json`` prints the picks as one object (what the daemon's daily chooser
reads, ``daemon.loops.forecast_chooser``).

Read beside a running daemon (the store is SQLite in WAL mode, opened without its lock).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import time
from datetime import datetime, timezone

from config.errors import UsageError
from config.schema import load_config
from scaler.fleet.ahead import forecast_lead
from scaler.fleet.state import StateStore
from scaler.forecast.history import DemandHistory
from scaler.forecast.lead import BootDelays
from scaler.forecast.registry import make_forecaster
from scaler.forecast.repeat import REPEATS_AT, shape_correlation
from scaler.forecast.state import REACTIVE, choose

#: hours shown by default, and at most (seasonal-naive forecasts at most a day ahead)
DEFAULT_HOURS = 6
MAX_HOURS = 23


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("forecast", help="each model's forecast for the next hours and the forecaster it plans with")
    p.add_argument("config", metavar="CONFIG")
    p.add_argument("--model", metavar="M", help="only this model")
    p.add_argument("--hours", type=int, default=DEFAULT_HOURS, metavar="N",
                   help=f"hours ahead, 1 .. {MAX_HOURS} (default {DEFAULT_HOURS})")
    p.add_argument("--choose", action="store_true",
                   help="choose each model's forecaster by replaying its last forecast.choose_days days (minutes)")
    p.add_argument("--json", action="store_true", help="with --choose: print the picks as one JSON object")
    p.set_defaults(func=run)


def _hhmm(t: float) -> str:
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%H:%M")


def model_lines(model: str, h: DemandHistory, now: float, hours: int, forecasters: list[str], quantile: float,
                lead: float) -> list[str]:
    """One model's lines (module docstring)."""
    if not h.known:
        return [f"{model}: no history held: reactive (plans on the measured demand)"]
    corr = shape_correlation(h, now)
    shape = ("daily shape unknown (under two comparable days)" if corr is None else
             f"daily shape {'repeats' if corr >= REPEATS_AT else 'does not repeat'} (day-to-day correlation "
             f"{corr:.2f}, {REPEATS_AT:g} needed)")
    name = choose(h, now, forecasters, None)
    head = f"{model}: {h.known:,} minutes held; {shape}; plans with {name}"
    if name == REACTIVE:
        return [head + " (plans on the measured demand)"]
    fit = make_forecaster(name).fit(h, now)
    if fit is None:
        return [head + "; no fit on this history yet: reactive until there is one"]
    lines = [head + f"; lead now {lead:.0f} s: {_rate(fit.predict(h, now, lead, quantile))}"]
    for k in range(hours):
        t = now + k * 3600.0
        lines.append(f"  {_hhmm(t)}-{_hhmm(t + 3600.0)} UTC  q{round(100 * quantile)} {_rate(fit.predict(h, t, 3600.0, quantile))}")
    return lines


def _rate(x: float | None) -> str:
    return "none (reactive)" if x is None or not math.isfinite(x) else f"{x:.2f} q/s"


def run(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)
    names = [m.name for m in cfg.models]
    if args.model is not None and args.model not in names:
        raise UsageError(f"forecast: --model {args.model!r} is not in the config (known: {', '.join(names)})")
    if not 1 <= args.hours <= MAX_HOURS:
        raise UsageError(f"forecast: --hours must be 1 .. {MAX_HOURS}, got {args.hours}")
    if not os.path.exists(cfg.state_path):
        raise UsageError(f"forecast: no state store at {cfg.state_path} (costscale run creates it; "
                         "costscale history import seeds it)")
    now = time.time()
    if args.choose:
        return _choose(cfg, args, names, now)
    lead = forecast_lead(cfg, BootDelays())
    retention_s = cfg.forecast.retention_days * 86400.0
    print(f"forecast.mode {cfg.forecast.mode}, quantile {cfg.forecast.quantile:g}, candidates "
          f"{', '.join(cfg.forecast.forecasters)} (reactive always); at {_hhmm(now)} UTC")
    with StateStore.open(cfg.state_path, lock=False) as store:
        for m in ([args.model] if args.model is not None else names):
            for line in model_lines(m, store.demand_history(m, retention_s), now, args.hours,
                                    list(cfg.forecast.forecasters), cfg.forecast.quantile, lead):
                print(line)
    return 0


def _choose(cfg, args: argparse.Namespace, names: list[str], now: float) -> int:  # type: ignore[no-untyped-def]
    from daemon.aws.wiring import DaemonError
    from daemon.profiling.model_profiles import load_profiles_for
    from sim.replay.chooser import choose_by_replay

    days = max(cfg.forecast.choose_days, 1)
    try:
        profiles = load_profiles_for(cfg)     # as the daemon plans with them
    except DaemonError as exc:
        raise UsageError(f"forecast: {exc}") from None
    picks = {}
    with StateStore.open(cfg.state_path, lock=False) as store:
        for m in ([args.model] if args.model is not None else names):
            c = choose_by_replay(cfg, profiles, m, store.demand_history(m, cfg.forecast.retention_days * 86400.0),
                                 now, days=days)
            saving = c.saving()
            picks[m] = {"picked": c.picked, "reason": c.reason, "saving": saving,
                        "candidates": {x.name: {"usd": x.usd, "slo_attainment": x.attainment} for x in c.candidates}}
            if not args.json:
                print(f"{m}: plans with {c.picked}" + (f" (replayed saving {100 * saving:.2f} % over reactive)"
                                                        if saving is not None else "") + f": {c.reason}")
    if args.json:
        print(json.dumps({"picks": picks}))
    return 0


__all__ = ["DEFAULT_HOURS", "MAX_HOURS", "model_lines", "register", "run"]
