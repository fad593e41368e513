"""How long the chooser's replays of a week of history take (issue #39 goal "the chooser's replays of a
week of history finish within an hour in the background"): ``sim.replay.chooser.choose_by_replay`` over
the last ``--days`` days of 14 days of ``ahead_bench.py``'s generator (rm2, two peaks a day at 40 q/s,
per-minute Poisson counts), once per candidate (reactive and each of ``forecast.forecasters``), on one
core, as the daemon's daily chooser runs it in its child process (``costscale forecast --choose``).

    PYTHONPATH=. .venv/bin/python bench/forecast/chooser_week_bench.py [--days 7] [--config replay-rm2.yaml]

Prints the pick, each candidate's replayed dollars and attainment, and the CPU and wall seconds."""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.forecast import ahead_bench as bench  # noqa: E402
from config.profiles import load_profiles_csv  # noqa: E402
from daemon.commands.history import replay_history  # noqa: E402
from sim.replay.chooser import choose_by_replay  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--days", type=int, default=7, help="days replayed per candidate (forecast.choose_days)")
    ap.add_argument("--config", default=bench.EXAMPLE, help="an example under examples/")
    ap.add_argument("--peak", type=float, default=40.0)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    if not 1 <= args.days <= 13:
        print("chooser_week_bench: --days must be in 1..13 (14 days of history are generated)", file=sys.stderr)
        return 2
    cfg = bench.config("on", 90, 60, example=args.config)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "history.csv"
        bench.write_history(path, bench.history_rows(args.peak, args.seed, False, days=14))
        history = replay_history(str(path), cfg)["rm2"]
    profiles = load_profiles_csv(None)
    cpu, wall = time.process_time(), time.perf_counter()
    choice = choose_by_replay(cfg, profiles, "rm2", history, 0.0, days=args.days)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    print(f"chooser over {args.days} day(s) of rm2's history ({args.config}): picked {choice.picked} ({choice.reason})")
    for c in choice.candidates:
        print(f"  {c.name}: ${c.usd:.4f} at {100 * c.attainment:.2f} % within SLO")
    print(f"{len(choice.candidates)} candidate replays in {cpu:.0f} s of CPU, {wall:.0f} s wall "
          f"({cpu / 60:.1f} min of CPU; the goal: within an hour)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
