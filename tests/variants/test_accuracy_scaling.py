"""Accuracy scaling on a virtual clock (issue #13): Proteus adaptive batching (§5), query assignment by
the plan (§4), and the simulator that runs them with the accuracy planner (sim.accuracy_sim)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from dispatcher.accuracy.plan_router import PlanRouter
from variants.accuracy.allocation import headroom_routing
from sim.accuracy_sim import AccuracySpec, simulate_accuracy
from variants.accuracy.planner import VariantProfile
from variants.accuracy.adaptive_batching import BatchStep, batch_step, early_drops, interpolated_latency_s
from variants.accuracy.spare_workers import fill_spare


def linear(n: int) -> float:      # T_process(n) = 0.1 n seconds
    return 0.1 * n


def test_proteus_waits_until_the_head_cannot_wait_for_one_more() -> None:
    # one query expiring at 1.0: a batch of 2 takes 0.2 s, so it may wait until 0.8
    assert batch_step("proteus", [1.0], 0.0, linear, 4) == BatchStep(0, pytest.approx(0.8))
    assert batch_step("proteus", [1.0], 0.8, linear, 4) == BatchStep(1)
    # three queued at 0.5: T_max_wait(4) = 1.0 - 0.4 = 0.6
    assert batch_step("proteus", [1.0, 1.1, 1.2], 0.5, linear, 4) == BatchStep(0, pytest.approx(0.6))
    assert batch_step("proteus", [1.0, 1.1, 1.2], 0.6, linear, 4) == BatchStep(3)
    # a full batch goes at once
    assert batch_step("proteus", [1.0, 1.1, 1.2, 1.3, 1.4], 0.0, linear, 4) == BatchStep(4)


def test_work_conserving_and_none_and_the_head_deadline() -> None:
    assert batch_step("work_conserving", [1.0, 1.1, 1.2], 0.0, linear, 8) == BatchStep(3)
    assert batch_step("none", [1.0, 1.1, 1.2], 0.0, linear, 8) == BatchStep(1)
    # a batch of 3 (0.3 s) would make the head (0.25) miss, 2 would not
    assert batch_step("work_conserving", [0.25, 1.0, 1.0], 0.0, linear, 8) == BatchStep(2)
    assert batch_step("proteus", [], 0.0, linear, 8) == BatchStep(0, None)
    with pytest.raises(ValueError):
        batch_step("aimd", [1.0], 0.0, linear, 8)  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0.0, 2.0), min_size=1, max_size=12), st.floats(0.0, 1.0), st.integers(1, 8),
       st.sampled_from(["proteus", "work_conserving", "none"]))
def test_a_batch_never_makes_the_head_miss_when_one_query_would_not(exp: list[float], now: float, mb: int,
                                                                     policy: str) -> None:
    exp = sorted(exp)
    step = batch_step(policy, exp, now, linear, mb)  # type: ignore[arg-type]
    assert 0 <= step.send <= min(len(exp), mb)
    if step.send:
        assert now + linear(step.send) <= exp[0] + 1e-12 or step.send == 1
    else:
        assert policy == "proteus" and step.wait_until is not None and step.wait_until > now


def test_early_drop_only_when_a_full_batch_is_cheaper_per_query() -> None:
    economy = interpolated_latency_s({1: 10.0, 4: 16.0})         # 10 ms for 1 query, 4 ms a query in 4
    # the head (expiring at 12 ms) allows a batch of 1; from the second query on a full batch of 4 fits
    assert early_drops([0.012, 0.030, 0.031, 0.032, 0.033], 0.0, economy, 4) == 1
    assert early_drops([0.020, 0.030, 0.031, 0.032, 0.033], 0.0, economy, 4) == 0   # the head fits a full batch
    flat = linear                                                 # no economy: dropping only loses queries
    assert early_drops([0.15, 1.0, 1.0, 1.0, 1.0], 0.0, flat, 4) == 0
    assert early_drops([0.001], 0.0, economy, 4) == 0


def test_a_worker_behind_catches_up_with_early_drop() -> None:
    """With batching economy, a backlog (here all four queries due soon, then a steady stream) makes
    small batches forever unless the heads that keep them small are dropped."""
    v = VariantProfile("m", "v", 0.9, {"t": {1: 5.0, 10: 10.0, 40: 20.0}})   # SLO 50: batch 40 at 20 ms
    arr = np.sort(np.concatenate([np.full(300, 0.5), np.arange(0, 10.0, 1 / 1500.0)]))   # 1500 q/s: 75 %
    late = simulate_accuracy({"w": "t"}, [v], "m", 50.0, arr, AccuracySpec(early_drop=False, swap_s=0.0,
                                                                                batching="work_conserving"))
    caught = simulate_accuracy({"w": "t"}, [v], "m", 50.0, arr, AccuracySpec(swap_s=0.0, batching="work_conserving"))
    print(late.summary()["slo_attainment"], caught.summary()["slo_attainment"])
    assert late.summary()["slo_attainment"] < 0.9 < 0.97 < caught.summary()["slo_attainment"]


def test_interpolated_latency() -> None:
    f = interpolated_latency_s({1: 10.0, 4: 40.0, 8: 100.0})
    assert [round(f(n) * 1000, 9) for n in (1, 2, 6, 8, 10)] == [10.0, 20.0, 70.0, 100.0, 130.0]


def test_plan_router_follows_the_fractions_exactly() -> None:
    r = PlanRouter({"m": {"a": 0.5, "b": 0.25, "c": 0.25, "d": 0.0}})
    picks = [r.route("m") for _ in range(8)]
    assert {w: picks.count(w) for w in "abc"} == {"a": 4, "b": 2, "c": 2}
    assert r.route("other") is None


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(0.01, 1.0), min_size=1, max_size=6), st.integers(1, 200))
def test_plan_router_share_stays_close(weights: list[float], k: int) -> None:
    """A worker's count is k x its fraction minus its credit, and the credits stay bounded (they sum
    to 0, the largest gives back 1 a query): here within one query per worker routed."""
    fr = {f"w{i}": w for i, w in enumerate(weights)}
    total = sum(weights)
    r = PlanRouter({"m": fr})
    counts = dict.fromkeys(fr, 0)
    for _ in range(k):
        counts[r.route("m")] += 1  # type: ignore[index]
    for w, f in fr.items():
        assert abs(counts[w] - k * f / total) <= len(fr) - 1 + 1e-9 or len(fr) == 1


def test_headroom_routing_hand_computed() -> None:
    ws = {"a": (0.8, 10.0), "b": (0.8, 10.0), "c": (0.7, 20.0)}
    assert headroom_routing(ws, 15.0, beta=1.25) == {"a": 0.5, "b": 0.5}
    got = headroom_routing(ws, 30.0, beta=1.25)
    assert got == pytest.approx({"a": 8 / 30, "b": 8 / 30, "c": 14 / 30})
    assert headroom_routing(ws, 50.0, beta=1.25) == pytest.approx({"a": 0.25, "b": 0.25, "c": 0.5})
    assert headroom_routing({}, 5.0) == {}


def _one(lat: dict[int, float], acc: float = 0.9, name: str = "v") -> VariantProfile:
    return VariantProfile("m", name, acc, {"t": lat})


def test_simulator_hand_computed_latencies() -> None:
    # no batching: 100 ms each
    r = simulate_accuracy({"w": "t"}, [_one({1: 100.0})], "m", 1000.0, np.array([0.0, 0.1, 0.2]),
                          AccuracySpec(batching="none", swap_s=0.0))
    assert r.latency_ms.tolist() == pytest.approx([100.0, 100.0, 100.0])
    assert r.summary()["slo_attainment"] == 1.0 and r.summary()["mean_accuracy"] == 0.9
    # Proteus batching, batches of up to 2 (150 ms <= SLO/2): a lone query waits until 1.0 - 0.15
    r = simulate_accuracy({"w": "t"}, [_one({1: 100.0, 2: 150.0})], "m", 1000.0, np.array([0.0]),
                          AccuracySpec(swap_s=0.0))
    assert r.latency_ms.tolist() == pytest.approx([950.0])


def _family() -> list[VariantProfile]:
    """Three variants; at a 200 ms SLO (batches whose latency is <= 100 ms) a worker serves 40 q/s
    of "big" (batch 4), 88.9 of "mid" (batch 8), 188.2 of "small" (batch 16)."""
    return [_one({1: 10.0, 2: 15.0, 4: 25.0, 8: 45.0, 16: 85.0}, 0.70, "small"),
            _one({1: 20.0, 2: 30.0, 4: 50.0, 8: 90.0}, 0.75, "mid"),
            _one({1: 40.0, 2: 60.0, 4: 100.0}, 0.80, "big")]


def _burst() -> np.ndarray:
    rng = np.random.default_rng(3)
    low = np.cumsum(rng.exponential(1 / 40.0, 2400))                 # 40 q/s for ~60 s
    high = low[-1] + np.cumsum(rng.exponential(1 / 320.0, 19200))    # then 2x what "big" serves (160 q/s)
    return np.concatenate([low, high])


def test_allocations_on_a_burst_trade_accuracy_for_attainment() -> None:
    pool = {f"w{i}": "t" for i in range(4)}
    arr = _burst()
    res = {a: simulate_accuracy(pool, _family(), "m", 200.0, arr, AccuracySpec(allocation=a)).summary()
           for a in ("proteus", "no_scaling", "clipper_ht", "infaas_accuracy")}
    assert res["no_scaling"]["mean_accuracy"] == pytest.approx(0.80)
    assert res["clipper_ht"]["mean_accuracy"] == pytest.approx(0.70)
    assert res["no_scaling"]["slo_attainment"] < 0.6            # it cannot serve the burst
    # an 8x step: the first seconds, before the burst is planned for, miss (3.5 % of the run here)
    assert res["proteus"]["slo_attainment"] > 0.95 > res["no_scaling"]["slo_attainment"] + 0.3
    assert res["proteus"]["mean_accuracy"] > res["clipper_ht"]["mean_accuracy"] + 0.03
    print({a: {k: round(v, 4) for k, v in r.items()} for a, r in res.items()})


@settings(max_examples=15, deadline=None)
@given(st.floats(0.0, 0.8), st.integers(0, 10_000))
def test_min_accuracy_is_never_violated(floor: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    arr = np.cumsum(rng.exponential(1 / 120.0, 1500))
    r = simulate_accuracy({"a": "t", "b": "t"}, _family(), "m", 200.0, arr, AccuracySpec(min_accuracy=floor))
    served = r.accuracy[~np.isnan(r.accuracy)]
    assert served.size and served.min() >= floor


def test_spare_workers_host_the_most_accurate_variant_of_their_type() -> None:
    got = fill_spare({"a": "mid", "b": None, "c": None}, {"a": "t", "b": "t", "c": "u"}, {"t": "big"})
    assert got == {"a": "mid", "b": "big", "c": None}


def _replay_cli(capsys, *args: str):  # type: ignore[no-untyped-def]
    from daemon.cli import main
    from variants.families.profiles import shipped_csv

    code = main(["accuracy", "replay", "--variants", str(shipped_csv("resnet")), *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_replay_cli_json_with_baselines(capsys) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = _replay_cli(capsys, "--pool", "r5n.large=2", "--slo-ms", "1000", "--minutes", "2",
                               "--pattern", "macroburst:low=3,high=12,low_s=40,high_s=40", "--baselines", "--json")
    assert code == 0
    import json
    got = json.loads(out)
    fields = {"queries", "slo_attainment", "mean_accuracy", "max_drop_points", "missed", "replans", "swaps", "max_solve_ms"}
    assert fields <= set(got) and set(got["baselines"]) == {"no_scaling", "clipper_ht", "infaas_accuracy", "slackfit", "slackfit_queue"}
    assert got["baselines"]["no_scaling"]["mean_accuracy"] == pytest.approx(0.78312)
    assert got["baselines"]["clipper_ht"]["mean_accuracy"] == pytest.approx(0.69758)


@pytest.mark.parametrize("args, needle", [
    (["--pool", "r5n.large=1", "--slo-ms", "1000", "--pattern", "nope"], "unknown pattern"),
    (["--pool", "r5n.large=1", "--slo-ms", "0", "--pattern", "step"], "--slo-ms must be > 0"),
    (["--pool", "x1.huge=1", "--slo-ms", "1000", "--pattern", "step"], "x1.huge"),
    (["--pool", "r5n.large=1", "--slo-ms", "1000", "--pattern", "step", "--model", "bert"], "no variant of 'bert'"),
    (["--pool", "r5n.large=1", "--slo-ms", "1000", "--pattern", "step", "--min-accuracy", "0.9"], "reaches 0.9"),
])
def test_replay_cli_bad_input_is_one_line_exit_2(capsys, args: list[str], needle: str) -> None:  # type: ignore[no-untyped-def]
    code, out, err = _replay_cli(capsys, *args)
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1 and out == ""


def test_slackfit_buckets_and_choice_hand_computed() -> None:
    from variants.accuracy.slackfit import buckets, choose, choose_for_queue, pareto

    fast = (0.70, lambda n: 0.010 * n)           # 10 ms a query
    slow = (0.80, lambda n: 0.040 * n)           # 40 ms a query
    worse = (0.65, lambda n: 0.050 * n)          # slower and less accurate than "fast": not on the front
    vs = {"fast": fast, "slow": slow, "worse": worse}
    assert pareto(vs) == ["fast", "slow"]
    table = buckets(vs, {"fast": 4, "slow": 4, "worse": 4}, n_buckets=3)
    # from 10 ms (fast, 1) to 160 ms (slow, 4): caps 60, 110, 160 ms; the largest batch wins, then accuracy
    assert [(round(b.latency_s, 3), b.variant, b.batch) for b in table] == [
        (0.06, "fast", 4), (0.11, "fast", 4), (0.16, "slow", 4)]
    assert choose(table, 0.05) is None and choose(table, 0.12).latency_s == pytest.approx(0.11)
    # ours: the most accurate that serves what waits within the slack
    front = pareto(vs)
    mb = {"fast": 4, "slow": 4}
    assert choose_for_queue(vs, mb, front, 2, 0.1) == ("slow", 2)       # 80 ms fits
    assert choose_for_queue(vs, mb, front, 3, 0.1) == ("fast", 3)       # 120 ms does not: fast
    assert choose_for_queue(vs, mb, front, 4, 0.025) == ("fast", 2)     # fast, as many as fit
    assert choose_for_queue(vs, mb, front, 1, 0.005) is None


def test_slackfit_serves_bursts_from_one_queue_without_plans() -> None:
    pool = {f"w{i}": "t" for i in range(4)}
    arr = _burst()
    for alloc in ("slackfit", "slackfit_queue"):
        s = simulate_accuracy(pool, _family(), "m", 200.0, arr, AccuracySpec(allocation=alloc)).summary()
        assert s["replans"] == 0 and s["swaps"] == 0
        assert s["slo_attainment"] > 0.95 and 0.70 <= s["mean_accuracy"] <= 0.80


def test_replan_trigger_hand_computed() -> None:
    from variants.accuracy.trigger import TriggerParams, initial_state, replan

    p = TriggerParams()                                   # 30 s timer, 5 s window, 1 s burst window, 1.2x, 10 %
    s = initial_state(100.0, p)
    flat = {1.0: 105.0, 5.0: 104.0}                      # noise: no burst, and before the timer nothing
    d, s2 = replan(s, 10.0, lambda w: flat.get(w, 103.0), p)
    assert d is None and s2 == s
    # a burst: 1 s at 150 q/s (> 120) confirmed by the 5 s rate (> 110): plan for 150, look again in 5 s
    burst = {1.0: 150.0, 5.0: 120.0}
    d, s3 = replan(s, 12.0, burst.__getitem__, p)
    assert d == 150.0 and (s3.planned, s3.steady, s3.planned_at, s3.next_plan) == (150.0, 100.0, 12.0, 17.0)
    # 5 s later the mean since (5 s) is 140, within 10 % of 150: the plan stays, and becomes steady
    d, s4 = replan(s3, 17.0, lambda w: 140.0, p)
    assert d is None and (s4.planned, s4.steady, s4.next_plan) == (150.0, 150.0, 47.0)
    # the timer with the mean moved by more than 10 %: plan for it
    d, s5 = replan(s4, 47.0, lambda w: {1.0: 100.0, 5.0: 100.0, 30.0: 90.0}[w], p)
    assert d == 90.0 and (s5.planned, s5.steady, s5.planned_at) == (90.0, 90.0, 47.0)
