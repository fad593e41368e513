"""Many models, one budget (issue #24): the budget split against hand-computed cases and a brute
force, weights, the joint plan on the Kairos profiles, which instance serves which model, and
demand kept per model."""
from __future__ import annotations

import itertools
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from config.profiles import load_profiles_csv
from config.schema import Config
from scaler.planner.budget_split import Frontier, scores, split_budget
from scaler.planner.joint_plan import declared_demands, plan_joint
from scaler.planner.replan import DemandView
from scaler.fleet.worker_assignment import assign_workers, fallback_shares
from sim.slo_check import slo_check

TYPES = ("g4dn.xlarge", "c5n.2xlarge", "r5n.large", "t3.xlarge")


def _cfg(models: list[dict], **over: object) -> Config:
    raw: dict[str, object] = {
        "cluster": "joint-test", "budget_per_hour": 3.0, "objective": "min_cost", "headroom": 0.1,
        "models": models, "instance_types": [{"type": t} for t in TYPES],
        "launch": {"ami_id": "ami-0123456789abcdef0"},
        "dispatcher": {"listen": "127.0.0.1:0", "policy": "kairos", "on_deadline": "drop"},
        "workload": {"batch_dist": "deeprecsys", "expected_qps": 2},
        "intervals": {"fleet_s": 30, "model_s": 1, "reconcile_s": 60},
        "state_path": "/tmp/costscale-joint-test.db",
    }
    raw.update(over)
    return Config.model_validate(raw)


@pytest.fixture(scope="module")
def profiles():  # type: ignore[no-untyped-def]
    return load_profiles_csv(None)


def _frontier(model: str, itype: str, points: list[tuple[int, float, float]]) -> Frontier:
    """A frontier by hand: (count of ``itype``, $/hr, q/s) rows after the empty pool."""
    counts = np.array([[0]] + [[n] for n, _, _ in points], dtype=np.int64)
    cost = np.array([0.0] + [c for _, c, _ in points])
    bound = np.array([0.0] + [b for _, _, b in points])
    return Frontier(model, (itype,), counts, cost, bound)


# ---- the split, by hand --------------------------------------------------------------------------

A = _frontier("a", "x", [(1, 1.0, 10.0), (2, 2.0, 20.0), (3, 3.0, 30.0)])
B = _frontier("b", "y", [(1, 0.5, 4.0), (2, 1.0, 8.0)])


def test_a_budget_that_covers_both_needs_buys_each_its_cheapest_cover() -> None:
    split = split_budget([A, B], {"a": 20.0, "b": 8.0}, {"a": 1.0, "b": 1.0}, 3.0, capped=True)
    assert split.rows == {"a": 2, "b": 2}            # x2 for a (20 q/s), y2 for b (8 q/s)
    assert split.cost_per_hour == pytest.approx(3.0) and split.min_score == 1.0


def test_a_short_budget_is_shared_by_weight() -> None:
    """2.5 $/hr cannot buy a's 20 q/s (2 $) and b's 8 q/s (1 $). Equal weights: either model half
    short scores 0.5, a tie. b of weight 2: b half short scores 1 - 2 x 0.5 = 0, so b is covered
    (y x2, 1 $) and a takes x1 (1 $, 10 of 20 q/s): 2 $ spent, the 0.5 $ left buys nothing."""
    split = split_budget([A, B], {"a": 20.0, "b": 8.0}, {"a": 1.0, "b": 2.0}, 2.5, capped=True)
    assert split.rows == {"a": 1, "b": 2}
    assert split.scores == {"a": pytest.approx(0.5), "b": pytest.approx(1.0)}
    assert split.cost_per_hour == pytest.approx(2.0)
    # the same with a of weight 2: a covered (x2, 2 $), b at y1 (0.5 $): 2.5 $
    split = split_budget([A, B], {"a": 20.0, "b": 8.0}, {"a": 2.0, "b": 1.0}, 2.5, capped=True)
    assert split.rows == {"a": 2, "b": 1} and split.cost_per_hour == pytest.approx(2.5)


