"""The reference replays: five `costscale replay` runs whose figures a change that means to keep
every decision must print again to the last digit (CONTRIBUTING.md "Moving code"), and whose
differences a change to a decision must state (dollars, attainment, plans).

    .venv/bin/python bench/replay/reference_replays.py --out /tmp/ref-before            # before the change
    .venv/bin/python bench/replay/reference_replays.py --out /tmp/ref-after --against /tmp/ref-before
    .venv/bin/python bench/replay/reference_replays.py --only rm2,three --out DIR ...   # a subset

Each run is the README's command with ``--json``, in a process of its own (the checkout's code:
``PYTHONPATH`` is this checkout), written to ``OUT/NAME.json``. ``--against`` compares every figure
but ``wall_s``; the exit status is 1 when any differs. The spot day takes about two minutes, the
others a few seconds each.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

ROOT = Path(__file__).resolve().parents[2]

#: name -> the arguments of `costscale` (README "Replay", "Spot", "Both loops on one clock", "Pipelines")
REFERENCE: dict[str, list[str]] = {
    "rm2": ["replay", "examples/replay-rm2.yaml", "--trace", "examples/traces/diurnal-1h.csv", "--baselines"],
    "three": ["replay", "examples/replay-three.yaml", "--pattern", "diurnal:peak=60,model=rm2",
              "--pattern", "diurnal:peak=150,am=6,pm=15,model=wnd", "--pattern", "diurnal:peak=30,am=12,pm=22,model=dien",
              "--hours", "1"],
    "accuracy": ["replay", "examples/replay-accuracy.yaml", "--pattern", "macroburst:low=6,high=24,low_s=600,high_s=300",
                 "--hours", "0.5", "--baselines"],
    "pipeline": ["replay", "examples/pipeline.yaml", "--pattern",
                 "macroburst:low=4,high=16,low_s=600,high_s=300,model=traffic", "--hours", "0.5"],
    "spot": ["replay", "examples/replay-spot.yaml", "--pattern", "diurnal:peak=20", "--hours", "24",
             "--spot-trace", "examples/traces/spot-aws3-day40.csv", "--baselines"],
}
IGNORED = {"wall_s"}   # the run's own wall time: the only figure allowed to move


def run(name: str, out: Path) -> float:
    """One reference replay in its own process; its JSON report to ``out/NAME.json``; wall seconds."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", "import sys; from daemon.cli import main; sys.exit(main())",
                           *REFERENCE[name], "--json"], cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{name}: exit {proc.returncode}: {proc.stderr.strip().splitlines()[-1:]}")
    (out / f"{name}.json").write_text(proc.stdout)
    return time.perf_counter() - t0


def differences(a: Any, b: Any, path: str = "") -> Iterator[str]:
    """Every figure that differs between two reports (``IGNORED`` keys aside)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted((set(a) | set(b)) - IGNORED):
            if k not in a or k not in b:
                yield f"{path}.{k}: only in {'the second' if k not in a else 'the first'}"
            else:
                yield from differences(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            yield f"{path}: {len(a)} items, then {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            yield from differences(x, y, f"{path}[{i}]")
    elif a != b:
        yield f"{path}: {a!r} -> {b!r}"


def headline(report: dict[str, Any]) -> str:
    return (f"${report.get('cost_usd')}, {100 * float(report.get('slo_attainment', 0)):.4f} % in SLO, "
            f"{report.get('plans')} plans")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for NAME.json (made if missing)")
    ap.add_argument("--against", type=Path, help="a folder of an earlier run: compare every figure")
    ap.add_argument("--only", default="", help=f"comma-separated subset of {','.join(REFERENCE)}")
    args = ap.parse_args(argv)
    names = [n for n in args.only.split(",") if n] or list(REFERENCE)
    unknown = [n for n in names if n not in REFERENCE]
    if unknown:
        print(f"unknown reference replay {', '.join(unknown)} (known: {', '.join(REFERENCE)})", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    moved = 0
    for i, name in enumerate(names, 1):
        print(f"[{i}/{len(names)}] {name} ...", end=" ", flush=True)
        wall = run(name, args.out)
        now = json.loads((args.out / f"{name}.json").read_text())
        line = f"{headline(now)} ({wall:.1f} s)"
        if args.against is not None:
            before = args.against / f"{name}.json"
            if not before.exists():
                line += "; nothing to compare with"
            else:
                diff = list(differences(json.loads(before.read_text()), now))
                moved += bool(diff)
                line += "; IDENTICAL" if not diff else f"; {len(diff)} figures moved:\n    " + "\n    ".join(diff[:20])
        print(line, flush=True)
    return 1 if moved else 0


if __name__ == "__main__":
    sys.exit(main())
