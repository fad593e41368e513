"""``costscale history import CSV [--config CONFIG]`` and ``costscale history show [--model M]
[--config CONFIG]``: each model's per-minute demand history in the daemon's state store (issue #39
deliverable 1), which the forecasters read (:mod:`scaler.forecast`).

``import`` seeds it from a user's own logs: the CSV ``timestamp,model,qps``
(:mod:`scaler.forecast.history_csv`), a positive timestamp in epoch seconds, a negative one in
seconds before now; several rows in a minute make its rate their mean. Rows older than
``forecast.retention_days`` are dropped; a minute already held takes the imported rate. The store
is the config's ``state_path`` and is taken with its lock: a running daemon holds it, so import
before ``costscale run`` (or stop it). A bad row, a model not in the config or a timestamp after
now: one line naming the row, exit 2, nothing written.

``show`` prints what is held per series: measured minutes, span, and the unmeasured gaps inside it
(read beside a running daemon: the store is SQLite in WAL mode).
"""
from __future__ import annotations

import argparse
import os
import time
from datetime import datetime, timezone
from typing import Iterator

from config.errors import UsageError
from config.files import unreadable
from config.schema import Config, load_config
from daemon.commands.common.progress import Progress
from scaler.fleet.state import StateStore
from scaler.forecast.history import DemandHistory, minute_of, series_names
from scaler.forecast.history_csv import parse_history_csv

#: the config costscale run reads under systemd (systemd/costscale.service)
DEFAULT_CONFIG = "/etc/costscale/costscale.yaml"
#: progress steps over the file's bytes
PROGRESS_STEPS = 100


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("history", help="each model's per-minute demand history (import from a CSV, show)")
    acts = p.add_subparsers(dest="action", metavar="ACTION", parser_class=type(p))
    acts.required = True
    imp = acts.add_parser("import", help="seed the history from a CSV timestamp,model,qps (timestamps: epoch "
                                         "seconds; negative: seconds before now)")
    imp.add_argument("csv", metavar="CSV")
    imp.add_argument("--config", default=DEFAULT_CONFIG, metavar="CONFIG", help=f"(default {DEFAULT_CONFIG})")
    imp.set_defaults(func=run_import)
    show = acts.add_parser("show", help="print the minutes, span and gaps held per model")
    show.add_argument("--model", metavar="M", help="only this model or pipeline")
    show.add_argument("--config", default=DEFAULT_CONFIG, metavar="CONFIG", help=f"(default {DEFAULT_CONFIG})")
    show.set_defaults(func=run_show)


def _lines(path: str, bar: Progress | None, cmd: str = "history import") -> Iterator[str]:
    """The file's lines, the bar stepped by the bytes read; an unreadable file is one line."""
    try:
        size = max(os.path.getsize(path), 1)
        with open(path, newline="", encoding="utf-8") as f:
            read, shown = 0, 0
            for line in f:
                read += len(line)
                while bar is not None and shown < PROGRESS_STEPS * read // size:
                    shown += 1
                    bar.step(path)
                yield line
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{cmd}: {path}: {unreadable(exc)}") from None


def run_import(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)
    now = time.time()
    retention_s = cfg.forecast.retention_days * 86400.0
    bar = Progress(PROGRESS_STEPS)
    try:
        parsed = parse_history_csv(_lines(args.csv, bar), args.csv, negative_from=now,
                                   known=series_names(cfg),
                                   before=(now, "now (give epoch seconds, or negative seconds before now)"))
    except ValueError as exc:
        raise UsageError(f"history import: {exc}") from None
    finally:
        bar.close()
    first_kept = minute_of(now) - int(retention_s // 60) + 1
    with StateStore.open(cfg.state_path) as store:
        written = dropped = 0
        for series in parsed.minutes:
            mins, rates = parsed.minutes[series], parsed.rates[series]
            keep = mins >= first_kept
            dropped += int((~keep).sum())
            written += store.record_demand(series, mins[keep], rates[keep])
        store.prune_demand(first_kept)
    print(f"imported {parsed.rows:,} rows into {cfg.state_path}: {written:,} minutes of "
          f"{len(parsed.minutes)} series" + (f"; {dropped:,} minute(s) older than the {cfg.forecast.retention_days}-day "
                                             "retention dropped" if dropped else ""))
    return 0


def replay_history(path: str, cfg: Config) -> dict[str, DemandHistory]:
    """``costscale replay --history CSV``: each series' history before the trace (negative
    timestamps: seconds before its start; a row at or after it is refused), on the replay's clock."""
    try:
        parsed = parse_history_csv(_lines(path, None, "replay --history"), path, negative_from=0.0,
                                   known=series_names(cfg), before=(0.0, "the trace's start (give negative seconds)"))
    except ValueError as exc:
        raise UsageError(f"replay --history: {exc}") from None
    return parsed.histories(cfg.forecast.retention_days * 86400.0)


def _when(minute: int) -> str:
    return datetime.fromtimestamp(minute * 60, tz=timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def describe(series: str, h: DemandHistory) -> str:
    """One series' line: measured minutes, span and gaps."""
    if not h.known:
        return f"{series}: nothing held"
    first, last = h.first_minute, h.last_minute
    assert first is not None and last is not None
    gaps = h.gaps()
    unknown = sum(b - a for a, b in gaps)
    span = last - first + 1
    text = (f"{series}: {h.known:,} minutes measured over {span / 1440:.2f} days ({_when(first)} .. "
            f"{_when(last + 1)})")
    if gaps:
        a, b = max(gaps, key=lambda g: g[1] - g[0])
        text += (f"; {len(gaps)} gap(s), {unknown:,} minutes unmeasured, the longest {b - a:,} minutes from "
                 f"{_when(a)}")
    else:
        text += "; no gaps"
    return text


def run_show(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)
    names = series_names(cfg)
    if args.model is not None and args.model not in names:
        raise UsageError(f"history show: --model {args.model!r} is not in the config (known: {', '.join(names)})")
    if not os.path.exists(cfg.state_path):
        raise UsageError(f"history show: no state store at {cfg.state_path} (costscale run creates it; "
                         "costscale history import seeds it)")
    retention_s = cfg.forecast.retention_days * 86400.0
    with StateStore.open(cfg.state_path, lock=False) as store:
        held = store.demand_series()
        wanted = [args.model] if args.model is not None else sorted(set(names) | set(held))
        for series in wanted:
            print(describe(series, store.demand_history(series, retention_s)))
    return 0