def test_max_throughput_serves_demand_times_weight_alike() -> None:
    """Uncapped: a and b each at 10 q/s demand, 3 $/hr. x1 + y2 (2 $) serves 1.0 and 0.8; the
    max-min is 0.8 (b at its top row), and the dollar left lifts a to x2 (3 $ in all)."""
    split = split_budget([A, B], {"a": 10.0, "b": 10.0}, {"a": 1.0, "b": 1.0}, 3.0, capped=False)
    assert split.rows == {"a": 2, "b": 2} and split.min_score == pytest.approx(0.8)
    assert split.cost_per_hour == pytest.approx(3.0)


def test_a_model_without_demand_still_gets_one_worker() -> None:
    s = scores(np.array([0.0, 4.0]), 0.0, 1.0, capped=True)
    assert list(s) == [0.0, 1.0]
    split = split_budget([A, B], {"a": 20.0, "b": 0.0}, {"a": 1.0, "b": 1.0}, 2.5, capped=True)
    assert split.rows == {"a": 2, "b": 1}


# ---- the split against a brute force -------------------------------------------------------------

@st.composite
def _case(draw):  # type: ignore[no-untyped-def]
    n_models = draw(st.integers(1, 3))
    frontiers, targets, weights = [], {}, {}
    for i in range(n_models):
        k = draw(st.integers(1, 4))
        costs = np.cumsum(draw(st.lists(st.integers(1, 8), min_size=k, max_size=k))) / 4.0
        bounds = np.cumsum(draw(st.lists(st.integers(1, 30), min_size=k, max_size=k))).astype(float)
        frontiers.append(_frontier(f"m{i}", f"t{i}", [(j + 1, float(c), float(b))
                                                       for j, (c, b) in enumerate(zip(costs, bounds))]))
        targets[f"m{i}"] = float(draw(st.integers(0, 60)))
        weights[f"m{i}"] = draw(st.sampled_from([0.5, 1.0, 2.0, 3.0]))
    return frontiers, targets, weights, draw(st.integers(0, 24)) / 4.0, draw(st.booleans())


@settings(max_examples=300, deadline=None)
@given(_case())
def test_the_split_reaches_the_brute_force_max_min(case) -> None:  # type: ignore[no-untyped-def]
    frontiers, targets, weights, budget, capped = case
    split = split_budget(frontiers, targets, weights, budget, capped=capped)
    sc = [scores(f.bound, targets[f.model], weights[f.model], capped) for f in frontiers]
    best = -math.inf
    for rows in itertools.product(*(range(len(f)) for f in frontiers)):
        if sum(f.cost[r] for f, r in zip(frontiers, rows)) <= budget + 1e-9:
            best = max(best, min(s[r] for s, r in zip(sc, rows)))
    assert split.cost_per_hour <= budget + 1e-9
    assert split.min_score == pytest.approx(best) or (math.isinf(best) and math.isinf(split.min_score))


# ---- the joint plan on the Kairos profiles -------------------------------------------------------

def _demand(cfg: Config, qps: dict[str, float]) -> dict[str, DemandView]:
    dd = declared_demands(cfg)
    return {m: DemandView(q, dd[m].mix, True) for m, q in qps.items()}


def test_one_model_is_planned_as_before(profiles) -> None:  # type: ignore[no-untyped-def]
    from scaler.planner.model_plan import plan_fleet

    cfg = _cfg([{"name": "rm2", "qos_ms": 350}], budget_per_hour=2.5)
    d = _demand(cfg, {"rm2": 40.0})["rm2"]
    alone = plan_fleet(cfg, profiles, d.mix, d.qps, slo_check=slo_check, model="rm2")
    joint = plan_joint(cfg, profiles, {"rm2": d}, slo_check=slo_check)
    assert joint.pool == {t: n for t, n in alone.chosen.items() if n} and joint.rule == alone.rule


def test_each_model_gets_its_own_pick_when_the_budget_covers_them(profiles) -> None:  # type: ignore[no-untyped-def]
    from scaler.planner.model_plan import plan_fleet

    cfg = _cfg([{"name": "rm2", "qos_ms": 350}, {"name": "dien", "qos_ms": 35}], budget_per_hour=3.0)
    dem = _demand(cfg, {"rm2": 20.0, "dien": 20.0})
    joint = plan_joint(cfg, profiles, dem, slo_check=slo_check)
    assert joint.rule == "joint-min-cost" and not joint.short
    for m in ("rm2", "dien"):
        own = plan_fleet(cfg, profiles, dem[m].mix, dem[m].qps, slo_check=slo_check, model=m)
        assert joint.models[m].pool == {t: n for t, n in own.chosen.items() if n}
    assert joint.cost_per_hour == pytest.approx(sum(s.cost_per_hour for s in joint.models.values()))
    assert joint.cost_per_hour <= 3.0
    # the live dispatcher's one base type: the busiest model's (a tie: the first in the config)
    assert joint.dispatch_base_type() == joint.models["rm2"].plan.base_type    # type: ignore[union-attr]
    busier = plan_joint(cfg, profiles, _demand(cfg, {"rm2": 5.0, "dien": 20.0}), slo_check=slo_check)
    assert busier.dispatch_base_type() == busier.models["dien"].plan.base_type    # type: ignore[union-attr]


