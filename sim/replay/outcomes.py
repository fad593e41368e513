"""What a query of the replay's query loop ends as: one code per query in ``QueryLoop.outcome``
(:mod:`sim.replay.query_loop`), read by the report (:mod:`sim.replay.report`) and the baselines.

- ``PENDING``: not ended (still waiting or in flight at the end: a miss, like a drop);
- ``SERVED``: answered; its latency is in ``QueryLoop.latency``;
- ``REJECTED``: refused at admission (a full queue, or infeasible at once in ``drop`` mode);
- ``DROPPED``: ended by the routing round as infeasible (``drop`` mode);
- ``EXPIRED``: still unanswered ``query_timeout_s`` after its arrival (DEADLINE_EXCEEDED);
- ``UNAVAILABLE``: re-dispatched more than ``max_retries`` times.
"""
from __future__ import annotations

PENDING, SERVED, REJECTED, DROPPED, EXPIRED, UNAVAILABLE = 0, 1, 2, 3, 4, 5

__all__ = ["PENDING", "SERVED", "REJECTED", "DROPPED", "EXPIRED", "UNAVAILABLE"]
