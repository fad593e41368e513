"""The budget's float tolerance: one home for the epsilon every budget comparison uses.

A pool's cost is a sum of $/hr prices in floats, so a pool that costs exactly the budget can sum
to a hair above it (0.1 + 0.2 > 0.3). Every check "does this fit the budget" (the planner's
ranking and searches, the transitions, parking, probes, the spot placement, the actuator's check
before each launch, the config checks and the replay's ledger) allows this much, so they agree on
which pools fit. Time comparisons and solver tolerances are other concepts and keep their own.
"""
from __future__ import annotations

#: $/hr: a cost within this of the budget fits it (float noise of summed prices, far below a cent)
BUDGET_EPS = 1e-9

__all__ = ["BUDGET_EPS"]
