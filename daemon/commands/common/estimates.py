"""How ``costscale plan`` shows the estimated profiles a plan rests on (issue #29): a mark on each
estimated type, a footnote line per estimate with its basis, a line saying when the pick itself rests
on estimates, and the types left out because their estimates are not allowed
(:mod:`scaler.planner.estimate_gate`); in ``--json``, an ``estimated`` list and the bases."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from config.profiles import Estimate, ProfileTable
from config.schema import Config
from scaler.planner.estimate_gate import ALLOW_FIELD, estimates_in, model_split

#: the mark after an estimated type in the plan's table
MARK = "~"


@dataclass(frozen=True)
class PlanEstimates:
    """One model's estimates in a plan: on the plan's types, in its pick, and left out."""

    model: str
    considered: dict[str, Estimate] = field(default_factory=dict)   # planned types with an estimate
    picked: dict[str, Estimate] = field(default_factory=dict)       # those with workers in the pick
    left_out: dict[str, Estimate] = field(default_factory=dict)     # estimates not allowed: not planned on

    def to_dict(self) -> dict[str, Any]:
        return {"estimated": sorted(self.considered), "estimated_picked": sorted(self.picked),
                "estimates": {t: e.basis for t, e in sorted(self.considered.items())},
                "left_out_estimated": {t: e.basis for t, e in sorted(self.left_out.items())}}


def model_estimates(cfg: Config, profiles: ProfileTable, model: str, pool: Mapping[str, int],
                    types: Sequence[str] | None) -> PlanEstimates:
    """``model``'s estimates among ``pool``'s types (its columns) and those ``types`` (None: the
    config's) left out."""
    left = model_split(cfg, profiles, model, types).left_out
    considered = estimates_in(profiles, cfg.model(model).profile_name, [t for t in pool if t not in left])
    return PlanEstimates(model, considered, {t: e for t, e in considered.items() if pool.get(t, 0) > 0}, left)


def marked(itype: str, est: Mapping[str, Estimate]) -> str:
    return itype + MARK if itype in est else itype


def footer(per_model: Sequence[PlanEstimates]) -> list[str]:
    """The lines under a plan: each estimate's basis, whether the pick rests on any, what was left out."""
    lines: list[str] = []
    several = len(per_model) > 1
    for pe in per_model:
        who = f"{pe.model}: " if several else ""
        for t, e in sorted(pe.considered.items()):
            lines.append(f"{MARK} {who}{t}: {e.basis}")
    picked = [f"{pe.model} on {t}" if several else t for pe in per_model for t in sorted(pe.picked)]
    if picked:
        how = "; ".join(f"costscale profile CONFIG --model {pe.model} --types {','.join(sorted(pe.picked))}"
                        for pe in per_model if pe.picked)
        lines.append(f"this pick rests on estimated profiles, not measurements: {', '.join(picked)} (measure them: {how})")
    left = [(pe.model, t, e) for pe in per_model for t, e in sorted(pe.left_out.items())]
    if left:
        lines.append("left out (only an estimate there, not allowed): "
                     + "; ".join(f"{m} on {t} ({e.basis})" if several else f"{t} ({e.basis})" for m, t, e in left)
                     + f"; set {ALLOW_FIELD}: true or pass --estimates to plan with them")
    return lines


__all__ = ["MARK", "PlanEstimates", "footer", "marked", "model_estimates"]
