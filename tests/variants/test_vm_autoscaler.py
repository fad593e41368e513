"""INFaaS §4.2.3 VM-Autoscaler: each rule in a hand case; output is a request, never a launch."""
from __future__ import annotations

from variants.infaas.vm_autoscaler import VmDecision, VmParams, VmState, WorkerStatus, decide_vm
from variants.infaas.state_machine import VariantState

A, O, F = VariantState.ACTIVE, VariantState.OVERLOADED, VariantState.INTERFERED


def gpu(name: str, util: float, *states: VariantState) -> WorkerStatus:
    return WorkerStatus(name, "gpu", util, tuple(states))


def only(decisions: list[VmDecision]) -> VmDecision:
    assert len(decisions) == 1
    return decisions[0]


def test_utilization_above_80_percent_adds() -> None:
    d = only(decide_vm([gpu("g1", 0.81, A)], now=0.0)[0])
    assert (d.action, d.hardware) == ("add", "gpu")
    assert "utilization 81% > 80%" in d.reason


def test_utilization_is_across_all_workers_of_the_class() -> None:
    # 0.95 and 0.6 average 0.775 <= 0.8: hold
    assert only(decide_vm([gpu("g1", 0.95, A), gpu("g2", 0.6, A)], now=0.0)[0]).action == "hold"
    assert only(decide_vm([gpu("g1", 0.80, A)], now=0.0)[0]).action == "hold"  # not above 80 %


def test_all_interfered_adds() -> None:
    d = only(decide_vm([gpu("g1", 0.5, F), gpu("g2", 0.5, F, F)], now=0.0)[0])
    assert d.action == "add" and "Interfered on all 2 gpu worker(s)" in d.reason
    # one worker with an Active variant: not all interfered
    assert only(decide_vm([gpu("g1", 0.5, F), gpu("g2", 0.5, F, A)], now=0.0)[0]).action == "hold"


def test_more_than_80_percent_workers_overloaded_adds() -> None:
    five = [gpu(f"g{i}", 0.5, O, A) for i in range(5)]
    d = only(decide_vm(five, now=0.0)[0])                      # 5/5 > 80 %
    assert d.action == "add" and "5/5 gpu workers have Overloaded variants" in d.reason
    four_of_five = five[:4] + [gpu("g5", 0.5, A)]
    assert only(decide_vm(four_of_five, now=0.0)[0]).action == "hold"  # 4/5 = 80 %: not more than


def test_add_waits_for_the_vm_it_requested() -> None:
    _, st = decide_vm([gpu("g1", 0.9, A)], now=0.0)
    d = only(decide_vm([gpu("g1", 0.9, A)], now=10.0, state=st)[0])
    assert d.action == "hold" and "added 10 s ago" in d.reason
    assert only(decide_vm([gpu("g1", 0.9, A)], now=30.0, state=st)[0]).action == "add"


def test_low_use_removes_only_after_cooldown() -> None:
    ws = [gpu("g1", 0.1, A), gpu("g2", 0.2, A)]
    params = VmParams(remove_cooldown_s=120.0)
    d, st = decide_vm(ws, now=0.0, params=params)
    assert only(d).action == "hold"
    d, st = decide_vm(ws, now=119.0, state=st, params=params)
    assert only(d).action == "hold" and "cooldown" in only(d).reason      # below cooldown: hold
    d, st = decide_vm(ws, now=120.0, state=st, params=params)
    assert (only(d).action, only(d).hardware) == ("remove", "gpu")       # after cooldown: remove
    d, st = decide_vm(ws, now=130.0, state=st, params=params)
    assert only(d).action == "hold"                                      # the next one waits again


def test_low_use_interrupted_resets_the_timer() -> None:
    low = [gpu("g1", 0.1, A), gpu("g2", 0.1, A)]
    _, st = decide_vm(low, now=0.0)
    _, st = decide_vm([gpu("g1", 0.6, A), gpu("g2", 0.6, A)], now=60.0, state=st)
    d, st = decide_vm(low, now=130.0, state=st)
    assert only(d).action == "hold"
    d, _ = decide_vm(low, now=250.0, state=st)
    assert only(d).action == "remove"


def test_never_below_min_workers_and_not_while_overloaded() -> None:
    d, st = decide_vm([gpu("g1", 0.0, A)], now=0.0)
    assert only(decide_vm([gpu("g1", 0.0, A)], now=1000.0, state=st)[0]).action == "hold"
    busy = [gpu("g1", 0.1, O), gpu("g2", 0.1, A), gpu("g3", 0.1, A)]
    _, st = decide_vm(busy, now=0.0)
    assert only(decide_vm(busy, now=1000.0, state=st)[0]).action == "hold"


def test_one_decision_per_hardware_class() -> None:
    ws = [gpu("g1", 0.9, A), WorkerStatus("c1", "cpu", 0.3, (A,)), WorkerStatus("i1", "inferentia", 0.5, (F,))]
    d, _ = decide_vm(ws, now=0.0)
    assert [(x.hardware, x.action) for x in d] == [("cpu", "hold"), ("gpu", "add"), ("inferentia", "add")]


def test_pure_state_in_state_out() -> None:
    st0 = VmState()
    _, st1 = decide_vm([gpu("g1", 0.9, A)], now=5.0, state=st0)
    assert st0 == VmState() and st1.last_add == {"gpu": 5.0}
