"""The model loop (INFaaS §4.2): pure decisions with hand-computed cases, and the adapter applying
them to workers through a fake dispatcher (Load/Unload calls recorded)."""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from types import SimpleNamespace

from hypothesis import given, settings, strategies as st
import pytest

from daemon.loops.model_loop import ModelLoop
from variants.infaas.capacity_hint import HintParams, next_capacity_hint
from variants.infaas.model_decision import (ModelInputs, ModelLoopParams, VariantCandidate, WorkerSnapshot, decide,
                                     placements_for, shortfall)
from dispatcher.latency_model import LatencyModel
from dispatcher.modelless import VariantMeta
from config.profiles import load_profiles_csv
from variants.infaas.vm_autoscaler import VmDecision, VmParams
from variants.infaas.state_machine import VariantState


def prof(model: str, itype: str, batch: float, stat: str) -> float:
    return 100.0 if stat == "mean" else 150.0   # saturation 10 q/s per worker


def inputs(now: float, load: float, workers, served=None) -> ModelInputs:  # noqa: ANN001
    return ModelInputs(now=now, interval_s=1.0, workers=tuple(workers),
                       variants=(VariantCandidate("m", "m", "any", 1.0, 0.5),),
                       load_qps={"m": load}, mean_batch={"m": 1.0}, slo_ms={"m": 350.0},
                       price_per_hour={"c": 3.6}, profile=prof)


def ws(loaded: dict[str, tuple[str, ...]], util: dict[str, float] | None = None, served=None):  # noqa: ANN001
    util = util or {}
    return [WorkerSnapshot(w, "c", "cpu", util.get(w, 0.0), v, (served or {}).get(w, ())) for w, v in sorted(loaded.items())]


def test_scale_down_waits_t_v_and_never_empties_a_worker() -> None:
    workers = ws({"w1": ("m",), "w2": ("m",)}, {"w1": 0.1, "w2": 0.0})
    d0, s0 = decide(inputs(0.0, 1.0, workers))
    assert d0.plan is not None and d0.plan.counts == {"m@c": 2}   # T_v (0.5 s) not elapsed yet
    d1, _ = decide(inputs(1.0, 1.0, workers), s0)
    assert d1.plan is not None and d1.plan.counts == {"m@c": 1}
    assert d1.placements == ()               # w2 would be left empty: its replica stays
    plan = d1.plan
    assert [(p.action, p.worker) for p in placements_for(plan, workers, keep_one=False)] == [("unload", "w2")]
    # a worker holding two variants gives one up
    two = ws({"w1": ("m", "x"), "w2": ("m",)}, {"w1": 0.0, "w2": 0.5})
    assert [(p.action, p.variant, p.worker) for p in placements_for(plan, two)] == [("unload", "m", "w1")]


def test_scale_up_replicates_on_free_workers_and_reports_unmet() -> None:
    workers = ws({"w1": ("m",), "w2": (), "w3": ()})
    d, _ = decide(inputs(0.0, 25.0, workers))   # need 25 * 1.05 = 26.25 q/s -> 3 instances of 10 q/s
    assert [(p.action, p.worker) for p in d.placements] == [("load", "w2"), ("load", "w3")]
    assert d.unmet_qps == {}
    d2, _ = decide(inputs(0.0, 40.0, workers))  # 42 q/s > 3 slots: VM autoscaling is needed
    assert d2.unmet_qps["m"] == 42.0 - 30.0
    assert d2.shortfall_qps["m"] == pytest.approx(40.0 - 30.0)   # below the load itself: 10 q/s


def test_a_shortfall_is_only_what_the_load_itself_misses() -> None:
    """The capacity hint acts on the shortfall: 29 q/s asks for 30.45 on 30 q/s of slots, 0.45
    unmet, all of it headroom (1.45 q/s): no shortfall."""
    workers = ws({"w1": ("m",), "w2": (), "w3": ()})
    d, _ = decide(inputs(0.0, 29.0, workers))
    assert d.unmet_qps["m"] == pytest.approx(0.45) and d.shortfall_qps == {}
    assert next_capacity_hint(1.0, d.vm, d.shortfall_qps) == 1.0
    assert shortfall({"m": 0.45, "n": 3.0}, {"m": 29.0, "n": 20.0}, 0.05) == {"n": 2.0}
    # an instance only the floor asks for (min_qps 0.01 of an idle model) is no shortfall; 2 q/s of a
    # 4 q/s load unplaced: 2 - 0.2
    assert shortfall({"idle": 0.01, "x": 2.0}, {"idle": 0.0, "x": 4.0}, 0.05) == {"x": pytest.approx(1.8)}