def test_a_short_budget_names_the_short_models_and_holds_the_budget(profiles) -> None:  # type: ignore[no-untyped-def]
    cfg = _cfg([{"name": "rm2", "qos_ms": 350}, {"name": "dien", "qos_ms": 35}], budget_per_hour=2.0)
    joint = plan_joint(cfg, profiles, _demand(cfg, {"rm2": 200.0, "dien": 400.0}), slo_check=slo_check)
    assert joint.rule == "joint-split" and set(joint.short) == {"rm2", "dien"}
    assert joint.cost_per_hour <= 2.0 + 1e-9
    assert all(s.pool for s in joint.models.values())     # neither is left without workers


def test_weights_are_honoured(profiles) -> None:  # type: ignore[no-untyped-def]
    """Two copies of rm2 at the same demand on a budget that covers neither: the copy of weight 3
    is relatively less short than the one of weight 1, and holds at least its capacity."""
    models = [{"name": "light", "qos_ms": 350, "profile": "rm2"},
              {"name": "heavy", "qos_ms": 350, "profile": "rm2", "weight": 3}]
    cfg = _cfg(models, budget_per_hour=2.0)
    joint = plan_joint(cfg, profiles, _demand(cfg, {"light": 200.0, "heavy": 200.0}), slo_check=slo_check)
    light, heavy = joint.models["light"], joint.models["heavy"]
    assert heavy.capacity_qps > light.capacity_qps
    assert heavy.short_qps < light.short_qps
    equal = plan_joint(_cfg([{**models[0]}, {**models[1], "weight": 1}], budget_per_hour=2.0), profiles,
                       _demand(cfg, {"light": 200.0, "heavy": 200.0}), slo_check=slo_check)
    assert abs(equal.models["light"].capacity_qps - equal.models["heavy"].capacity_qps) \
        < heavy.capacity_qps - light.capacity_qps


def test_max_throughput_splits_by_declared_rates_before_any_is_measured(profiles) -> None:  # type: ignore[no-untyped-def]
    models = [{"name": "a", "qos_ms": 350, "profile": "rm2", "expected_qps": 10},
              {"name": "b", "qos_ms": 350, "profile": "rm2", "expected_qps": 30}]
    cfg = _cfg(models, objective="max_throughput", budget_per_hour=2.0, confirm_evaluations=0)
    joint = plan_joint(cfg, profiles, {}, slo_check=slo_check)
    assert joint.models["b"].capacity_qps > 2 * joint.models["a"].capacity_qps
    assert joint.cost_per_hour <= 2.0 + 1e-9


# ---- which instance serves which model -----------------------------------------------------------

def test_instances_keep_their_model_and_new_ones_fill_the_shares() -> None:
    inst = [("i-1", "r"), ("i-2", "r"), ("i-3", "g"), ("i-4", "r")]
    shares = {"a": {"r": 1}, "b": {"r": 2, "g": 1}}
    got = assign_workers(inst, shares, {"i-2": "a"})
    assert got == {"i-2": "a", "i-1": "b", "i-4": "b", "i-3": "b"}
    # b's share shrinks to one r5n: the surplus instance keeps its model until it is retired
    got2 = assign_workers(inst, {"a": {"r": 2}, "b": {"r": 1, "g": 1}}, got)
    assert got2["i-2"] == "a" and got2["i-3"] == "b" and sorted(got2.values()).count("a") == 2
    assert assign_workers(inst, {"only": {"r": 3}}, {}) == {i: "only" for i, _ in inst}


