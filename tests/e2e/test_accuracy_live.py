"""Accuracy scaling in the daemon (issue #13 "Live"), the parts without a network: the model loop's
accuracy round (variants.accuracy.plan_round), the dispatcher's routing by the plan
(dispatcher.accuracy.routing) and a worker padding each family member to its own profile."""
from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import pytest

import numpy as np

from config.profiles import LatencyProfile, save_profiles_csv
from dispatcher.accuracy.routing import AccuracyRouting
from dispatcher.modelless import VariantMeta
from dispatcher.policy import QueryView
from variants.accuracy.planner import VariantProfile
from variants.accuracy.plan_round import (AccuracyInputs, AccuracyRoundParams, AccuracyState, accuracy_round, max_utilization,
                                     planner_profiles, swaps)
from variants.accuracy.trigger import TriggerParams

# two variants of application "a" on type T, SLO 1000 ms, served one query at a time:
# hi: 100 ms, accuracy 0.9; lo: 20 ms, accuracy 0.8. Capacity per worker: the M/D/1 rate whose p99
# stays within the SLO (max_utilization): 7.59 q/s for hi, 47.7 q/s for lo
VARIANTS = (VariantProfile("a", "hi", 0.9, {"T": {1: 100.0}}), VariantProfile("a", "lo", 0.8, {"T": {1: 20.0}}))
PARAMS = AccuracyRoundParams(trigger=TriggerParams(replan_s=30.0), beta=1.05)
CAP_HI = 1000.0 / 100.0 * max_utilization(100.0, 1000.0)


def test_max_utilization_solves_the_tail_condition() -> None:
    # rho exp(-2 (1 - rho) (slo - s) / s) = 1 %: at s = 100, slo = 1000 the exponent is 18 (1 - rho)
    rho = max_utilization(100.0, 1000.0)
    assert rho * math.exp(-18.0 * (1.0 - rho)) == pytest.approx(0.01, rel=1e-6)
    assert 0.759 < rho < 0.760
    assert max_utilization(100.0, 300.0) < max_utilization(100.0, 1000.0) < max_utilization(10.0, 1000.0) < 1.0
    assert max_utilization(100.0, 100.0) == 0.0 and max_utilization(100.0, 50.0) == 0.0
    # the planner sees 1 / rho of the service time, and an SLO that admits it (Proteus's SLO/2 rule)
    profiles, slo = planner_profiles(VARIANTS, {"a": 1000.0})
    assert profiles[0].latency_ms == {"T": {1: pytest.approx(100.0 / rho)}}
    assert slo == {"a": pytest.approx(2 * 100.0 / rho)}
    gone, _ = planner_profiles((VariantProfile("a", "slow", 0.95, {"T": {1: 1200.0}}),), {"a": 1000.0})
    assert gone[0].latency_ms == {}


def inputs(now: float, rate: float, hosted: dict, workers: dict | None = None) -> AccuracyInputs:
    workers = workers or {"w1": "T", "w2": "T"}
    return AccuracyInputs(now, workers, hosted, VARIANTS, {"a": 1000.0}, lambda app, window: rate)


def test_the_round_plans_full_accuracy_then_trades_it_for_a_burst_and_comes_back() -> None:
    # first round: 5 q/s x 1.05 fits one "hi" worker (7.59 q/s); the spare one hosts "hi" too, and
    # routing splits the measured 5 q/s evenly (each below its 7.59 / 1.05)
    alloc, st = accuracy_round(inputs(0.0, 5.0, {"w1": None, "w2": None}), AccuracyState(), PARAMS)
    assert alloc is not None
    assert alloc.placement == {"w1": "hi", "w2": "hi"}
    assert alloc.routing == {"a": {"w1": pytest.approx(0.5), "w2": pytest.approx(0.5)}}
    assert alloc.unmet_qps() == {"a": 0.0}
    # the same rate a second later: nothing to do
    again, st = accuracy_round(inputs(1.0, 5.0, {"w1": "hi", "w2": "hi"}), st, PARAMS)
    assert again is None
    # a burst to 30 q/s (31.5 with beta): two "hi" serve 15.2; one swaps to "lo" (7.6 + 47.7 >= 31.5),
    # the fewest swaps; "hi" takes 7.59 / 1.05 of the 30 first, "lo" the rest
    burst, st = accuracy_round(inputs(2.0, 30.0, {"w1": "hi", "w2": "hi"}), st, PARAMS)
    assert burst is not None
    assert sorted(burst.placement.values()) == ["hi", "lo"]
    lo = next(w for w, v in burst.placement.items() if v == "lo")
    hi = next(w for w, v in burst.placement.items() if v == "hi")
    assert burst.routing["a"][hi] == pytest.approx((CAP_HI / 1.05) / 30.0)
    assert burst.routing["a"][lo] == pytest.approx(1.0 - (CAP_HI / 1.05) / 30.0)
    assert swaps({"w1": "hi", "w2": "hi"}, burst.placement) == [(lo, "hi", "lo")]
    # the burst ends: the next timer look plans for the mean rate; every query is served by "hi"
    # again. The "lo" worker the plan does not need takes "hi" back (idle, so the swap costs no
    # query) and the two share the load at full accuracy, as at the start
    hosted = dict(burst.placement)
    back, st = accuracy_round(inputs(60.0, 5.0, hosted), st, PARAMS)
    assert back is not None and back.placement == {"w1": "hi", "w2": "hi"}
    assert swaps(hosted, back.placement) == [(lo, "lo", "hi")]
    assert back.routing == {"a": {"w1": 0.5, "w2": 0.5}} and back.plan.accuracy == {"a": pytest.approx(0.9)}


