"""Demand from every dispatcher replica (issue #27, deliverable 3): the merge of the replicas'
per-model windows (pure: sums, the traffic-weighted mix, stale and dead replicas dropped), its
fit with the dispatcher's windows and the fleet tick's ``planning_demand``, and the DynamoDB
items the replicas publish, against moto in server mode on 127.0.0.1."""
from __future__ import annotations

import math
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dispatcher.window import DemandWindow
from scaler.planner.batch_mix import BatchMix
from scaler.replicas.demand_table import DynamoDemandTable
from scaler.fleet.step import planning_demand
from scaler.replicas.lease_table import DynamoLeaseTable, make_dynamodb_client
from scaler.planner.replan import DemandView
from scaler.replicas.demand import MergedDemand, ModelWindow, ReplicaDemand, merge_demand, sum_windows, window_of
from scaler.replicas.membership import Replica
from scaler.replicas.replica_table import DynamoReplicaTable
from scaler.replicas.heartbeat import ReplicaHeartbeat
from scaler.replicas.membership import live_replicas
from sim.clock import VirtualClock

T0 = 1_700_000_000.0


def mix(sizes: list[int], fractions: list[float]) -> BatchMix:
    return BatchMix(np.array(sizes, dtype=np.int64), np.array(fractions, dtype=float))


A_WIN = ModelWindow(arrival_qps=10.0, steady_qps=8.0, count=1000, total=1400, mean_batch=150.0,
                    mix=mix([100, 200], [0.5, 0.5]), span_s=50.0)
B_WIN = ModelWindow(arrival_qps=30.0, steady_qps=24.0, count=1500, total=2000, mean_batch=275.0,
                    mix=mix([200, 300], [0.25, 0.75]), span_s=60.0)


def same(a: ModelWindow, b: ModelWindow) -> bool:
    """Equal windows, floats to 1e-12 (a sum in another order rounds differently)."""
    close = [math.isclose(x, y, rel_tol=1e-12, abs_tol=1e-12) for x, y in
             ((a.arrival_qps, b.arrival_qps), (a.steady_qps, b.steady_qps), (a.mean_batch, b.mean_batch),
              (a.span_s, b.span_s))]
    return all(close) and (a.count, a.total) == (b.count, b.total) and np.array_equal(a.mix.sizes, b.mix.sizes) \
        and np.allclose(a.mix.fractions, b.mix.fractions, rtol=0, atol=1e-12)


# -- the merge ----------------------------------------------------------------------------------------

def test_rates_and_counts_add_and_the_mix_is_weighted_by_each_replicas_steady_rate() -> None:
    got = sum_windows([A_WIN, B_WIN])
    # weights 8 : 24 = 1/4 : 3/4 (not the counts' 2/5 : 3/5); at 100: 1/4 × 1/2; at 200: 1/4 × 1/2 + 3/4 × 1/4; at 300: 3/4 × 3/4
    want = ModelWindow(arrival_qps=40.0, steady_qps=32.0, count=2500, total=3400, mean_batch=243.75,
                       mix=mix([100, 200, 300], [0.125, 0.3125, 0.5625]), span_s=60.0)
    assert same(got, want)
    assert got.mean_batch == pytest.approx(got.mix.mean())      # the mean batch is the mix's own


def test_without_any_rate_yet_the_mix_is_weighted_by_the_counts() -> None:
    a = ModelWindow(0.0, 0.0, 1, 1, 10.0, mix([10], [1.0]), 0.0)
    b = ModelWindow(0.0, 0.0, 3, 3, 20.0, mix([20], [1.0]), 0.0)
    assert same(sum_windows([a, b]), ModelWindow(0.0, 0.0, 4, 4, 17.5, mix([10, 20], [0.25, 0.75]), 0.0))


