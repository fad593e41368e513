"""Batching on one worker: when to send the queries queued for its variant, and how many (pure).

**Proteus adaptive batching** (Proteus §5, Figure 3): proactive and non-work-conserving. With q
queries queued, the head expiring at T_exp(1) and T_process(n) the time a batch of n takes, the
worker may wait for a (q+1)-st query until T_max_wait(q+1) = T_exp(1) − T_process(q+1). Before it,
it waits (the device may stay idle to fill the batch); at it (case 1) or once a (q+1)-st query came
and T_max_wait(q+2) has passed (case 2), it sends the q queries it has. Nothing in the queue then
times out because of the batch: the head, which expires first, finishes by its expiry.

**Work-conserving** (Nexus, as Proteus §6.4 runs it against): an idle worker sends what is queued at
once, as many as fit the head's deadline. **None**: one query at a time.

Every policy sends at most ``max_batch`` queries, and never a batch that would make the head miss
when a smaller one would not (the largest n with now + T_process(n) <= T_exp(1), at least 1).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal, Sequence

BatchingPolicy = Literal["proteus", "work_conserving", "none"]
BATCHING_POLICIES: tuple[str, ...] = ("proteus", "work_conserving", "none")
#: early drop only when a full batch is at least this much cheaper per query than the head's batch
EARLY_DROP_GAIN = 0.10


@dataclass(frozen=True)
class BatchStep:
    """What an idle worker does now: send the first ``send`` queries (``send`` > 0), or wait until
    ``wait_until`` (or the next arrival, whichever comes first; None: until the next arrival)."""

    send: int
    wait_until: float | None = None


def _largest_fitting(q: int, now: float, head_expiry: float, process_s: Callable[[int], float]) -> int:
    """The largest n <= q whose batch finishes by the head's expiry; 1 when none does."""
    n = q
    while n > 1 and now + process_s(n) > head_expiry:
        n -= 1
    return n


def batch_step(policy: BatchingPolicy, expiries: Sequence[float], now: float,
               process_s: Callable[[int], float], max_batch: int) -> BatchStep:
    """The step of an idle worker with the queued queries' expiries ``expiries`` (head first,
    ascending), ``process_s(n)`` the seconds a batch of n takes on it, at most ``max_batch`` per batch.
    """
    q = min(len(expiries), max(int(max_batch), 1))
    if q == 0:
        return BatchStep(0, None)
    head = float(expiries[0])
    if policy == "none":
        return BatchStep(1)
    if policy == "work_conserving" or q >= max_batch:
        return BatchStep(_largest_fitting(q, now, head, process_s))
    if policy != "proteus":
        raise ValueError(f"unknown batching policy {policy!r} (one of {', '.join(BATCHING_POLICIES)})")
    max_wait = head - process_s(q + 1)          # T_max_wait(q+1)
    if now < max_wait:
        return BatchStep(0, max_wait)
    return BatchStep(_largest_fitting(q, now, head, process_s))


def early_drops(expiries: Sequence[float], now: float, process_s: Callable[[int], float], max_batch: int) -> int:
    """How many queries at the head of the queue to drop before batching (Nexus's early drop, Shen et
    al., SOSP 2019, §6.3): slide a window of the batch size from the head and drop the queries before
    the first one that can be served in a full batch (min(queries from it on, ``max_batch``)) by its
    deadline; 0 when none can (the largest batch the head allows goes, :func:`batch_step`).

    Without it a worker that fell behind (a burst, a variant swap) never catches up when per-query
    cost falls with the batch: each batch serves queries near their deadline, so it stays small and
    slow, and the queue behind it ages into the same state. Only when the full batch costs at least
    :data:`EARLY_DROP_GAIN` less per query than the batch the head allows."""
    n, mb = len(expiries), max(int(max_batch), 1)
    if n < 2:
        return 0
    head_fit = _largest_fitting(min(n, mb), now, expiries[0], process_s)
    for k in range(n):
        full = min(n - k, mb)
        if now + process_s(full) <= expiries[k]:
            # worth it only when the full batch costs less per query than the one the head allows
            # (with no batching economy, as on a CPU, dropping only loses queries)
            return k if process_s(full) / full < process_s(head_fit) / head_fit * (1 - EARLY_DROP_GAIN) else 0
    return 0


def interpolated_latency_s(latency_ms: dict[int, float]) -> Callable[[int], float]:
    """T_process(n) from a profile measured at some batch sizes: linear between the measured sizes,
    the smallest size's time below it, linear beyond the largest from its last two points (seconds).
    """
    pts = sorted((int(b), float(ms)) for b, ms in latency_ms.items())
    if not pts:
        raise ValueError("an empty latency profile")

    def f(n: int) -> float:
        if n <= pts[0][0]:
            return pts[0][1] / 1000.0
        for (b0, m0), (b1, m1) in zip(pts, pts[1:]):
            if n <= b1:
                return (m0 + (m1 - m0) * (n - b0) / (b1 - b0)) / 1000.0
        if len(pts) == 1:
            return pts[0][1] * n / pts[0][0] / 1000.0
        (b0, m0), (b1, m1) = pts[-2], pts[-1]
        return (m1 + (m1 - m0) * (n - b1) / (b1 - b0)) / 1000.0

    return f


__all__ = ["BATCHING_POLICIES", "BatchStep", "BatchingPolicy", "batch_step", "early_drops", "interpolated_latency_s"]