def test_a_change_of_live_workers_plans_again_at_once() -> None:
    _, st = accuracy_round(inputs(0.0, 5.0, {"w1": None, "w2": None}), AccuracyState(), PARAMS)
    alloc, _ = accuracy_round(inputs(1.0, 5.0, {"w1": "hi"}, workers={"w1": "T"}), st, PARAMS)
    assert alloc is not None and alloc.placement == {"w1": "hi"}


def test_the_floor_is_kept_and_unmet_demand_reported() -> None:
    # "lo" is below the floor: two "hi" workers serve 2 x 7.59 of the 30 q/s measured (the shortfall
    # below the load, not below 1.05 x it)
    params = AccuracyRoundParams(beta=1.05, min_accuracy=(("a", 0.85),))
    alloc, _ = accuracy_round(inputs(0.0, 30.0, {"w1": None, "w2": None}), AccuracyState(), params)
    assert alloc is not None and set(alloc.placement.values()) == {"hi"}
    assert alloc.unmet_qps()["a"] == pytest.approx(30.0 - 2 * CAP_HI)


def _dispatcher(queued: list) -> SimpleNamespace:
    """What accuracy routing is given, as stand-ins: placement, the workers, the waiting queries,
    the round trigger's kick (counted), the clock and ξ."""
    metas = {"hi": VariantMeta("hi", "m-hi", "any", 0.9, 1), "lo": VariantMeta("lo", "m-lo", "any", 0.8, 1)}
    models = {"m-hi": SimpleNamespace(name="m-hi", profile_name="m-hi"), "m-lo": SimpleNamespace(name="m-lo", profile_name="m-lo")}
    kicks = []
    return SimpleNamespace(clock=lambda: 0.0, placement=SimpleNamespace(variant_meta=metas, models=models),
                           workers={}, xi=1.0, waiting=queued, kick=lambda: kicks.append(1), kicks=kicks)


def _routing(d: SimpleNamespace) -> AccuracyRouting:
    return AccuracyRouting(d.placement, SimpleNamespace(workers=d.workers), lambda: iter(d.waiting), d.kick,  # type: ignore[arg-type]
                           d.clock, SimpleNamespace(xi=d.xi))  # type: ignore[arg-type]


def _query(qid: str, variant: str, model: str) -> SimpleNamespace:
    return SimpleNamespace(query_id=qid, application="a", variant=variant, model=SimpleNamespace(name=model),
                           min_accuracy=0.0, view=QueryView(qid, model, 1, 0.0, 200.0))


def test_routing_follows_the_plan_and_queued_queries_follow_a_swap() -> None:
    q = _query("q1", "hi", "m-hi")
    d = _dispatcher([q])
    r = _routing(d)
    assert r.route("a", 0.0) is None                       # no plan yet: getVariant decides
    r.set_plan({"w1": "hi", "w2": "hi"}, {"a": {"w1": 0.5, "w2": 0.5}})
    assert q.variant == "hi"                               # still placed: stays
    r.set_plan({"w1": "lo", "w2": "lo"}, {"a": {"w1": 0.5, "w2": 0.5}})
    assert (q.variant, q.model.name, q.view.model) == ("lo", "m-lo", "m-lo")
    assert r.rerouted == 1 and d.kicks
    # 1 in 4 queries to "hi", in the plan's proportions; a floor above "lo" refuses its share
    r.set_plan({"w1": "hi", "w2": "lo"}, {"a": {"w1": 0.25, "w2": 0.75}})
    picks = [r.route("a", 0.0) for _ in range(8)]
    assert picks.count("hi") == 2 and picks.count("lo") == 6
    assert {r.route("a", 0.85) for _ in range(8)} == {"hi", None}


def test_a_worker_pads_a_family_member_to_its_own_profile(tmp_path: Path) -> None:
    from worker.padding import own_profiles
    from worker.options import WorkerOptions

    def prof(model: str, ms: float) -> LatencyProfile:
        b, lat = np.array([1.0, 2.0]), np.array([ms, 2 * ms])
        return LatencyProfile(model, "c5n.2xlarge", b, lat, lat, lat)

    csv = tmp_path / "p.csv"
    save_profiles_csv(csv, [prof("rm2", 5.0), prof("member-a", 40.0)])
    opts = WorkerOptions(instance_id="i-1", instance_type="c5n.2xlarge", emulate_profile="rm2", profiles_path=csv)
    got = own_profiles(opts).get("member-a")
    assert got is not None and float(got.latency_ms(1)) == 40.0
    assert own_profiles(opts).get("rm2") is None             # the worker's own profile applies
    assert own_profiles(opts).get("unknown") is None
    assert own_profiles(WorkerOptions(instance_id="i-1", instance_type="c5n.2xlarge")).get("member-a") is None