def test_a_shrinking_share_parks_the_booting_worker_not_a_warm_one() -> None:
    """The live two-model test's transient (issue #24): the ranker's plan fell from r5n×3 to r5n×2
    while its third r5n ("i-a", the lowest id) was still booting. Releasing by id parked a warm r5n
    and left the ranker one booting worker short at 24 q/s; the booting one is parked instead."""
    from scaler.cloud.provider import ManagedInstance
    from scaler.fleet.step import park_round
    from scaler.fleet.parking import ParkState
    from scaler.fleet.worker_assignment import released

    inst = [ManagedInstance("i-g", "g", "running", 1.0), ManagedInstance("i-c", "r", "running", 2.0),
            ManagedInstance("i-f", "r", "running", 3.0), ManagedInstance("i-a", "r", "pending", 4.0)]
    now = {"i-g": "rm2", "i-c": "ranker", "i-f": "ranker", "i-a": "ranker"}
    shares = {"rm2": {"g": 1}, "ranker": {"r": 2}}
    ready = frozenset({"i-g", "i-c", "i-f"})
    assert released([(i.instance_id, i.instance_type) for i in inst], shares, now, ready) == {"i-a"}
    assert released([(i.instance_id, i.instance_type) for i in inst], shares, now) == {"i-f"}   # by id alone
    dec, state = park_round(inst, {"g": 1, "r": 2}, ready, lambda t: 1.0, 10.0, 100.0, ParkState(), 120.0,
                            shares, now)
    assert dec.park == ("i-a",) and not dec.retire
    after = assign_workers([(i.instance_id, i.instance_type) for i in inst], shares, now, parked=state.parked)
    assert after["i-c"] == after["i-f"] == "ranker"


def test_a_pool_not_planned_per_model_is_dealt_busiest_first() -> None:
    assert fallback_shares({"r": 3, "g": 1}, ["a", "b"], {"a": 1.0, "b": 5.0}) == \
        {"b": {"g": 1, "r": 1}, "a": {"r": 2}}


# ---- demand kept per model -----------------------------------------------------------------------

def test_no_models_demand_counts_as_anothers(tmp_path: Path) -> None:
    """The daemon plans each model from its own window: a window that saw only rm2's queries leaves
    dien at its declared rate."""
    from daemon.app import Daemon
    from dispatcher.window import DemandWindow

    cfg = _cfg([{"name": "rm2", "qos_ms": 350}, {"name": "dien", "qos_ms": 35, "expected_qps": 3}],
               state_path=str(tmp_path / "s.db"))
    win = DemandWindow()
    for k in range(600):
        win.record(10, k * 0.05)        # 20 q/s of rm2 for 30 s
    empty = DemandWindow()
    d = Daemon(cfg)
    d.dispatcher = SimpleNamespace(    # type: ignore[assignment]
        window_snapshot=lambda model=None, steady_s=60.0: (win if model == "rm2" else empty).snapshot(30.0, steady_s))
    got = d.current_demand()
    assert got["rm2"].qps == pytest.approx(20.0, rel=0.05) and got["rm2"].measured
    assert got["dien"].qps == 3.0 and not got["dien"].measured


# ---- the model loop per model ----------------------------------------------------------------------

def test_the_model_loop_sees_each_model_on_its_own_workers() -> None:
    from variants.runtime.executor import ANY_HARDWARE
    from variants.infaas.model_decision import ModelInputs, VariantCandidate, WorkerSnapshot
    from variants.infaas.model_split import split_by_model

    workers = (WorkerSnapshot("w1", "r5n.large", "cpu", 0.5, ("a", "b"), (("a", 10, 5.0), ("b", 10, 6.0))),
               WorkerSnapshot("w2", "r5n.large", "cpu", 0.1, ("a", "b")),
               WorkerSnapshot("w3", "g4dn.xlarge", "gpu", 0.0, ("a", "b")))
    inputs = ModelInputs(now=1.0, interval_s=1.0, workers=workers,
                         variants=(VariantCandidate("a", "a", ANY_HARDWARE), VariantCandidate("b", "b", ANY_HARDWARE)),
                         load_qps={"a": 5.0, "b": 9.0}, mean_batch={"a": 10.0, "b": 20.0},
                         slo_ms={"a": 100.0, "b": 50.0}, price_per_hour={}, profile=lambda *a: 1.0)
    parts = split_by_model(inputs, {"w1": "a", "w2": "b"})     # w3 has no assignment: any model
    assert [w.worker for w in parts["a"].workers] == ["w1", "w3"]
    assert [w.worker for w in parts["b"].workers] == ["w2", "w3"]
    assert parts["a"].workers[0].loaded == ("a",) and parts["a"].workers[0].served == (("a", 10, 5.0),)
    assert parts["b"].load_qps == {"b": 9.0} and parts["b"].slo_ms == {"b": 50.0}
    assert [v.name for v in parts["b"].variants] == ["b"]


