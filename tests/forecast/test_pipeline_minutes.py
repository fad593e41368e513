"""A pipeline's demand series (issue #39 deliverable 1: "each model's (and pipeline's) per-minute
arrival rate"): its queries counted where they enter (dispatcher.pipeline_exec), published by each
replica and summed on the holder as models' are, recorded and pruned by the daemon as a model's
(daemon.loops.demand_minutes), and recorded by the replay at each virtual minute
(sim.replay.forecasting)."""
from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import numpy as np

from config.profiles import load_profiles_csv
from config.schema import Config, load_config
from daemon.loops.demand_minutes import DemandMinutes, minute_rates
from scaler.forecast.history import series_names
from dispatcher.proto import costscale_pb2 as pb
from dispatcher.window import DemandWindow
from scaler.fleet.state import StateStore
from scaler.forecast.state import ForecastState
from sim.workload import Workload
from tests.dispatcher.test_pipeline_exec import _cfg, _runner, _Stand
from tests.forecast.test_demand_minutes import Dispatcher, Merged, Replica, Snap

EXAMPLE = Path(__file__).resolve().parents[2] / "examples/pipeline.yaml"


def cfg_for(mode: str) -> Config:
    cfg = load_config(EXAMPLE)
    return cfg.model_copy(update={"forecast": cfg.forecast.model_copy(update={"mode": mode, "choose_days": 0})})


def test_the_series_are_the_models_then_the_pipelines() -> None:
    assert series_names(cfg_for("off")) == ["detector", "classifier", "traffic"]


def test_a_pipelines_rate_is_its_window_or_the_replicas_sum() -> None:
    d = Dispatcher({"detector": 4.0, "classifier": 8.0, "traffic": 4.0})
    assert minute_rates(cfg_for("off"), d, None) == {"detector": 4.0, "classifier": 8.0, "traffic": 4.0}
    assert ("traffic", 60.0) in d.asked
    merged = Merged({"traffic": Snap(9.0), "detector": Snap(9.0)})    # the holder: the replicas summed
    assert minute_rates(cfg_for("off"), d, Replica(merged, lead=True)) == \
        {"detector": 9.0, "classifier": 8.0, "traffic": 9.0}


def test_a_pipelines_minutes_are_recorded_and_pruned_as_a_models(tmp_path: Path, caplog) -> None:  # type: ignore[no-untyped-def]
    cfg = cfg_for("shadow")
    fc = ForecastState()
    with StateStore.open(tmp_path / "s.db") as store:
        for name in ("detector", "traffic"):                 # a day and more before: the same minutes held
            store.record_demand(name, range(0, 3000, 10), [1.0] * 300)
        rec = DemandMinutes(store, 1, wall=lambda: 3061 * 60 + 1.0, forecast=fc, cfg=lambda: cfg)
        assert fc.histories["traffic"].known == fc.histories["detector"].known == 144   # the store's last day
        rec.write(3001, {"detector": 2.0, "traffic": 2.0})   # not on the hour: nothing pruned
        assert store.demand_history("traffic", 1e9).first_minute == 0
        with caplog.at_level(logging.INFO, logger="costscale.audit"):
            asyncio.run(rec.ended(3060, {"detector": 3.0, "classifier": 6.0, "traffic": 3.0}))
        for name in ("detector", "traffic"):                 # pruned to one day, both alike
            h = store.demand_history(name, 1e9)
            assert (h.first_minute, h.at(3001), h.at(3060)) == (3060 - 1440 + 1 + 9, 2.0, 3.0)
        assert fc.histories["traffic"].at(3060) == 3.0
    ev = [r.audit for r in caplog.records if getattr(r, "audit", None)][0]
    assert set(ev["models"]) == {"detector", "classifier"}   # recorded, not forecast


def test_the_runner_counts_a_pipelines_queries_where_they_enter() -> None:
    d = _Stand(_cfg(factor=2.0))
    run = _runner(d)
    for t in (0.0, 10.0, 20.0):
        d.now = t
        assert isinstance(asyncio.run(run.submit(pb.SubmitRequest(application="recs", batch_size=2))), pb.SubmitReply)
    asyncio.run(run.submit(pb.SubmitRequest(application="recs")))     # no batch, no inputs: refused, not counted
    snap = run.windows["recs"].snapshot(30.0, 60.0)
    assert (snap.total, snap.mean_batch) == (3, 2.0) and len(d.calls) == 9    # its 9 steps: in their models'


def test_each_replica_publishes_its_pipeline_windows() -> None:
    from daemon.replicas.role import model_windows
    from scaler.replicas.demand import ReplicaDemand, merge_demand
    w = DemandWindow()
    for t in range(30):
        w.record(1, float(t))

    class One:
        def window_snapshot(self, name: str, steady_s: float = 60.0):  # type: ignore[no-untyped-def]
            return (w if name == "traffic" else DemandWindow()).snapshot(30.0, steady_s)
    pub = model_windows(cfg_for("off"), One())
    assert set(pub) == {"detector", "classifier", "traffic"} and pub["traffic"].total == 30
    merged = merge_demand([ReplicaDemand("a", 100.0, pub), ReplicaDemand("b", 100.0, pub)], ["a", "b"], 100.0)
    assert merged.windows["traffic"].steady_qps == 2 * pub["traffic"].steady_qps and merged.windows["traffic"].total == 60


def test_the_replay_records_a_pipelines_minutes(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import sim.replay.fleet as replay_fleet
    from sim.replay.forecasting import ReplayForecast
    from sim.replay.run import ReplaySpec, replay
    kept: list[ReplayForecast] = []

    class Kept(ReplayForecast):
        def __init__(self, *a, **kw) -> None:  # type: ignore[no-untyped-def]
            super().__init__(*a, **kw)
            kept.append(self)
    monkeypatch.setattr(replay_fleet, "ReplayForecast", Kept)
    cfg = cfg_for("on")                                              # no history: plans reactively
    arr = np.sort(np.random.default_rng(3).uniform(0, 180, 1800))      # 10 images/s for 3 minutes
    replay(cfg, load_profiles_csv(cfg.profiles), {"traffic": Workload(arr, np.ones(arr.size, dtype=np.int64))},
           190.0, ReplaySpec())
    hs = kept[0].state.histories
    got, root = hs["traffic"].known_minutes(), hs["detector"].known_minutes()
    # every image enters at its root task's model (no queries of its own): the same series, minute by minute
    assert list(got[0]) == [0, 1, 2] and list(got[1]) == list(root[1])
    assert 9.0 < float(np.mean(got[1])) < 11.0