class PerRow:
    """ms per row by profile name."""

    def predict_ms(self, model: str, instance_type: str, batch_size: float) -> float:
        return {"m-hi": 100.0, "m-lo": 10.0}[model] * batch_size


def _slackfit_dispatcher(waiting: int) -> tuple[SimpleNamespace, SimpleNamespace, list]:
    from dispatcher.modelless import VariantMeta

    metas = {"hi": VariantMeta("hi", "m-hi", "any", 0.9, 8), "lo": VariantMeta("lo", "m-lo", "any", 0.8, 8)}
    models = {m: SimpleNamespace(name=m, profile_name=m, max_batch=100) for m in ("m-hi", "m-lo")}
    w = SimpleNamespace(instance_type="T", draining=False, removed=False, idle=True, loaded={"hi", "lo"})
    placement = SimpleNamespace(variant_meta=metas, models=models, app_models={"a": ["m-hi", "m-lo"]},
                                variant_model=lambda v: metas[v].model if v in metas else v,
                                variant_ms=lambda v, t, b: PerRow().predict_ms(metas[v].model, t, b))
    d = SimpleNamespace(clock=lambda: 10.0, placement=placement, workers={"w": w}, xi=1.0, waiting=[], kick=lambda: None)
    qs = [SimpleNamespace(query_id=f"q{i}", application="a", variant="", model=models["m-hi"], batch=1, inputs=[], sig=(),
                          min_accuracy=0.0, arrival=10.0, qos_ms=1000.0, view=QueryView(f"q{i}", "m-hi", 1, 10.0, 1000.0))
          for i in range(waiting + 1)]
    return d, w, qs


def test_slackfit_binds_the_most_accurate_variant_that_serves_the_queue_in_half_the_slack() -> None:
    # slack 1 s, half of it 0.5 s: four queries of "hi" take 0.4 s -> "hi" for all four
    d, w, qs = _slackfit_dispatcher(3)
    r = _routing(d)
    assert r.bind(qs[0], w, 10.0, qs[1:]) == qs[1:]
    assert {q.variant for q in qs} == {"hi"} and r.bound == {"hi": 4}
    # seven take 0.7 s on "hi": "lo" (0.07 s) serves them all
    d, w, qs = _slackfit_dispatcher(6)
    r = _routing(d)
    assert r.bind(qs[0], w, 10.0, qs[1:]) == qs[1:] and {q.variant for q in qs} == {"lo"}
    assert qs[0].model.name == "m-lo" and qs[0].view.model == "m-lo"
    # 30 q/s arriving: "hi" serves 10 q/s however it batches, under 1.5 x 30 -> "lo"
    d, w, qs = _slackfit_dispatcher(3)
    r = _routing(d)
    for i in range(30):
        r.record("a", 1, 9.0 + i / 30.0)
    assert r.bind(qs[0], w, 10.0, qs[1:]) == qs[1:] and {q.variant for q in qs} == {"lo"}


def test_a_model_named_apart_from_its_profile_is_padded_to_that_profile(tmp_path: Path) -> None:
    """Several models on one worker (issue #24): ``ranker`` (profile dien) runs at dien's latency,
    not at the worker's emulated rm2; the local runner passes ``--model-profile`` for it."""
    from daemon.local.runner import LocalRunner
    from scaler.cloud.provider import ManagedInstance
    from worker.padding import own_profiles
    from worker.options import WorkerOptions

    def prof(model: str, ms: float) -> LatencyProfile:
        b, lat = np.array([1.0, 2.0]), np.array([ms, 2 * ms])
        return LatencyProfile(model, "c5n.2xlarge", b, lat, lat, lat)

    csv = tmp_path / "p.csv"
    save_profiles_csv(csv, [prof("rm2", 5.0), prof("dien", 12.0)])
    opts = WorkerOptions(instance_id="i-1", instance_type="c5n.2xlarge", emulate_profile="rm2", profiles_path=csv,
                         model_profiles={"ranker": "dien"})
    got = own_profiles(opts).get("ranker")
    assert got is not None and float(got.latency_ms(1)) == 12.0
    runner = LocalRunner("127.0.0.1:1", "t", [("rm2", "builtin:mlp", "rm2"), ("ranker", "builtin:mlp", "dien")])
    cmd = runner._command(ManagedInstance("i-1", "c5n.2xlarge", "running"))
    assert cmd[cmd.index("--emulate-profile") + 1] == "rm2" and "ranker=dien" in cmd