def test_a_model_being_profiled_holds_its_pool_and_the_others_plan_in_the_rest(profiles) -> None:  # type: ignore[no-untyped-def]
    """A model without profiles yet is held on its conservative pool; the others are planned in
    what that pool leaves of the budget, on the types they may use."""
    cfg = _cfg([{"name": "rm2", "qos_ms": 350}, {"name": "dien", "qos_ms": 35}], budget_per_hour=1.0)
    dem = _demand(cfg, {"rm2": 30.0, "dien": 30.0})
    joint = plan_joint(cfg, profiles, dem, slo_check=slo_check, fixed={"dien": {"r5n.large": 1}},
                       types_for={"rm2": ["g4dn.xlarge", "r5n.large"]})
    assert joint.models["dien"].pool == {"r5n.large": 1} and joint.models["dien"].plan is None
    assert joint.models["rm2"].pool and set(joint.models["rm2"].pool) <= {"g4dn.xlarge", "r5n.large"}
    assert joint.models["rm2"].cost_per_hour <= 1.0 - 0.149 + 1e-9 and joint.cost_per_hour <= 1.0 + 1e-9
    both = plan_joint(cfg, profiles, dem, slo_check=slo_check, fixed={"dien": {"g4dn.xlarge": 1}, "rm2": {"r5n.large": 2}})
    assert both.rule == "held" and both.pool == {"g4dn.xlarge": 1, "r5n.large": 2}
    from scaler.planner.base_aux import PlanError
    with pytest.raises(PlanError, match="over the budget"):
        plan_joint(cfg, profiles, dem, slo_check=slo_check, fixed={"dien": {"g4dn.xlarge": 2}})


def test_only_the_models_whose_demand_moved_are_planned_again(profiles) -> None:  # type: ignore[no-untyped-def]
    from scaler.fleet import step as fleet_step

    cfg = _cfg([{"name": "rm2", "qos_ms": 350}, {"name": "dien", "qos_ms": 35}])
    planned = _demand(cfg, {"rm2": 20.0, "dien": 20.0})
    plan = plan_joint(cfg, profiles, planned, slo_check=slo_check)
    assert plan.rule == "joint-min-cost"
    now = _demand(cfg, {"rm2": 20.5, "dien": 60.0})       # rm2 within 5 %: held; dien tripled
    keep = fleet_step.unmoved_shares(cfg, "interval", plan, planned, 0.0, now, 60.0, False)
    assert set(keep) == {"rm2"}
    again = plan_joint(cfg, profiles, now, slo_check=slo_check, keep=keep)
    assert again.models["rm2"] is keep["rm2"] and again.models["dien"].capacity_qps > plan.models["dien"].capacity_qps
    assert fleet_step.planned_demands(keep, planned, now) == {"rm2": planned["rm2"], "dien": now["dien"]}
    for reason, at, gone in (("config reloaded", 0.0, False), ("interval", 0.0, True),
                             ("interval", -fleet_step.PLAN_MAX_AGE_S, False)):
        assert fleet_step.unmoved_shares(cfg, reason, plan, planned, at, now, 60.0, gone) == {}


def test_a_budget_too_small_for_every_model_serves_as_many_as_it_can() -> None:
    """1.2 $/hr cannot give a (1 $), b and c (0.5 $ each) a worker each, so the max-min is 0; what
    is left goes a row at a time to the lowest score, the cheapest step first: b and c, not a."""
    c = _frontier("c", "z", [(1, 0.5, 5.0), (2, 1.0, 10.0)])
    split = split_budget([A, B, c], {"a": 10.0, "b": 10.0, "c": 10.0}, {"a": 1.0, "b": 1.0, "c": 1.0}, 1.2,
                         capped=False)
    assert split.rows == {"a": 0, "b": 1, "c": 1} and split.cost_per_hour == pytest.approx(1.0)
