"""Profiles for the catalog types nobody measured (issue #29): each such type is planned as a
measured *sibling* type scaled by a latency factor, from the committed, cited table
``config/type_estimates.csv``; every profile made so is an :class:`config.profiles.Estimate`.

Kairos §7 measured four types (g4dn.xlarge, c5n.2xlarge, r5n.large, t3.xlarge; the shipped
``kairos_latency_profiles.csv``); the catalog has eight more. A row gives one of them a sibling among
the measured four (the same GPU, the same vCPUs of the same processor family, or the closest
accelerator instance) and ``latency_factor`` = its latency / the sibling's at every batch. The factor
is the sibling's lead over the type on the weakest published hardware figure that bounds an inference,
and never below 1: a datasheet ratio bounds a speed-up from above, the measured service times hold
host work and PCIe transfers a faster accelerator does not shrink, and an estimate that is too fast
makes the planner under-provision (Kairos §5.2 plans capacity from these latencies) where one that
is too slow only makes it prefer a measured type. So g5.xlarge and inf2.xlarge, whose every figure
beats the T4's, are estimated at the T4's latency, and inf1.xlarge at 6.4x it (its device memory
bandwidth, 50 GB/s, against the T4's 320 GB/s). The CSV cites the datasheets row by row.

Rules (pure but for :func:`type_rules`, which reads the shipped table once):

- :func:`sibling_estimates`: for every (model, type with a row) of a table without a *measured*
  profile there, the sibling's profile (measured, or itself an estimate) times the factor; a stored
  estimate on such a type is derived again from the sibling's current profile (a probe measurement of
  the sibling moves it), and one without the sibling in the table stays, marked with its sibling.
- :func:`with_type_estimates`: a table with those added (measurements always win).

The planner uses a type's estimate only where the config allows it (``scaler.planner.estimate_gate``).
"""
from __future__ import annotations

import csv
import functools
import io
from dataclasses import dataclass
from importlib import resources
from typing import Iterable, Mapping

from config.profiles import Estimate, LatencyProfile, ProfileTable

#: where the table lies (beside the catalog)
TABLE_NAME = "type_estimates.csv"


@dataclass(frozen=True)
class TypeRule:
    """One row of ``config/type_estimates.csv``: ``instance_type`` is estimated as ``sibling``'s
    profile times ``latency_factor`` (>= 1), for the reason ``why`` (short), ``evidence`` and
    ``source`` (the citations)."""

    instance_type: str
    sibling: str
    latency_factor: float
    why: str
    evidence: str
    source: str

    def basis(self, sibling_estimated: bool = False) -> str:
        """One line saying what an estimate by this rule rests on."""
        of = f"{self.sibling} (itself an estimate)" if sibling_estimated else self.sibling
        return f"estimate: {of} x {self.latency_factor:g} ({self.why}; config/{TABLE_NAME})"


def parse_type_rules(text: str, known: Mapping[str, object] | None = None) -> dict[str, TypeRule]:
    """The table's rows by type (``#`` lines are comments). Raises ValueError (one line) for a
    factor below 1 or not a number, a sibling that has a row itself, or a type or sibling not in
    ``known`` (the catalog) when given."""
    rows = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    out: dict[str, TypeRule] = {}
    for r in csv.DictReader(io.StringIO("\n".join(rows))):
        t = r["instance_type"].strip()
        try:
            f = float(r["latency_factor"])
        except ValueError:
            raise ValueError(f"{TABLE_NAME}: {t}: latency_factor {r['latency_factor']!r} is not a number") from None
        if not f >= 1.0:
            raise ValueError(f"{TABLE_NAME}: {t}: latency_factor {f:g} is below 1 (an estimate never claims a speed-up)")
        out[t] = TypeRule(t, r["sibling"].strip(), f, r["why"].strip(), r["evidence"].strip(), r["source"].strip())
    for t, rule in out.items():
        if rule.sibling in out:
            raise ValueError(f"{TABLE_NAME}: {t}: its sibling {rule.sibling} is estimated itself (give a measured type)")
        for name in (t, rule.sibling):
            if known is not None and name not in known:
                raise ValueError(f"{TABLE_NAME}: {name}: not in the instance catalog")
    return out


@functools.lru_cache(maxsize=1)
def type_rules() -> dict[str, TypeRule]:
    """The shipped table, read once per process."""
    from config.catalog import load_catalog

    text = resources.files("config").joinpath(TABLE_NAME).read_text(encoding="utf-8")
    return parse_type_rules(text, load_catalog())


def scaled(profile: LatencyProfile, rule: TypeRule, model: str | None = None) -> LatencyProfile:
    """``profile`` (on ``rule.sibling``) as the estimate for ``rule.instance_type``: every batch's
    mean, p50 and p99 times the factor."""
    f = rule.latency_factor
    return LatencyProfile(model=model or profile.model, instance_type=rule.instance_type,
                          batch_sizes=profile.batch_sizes.copy(), mean_ms=profile.mean_ms * f,
                          p50_ms=profile.p50_ms * f, p99_ms=profile.p99_ms * f)


def sibling_estimates(table: ProfileTable, rules: Mapping[str, TypeRule] | None = None,
                      models: Iterable[str] | None = None) -> ProfileTable:
    """The estimates the rules give ``table`` (module docstring): a table of estimates only.
    ``models``: only theirs (None: every model's; a model's estimates rest on its own profiles only)."""
    rules = type_rules() if rules is None else rules
    out = ProfileTable()
    for model in table.models() if models is None else models:
        for t, rule in rules.items():
            key = (model, t)
            if table.has(*key) and table.estimate(*key) is None:
                continue                       # measured: kept
            if table.has(model, rule.sibling):
                out.profiles[key] = scaled(table.get(model, rule.sibling), rule, model)
                out.estimated[key] = Estimate(rule.basis(table.estimate(model, rule.sibling) is not None), rule.sibling)
            elif table.has(*key):              # a stored estimate without its sibling here: kept, marked
                out.profiles[key] = table.get(*key)
                out.estimated[key] = Estimate(table.estimated[key].basis, rule.sibling)
    return out


def estimate_of(basis: str, instance_type: str, rules: Mapping[str, TypeRule] | None = None) -> Estimate:
    """A stored estimate (its provider or CSV ``source`` as ``basis``) on ``instance_type``: one by
    the table (its sibling named) where the type has a row, else one from a local run."""
    rule = (type_rules() if rules is None else rules).get(instance_type)
    return Estimate(basis, rule.sibling if rule is not None else None)


def with_type_estimates(table: ProfileTable, rules: Mapping[str, TypeRule] | None = None) -> ProfileTable:
    """``table`` with :func:`sibling_estimates` added (a measured profile is never replaced)."""
    return table.merged(sibling_estimates(table, rules))


__all__ = ["TABLE_NAME", "TypeRule", "estimate_of", "parse_type_rules", "scaled", "sibling_estimates", "type_rules",
           "with_type_estimates"]
