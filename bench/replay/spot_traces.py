"""Write the spot availability traces of ``examples/traces/`` from the SpotHedge artifact (issue #28).

Source: the SpotHedge artifact (EuroSys '25), github.com/MaoZiming/spothedge_ae, ``data/AWS3/``:
p3.2xlarge (1 V100) spot availability in 9 AWS zones from 2023-02-15, one value every 300 s
(``metadata.gap_seconds``), 1: a spot instance could be had, 0: not. The same series are in
github.com/skypilot-org/spot-traces ``availability/1-node/aws-02-15-2023/`` (the NSDI '24 "Can't Be
Late" traces; that copy says gap_seconds 195). Neither repository has a licence file.

This script takes the three zones the issue names (us-east-1a, us-east-1c, us-east-1d) and writes
one CSV per chosen day in the replay's shape (``timestamp_s,zone,instance_type,available``, one row
per zone every 300 s, ``*``: the zone's availability applied to every instance type, an assumption:
the traces measured p3.2xlarge only). The days are chosen by a rule fixed before any replay ran:
days ranked by the share of 5-minute ticks with spot in at least one of the three zones; the
median day, the upper-quartile day, the lower-quartile day, and the one day with no spot at all.

    python bench/replay/spot_traces.py PATH/TO/spothedge_ae/data/AWS3 examples/traces
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ZONES = ("us-east-1a", "us-east-1c", "us-east-1d")
TICK_S = 300
DAY = 24 * 3600 // TICK_S
SOURCE = ("# Spot availability of p3.2xlarge (1 V100) in three us-east-1 zones, day {day} of the SpotHedge artifact's\n"
          "# AWS3 trace (github.com/MaoZiming/spothedge_ae data/AWS3, from 2023-02-15; the same series as\n"
          "# github.com/skypilot-org/spot-traces availability/1-node/aws-02-15-2023; no licence file in either).\n"
          "# One row per zone every 300 s; instance_type * applies the zone's V100 availability to every type.\n"
          "# Chosen as the {why} (bench/replay/spot_traces.py; {share:.1%} of ticks with spot in some zone).\n")


def load(src: Path) -> dict[str, list[int]]:
    out = {}
    for z in ZONES:
        data = json.loads((src / f"{z}_v100_1.json").read_text())
        if data["metadata"]["gap_seconds"] != TICK_S:
            raise SystemExit(f"{z}: gap_seconds {data['metadata']['gap_seconds']}, expected {TICK_S}")
        out[z] = [1 if v > 0 else 0 for v in data["data"]]
    return out


def union_share(series: dict[str, list[int]], day: int) -> float:
    ticks = range(day * DAY, (day + 1) * DAY)
    return sum(1 for i in ticks if any(series[z][i] for z in ZONES)) / DAY


def chosen_days(series: dict[str, list[int]]) -> dict[str, int]:
    n = min(len(v) for v in series.values()) // DAY
    share = {d: union_share(series, d) for d in range(n)}
    ranked = sorted(share, key=lambda d: (share[d], d))
    out = {"median day": ranked[(n - 1) // 2], "upper-quartile day": ranked[int(0.75 * (n - 1))],
           "lower-quartile day": ranked[int(0.25 * (n - 1))]}
    zero = [d for d in ranked if share[d] == 0.0]
    if zero:
        out["day with no spot in any zone"] = zero[0]
    return out


def write_day(series: dict[str, list[int]], day: int, why: str, out: Path) -> Path:
    path = out / f"spot-aws3-day{day:02d}.csv"
    lines = [SOURCE.format(day=day, why=why, share=union_share(series, day)), "timestamp_s,zone,instance_type,available\n"]
    for k in range(DAY):
        for z in ZONES:
            lines.append(f"{k * TICK_S},{z},*,{series[z][day * DAY + k]}\n")
    path.write_text("".join(lines), encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("src", type=Path, help="the artifact's data/AWS3 folder")
    p.add_argument("out", type=Path, help="where to write the CSVs (examples/traces)")
    a = p.parse_args(argv)
    series = load(a.src)
    for why, day in chosen_days(series).items():
        print(f"{why}: day {day} ({union_share(series, day):.3f}) -> {write_day(series, day, why, a.out)}")
    shares = [union_share(series, d) for d in range(min(len(v) for v in series.values()) // DAY)]
    print(f"{len(shares)} days; median share {statistics.median(shares):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
