"""INFaaS §3.2 Figure 4: the variant-instance state machine, one rule per case."""
from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from variants.infaas.state_machine import StateParams, VariantReport, VariantState, apply_reports, next_state

I, A, O, F = VariantState.INACTIVE, VariantState.ACTIVE, VariantState.OVERLOADED, VariantState.INTERFERED


def rep(qps: float = 50.0, p99: float = 20.0, loaded: bool = True) -> VariantReport:
    # peak 100 qps, profiled latency 20 ms
    return VariantReport("resnet50-trt", "w1", loaded=loaded, qps_served=qps, peak_qps=100.0,
                         p99_ms=p99, profiled_ms=20.0)


def test_inactive_to_active_when_loaded() -> None:
    assert next_state(I, rep(qps=0.0)) is A
    assert next_state(I, rep(loaded=False)) is I


def test_active_to_overloaded_at_peak_with_slack_threshold() -> None:
    # headroom 100/95 = 1.0526 >= 1.05: still Active; 100/96 = 1.0417 < 1.05: Overloaded
    assert next_state(A, rep(qps=95.0)) is A
    assert next_state(A, rep(qps=96.0)) is O


def test_overloaded_hysteresis() -> None:
    # back to Active only when headroom >= 1.10: 100/91 = 1.099 stays Overloaded, 100/90 = 1.111 leaves
    assert next_state(O, rep(qps=91.0)) is O
    assert next_state(O, rep(qps=90.0)) is A


def test_interfered_when_slower_than_profile_and_not_overloaded() -> None:
    assert next_state(A, rep(p99=24.0)) is A          # 1.2x: not above the margin
    assert next_state(A, rep(p99=24.5)) is F          # 1.225x
    assert next_state(F, rep(p99=22.5)) is F          # 1.125x: above the exit margin 1.1
    assert next_state(F, rep(p99=22.0)) is A          # 1.1x: recovered
    assert next_state(A, rep(qps=99.0, p99=40.0)) is O  # overloaded wins over interfered


def test_unloaded_returns_to_inactive_from_any_state() -> None:
    for s in VariantState:
        assert next_state(s, rep(loaded=False)) is I


def test_custom_margins() -> None:
    params = StateParams(overload_enter_headroom=1.0, overload_exit_headroom=1.0,
                         interfere_enter_ratio=1.5, interfere_exit_ratio=1.5)
    assert next_state(A, rep(qps=99.0), params) is A
    assert next_state(A, rep(qps=100.0, p99=29.0), params) is A
    assert next_state(A, rep(qps=101.0), params) is O
    with pytest.raises(ValueError):
        StateParams(overload_enter_headroom=1.2, overload_exit_headroom=1.1)


def test_apply_reports_folds_per_instance() -> None:
    states = {("v", "w1"): A, ("v", "w2"): O}
    out = apply_reports(states, [
        VariantReport("v", "w1", True, 99.0, 100.0, 10.0, 10.0),
        VariantReport("u", "w3", True, 1.0, 100.0, 10.0, 10.0),
    ])
    assert out == {("v", "w1"): O, ("v", "w2"): O, ("u", "w3"): A}
    assert states[("v", "w1")] is A  # input untouched


@given(st.sampled_from(list(VariantState)), st.booleans(), st.floats(0, 500), st.floats(0, 200))
def test_invariants(current: VariantState, loaded: bool, qps: float, p99: float) -> None:
    r = VariantReport("v", "w", loaded, qps, 100.0, p99, 20.0)
    s = next_state(current, r)
    assert (s is I) == (not loaded)
    if loaded and qps < 100.0 / 1.10 and p99 <= 22.0:
        assert s is A          # comfortably inside both margins: Active whatever came before
    if loaded and qps > 100.0 / 1.05:
        assert s is O