def test_states_and_vm_add_from_reports() -> None:
    served = {"w1": tuple(("m", 1, 300.0) for _ in range(12))}   # 12 q/s > peak 10 q/s, p99 300 ms
    workers = ws({"w1": ("m",)}, {"w1": 0.95}, served)
    d, s = decide(inputs(0.0, 12.0, workers))
    assert d.states[("m", "w1")] is VariantState.OVERLOADED
    assert [(v.action, v.hardware) for v in d.vm] == [("add", "cpu")]
    assert next_capacity_hint(1.0, d.vm, d.unmet_qps) == 1.1
    calm = ws({"w1": ("m",)}, {"w1": 0.0}, {"w1": (("m", 1, 140.0),)})
    d2, _ = decide(inputs(1.0, 1.0, calm), s)
    assert d2.states[("m", "w1")] is VariantState.ACTIVE


def test_capacity_hint_rules() -> None:
    rm = [VmDecision("remove", "cpu", "low")]
    hold = [VmDecision("hold", "cpu", "ok")]
    assert next_capacity_hint(1.0, rm, {}) == 0.9
    assert next_capacity_hint(0.5, rm, {}) == 0.5
    assert next_capacity_hint(2.0, [VmDecision("add", "cpu", "x", interfered=True)], {}) == 2.0
    assert next_capacity_hint(1.0, [VmDecision("add", "cpu", "x", interfered=True)], {}) == 1.1
    # issue #12: utilization or Overloaded alone is the planner's job (measured demand + headroom)
    assert next_capacity_hint(1.2, [VmDecision("add", "cpu", "utilization 86% > 80%")], {}) == 1.175
    # nor does the hint rise while the fleet still boots its target (unmet demand is what it is for)
    assert next_capacity_hint(1.0, [VmDecision("add", "cpu", "x", interfered=True)], {"m": 3.0},
                              settled=False) == 1.0
    assert next_capacity_hint(1.2, [], {"m": 3.0}, settled=False) == 1.175
    assert next_capacity_hint(1.2, hold, {}) == 1.175
    assert next_capacity_hint(0.9, hold, {}) == 0.925
    assert next_capacity_hint(1.0, hold, {"m": 1.0}, HintParams(step=0.5)) == 1.5


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=1, max_size=6), st.floats(0.0, 80.0))
def test_placements_reach_the_plan_counts(held: list[int], load: float) -> None:
    workers = ws({f"w{i}": (("m",) if h else ()) for i, h in enumerate(held)})
    d, _ = decide(inputs(100.0, load, workers))
    after = {w.worker: set(w.loaded) for w in workers}
    for p in d.placements:
        (after[p.worker].add if p.action == "load" else after[p.worker].discard)(p.variant)
    if d.plan is not None:
        # loads reach the target; unloads stop where a worker would be left empty
        have = sum("m" in v for v in after.values())
        assert have >= d.plan.counts["m@c"] >= 1
        assert have == max(d.plan.counts["m@c"], sum(1 for h in held if h))
    assert all(len(v) <= 1 for v in after.values())
    assert all(after[w.worker] for w in workers if w.loaded)


# ---- the adapter ---------------------------------------------------------------------------------------

@dataclass
class FakeWorker:
    instance_type: str = "c5n.2xlarge"
    hardware: str = "cpu"
    draining: bool = False
    removed: bool = False
    loaded: set = field(default_factory=set)