def test_dead_stale_and_silent_replicas_are_dropped_saying_why_and_a_replica_counts_once() -> None:
    pubs = [ReplicaDemand("a", T0 + 10, {"m1": A_WIN}),
            ReplicaDemand("a", T0 + 4, {"m1": B_WIN}),                  # an older publication of a: ignored
            ReplicaDemand("b", T0 + 9, {"m1": B_WIN, "m2": B_WIN}),
            ReplicaDemand("c", T0 + 10, {"m1": B_WIN, "m3": B_WIN}),    # c's heartbeat expired
            ReplicaDemand("d", T0 + 3, {"m1": B_WIN})]                  # d is live but stuck
    got = merge_demand(pubs, ["a", "b", "d", "e"], T0 + 10, max_age_s=6.0)
    assert got.replicas == ("a", "b")
    assert got.dropped == {"c": "not live (heartbeat expired or never written)",
                           "d": "published 7.0 s ago (older than 6 s)", "e": "nothing published"}
    assert sorted(got.windows) == ["m1", "m2"]                          # m3 only from a dead replica
    assert same(got.windows["m1"], sum_windows([A_WIN, B_WIN])) and same(got.windows["m2"], B_WIN)
    assert merge_demand(pubs, [], T0 + 10) == MergedDemand({}, (), {r: "not live (heartbeat expired or never written)"
                                                                     for r in "abcd"})


@st.composite
def windows(draw: st.DrawFn) -> ModelWindow:
    sizes = sorted(draw(st.lists(st.integers(1, 1000), min_size=1, max_size=5, unique=True)))
    w = np.array(draw(st.lists(st.floats(0.01, 1), min_size=len(sizes), max_size=len(sizes))))
    frac = w / w.sum()
    n = draw(st.integers(1, 10_000))
    return ModelWindow(draw(st.floats(0, 1000)), draw(st.floats(0, 1000)), n, n, float(np.dot(sizes, frac)),
                       mix(sizes, list(frac)), draw(st.floats(0, 120)))


@settings(max_examples=200, deadline=None)
@given(st.lists(windows(), min_size=1, max_size=4), st.randoms())
def test_the_merge_adds_rates_keeps_a_mix_and_does_not_depend_on_the_order(ws: list[ModelWindow],
                                                                            rnd: random.Random) -> None:
    got = sum_windows(ws)
    assert got.arrival_qps == pytest.approx(sum(w.arrival_qps for w in ws))
    assert got.steady_qps == pytest.approx(sum(w.steady_qps for w in ws))
    assert got.count == sum(w.count for w in ws) and got.span_s == max(w.span_s for w in ws)
    assert got.mix.fractions.sum() == pytest.approx(1.0) and np.all(np.diff(got.mix.sizes) > 0)
    assert set(got.mix.sizes) <= set().union(*(set(w.mix.sizes) for w in ws))
    assert got.mean_batch == pytest.approx(got.mix.mean())
    shuffled = list(ws)
    rnd.shuffle(shuffled)
    assert same(sum_windows(shuffled), got)
    assert same(sum_windows(ws[:1]), ws[0])                            # one replica: its own window


# -- with the dispatcher's windows and the fleet tick -----------------------------------------------------

