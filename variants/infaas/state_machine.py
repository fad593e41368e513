"""The lifecycle of one model-variant instance on one worker (INFaaS §3.2 "State machine for the
lifecycle of model-variants", Figure 4; maintained from the monitoring daemon's reports, §5).

States:

* ``INACTIVE``   -- not loaded on that worker.
* ``ACTIVE``     -- loaded and serving below its peak throughput.
* ``OVERLOADED`` -- loaded and serving at its peak (saturation) throughput.
* ``INTERFERED`` -- loaded, not overloaded, but its measured latency is above the profiled value
  (co-located variants contend for caches, memory bandwidth or hardware threads).

"Serving at peak throughput" is read with the Model-Autoscaler's slack-threshold (INFaaS §4.2.2,
§5: 1.05): an instance whose headroom ``peak_qps / qps_served`` drops below 1.05 is Overloaded;
it returns to Active only once its headroom is back above 1.10, the top of the range INFaaS
swept (§5: 1.01–1.1), so a variant does not flap at the boundary. INFaaS gives no number for
"latency above the profiled value"; we enter Interfered at p99 > 1.2 x profiled and leave it at
p99 <= 1.1 x profiled (our defaults, parameters below).

The transition function is pure: state + report + parameters -> next state.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Iterable, Mapping


class VariantState(str, Enum):
    INACTIVE = "inactive"
    ACTIVE = "active"
    OVERLOADED = "overloaded"
    INTERFERED = "interfered"


@dataclass(frozen=True)
class VariantReport:
    """One monitoring-daemon sample for a (variant, worker) instance (INFaaS §5: every 2 s)."""

    variant: str
    worker: str
    loaded: bool
    qps_served: float = 0.0      # queries (x batch) per second served in the last interval
    peak_qps: float = 0.0        # profiled saturation throughput of this variant on this hardware
    p99_ms: float = 0.0          # measured p99 latency in the last interval
    profiled_ms: float = 0.0     # profiled latency of this variant on this hardware


@dataclass(frozen=True)
class StateParams:
    """Margins of the state machine. Defaults: slack-threshold 1.05 (INFaaS §5), exit at 1.10
    (top of the swept range, §5); interference margins are ours (INFaaS gives none)."""

    overload_enter_headroom: float = 1.05
    overload_exit_headroom: float = 1.10
    interfere_enter_ratio: float = 1.2
    interfere_exit_ratio: float = 1.1

    def __post_init__(self) -> None:
        if not (1.0 <= self.overload_enter_headroom <= self.overload_exit_headroom):
            raise ValueError("need 1 <= overload_enter_headroom <= overload_exit_headroom")
        if not (1.0 <= self.interfere_exit_ratio <= self.interfere_enter_ratio):
            raise ValueError("need 1 <= interfere_exit_ratio <= interfere_enter_ratio")


def _headroom(report: VariantReport) -> float:
    if report.qps_served <= 0.0:
        return float("inf")
    return report.peak_qps / report.qps_served


def next_state(current: VariantState, report: VariantReport, params: StateParams = StateParams()) -> VariantState:
    """Transition of one (variant, worker) instance given its latest report (INFaaS Figure 4).

    Overloaded takes precedence over Interfered: an instance at peak throughput is expected to
    show queueing latency, and Interfered is defined as "not overloaded but slower than profiled".
    """
    if not report.loaded:
        return VariantState.INACTIVE
    headroom = _headroom(report)
    limit = params.overload_exit_headroom if current is VariantState.OVERLOADED else params.overload_enter_headroom
    if headroom < limit:
        return VariantState.OVERLOADED
    if report.profiled_ms > 0.0:
        ratio = report.p99_ms / report.profiled_ms
        margin = params.interfere_exit_ratio if current is VariantState.INTERFERED else params.interfere_enter_ratio
        if ratio > margin:
            return VariantState.INTERFERED
    return VariantState.ACTIVE


StateKey = tuple[str, str]  # (variant, worker)


def apply_reports(
    states: Mapping[StateKey, VariantState],
    reports: Iterable[VariantReport],
    params: StateParams = StateParams(),
) -> dict[StateKey, VariantState]:
    """Fold a batch of reports into the state table; instances without a report keep their
    state, unknown instances start Inactive (INFaaS §3.2: every variant starts Inactive)."""
    out = dict(states)
    for r in reports:
        key = (r.variant, r.worker)
        out[key] = next_state(out.get(key, VariantState.INACTIVE), r, params)
    return out