class FakeDispatcher:
    def __init__(self) -> None:
        self.workers = {"a": FakeWorker(loaded={"m"}), "b": FakeWorker(loaded={"m"})}
        self._variant_meta = {"m": VariantMeta("m", "m", "any", 1.0, 8, 100.0)}
        self._models = {"m": SimpleNamespace(profile_name="rm2", qos_ms=350.0, min_accuracy=0.0, application=None)}
        self.placement = SimpleNamespace(apps={})     # applications -> their ModelSpec (none here)
        self._prices = {"c5n.2xlarge": 0.432}
        self.cfg = SimpleNamespace(models=[SimpleNamespace(name="m")])
        self.predictor = LatencyModel.from_profiles(load_profiles_csv(None))
        self.variant_states = {}
        self.serves: dict[str, str] = {}     # no assignment: one model
        self.calls: list[tuple[str, str, str]] = []
        self.accuracy = SimpleNamespace(late_bound=set())   # the Dispatcher's accuracy routing (unused here)

    def take_samples(self):  # noqa: ANN201
        return {}

    def utilization(self, w, now):  # noqa: ANN001, ANN201
        return 0.0

    def loaded_on(self, w):  # noqa: ANN001, ANN201
        return set(w.loaded)

    def speed_factor(self, v):  # noqa: ANN001, ANN201
        return 1.0

    def window_snapshot(self, model=None):  # noqa: ANN001, ANN201
        per_model = {"m": (0.5, 1.0), "n": (7.0, 30.0)}
        qps, mb = per_model.get(model, (0.0, 0.0))
        return SimpleNamespace(arrival_qps=qps, mean_batch=mb)

    async def unload_variant(self, worker, variant):  # noqa: ANN001, ANN201
        self.calls.append(("unload", worker, variant))
        self.workers[worker].loaded.discard(variant)
        return True, "unloaded"

    async def load_variant(self, worker, variant):  # noqa: ANN001, ANN201
        self.calls.append(("load", worker, variant))
        return False, "worker refused"


def test_adapter_applies_unload_via_rpcs_and_reports_vm() -> None:
    from config.profiles import load_profiles_csv

    fd = FakeDispatcher()
    seen: list = []

    async def on_vm(decisions, unmet):  # noqa: ANN001
        seen.append(([x.action for x in decisions], dict(unmet)))

    fd.workers["a"].loaded.add("m-int8")
    fd._variant_meta["m-int8"] = VariantMeta("m-int8", "m", "cpu", 0.9, 8, 100.0)
    loop = ModelLoop(fd, load_profiles_csv(None), ModelLoopParams(vm=VmParams(remove_cooldown_s=0.0)), on_vm=on_vm)

    async def run() -> None:
        await loop.tick(0.0)
        await loop.tick(1.0)

    asyncio.run(run())
    # 0.5 q/s on rm2@c5n.2xlarge needs one instance: worker a gives up its extra ones, b keeps m
    assert sorted(fd.calls) == [("unload", "a", "m"), ("unload", "a", "m-int8")] or \
        sorted(fd.calls) == [("unload", "a", "m")]
    assert all(p.action == "unload" and p.worker == "a" for p in loop.applied) and loop.failed == []
    assert fd.workers["b"].loaded == {"m"} and fd.workers["a"].loaded
    assert seen[-1][0] == ["remove"] and loop.rounds == 2


def test_adapter_profile_mean_from_predictor_p99_from_profile_or_zero() -> None:
    fd = FakeDispatcher()
    profiles = load_profiles_csv(None)
    loop = ModelLoop(fd, profiles)
    fd._models["u"] = SimpleNamespace(profile_name="unprofiled-model", qos_ms=100.0)
    # mean: the dispatcher's predictor (here seeded with the same profiles)
    assert loop._profile("m", "c5n.2xlarge", 4.0, "mean") == fd.predictor.predict_ms("rm2", "c5n.2xlarge", 4.0)
    assert loop._profile("m", "c5n.2xlarge", 4.0, "p99") == float(profiles.latency_ms("rm2", "c5n.2xlarge", [4.0], "p99")[0])
    # an unprofiled pair: the predictor's fallback for the mean, 0 for p99 (no interference check)
    fd.predictor.observe("unprofiled-model", "c5n.2xlarge", 4.0, 40.0)
    assert loop._profile("u", "c5n.2xlarge", 4.0, "mean") == fd.predictor.predict_ms("unprofiled-model", "c5n.2xlarge", 4.0)
    assert loop._profile("u", "c5n.2xlarge", 4.0, "p99") == 0.0


def test_snapshot_takes_each_models_load_from_its_own_window() -> None:
    """Two models: each one's variant instances are sized from its own arrivals, not the total."""
    fd = FakeDispatcher()
    fd._variant_meta["n"] = VariantMeta("n", "n", "any", 1.0, 8, 100.0)
    fd._models["n"] = SimpleNamespace(profile_name="rm2", qos_ms=350.0, min_accuracy=0.0, application=None)
    snap = ModelLoop(fd, load_profiles_csv(None)).snapshot(1.0)
    assert dict(snap.load_qps) == {"m": 0.5, "n": 7.0}
    assert dict(snap.mean_batch) == {"m": 1.0, "n": 30.0}


