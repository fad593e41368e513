"""The fleet-side faults of issue #40 at seeded points: the EC2 endpoint down, the state store's disk
full, the wall clock stepped ±10 minutes. Each point is one seeded run of the real daemon's fleet
loop against moto in server mode on 127.0.0.1 (``tests/fleet_faults.py``: compressed virtual time,
a pool change every 10 virtual seconds, the invariants checked at every RunInstances sent), the
fault's start, length and sign drawn per point. One table per fault: seed, fault window, budget
excursions, launches without their intent, duplicate ClientTokens, orphans, ticks refused,
recovered-after (virtual s from the fault's end to the pool at its target), the pool at its last
target, the store's integrity_check; for the clock, the audit log's missing or repeated intents and
the spend against what the pool could cost in the run's monotonic time.

The disk is full as ``tests/fleet_faults.py`` ``FleetRig._disk`` makes it: the store cannot grow by a
page, so a write that fits the pages there still goes through (as on a full disk), and a point's
ticks refused count only the ticks that met the fault; the write-ahead check holds at every launch
either way.

    PYTHONPATH=. python bench/faults/fleet_faults_bench.py [--points 5] [--only ec2_down,store_full,clock_step] [--out F.json]
"""
from __future__ import annotations

import argparse
import json
import logging
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests import conftest  # noqa: E402,F401  (fake AWS credentials, moto's short image list)
from tests.conftest import free_port, moto_reset  # noqa: E402
from tests.fleet_faults import BUDGET, Ledger, Window, run_seed  # noqa: E402

FAULTS = ("ec2_down", "store_full", "clock_step")
TICKS = 12
SEED0 = 4000


def _point(fault: str, k: int) -> tuple[int, dict[str, Any], float, str]:
    """The k-th seeded point of ``fault``: (seed, the rig's fault argument, the fault's end, its text)."""
    seed = SEED0 + 100 * FAULTS.index(fault) + k
    rng = random.Random(seed)
    # a fault begins 0.2-3 s into a tick (ticks every 10 virtual s): mid pool change, between an
    # intent and its call, or between a launch and its record
    start = 10.0 * (1 + k % 5) + round(rng.uniform(0.2, 3.0), 1)    # the k-th point: in tick k + 1
    if fault == "ec2_down":       # 60 s
        w = Window(start, start + 60.0)
        return seed, {"ec2_down": w}, w.end, f"down {w}"
    if fault == "store_full":     # 50 to 80 s (a write fails once it needs a page more: module docstring)
        w = Window(start, start + round(rng.uniform(50.0, 80.0), 1))
        return seed, {"store_full": w}, w.end, f"full {w}"
    at, sign = round(start + rng.uniform(0.0, 40.0), 1), (-1.0 if k % 2 == 0 else 1.0)
    return seed, {"wall_step": (at, sign * 600.0)}, at, f"{sign * 600:+.0f} s at {at:g} s"


def _row(fault: str, seed: int, window: str, led: Ledger, cpu_s: float, wall_s: float) -> dict[str, Any]:
    row = {"fault": fault, "seed": seed, "window": window, "budget_excursions": len(led.excursions),
           "peak_per_hour": round(led.peak, 4), "without_intent": len(led.without_intent),
           "duplicates": len(led.duplicates), "orphans": len(led.orphans), "launches": len(led.sent),
           "ticks_refused": len(led.failed_ticks), "recovered_after_s": led.recovered_after_s,
           "pool_at_target": led.pool_ok, "integrity": led.integrity, "cpu_s": round(cpu_s, 2),
           "wall_s": round(wall_s, 2)}
    if fault == "clock_step":
        row.update(audit_missing=len(led.audit_missing), audit_twice=len(led.audit_twice),
                   spent_usd=round(led.spent_usd, 6),
                   spend_bound_usd=round(BUDGET * led.elapsed_s / 3600.0, 6))
    return row


def held(row: dict[str, Any]) -> bool:
    ok = (row["budget_excursions"] == row["without_intent"] == row["duplicates"] == row["orphans"] == 0
          and row["pool_at_target"] and row["integrity"] == "ok" and row["recovered_after_s"] is not None)
    if row["fault"] == "clock_step":
        ok = ok and row["audit_missing"] == row["audit_twice"] == 0 and row["spent_usd"] <= row["spend_bound_usd"]
    return bool(ok)


def table(fault: str, rows: list[dict[str, Any]]) -> str:
    cols = ["seed", "window", "budget_excursions", "without_intent", "duplicates", "orphans", "launches",
            "ticks_refused", "recovered_after_s", "pool_at_target", "integrity"]
    if fault == "clock_step":
        cols += ["audit_missing", "audit_twice", "spent_usd", "spend_bound_usd"]
    head = "| " + " | ".join(cols) + " |\n|" + "---|" * len(cols) + "\n"
    return f"**{fault}**\n\n" + head + "".join(
        "| " + " | ".join(str(r[c]) for c in cols) + " |\n" for r in rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=5, help="seeded points per fault (default 5)")
    ap.add_argument("--only", default=",".join(FAULTS), help="faults to run, comma separated")
    ap.add_argument("--out", type=Path, help="write the rows as JSON here")
    args = ap.parse_args(argv)
    only = [f for f in args.only.split(",") if f]
    bad = [f for f in only if f not in FAULTS]
    if bad or args.points < 1:
        print(f"fleet_faults_bench: unknown fault {bad[0]!r} (one of {', '.join(FAULTS)})" if bad
              else "fleet_faults_bench: --points must be >= 1", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.ERROR)
    for handler in logging.getLogger().handlers:   # (the rig hears the audit log at INFO: not printed)
        handler.setLevel(logging.ERROR)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)   # moto's request lines
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    rows: list[dict[str, Any]] = []
    try:
        for fault in only:
            for k in range(args.points):
                seed, kw, end, text = _point(fault, k)
                moto_reset(endpoint)
                c0, w0 = time.process_time(), time.monotonic()
                with tempfile.TemporaryDirectory(prefix="fleet-faults-") as tmp:
                    led = run_seed(endpoint, Path(tmp), seed, TICKS, end, **kw)
                rows.append(_row(fault, seed, text, led, time.process_time() - c0, time.monotonic() - w0))
                print(f"{fault} seed {seed} ({text}): {'held' if held(rows[-1]) else 'BROKEN'}", flush=True)
            print(table(fault, [r for r in rows if r["fault"] == fault]), flush=True)
    finally:
        server.stop()
    if args.out is not None:
        args.out.write_text(json.dumps({"budget_per_hour": BUDGET, "ticks": TICKS, "rows": rows}, indent=1))
    broken = [r for r in rows if not held(r)]
    print(f"{len(rows) - len(broken)} of {len(rows)} points held every invariant")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
