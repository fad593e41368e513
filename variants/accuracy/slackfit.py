"""SlackFit (SuperServe §4.2): per dispatch, which resident variant and how large a batch, from the
slack of the query with the earliest deadline (pure).

**Offline:** latency buckets evenly spaced between the least accurate variant's latency at batch 1
and the most accurate one's at its largest batch; in each bucket, the (variant, batch) with the
largest batch whose latency is at most the bucket's, the most accurate on ties. Low buckets hold low
accuracy and large batches (throughput for bursts), high buckets high accuracy and small batches
(SuperServe P1-P3). Only variants on the latency/accuracy Pareto front take part.

**Online:** when a worker is free, the bucket whose latency is closest to but under the earliest
deadline's remaining slack; its batch of the earliest-deadline queries goes (fewer if fewer wait).
Bursts eat slack and move the choice to faster, less accurate variants and larger batches; at
normal load the slack is large and the most accurate variant serves. Switching between resident
variants costs nothing (SuperServe's SubNetAct; here: every variant's session stays loaded).
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

#: SuperServe does not fix the count; ten buckets cover our families' latency ranges finely enough
DEFAULT_BUCKETS = 10


@dataclass(frozen=True)
class Bucket:
    latency_s: float        # the bucket's upper latency
    variant: str
    batch: int


def pareto(variants: Mapping[str, tuple[float, Callable[[int], float]]]) -> list[str]:
    """Variants not dominated at batch 1 (another is at least as accurate and faster), fastest first.
    ``variants``: name -> (accuracy, seconds for a batch of n)."""
    names = sorted(variants, key=lambda v: (variants[v][1](1), -variants[v][0]))
    out: list[str] = []
    for v in names:
        if not out or variants[v][0] > variants[out[-1]][0]:
            out.append(v)
    return out


def buckets(variants: Mapping[str, tuple[float, Callable[[int], float]]], max_batch: Mapping[str, int],
            n_buckets: int = DEFAULT_BUCKETS) -> list[Bucket]:
    """The offline phase for one worker type: ``variants`` name -> (accuracy, T_process(n) in s),
    ``max_batch`` name -> the largest batch it may run. Buckets with no fitting choice are left out."""
    front = pareto(variants)
    if not front:
        return []
    lo = variants[front[0]][1](1)
    hi = variants[front[-1]][1](max(max_batch.get(front[-1], 1), 1))
    out: list[Bucket] = []
    for k in range(1, n_buckets + 1):
        cap = lo + (hi - lo) * k / n_buckets if n_buckets > 1 else hi
        best: tuple[int, float, str] | None = None
        for v in front:
            acc, t = variants[v]
            b = max_batch.get(v, 1)
            while b >= 1 and t(b) > cap + 1e-12:
                b -= 1
            if b >= 1 and (best is None or (b, acc) > (best[0], best[1])):
                best = (b, acc, v)
        if best is not None:
            out.append(Bucket(cap, best[2], best[0]))
    return out


def choose(table: Sequence[Bucket], slack_s: float) -> Bucket | None:
    """The online phase: the bucket closest to but under ``slack_s``; None when none fits (the
    earliest query can no longer meet its deadline)."""
    keys = [b.latency_s for b in table]
    i = bisect.bisect_right(keys, slack_s) - 1
    return table[i] if i >= 0 else None


def choose_for_queue(variants: Mapping[str, tuple[float, Callable[[int], float]]], max_batch: Mapping[str, int],
                     front: Sequence[str], queued: int, slack_s: float, min_qps: float = 0.0) -> tuple[str, int] | None:
    """Ours, not SuperServe's (``slackfit_queue``): the most accurate Pareto variant that serves the
    queued queries (up to its largest batch) within the slack; when none does, the fastest one with
    the largest batch that fits; None when not even one query fits. SuperServe's buckets prefer the
    largest batch at every latency, which on our families (the fastest variant fits its largest
    batch in most buckets) serves a lone query with the least accurate variant at any load.

    ``min_qps`` (the live dispatcher's, ours): the variant must also serve at least that many queries
    per second in such batches (the arrival rate each worker takes): on the live path a batch that
    fits the head's slack but serves fewer queries per second than arrive leaves those arriving
    meanwhile to miss (a first live run on the digits family missed 12 % of a spike that way)."""
    for v in reversed(front):                         # most accurate first
        acc, t = variants[v]
        n = min(queued, max(max_batch.get(v, 1), 1))
        if n >= 1 and t(n) <= slack_s and (min_qps <= 0 or n >= min_qps * t(n)):
            return v, n
    if not front:
        return None
    fastest = front[0]
    t = variants[fastest][1]
    n = min(queued, max(max_batch.get(fastest, 1), 1))
    while n >= 1 and t(n) > slack_s:
        n -= 1
    return (fastest, n) if n >= 1 else None


#: SlackFit at dispatch (the live dispatcher's and the replay's): the arrival rate each worker must
#: keep up with is measured over this window (s), and kept up with at most 1 / this busy (a worker
#: served at its full rate queues past the SLO)
LATE_RATE_WINDOW_S = 1.0
LATE_HEADROOM = 1.5


def bind_at_dispatch(variants: Mapping[str, tuple[float, Callable[[int], float]]], max_batch: Mapping[str, int],
                     front: Sequence[str], group: int, slack_s: float, rate_qps: float, holders: int,
                     idle_others: int) -> tuple[str, int]:
    """The variant and how many of the ``group`` waiting queries (the head first) go in one call
    when a late-bound query is dispatched (``dispatcher.accuracy.routing.AccuracyRouting.bind``, and
    the replay's :class:`sim.replay.variant_lane.VariantLoop`): :func:`choose_for_queue` for this worker's
    share of what waits (the idle holders take the rest in this round) within half the head's slack
    (a query arriving as this call starts waits for it, then needs its own: Proteus §4's SLO/2; the
    whole slack let one long call make the queries behind it miss),
    serving at least this worker's share of the arrivals (:data:`LATE_HEADROOM` x ``rate_qps`` over
    the ``holders``); the fastest variant with one query when nothing fits."""
    share = LATE_HEADROOM * rate_qps / max(holders, 1)
    mine = -(-group // (1 + idle_others))
    return choose_for_queue(variants, max_batch, front, mine, slack_s / 2.0, min_qps=share) or (front[0], 1)


__all__ = ["Bucket", "DEFAULT_BUCKETS", "LATE_HEADROOM", "LATE_RATE_WINDOW_S", "bind_at_dispatch", "buckets", "choose",
           "choose_for_queue", "pareto"]
