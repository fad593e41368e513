"""The ``quotas`` section: the account's running-vCPU quotas per family, On-Demand and Spot apart
(issue #38 deliverable 6; families and their docs in :mod:`config.quota_families`).

```yaml
quotas:
  on_demand: {g_vt: 8, standard: 64}   # vCPUs; a family not listed has no quota (unlimited)
  spot: {g_vt: 4}
```

No section, or a family left out, is no cap: the planner plans as it did without quotas. The planner
(:mod:`scaler.planner.quota`) keeps every pool within these caps; ``--quota FAMILY=VCPUS`` (and
``--quota spot.FAMILY=VCPUS``) on ``costscale plan`` and ``costscale replay`` overrides them for a
what-if (:func:`with_overrides`).
"""
from __future__ import annotations

from typing import Annotated, Any, Iterable, Mapping

from pydantic import Field, field_validator

from config.errors import UsageError
from config.fields import Strict
from config.quota_families import FAMILIES

VcpuCount = Annotated[int, Field(ge=0, le=10_000_000)]


def _families(v: dict[str, int]) -> dict[str, int]:
    bad = sorted(set(v) - set(FAMILIES))
    if bad:
        raise ValueError(f"unknown quota family {', '.join(bad)} (known: {', '.join(FAMILIES)})")
    return v


class QuotasSpec(Strict):
    """Running-vCPU quotas per family: ``on_demand`` for the on-demand pool, ``spot`` for spot slots."""

    on_demand: dict[str, VcpuCount] = Field(
        {}, description="per family (standard, g_vt, p, inf, f, x, dl, trn, high_memory) the running On-Demand "
                        "vCPU quota; a family not listed is unlimited")
    spot: dict[str, VcpuCount] = Field({}, description="per family the running Spot vCPU quota; not listed: unlimited")

    @field_validator("on_demand", "spot")
    @classmethod
    def _known(cls, v: dict[str, int]) -> dict[str, int]:
        return _families(v)


def parse_quota_flag(text: str) -> tuple[str, str, int]:
    """``FAMILY=VCPUS`` (on-demand) or ``spot.FAMILY=VCPUS`` -> (market, family, vcpus). Raises
    UsageError (one line, exit 2) for anything else."""
    key, sep, val = text.partition("=")
    market, dot, fam = key.strip().partition(".")
    if not dot:
        market, fam = "on_demand", market
    elif market not in ("spot", "on_demand"):
        raise UsageError(f"--quota {text!r}: the market before '.' must be spot or on_demand")
    if not sep or fam not in FAMILIES:
        raise UsageError(f"--quota {text!r}: expected FAMILY=VCPUS or spot.FAMILY=VCPUS, FAMILY one of "
                         f"{', '.join(FAMILIES)}")
    try:
        n = int(val)
    except ValueError:
        n = -1
    if n < 0:
        raise UsageError(f"--quota {text!r}: VCPUS must be a whole number >= 0")
    return market, fam, n


def with_overrides(cfg: Any, flags: Iterable[str]) -> Any:
    """``cfg`` with the ``--quota`` flags applied over its ``quotas`` section (the flags win)."""
    flags = list(flags or ())
    if not flags:
        return cfg
    base = cfg.quotas or QuotasSpec()
    od, sp = dict(base.on_demand), dict(base.spot)
    for f in flags:
        market, fam, n = parse_quota_flag(f)
        (sp if market == "spot" else od)[fam] = n
    return cfg.model_copy(update={"quotas": QuotasSpec(on_demand=od, spot=sp)})


#: vCPUs per (market, family): ``("on_demand", "g_vt") -> 64``
Known = Mapping[tuple[str, str], int]


def merged_quotas(override: QuotasSpec | None, read: Known, lowered: Known | None = None) -> QuotasSpec | None:
    """The quotas the daemon plans within (pure): per family and market, the config's ``quotas``
    (``override``) where it names one, else what Service Quotas said (``read``); then, where a
    launch was refused for the quota since the last read (``lowered``: the vCPUs running then),
    the lower of the two. None when nothing is known (no cap)."""
    lowered = lowered or {}
    base = override or QuotasSpec()
    out: dict[str, dict[str, int]] = {"on_demand": dict(base.on_demand), "spot": dict(base.spot)}
    for (market, fam), n in read.items():
        out[market].setdefault(fam, int(n))
    for (market, fam), n in lowered.items():
        have = out[market].get(fam)
        out[market][fam] = int(n) if have is None else min(int(have), int(n))
    if override is None and not any(out.values()):
        return None
    return QuotasSpec(on_demand=out["on_demand"], spot=out["spot"])


__all__ = ["Known", "QuotasSpec", "merged_quotas", "parse_quota_flag", "with_overrides"]
