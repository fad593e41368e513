"""The README's 20-minute step for planning ahead (issue #39): rm2 on ``examples/replay-rm2.yaml``,
5 q/s then 30 q/s from 10 minutes on, after 7 days of the same step as history. Replayed by
``tests/forecast/test_replay_ahead.py`` (its exact figures) and ``shadow_served_bench.py``."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import yaml

from config.profiles import ProfileTable
from config.schema import Config
from scaler.forecast.history import DemandHistory
from sim.patterns import parse_pattern, pattern_workload
from sim.replay.run import ReplayRun, ReplaySpec, replay

ROOT = Path(__file__).resolve().parents[2]
#: the trace: 5 q/s, then 30 q/s from 10 minutes on, 20 minutes in all; the history: 7 days of it
STEP_S, DURATION_S, LOW, HIGH = 600.0, 1200.0, 5.0, 30.0


def cfg_for(mode: str, tmp_path: Path) -> Config:
    """The example with ``forecast.mode`` ``mode``, its state file under ``tmp_path``."""
    raw = yaml.safe_load((ROOT / "examples" / "replay-rm2.yaml").read_text())
    raw["state_path"] = str(tmp_path / f"{mode}.db")
    raw["forecast"] = {"mode": mode}
    raw["workload"]["expected_qps"] = LOW
    return Config.model_validate(raw)


def step_history() -> dict[str, DemandHistory]:
    """Each of the 7 days before the trace steps from 5 to 30 q/s at the same minute as the trace."""
    minutes = np.arange(-7 * 1440, 0)
    rates = np.where(np.mod(minutes, 1440) >= STEP_S // 60, HIGH, LOW)
    rates[np.mod(minutes, 1440) >= DURATION_S // 60] = LOW
    return {"rm2": DemandHistory.from_minutes(minutes, rates)}


def run(mode: str, tmp_path: Path, profiles: ProfileTable,
        history: dict[str, DemandHistory] | None = None) -> ReplayRun:
    """The step replayed in ``mode`` (seed 3)."""
    cfg = cfg_for(mode, tmp_path)
    spec = parse_pattern(f"step:low={LOW:g},high={HIGH:g},at_s={STEP_S:g}")
    wl = pattern_workload(spec, DURATION_S, cfg.workload.batch_dist, seed=3, max_batch=cfg.models[0].max_batch)
    return replay(cfg, profiles, wl, DURATION_S, ReplaySpec(history=history))


__all__ = ["DURATION_S", "HIGH", "LOW", "STEP_S", "cfg_for", "run", "step_history"]
