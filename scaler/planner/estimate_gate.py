"""Which estimated profiles the fleet planner may plan on, and which of a plan's workers rest on
estimates (issue #29; pure).

A profile is a measurement (Kairos §7's AWS runs, a probe, a worker) or an estimate
(:class:`config.profiles.Estimate`): from a local run by a reference type's emulation factor
(``config.emulation``), or from a measured sibling type by ``config/type_estimates.csv``. The rule:

- **An estimate by the type table is planned on only where the config allows it**
  (``instance_types[].allow_estimates: true``; ``costscale plan --estimates`` for a what-if). Such a
  type has no measurement of any model behind it, only datasheets, and nothing measures it for a
  model whose profiles come from the profile CSV; so by default it is left out of that model's plan,
  and the plan says so (:func:`split_types`), rather than the daemon launching it on a guess.
- **An estimate from a local run on a reference type is planned on** as before: it is the model's
  only profile until measured, its factor rests on every reference model measured on that type, and
  the daemon measures it at start (``daemon.profiling.self_profiling``; INFaaS §3.2 profiles at registration).
- **Both are tagged** wherever a plan shows: :func:`estimates_in` and :func:`share_estimates` name
  each (model, type) of a pick that rests on an estimate, and :func:`estimates_line` says it in one line.

A measured profile always wins over an estimate (``ProfileTable.merged``,
``config.type_estimates.sibling_estimates``), so none of this applies once the type is measured.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Collection, Mapping, Sequence, TypeGuard

from config.profiles import Estimate, ProfileTable
from scaler.planner.base_aux import PlanError

#: where a config allows a type's estimates (named in messages)
ALLOW_FIELD = "instance_types[].allow_estimates"


@dataclass(frozen=True)
class TypeSplit:
    """A model's types, split: ``planned`` (in the given order) and ``left_out`` (type -> the
    estimate by the type table it has there, not allowed)."""

    planned: list[str]
    left_out: dict[str, Estimate]


def allowed_estimate_types(cfg: Any) -> frozenset[str]:
    """The config's types whose estimates by the type table may be planned on."""
    return frozenset(t.type for t in cfg.instance_types if getattr(t, "allow_estimates", False))


def needs_opt_in(e: Estimate | None) -> TypeGuard[Estimate]:
    """Whether an estimate is planned on only where allowed (one by the type table)."""
    return e is not None and e.sibling is not None


def split_types(profiles: ProfileTable, profile_name: str, types: Sequence[str],
                allowed: Collection[str]) -> TypeSplit:
    """``types`` without those where ``profile_name`` has only an estimate by the type table and
    the type is not in ``allowed``."""
    left = {t: e for t in types if needs_opt_in(e := profiles.estimate(profile_name, t)) and t not in allowed}
    return TypeSplit([t for t in types if t not in left], left)


def model_split(cfg: Any, profiles: ProfileTable, model: str, types: Sequence[str] | None) -> TypeSplit:
    """:func:`split_types` for configured ``model`` over ``types`` (None: the config's) with the
    config's allowed types. KeyError for a model the config does not have."""
    names = list(types) if types is not None else [t.type for t in cfg.instance_types]
    return split_types(profiles, cfg.model(model).profile_name, names, allowed_estimate_types(cfg))


def planned_types(cfg: Any, profiles: ProfileTable, model: str, types: Sequence[str] | None) -> Sequence[str] | None:
    """The types ``model`` is planned on: ``types`` (None: the config's) less the estimates it may
    not use (:func:`model_split`); ``types`` itself when none is left out. Raises PlanError (one
    line) when every type is left out for that reason."""
    try:
        split = model_split(cfg, profiles, model, types)
    except KeyError:
        return types          # the planner says it is unknown
    if not split.left_out:
        return types
    if not split.planned:
        raise PlanError(f"model {model!r}: its profiles on {', '.join(split.left_out)} are estimates "
                        f"({'; '.join(e.basis for e in split.left_out.values())}), planned on only where allowed: "
                        f"set {ALLOW_FIELD}: true (costscale plan --estimates for a what-if), or measure them "
                        f"(costscale profile CONFIG --model {model} --types {','.join(split.left_out)})")
    return split.planned


def estimates_in(profiles: ProfileTable, profile_name: str, types: Sequence[str]) -> dict[str, Estimate]:
    """Type -> the estimate behind ``profile_name``'s profile there, for each of ``types`` that has one."""
    return {t: e for t in types if (e := profiles.estimate(profile_name, t)) is not None}


def share_estimates(cfg: Any, profiles: ProfileTable,
                    shares: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, Estimate]]:
    """Model -> type -> estimate, for each model's workers (``shares``: model -> type -> count)
    that are planned from an estimate (models without any left out)."""
    out = {}
    for m, pool in shares.items():
        try:
            pname = cfg.model(m).profile_name
        except KeyError:
            continue
        est = estimates_in(profiles, pname, [t for t, n in pool.items() if n > 0])
        if est:
            out[m] = est
    return out


def estimates_line(estimated: Mapping[str, Mapping[str, Estimate]]) -> str:
    """One line naming each (model, type) planned from an estimate and its basis ('' when none)."""
    parts = [f"{m} on {t} ({e.basis})" for m, per in sorted(estimated.items()) for t, e in sorted(per.items())]
    return ("rests on estimated profiles, not measurements: " + "; ".join(parts)) if parts else ""


__all__ = ["ALLOW_FIELD", "TypeSplit", "allowed_estimate_types", "estimates_in", "estimates_line", "model_split",
           "needs_opt_in", "planned_types", "share_estimates", "split_types"]
