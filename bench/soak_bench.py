"""Soak bench (issue #40 deliverable 1): the real daemon (``costscale run --local-workers``) on moto for
many compressed days, under steady Poisson load with load steps, worker kills and config reloads,
sampled throughout (:mod:`bench.soak.run`); every invariant checked at every sample.

Compression: the fleet tick every ``--fleet-s`` (0.05 s) and the model tick every 0.1 s, and the
daemon's wall clock sped up ``--speed`` times (:mod:`bench.soak.wallclock`: 1200, so one fleet tick is
one calendar minute, a day of ticks and of store history in 72 s, the state store pruned by its
``state_retention`` of one day as it would be over months).

    python bench/soak_bench.py --minutes 40 --rate 300 --step-rate 450 --out /tmp/soak

writes ``soak.json`` (every sample) and ``soak.png`` (one panel per series) in ``--out`` and prints
the summary table; exit 1 when an invariant or a bound broke (each printed), 0 otherwise. Bounds
after warm-up: RSS growth <= ``--rss-growth`` (5 %), threads, fds, asyncio tasks and worker channels
flat (their max within what the pool's turnover explains), the store and the audit log within their
configured bounds at every sample.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.soak import report  # noqa: E402
from bench.soak.run import Soak, SoakSpec  # noqa: E402

#: how far a flat series' floor may rise after warm-up (:data:`bench.soak.report.FLAT`): the asyncio
#: default executor's threads start as needed up to its cap (cpu + 4), gRPC's event engine grows its
#: pool under load; the live pool's size moves with the load (a worker: a channel and its fds); /metrics
#: (its max): a series per outcome code (4) and per variant x instance type (7 x 4), first seen late
FLAT_SLACK = {"threads": 4.0, "fds": 8.0, "tasks": 12.0, "channels": 4.0, "series": 32.0}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=40.0, help="wall minutes of load (default 40)")
    ap.add_argument("--warmup-minutes", type=float, default=5.0)
    ap.add_argument("--rate", type=float, default=300.0, help="base load, q/s")
    ap.add_argument("--step-rate", type=float, default=450.0, help="the load step, q/s")
    ap.add_argument("--step-every-s", type=float, default=60.0)
    ap.add_argument("--fleet-s", type=float, default=0.05)
    ap.add_argument("--speed", type=float, default=1200.0, help="the daemon's wall clock, x real time")
    ap.add_argument("--kill-every-s", type=float, default=45.0)
    ap.add_argument("--hup-every-s", type=float, default=30.0)
    ap.add_argument("--sample-every-s", type=float, default=5.0)
    ap.add_argument("--rss-growth", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None, help="folder for soak.json and soak.png")
    ap.add_argument("--from-json", type=Path, default=None,
                    help="no run: the verdict, table and plot again from a soak.json written before")
    a = ap.parse_args(argv)
    if a.from_json is not None:
        try:
            res = json.loads(a.from_json.read_text())
        except (OSError, ValueError) as exc:
            print(f"soak_bench: --from-json {a.from_json}: {exc}", file=sys.stderr)
            return 2
        return _report(res, res["spec"]["warmup_s"], a.rss_growth, a.out or a.from_json.parent)
    if a.minutes <= a.warmup_minutes or min(a.rate, a.step_rate, a.fleet_s, a.speed) <= 0:
        print("soak_bench: --minutes must exceed --warmup-minutes, and rates, --fleet-s and --speed be > 0",
              file=sys.stderr)
        return 2
    spec = SoakSpec(duration_s=60 * a.minutes, warmup_s=60 * a.warmup_minutes, rate=a.rate, step_rate=a.step_rate,
                    step_every_s=a.step_every_s, fleet_s=a.fleet_s, speed=a.speed, kill_every_s=a.kill_every_s,
                    hup_every_s=a.hup_every_s, sample_every_s=a.sample_every_s, seed=a.seed)
    out = a.out or Path(tempfile.mkdtemp(prefix="costscale-soak-"))
    out.mkdir(parents=True, exist_ok=True)
    return _report(Soak(spec, out / "run").run().to_json(), spec.warmup_s, a.rss_growth, out)


def _report(res: dict, warmup_s: float, rss_growth: float, out: Path) -> int:   # type: ignore[type-arg]
    """The verdict, ``soak.json`` and ``soak.png`` in ``out``, the table printed; the exit status."""
    g = report.growth(res["samples"], warmup_s)
    bad = report.verdict(res, g, rss_growth, FLAT_SLACK)
    res["growth"], res["verdict"] = g, bad
    out.mkdir(parents=True, exist_ok=True)
    (out / "soak.json").write_text(json.dumps(res, indent=1, default=str))
    report.plot(res, warmup_s, out / "soak.png")
    print(report.table(res, g))
    print(f"\nplot: {out / 'soak.png'}   samples: {out / 'soak.json'}   daemon log: {out / 'run' / 'daemon.log'}")
    for line in bad[:50]:
        print(f"FAIL {line}")
    print("soak: " + ("every invariant and bound held" if not bad else f"{len(bad)} failures"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
