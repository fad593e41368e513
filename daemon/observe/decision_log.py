"""The decisions and errors ``costscale status`` shows, as the loops push them: :class:`DecisionLog`
keeps the last ones for Status, counts them for the metrics and writes each to the audit log
(:mod:`daemon.observe.audit`); :class:`PlanDecisions` turns a new fleet target into a decision with the
planner's rule, the demand it planned for and the workers planned from estimated profiles (issue #29)."""
from __future__ import annotations

import time
from collections import Counter, deque
from typing import TYPE_CHECKING, Any, Callable, Mapping

from daemon.observe import audit
from daemon.observe.fleet_status import plan_estimates
from dispatcher.api.status import Decision
from scaler.planner.pools import pool_text
from scaler.planner.estimate_gate import estimates_line

if TYPE_CHECKING:
    from config.profiles import ProfileTable
    from config.schema import Config
    from scaler.planner.joint_plan import JointPlan
    from scaler.planner.replan import DemandView

#: decisions kept in memory (Status shows the last ten)
DECISIONS_KEPT = 100


class DecisionLog:
    """The decisions and errors Status shows, as the loops push them (a fleet target, a VM-autoscaler
    add or remove) and the watchers find them: kept for Status, counted for the metrics, written to
    the audit log."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.decisions: deque[Decision] = deque(maxlen=DECISIONS_KEPT)
        self.counts: Counter[tuple[str, str]] = Counter()
        self.last_error = ""
        self.last_error_at = 0.0

    def record(self, loop: str, kind: str, summary: str, reason: str = "", **fields: Any) -> None:
        """A decision: kept for Status, counted for the metrics, written to the audit log."""
        self.decisions.append(Decision(self.clock(), loop, kind, summary, reason))
        self.counts[(loop, kind)] += 1
        audit.emit(kind, summary, reason, loop=loop, **fields)

    def error(self, message: str) -> None:
        self.last_error, self.last_error_at = message, self.clock()
        audit.emit("error", message)

    def vm(self, decisions: Any) -> None:
        """The VM autoscaler's adds and removes (``Daemon._on_vm`` tells it)."""
        for v in decisions:
            if v.action != "hold":
                self.record("model", f"vm_{v.action}", f"{v.action} {v.hardware} capacity", v.reason,
                            hardware=v.hardware)


class PlanDecisions:
    """Each new fleet target as ``Daemon.fleet_tick`` takes it, before the launches it leads to: the
    target, the rule and demand behind it, and the workers planned from estimated profiles (issue
    #29); a target held again is not a new decision. ``target``: the last one (the watchers' "why")."""

    def __init__(self, log: DecisionLog, cfg: Callable[[], Config], profiles: ProfileTable | None,
                 price: Callable[[str], float]) -> None:
        self.log = log
        self.cfg = cfg
        self.profiles = profiles
        self.price = price
        self.target: dict[str, int] | None = None

    def planned(self, target: dict[str, int], plan: JointPlan | None, demand: Mapping[str, DemandView] | None) -> None:
        if target == self.target:
            return
        self.target = target
        cfg = self.cfg()
        if plan is not None:
            why = f"{plan.rule} pool"
        elif cfg.pinned_pool:
            why = "pinned pool (config)"
        else:
            why = "conservative pool while a model is profiled"
        qps = sum(v.qps for v in demand.values()) if demand else None        # every model's
        measured = all(v.measured for v in demand.values()) if demand else None
        short = plan.short if plan is not None else {}
        if short:
            why += "; short " + ", ".join(f"{m} {q:.1f} q/s" for m, q in short.items())
        if qps is not None:
            why += f" for {qps:.1f} q/s ({'measured' if measured else 'declared'})"
        est = plan_estimates(cfg, self.profiles, plan) if self.profiles is not None else {}  # said wherever a plan shows
        if est:
            why += f"; {estimates_line(est)}"
        cost = sum(self.price(t) * n for t, n in target.items())
        self.log.record("fleet", "plan", f"target {pool_text(target) or 'none'} at {cost:.3f} $/hr", why,
                        target=target, cost_per_hour=round(cost, 6), rule=plan.rule if plan is not None else why,
                        demand_qps=round(qps, 4) if qps is not None else None, demand_measured=measured,
                        short_qps={m: round(q, 4) for m, q in short.items()},
                        models={m: s.to_dict() for m, s in plan.models.items()} if plan is not None else None,
                        estimated={m: {t: e.basis for t, e in per.items()} for m, per in est.items()})


__all__ = ["DECISIONS_KEPT", "DecisionLog", "PlanDecisions"]
