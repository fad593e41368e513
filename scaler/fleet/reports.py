"""What one apply or reconcile of the fleet actuator did, and how a pool is written in a log line.

:class:`ApplyReport` and :class:`ReconcileReport` are the actuator's outcomes as data (steps,
launches, terminations, capacity and budget cuts, errors), each with a one-line ``summary`` for the
log; :func:`scaler.planner.pools.pool_text` is the one way a pool (counts by type) is written in logs and status lines
(the actuator's reports, the fleet and status lines, ``costscale status``, the benches).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

from scaler.planner.pools import pool_text
from scaler.fleet.transitions import Step


@dataclass
class ApplyReport:
    plan_id: str
    target: dict[str, int]
    steps: list[Step] = field(default_factory=list)
    launched: dict[str, list[str]] = field(default_factory=dict)
    terminated: list[str] = field(default_factory=list)
    drained: dict[str, bool] = field(default_factory=dict)
    unavailable: list[str] = field(default_factory=list)     # types that failed for capacity (replan without)
    quota_refused: list[str] = field(default_factory=list)   # slots refused for the vCPU quota (quota lowered)
    shortfall: dict[str, int] = field(default_factory=dict)  # type → instances of the target still missing
    budget_cut: dict[str, int] = field(default_factory=dict)  # type → instances not launched to stay in budget
    errors: list[str] = field(default_factory=list)
    settled: "ReconcileReport | None" = None

    @property
    def complete(self) -> bool:
        return not self.errors and not any(self.shortfall.values())

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["complete"] = self.complete
        return d

    def summary(self) -> str:
        """One readable line for the log: what changed, and what did not happen."""
        parts = [f"launched {_ids(self.launched)}" if any(self.launched.values()) else "",
                 f"terminated {', '.join(self.terminated)}" if self.terminated else "",
                 f"short {pool_text(self.shortfall)}" if any(self.shortfall.values()) else "",
                 f"budget cut {pool_text(self.budget_cut)}" if any(self.budget_cut.values()) else "",
                 f"no capacity for {', '.join(self.unavailable)}" if self.unavailable else "",
                 f"over the vCPU quota: {', '.join(self.quota_refused)}" if self.quota_refused else "",
                 f"{len(self.errors)} error(s): {self.errors[0]}" if self.errors else ""]
        if self.settled is not None and self.settled.summary() != "no change":
            parts.append(f"settled: {self.settled.summary()}")
        return "; ".join(p for p in parts if p) or "no change"


@dataclass
class ReconcileReport:
    adopted: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)       # intent tokens found done in the cloud
    reissued: list[str] = field(default_factory=list)       # launch intents re-sent with the same token
    rolled_back: list[str] = field(default_factory=list)
    terminated_unwanted: list[str] = field(default_factory=list)
    terminated_stuck: list[str] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)
    unavailable: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        """One readable line for the log (empty lists left out)."""
        parts = [f"{name.replace('_', ' ')} {', '.join(ids)}" for name, ids in asdict(self).items() if ids]
        return "; ".join(parts) or "no change"


def _ids(by_type: dict[str, list[str]]) -> str:
    return ", ".join(f"{t}: {' '.join(ids)}" for t, ids in sorted(by_type.items()) if ids)




__all__ = ["ApplyReport", "ReconcileReport"]
