"""Batch-size distributions as declared in the config and on the CLI (``--batch-dist``): the spec
strings and their parser. :mod:`scaler.planner.batch_mix` samples them and builds the planner's mix.

Declared distributions (spec strings, as on the CLI ``--batch-dist``):
- ``deeprecsys``: production-like mixture (DeepRecSys; parameters from the Kairos artifact, see the
  data README): lognormal(mu=5.1, sigma=0.2); with p=8% replaced by U[1,100), 22% U[200,600),
  5% U[600,1000); otherwise kept if in [100,200], else replaced by U[190,200).
- ``lognormal``: plain lognormal(mu=5.1, sigma=0.2) — ``lognormal:MU:SIGMA`` to choose.
- ``gaussian``: normal(mean=250, sd=100) — ``gaussian:MEAN:SD`` to choose (Kairos §8.6 uses a
  Gaussian without stating its parameters; these are ours).
- ``fixed:N``: every query has batch N.
All draws are clipped to [1, max_batch] and rounded up to an integer.
"""
from __future__ import annotations

from dataclasses import dataclass

DEFAULT_MAX_BATCH = 1000
DIST_NAMES = ("deeprecsys", "lognormal", "gaussian", "fixed:N")


@dataclass(frozen=True)
class BatchDist:
    kind: str
    a: float = 0.0
    b: float = 0.0

    @property
    def spec(self) -> str:
        if self.kind == "fixed":
            return f"fixed:{int(self.a)}"
        return self.kind


def parse_batch_dist(spec: str) -> BatchDist:
    """Parse a spec string; raises ValueError with one clear line."""
    s = spec.strip().lower()
    parts = s.split(":")
    kind = parts[0]
    try:
        nums = [float(x) for x in parts[1:]]
    except ValueError:
        raise ValueError(f"bad batch distribution {spec!r}: numbers expected after ':'") from None
    if kind == "deeprecsys" and not nums:
        return BatchDist("deeprecsys")
    if kind == "lognormal" and len(nums) in (0, 2):
        return BatchDist("lognormal", *(nums or [5.1, 0.2]))
    if kind == "gaussian" and len(nums) in (0, 2):
        return BatchDist("gaussian", *(nums or [250.0, 100.0]))
    if kind == "fixed" and len(nums) == 1 and nums[0] >= 1 and nums[0] == int(nums[0]):
        return BatchDist("fixed", nums[0])
    raise ValueError(
        f"bad batch distribution {spec!r}: expected one of deeprecsys, lognormal[:MU:SIGMA], gaussian[:MEAN:SD], fixed:N"
    )
