"""INFaaS on an application with accuracy scaling off, in the replay (issue #25): getVariant at
admission and the model loop over the family's members (:mod:`sim.replay.infaas`), through the
functions the daemon calls."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from config.profiles import load_profiles_csv
from config.schema import load_config
from dispatcher import modelless as ml
from sim.replay.run import ReplaySpec, make_query_loop, replay
from sim.replay.infaas import ReplayInfaas
from sim.replay.variant_lane import VariantLoop
from sim.workload import Workload
from variants.infaas import model_decision
from variants.families.applications import with_applications
from variants.infaas.model_decision import model_params_for

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "replay-accuracy.yaml"


def _off():  # type: ignore[no-untyped-def]
    cfg = load_config(EXAMPLE)
    acc = cfg.model_scaling.accuracy_scaling.model_copy(update={"enabled": False})
    return cfg.model_copy(update={"model_scaling": cfg.model_scaling.model_copy(update={"accuracy_scaling": acc})})


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.floats(-3.0, 3.0), st.floats(0.0, 0.7)), max_size=12), st.floats(0.0, 2.0),
       st.one_of(st.none(), st.floats(0.0, 4.0)), st.floats(0.0, 900.0), st.booleans())
def test_the_replays_load_is_routing_load_bit_for_bit(ivs: list[tuple[float, float]], now: float,
                                                      busy_until: float | None, waiting: float,
                                                      one_after_another: bool) -> None:
    """The replay's own sum (issue #39, replay speed) adds the same floats in the same order as
    ``routing_load`` over the calls a worker finished: its calls pruned as the lane prunes them,
    the last left out while under way; summed by duration when the calls ran one after the other
    (as a worker runs them: each from a gap after the last one's end), else one by one."""
    from sim.replay.infaas import UTILIZATION_HORIZON_S, _routing_load
    if one_after_another:          # (gap, duration) pairs: a worker's calls, one at a time
        calls, t = [], -3.0
        for gap, d in ivs:
            calls.append((t + abs(gap) / 3.0, t + abs(gap) / 3.0 + d))
            t = calls[-1][1]
    else:
        calls = [(s, s + d) for s, d in sorted(ivs)]
    lo = now - UTILIZATION_HORIZON_S
    ordered = all(e >= s for s, e in calls) and all(b[0] >= a[1] for a, b in zip(calls, calls[1:]))
    assert ordered or not one_after_another
    dq = [(s, e, e - s) for s, e in calls]
    while dq and dq[0][1] < lo:                                   # as the lane prunes
        dq.pop(0)
    finished = dq if not dq or dq[-1][1] <= now else dq[:-1]      # the last one under way
    want = ml.routing_load([(s, e) for s, e, _ in finished], now, UTILIZATION_HORIZON_S, busy_until, waiting)
    assert _routing_load(dq, now, lo, ordered, busy_until, waiting) == want
    assert _routing_load(dq, now, lo, False, busy_until, waiting) == want


def test_the_load_getvariant_ranks_by_counts_the_call_under_way() -> None:
    # finished calls over [0, 2]: 1 s + 0.5 s of a 2 s horizon = 0.75; a call predicted to run to
    # 2.5 s adds 0.5 / 2 = 0.25; a call that started before the horizon counts from its start
    assert ml.routing_load([(0.0, 1.0), (1.5, 2.0)], 2.0, 2.0, None) == pytest.approx(0.75)
    assert ml.routing_load([(0.0, 1.0), (1.5, 2.0)], 2.0, 2.0, 2.5) == pytest.approx(1.0)
    assert ml.routing_load([(-1.0, 0.5)], 2.0, 2.0, None) == pytest.approx(0.25)
    assert ml.routing_load([], 2.0, 2.0, 1.0) == 0.0          # predicted done already: nothing ahead
    # 400 ms of waiting work on top of an idle, unloaded worker: 0.4 / 2
    assert ml.routing_load([], 2.0, 2.0, None, waiting_ms=400.0) == pytest.approx(0.2)


def test_a_workers_share_of_the_waiting_queries() -> None:
    # 6 queries wait for "a" (30 ms each here), hosted on 3 workers: 60 ms each; 2 wait for "b"
    # (100 ms), hosted on this worker alone: 200 ms; "c" has none waiting
    ms = {"a": 30.0, "b": 100.0, "c": 5.0}.__getitem__
    assert ml.waiting_share_ms(["a", "b", "c"], {"a": 6, "b": 2}, {"a": 3, "b": 1}, ms) == pytest.approx(260.0)
    assert ml.waiting_share_ms(["c"], {"a": 6}, {"a": 3}, ms) == 0.0


def test_getvariant_pins_each_query_to_the_least_loaded_workers_variant() -> None:
    """Two r5n.large workers, one hosting resnet-152 (188.25 ms at batch 1), one resnet-18
    (27.77 ms); queries at 0, 1 and 2 ms. The first: both unloaded, the faster variant (resnet-18)
    wins the tie. The second: resnet-18's worker has 26.77 ms of its call ahead (load 0.0134), the
    other none: resnet-152. The third: resnet-152's worker is committed 187.25 ms (0.0936),
    resnet-18's 25.77 ms (0.0129): resnet-18. Counting only finished calls (the dispatcher before
    this change) all three saw two unloaded workers and went to resnet-18."""
    cfg = _off()
    profiles = with_applications(cfg, load_profiles_csv(None))
    arr = np.array([0.0, 0.001, 0.002])
    lane = make_query_loop(cfg, profiles, Workload(arr, np.ones(3, dtype=np.int64)), ReplaySpec(), model="resnet")
    assert isinstance(lane, VariantLoop)
    events: list = []
    full = cfg.full_catalog()
    infaas = ReplayInfaas(lane, model_params_for(cfg), 1.0, {t: it.hardware for t, it in full.items()},
                          {t: it.price_per_hour for t, it in full.items()}, profiles,
                          lambda at, fn: events.append((at, fn)), lambda: lane.now)
    lane.add_worker("w1", "r5n.large", 0.0)
    lane.add_worker("w2", "r5n.large", 0.0)
    lane.host("w2", "resnet-18", 0.0)
    lane.run_until(1.0)
    assert [lane.vnames[v] for v in lane.qvariant] == ["resnet-18", "resnet-152", "resnet-18"]
    assert [infaas.windows[v].total for v in lane.vnames] == [1, 0, 0, 0, 2] and events == []   # nothing to load: both Active
    # the model loop's round over the members: each one's load from the queries pinned to it
    inputs = infaas.snapshot(1.0)
    assert {v.name for v in inputs.variants} == set(lane.vnames)
    assert inputs.load_qps["resnet-18"] == pytest.approx(2 * inputs.load_qps["resnet-152"])
    assert {w.worker: w.loaded for w in inputs.workers} == {"w1": ("resnet-152",), "w2": ("resnet-18",)}


def test_the_replay_calls_the_daemons_getvariant_and_model_loop(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Accuracy scaling off, the replay of an application routes every query through
    ``dispatcher.modelless.Router.route`` (the admission's getVariant, ``modelless.route``, is one
    built per query) and runs
    ``variants.infaas.model_decision.decide`` (the daemon's ModelLoop round) every model tick."""
    import sim.replay.infaas as ri

    calls = {"route": 0, "decide": 0}
    real_route, real_decide = ml.Router.route, model_decision.decide

    def route(*a, **k):  # type: ignore[no-untyped-def]
        calls["route"] += 1
        return real_route(*a, **k)

    def decide(*a, **k):  # type: ignore[no-untyped-def]
        calls["decide"] += 1
        return real_decide(*a, **k)
    monkeypatch.setattr(ml.Router, "route", route)
    monkeypatch.setattr(ri, "decide", decide)
    cfg = _off()
    arr = np.sort(np.random.default_rng(3).uniform(0.0, 120.0, 600))
    run = replay(cfg, load_profiles_csv(None), Workload(arr, np.ones(arr.size, dtype=np.int64)), 120.0, ReplaySpec())
    assert calls["route"] == 600
    assert calls["decide"] >= 100                     # one per model tick (intervals.model_s: 1 s)
    assert int((run.lanes["resnet"].qvariant >= 0).sum()) == 600      # every query pinned to a variant
