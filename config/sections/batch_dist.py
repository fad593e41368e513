"""Batch-size distributions as declared in the config and on the CLI (``--batch-dist``): the spec
strings, their parameters' defaults and their parser (one clear line for a bad spec).

The specs: ``deeprecsys``, ``lognormal[:MU:SIGMA]`` (default 5.1, 0.2), ``gaussian[:MEAN:SD]``
(default 250, 100) and ``fixed:N``. What each draws is said where they are sampled,
:mod:`scaler.planner.batch_mix`, which also builds the planner's mix from them.
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
