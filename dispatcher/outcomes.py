"""How queries ended, per model: what ``costscale status`` and the Prometheus metrics report as
demand, SLO attainment, served accuracy, outcomes and latency (both read this one ledger, so they
agree).

Every query that ends through :meth:`dispatcher.server.Dispatcher.submit` is recorded once, when
it ends (a retry answered from the idempotency cache is not recorded again): its model, its
outcome (``OK`` or the gRPC status name), whether it met its SLO, its latency and the accuracy of
the variant that served it. Offline chunks are not queries of a client and are not recorded.

SLO attainment (Kairos §7: the fraction of queries served within their latency target) counts a
query refused for lack of capacity or time (DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, UNAVAILABLE,
...) as a miss, as the demo does; a client's own mistake (INVALID_ARGUMENT, NOT_FOUND, CANCELLED,
...) is neither a hit nor a miss. Windows of the last 1, 5 and 15 minutes are kept as 10-second
buckets; counters and the latency histogram run from the start. Pure data: the caller passes the
times.
"""
from __future__ import annotations

import bisect
from collections import Counter, deque
from dataclasses import dataclass, field

#: width of the buckets the windows are summed from (s)
BUCKET_S = 10.0
#: the windows status reports (s): the last 1, 5 and 15 minutes
WINDOWS_S = (60, 300, 900)
#: outcomes that are the client's own doing: not counted for or against SLO attainment
CLIENT_ERRORS = frozenset({"INVALID_ARGUMENT", "NOT_FOUND", "CANCELLED", "FAILED_PRECONDITION", "UNIMPLEMENTED",
                           "ALREADY_EXISTS", "PERMISSION_DENIED", "UNAUTHENTICATED", "OUT_OF_RANGE"})
#: upper bounds (s) of the latency histogram's buckets (costscale_query_latency_seconds)
LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
#: the label of a query naming no model this dispatcher knows (one label, however many names)
UNKNOWN_MODEL = "(unknown)"


@dataclass
class _Bucket:
    index: int                 # time // BUCKET_S
    ended: int = 0             # queries that ended
    counted: int = 0           # of those, counted for attainment (client errors aside)
    slo_met: int = 0
    acc_sum: float = 0.0       # accuracy of the variants that served, summed
    acc_n: int = 0


@dataclass(frozen=True)
class WindowStats:
    """One model's queries over one window."""

    seconds: int
    demand_qps: float
    queries: int
    slo_met: int
    attainment: float | None       # None: no query counted
    served_accuracy: float | None  # None: no served query with a known accuracy


@dataclass
class ModelOutcomes:
    """One model's counters since the start, its latency histogram and its recent buckets."""

    queries: Counter[str] = field(default_factory=Counter)        # outcome -> count
    slo_violations: int = 0
    latency_counts: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS_S) + 1))
    latency_sum_s: float = 0.0
    buckets: deque[_Bucket] = field(default_factory=deque)


def counts_for_attainment(outcome: str) -> bool:
    return outcome not in CLIENT_ERRORS


class OutcomeLedger:
    """See the module docstring. ``started``: the time the windows count from when they are
    longer than the ledger's life."""

    def __init__(self, started: float) -> None:
        self.started = started
        self.models: dict[str, ModelOutcomes] = {}
        self._keep = int(max(WINDOWS_S) // BUCKET_S) + 1

    def record(self, model: str, outcome: str, now: float, *, slo_met: bool = False,
               latency_s: float | None = None, accuracy: float | None = None) -> None:
        """One query of ``model`` ended at ``now`` with ``outcome`` (``OK`` or a gRPC status name)."""
        m = self.models.get(model)
        if m is None:
            m = self.models[model] = ModelOutcomes()
        m.queries[outcome] += 1
        counted = counts_for_attainment(outcome)
        met = outcome == "OK" and slo_met
        if counted and not met:
            m.slo_violations += 1
        if outcome == "OK" and latency_s is not None:
            m.latency_counts[bisect.bisect_left(LATENCY_BUCKETS_S, latency_s)] += 1
            m.latency_sum_s += latency_s
        b = self._bucket(m, now)
        b.ended += 1
        b.counted += int(counted)
        b.slo_met += int(met)
        if outcome == "OK" and accuracy is not None:
            b.acc_sum += accuracy
            b.acc_n += 1

    def _bucket(self, m: ModelOutcomes, now: float) -> _Bucket:
        index = int(now // BUCKET_S)
        if not m.buckets or m.buckets[-1].index < index:
            m.buckets.append(_Bucket(index))
        while len(m.buckets) > 1 and m.buckets[0].index <= index - self._keep:
            m.buckets.popleft()
        return m.buckets[-1]

    def window(self, model: str, seconds: int, now: float) -> WindowStats:
        """``model``'s queries that ended in the last ``seconds`` (whole buckets; the rate is over
        the time since the ledger started when that is shorter)."""
        m = self.models.get(model)
        first = int(now // BUCKET_S) - int(seconds // BUCKET_S) + 1
        bs = [b for b in m.buckets if b.index >= first] if m is not None else []
        ended = sum(b.ended for b in bs)
        counted = sum(b.counted for b in bs)
        met = sum(b.slo_met for b in bs)
        acc_n = sum(b.acc_n for b in bs)
        span = max(min(float(seconds), now - self.started), 1.0)
        return WindowStats(seconds=seconds, demand_qps=ended / span, queries=ended, slo_met=met,
                           attainment=met / counted if counted else None,
                           served_accuracy=sum(b.acc_sum for b in bs) / acc_n if acc_n else None)

    def windows(self, model: str, now: float) -> list[WindowStats]:
        return [self.window(model, s, now) for s in WINDOWS_S]