def test_no_variant_below_its_applications_floor_is_a_candidate() -> None:
    """An application "app" of two members: "m" (accuracy 0.9) and "lo" (0.7); the application's
    models[].min_accuracy is 0.8. getVariant never routes a query to "lo", so the model loop is not
    given it (the autoscaler would keep one instance of it, holding a worker for nothing)."""
    fd = FakeDispatcher()
    fd._variant_meta = {"m": VariantMeta("m", "m", "any", 0.9, 8, 100.0), "lo": VariantMeta("lo", "lo", "any", 0.7, 8, 100.0)}
    fd._models = {"m": SimpleNamespace(profile_name="rm2", qos_ms=350.0, min_accuracy=0.0, application="app"),
                  "lo": SimpleNamespace(profile_name="rm2", qos_ms=350.0, min_accuracy=0.0, application="app")}
    fd.placement = SimpleNamespace(apps={"app": SimpleNamespace(min_accuracy=0.8)})
    assert [v.name for v in ModelLoop(fd, load_profiles_csv(None)).snapshot(1.0).variants] == ["m"]
    fd.placement.apps["app"].min_accuracy = 0.0
    assert sorted(v.name for v in ModelLoop(fd, load_profiles_csv(None)).snapshot(1.0).variants) == ["lo", "m"]


def test_an_equivalent_loaded_variant_is_kept_instead_of_swapped() -> None:
    from variants.infaas.model_decision import prefer_loaded_equivalents
    from variants.infaas.autoscale_ilp import ScalingProblem, ScalingVariant, plan_from_counts

    def sv(name: str, lat: float, cost: float = 1e-4) -> ScalingVariant:
        return ScalingVariant(name, "m", "r5n.large", lat, 1000.0 / lat, cost, 0.5, {"slot": 1.0})

    a, b, fast = sv("a", 20.0), sv("b", 20.0), sv("fast", 10.0)
    problem = ScalingProblem(variants=(a, b, fast), load_qps={"m": 60.0}, slo_ms={"m": 100.0},
                             running={"a": 3}, capacity={"r5n.large": {"slot": 3.0}})
    # the plan drops to two instances but swaps a for the equivalent b: keep two of a instead
    got = prefer_loaded_equivalents(problem, plan_from_counts(problem, {"b": 2}, "greedy"))
    assert dict(got.counts) == {"a": 2, "b": 0, "fast": 0}
    # a faster variant is a real upgrade: left alone
    plan = plan_from_counts(problem, {"fast": 2}, "greedy")
    assert prefer_loaded_equivalents(problem, plan) is plan


def test_interference_compares_each_query_with_its_own_batch() -> None:
    """Issue #12: a worker serving a heavy-tailed batch mix exactly at the profile is not
    Interfered (the p99 of the mix was once compared with the profile at the mean batch); 1.5x the
    profile at every batch is; fewer than MIN_P99_SAMPLES queries give no verdict."""
    from variants.infaas.model_decision import MIN_P99_SAMPLES, reports_for

    def by_batch(model: str, itype: str, batch: float, stat: str) -> float:
        return (10.0 + 2.0 * batch) * (1.0 if stat == "mean" else 1.5)    # p99 = 1.5 x mean

    mix = [1] * 30 + [200] * 2                         # mean batch ~13.5, a tail at 200
    def snap(scale: float, n: int) -> ModelInputs:
        served = tuple(("m", b, scale * by_batch("m", "c", b, "p99")) for b in mix[:n])
        w = WorkerSnapshot("w1", "c", "cpu", 0.5, ("m",), served)
        base = inputs(0.0, 1.0, [w])
        return ModelInputs(**{**base.__dict__, "profile": by_batch, "interval_s": 10.0})   # 3.2 q/s: not Overloaded

    exact = reports_for(snap(1.0, len(mix)), {"m": "m"})[0]
    assert exact.profiled_ms > 0 and exact.p99_ms / exact.profiled_ms == 1.0
    slow = reports_for(snap(1.5, len(mix)), {"m": "m"})[0]
    assert slow.p99_ms / slow.profiled_ms == 1.5
    d, _ = decide(snap(1.0, len(mix)))
    assert d.states[("m", "w1")] is not VariantState.INTERFERED
    d, _ = decide(snap(1.5, len(mix)))
    assert d.states[("m", "w1")] is VariantState.INTERFERED
    few = reports_for(snap(3.0, MIN_P99_SAMPLES - 1), {"m": "m"})[0]
    assert few.p99_ms == few.profiled_ms == 0.0        # no verdict on a handful of queries
