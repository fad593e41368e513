"""The live accuracy e2e (``tests/e2e/test_accuracy_e2e.py``), replayed (issue #25 item 5): the same
arrivals through ``costscale replay`` with the application in the config instead of the registry.

The live daemon serves the digits family as an application registered in its variant registry; the
replay takes it from the config (``family:`` naming a CSV of the same rows: the members' accuracies
and the test's latency profile on c5n.2xlarge). The pool is the live one, pinned, up at 0 (the live
workers are registered before the first query). Time 0 is the first query sent; a variant load takes
``load_s`` (the live loads of these members take milliseconds; 0.1 s is the model loop's floor,
``ModelLoop.snapshot``).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from config.profiles import load_profiles_csv
from config.schema import Config
from sim.replay.run import ReplayRun, ReplaySpec, replay
from sim.workload import Workload
from variants.families.profiles import ProfileRow, write_csv


def replay_config(live: dict[str, Any], app: str, csv_path: Path, qos_ms: float) -> Config:
    """The live config with the application as its one model (the registry's family, from the CSV)."""
    raw = dict(live)
    raw["models"] = [{"name": app, "family": str(csv_path), "qos_ms": qos_ms, "max_batch": 1}]
    return Config.model_validate(raw)


def replay_the_e2e(live: dict[str, Any], app: str, rows: Sequence[ProfileRow], qos_ms: float,
                   sent_s: Sequence[float], tmp: Path, load_s: float = 0.1) -> ReplayRun:
    """Replay the e2e's arrivals (seconds from the first, one query each) under the live config."""
    cfg = replay_config(live, app, write_csv(tmp / f"{app}-family.csv", rows), qos_ms)
    arr = np.sort(np.asarray(sent_s, dtype=float))
    wl = Workload(arr - arr[0], np.ones(arr.size, dtype=np.int64))
    return replay(cfg, load_profiles_csv(cfg.profiles), wl, float(wl.arrivals[-1]) + 15.0,
                  ReplaySpec(model=app, boot_s={"gpu": 0.0, "cpu": 0.0, "inferentia": 0.0}, load_s=load_s),
                  state_dir=tmp)


def placements(plans: Sequence[tuple[float, Any]]) -> list[tuple[str, ...]]:
    """The placements the plans made over the whole pool, as sorted variant tuples, repeats merged:
    what was swapped, in order. Plans over fewer workers (live, before the second worker registered;
    the replay starts with the pool up) are left out, and so is a flap: a placement left, within one
    plan, for the one before it (A, X, A is A: a noisy reading of the window, which a loaded machine
    makes more of live)."""
    rows = [tuple(sorted(v for v in alloc.placement.values() if v is not None)) for _, alloc in plans]
    size = max((len(r) for r in rows), default=0)
    out: list[tuple[str, ...]] = []
    for p in (r for r in rows if len(r) == size):
        if out and out[-1] == p:
            continue
        if len(out) >= 2 and out[-2] == p:        # A, X, A: the flap X is not a swap that held
            out.pop()
            continue
        out.append(p)
    return out


def same_swaps(a: Sequence[tuple[str, ...]], b: Sequence[tuple[str, ...]]) -> bool:
    """The same placements in the same order, where one side may pass through placements the other
    skipped (a replan trigger a tick earlier or later reads the window mid-change, and the live tick
    times jitter): the shorter is a subsequence of the longer with the same first and last, and each
    placement only the longer makes is one worker's swap away from a neighbour in it."""
    long, short = (a, b) if len(a) >= len(b) else (b, a)
    if not short or long[0] != short[0] or long[-1] != short[-1]:
        return False

    def one_swap(p: tuple[str, ...], q: tuple[str, ...]) -> bool:
        left = list(q)
        for v in p:
            if v in left:
                left.remove(v)
        return len(p) == len(q) and len(left) == 1

    i, extra = 0, []
    for k, p in enumerate(long):
        if i < len(short) and p == short[i]:
            i += 1
        else:
            extra.append(k)
    return i == len(short) and all(one_swap(long[k], long[k - 1]) or one_swap(long[k], long[k + 1]) for k in extra)


__all__ = ["same_swaps", "placements", "replay_config", "replay_the_e2e"]