def stream(n: int, seconds: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return np.linspace(0.0, seconds, n, endpoint=False), rng.integers(1, 1000, n)


def test_a_round_robin_split_of_one_stream_merges_to_the_rates_of_one_window() -> None:
    t, b = stream(9000, 90.0, 1)                                       # 100 q/s, steady: 90 s > 60 s
    whole, parts = DemandWindow(), [DemandWindow(), DemandWindow(), DemandWindow()]
    for k, (tk, bk) in enumerate(zip(t, b)):
        whole.record(int(bk), float(tk))
        parts[k % 3].record(int(bk), float(tk))
    now = 90.0
    one = whole.snapshot(now)
    got = sum_windows([window_of(p.snapshot(now)) for p in parts])
    assert got.arrival_qps == pytest.approx(one.arrival_qps) and got.steady_qps == pytest.approx(one.steady_qps)
    assert got.count == one.count == 9000 and got.span_s == pytest.approx(one.span_s, abs=0.03)
    assert np.abs(np.cumsum(got.mix.fractions) - np.cumsum(one.mix.fractions)).max() < 0.01   # the same mix


def test_the_fleet_tick_plans_twice_the_demand_of_two_replicas_seeing_the_same_traffic() -> None:
    t, b = stream(6000, 80.0, 2)
    w = DemandWindow()
    for tk, bk in zip(t, b):
        w.record(int(bk), float(tk))
    one = window_of(w.snapshot(80.0))
    merged = merge_demand([ReplicaDemand("a", T0, {"m": one}), ReplicaDemand("b", T0, {"m": one})], ["a", "b"], T0)
    got = merged.windows["m"]
    declared = DemandView(0.0, mix([100], [1.0]), False)
    single = planning_demand(one.arrival_qps, one.mix, one.count, declared, 1.0, one.steady_qps)
    both = planning_demand(got.arrival_qps, got.mix, got.count, declared, 1.0, got.steady_qps)
    assert both.measured and both.qps == pytest.approx(2 * single.qps) and single.qps == pytest.approx(75.0, abs=0.1)
    assert np.array_equal(both.mix.sizes, single.mix.sizes) and np.allclose(both.mix.fractions, single.mix.fractions)


# -- the items on moto --------------------------------------------------------------------------------------

def _tables(endpoint: str, cluster: str = "c1") -> tuple[DynamoDemandTable, DynamoReplicaTable]:
    client = make_dynamodb_client("us-east-1", endpoint)
    DynamoLeaseTable("costscale-leases", client).ensure_table()
    return (DynamoDemandTable("costscale-leases", client, cluster, max_age_s=6.0),
            DynamoReplicaTable("costscale-leases", client, cluster))


def test_published_windows_read_back_exactly_and_another_live_process_cannot_overwrite_them(moto_endpoint: str) -> None:
    table, _ = _tables(moto_endpoint)
    a = Replica("c1", "a", "h1:1:x", "h1")
    a2 = Replica("c1", "a", "h2:2:y", "h2")
    odd = ModelWindow(0.1 + 0.2, 1 / 3, 7, 9, 123.456789, mix([1, 10, 990], [1 / 3, 1 / 6, 0.5]), 12.5)
    pub = ReplicaDemand("a", T0 + 0.125, {"m1": A_WIN, "m2": odd})
    assert table.publish(a, pub) is True
    got = table.read()
    assert [g.replica for g in got] == ["a"] and got[0].at == T0 + 0.125
    assert same(got[0].windows["m1"], A_WIN) and same(got[0].windows["m2"], odd)
    assert got[0].windows["m2"].mix.fractions.tolist() == [1 / 3, 1 / 6, 0.5]          # floats exactly
    assert table.publish(a2, ReplicaDemand("a", T0 + 3, {"m1": B_WIN})) is False       # a's is 2.875 s old
    assert table.publish(a2, ReplicaDemand("a", T0 + 6.125, {"m1": B_WIN})) is True    # 6 s: a restarted
    assert table.forget(a) is False and table.forget(a2) is True and table.read() == []
    with pytest.raises(ValueError, match="replica a cannot publish replica b's demand"):
        table.publish(a, ReplicaDemand("b", T0, {}))


def test_the_lease_holder_sums_the_live_replicas_windows_and_drops_a_dead_ones(moto_endpoint: str) -> None:
    demand, replicas = _tables(moto_endpoint)
    other, _ = _tables(moto_endpoint, "c2")
    clock = VirtualClock(T0)
    procs = {r: Replica("c1", r, f"h-{r}:1:n", f"h-{r}") for r in "abc"}
    beats = {r: ReplicaHeartbeat(replicas, p, 6.0, clock=clock.now, monotonic=clock.now) for r, p in procs.items()}
    for r in "abc":
        beats[r].beat(0)
        demand.publish(procs[r], ReplicaDemand(r, clock.now(), {"m1": B_WIN if r == "c" else A_WIN}))
    assert other.publish(Replica("c2", "a", "x", "h"), ReplicaDemand("a", T0, {"m1": B_WIN}))
    clock.advance_to(T0 + 4)                                 # c dies; a and b beat and publish again
    for r in "ab":
        beats[r].beat(0)
        demand.publish(procs[r], ReplicaDemand(r, clock.now(), {"m1": A_WIN}))
    now = T0 + 4
    assert merge_demand(demand.read(), live_replicas(replicas.beats(), now), now).replicas == ("a", "b", "c")
    clock.advance_to(T0 + 6)
    now = clock.now()
    got = merge_demand(demand.read(), live_replicas(replicas.beats(), now), now)
    assert got.replicas == ("a", "b") and got.dropped == {"c": "not live (heartbeat expired or never written)"}
    assert same(got.windows["m1"], sum_windows([A_WIN, A_WIN]))
