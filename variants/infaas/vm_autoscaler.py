"""The VM-Autoscaler's decision (INFaaS §4.2.3), per hardware class, as a request to the fleet
planner -- never a launch: the planner/actuator keeps the money invariant (DESIGN invariant 1).

Add a worker of hardware class h when, over the workers of h:

1. their utilization (mean across the workers of h) exceeds 80 % (INFaaS §4.2.3 and §5: 80 %,
   chosen for 20-30 s VM start-up);
2. the variants on them are Interfered on every worker (§4.2.3 rule 2);
3. more than 80 % of them have an Overloaded variant (§4.2.3 rule 3).

After an add, further adds of h wait ``add_cooldown_s`` (default 30 s: INFaaS's VM start-up of
20-30 s), so one overload is not answered by several VMs. INFaaS does not spell out scale-in; we
remove a worker of h after its utilization has stayed below ``low_utilization`` (40 %, the
threshold INFaaS uses for pausing offline work, §5) for ``remove_cooldown_s`` with no Overloaded
or Interfered variant, keeping ``min_workers``. Time comes in as ``now``; timers live in
:class:`VmState` (pure: state in, state out).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Mapping, Sequence

from variants.infaas.state_machine import VariantState

VmAction = Literal["add", "remove", "hold"]


@dataclass(frozen=True)
class WorkerStatus:
    worker: str
    hardware: str                                   # "cpu" | "gpu" | "inferentia"
    utilization: float                              # 0..1, busiest resource of the worker
    variant_states: tuple[VariantState, ...] = ()   # states of the variant instances on it


@dataclass(frozen=True)
class VmDecision:
    action: VmAction
    hardware: str
    reason: str
    interfered: bool = False      # the add is (also) for variants Interfered on every worker of ``hardware``


@dataclass(frozen=True)
class VmParams:
    utilization_threshold: float = 0.80     # INFaaS §4.2.3 / §5
    overloaded_fraction: float = 0.80       # INFaaS §4.2.3 rule 3
    add_cooldown_s: float = 30.0            # INFaaS §4.2.3: VMs take 20-30 s to start
    low_utilization: float = 0.40           # ours (INFaaS §5 uses 40 % for offline pausing)
    remove_cooldown_s: float = 120.0        # ours: sustained low use before removing
    min_workers: int = 1


@dataclass(frozen=True)
class VmState:
    last_add: Mapping[str, float] = field(default_factory=dict)    # hardware -> time of last add
    low_since: Mapping[str, float] = field(default_factory=dict)   # hardware -> low use since


def decide_vm(
    workers: Sequence[WorkerStatus],
    now: float,
    state: VmState = VmState(),
    params: VmParams = VmParams(),
) -> tuple[list[VmDecision], VmState]:
    """One VM-Autoscaler round (INFaaS §5 polls every 2 s): one decision per hardware class
    present in ``workers`` (sorted by hardware), and the next state."""
    last_add = dict(state.last_add)
    low_since = dict(state.low_since)
    by_hw: dict[str, list[WorkerStatus]] = {}
    for w in workers:
        by_hw.setdefault(w.hardware, []).append(w)
    for hw in list(low_since):
        if hw not in by_hw:
            del low_since[hw]
    decisions: list[VmDecision] = []
    for hw in sorted(by_hw):
        ws = by_hw[hw]
        util = sum(w.utilization for w in ws) / len(ws)
        n_over = sum(1 for w in ws if VariantState.OVERLOADED in w.variant_states)
        all_states = [s for w in ws for s in w.variant_states]
        all_interfered = bool(all_states) and all(
            w.variant_states and all(s is VariantState.INTERFERED for s in w.variant_states) for w in ws)
        reasons: list[str] = []
        if util > params.utilization_threshold:
            reasons.append(f"utilization {util:.0%} > {params.utilization_threshold:.0%}")
        if all_interfered:
            reasons.append(f"variants Interfered on all {len(ws)} {hw} worker(s)")
        if n_over > params.overloaded_fraction * len(ws):
            reasons.append(f"{n_over}/{len(ws)} {hw} workers have Overloaded variants "
                           f"(> {params.overloaded_fraction:.0%})")
        if reasons:
            low_since.pop(hw, None)
            since_add = now - last_add[hw] if hw in last_add else None
            if since_add is not None and since_add < params.add_cooldown_s:
                decisions.append(VmDecision("hold", hw, f"{'; '.join(reasons)}; waiting for the worker "
                                                        f"added {since_add:g} s ago"))
            else:
                last_add[hw] = now
                decisions.append(VmDecision("add", hw, "; ".join(reasons), interfered=all_interfered))
            continue
        busy = n_over > 0 or any(s is VariantState.INTERFERED for s in all_states)
        if util < params.low_utilization and not busy and len(ws) > params.min_workers:
            since = low_since.setdefault(hw, now)
            if now - since >= params.remove_cooldown_s:
                low_since[hw] = now  # the next removal needs another full cooldown
                decisions.append(VmDecision("remove", hw, f"utilization {util:.0%} < "
                                            f"{params.low_utilization:.0%} for {now - since:g} s"))
            else:
                decisions.append(VmDecision("hold", hw, f"utilization {util:.0%} low for {now - since:g} s "
                                            f"(< {params.remove_cooldown_s:g} s cooldown)"))
            continue
        low_since.pop(hw, None)
        decisions.append(VmDecision("hold", hw, f"utilization {util:.0%}"))
    return decisions, VmState(last_add=last_add, low_since=low_since)
