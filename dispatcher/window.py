"""Demand window: the last N (default 10,000) queries' batch sizes and arrival times.

The fleet loop plans from what the query loop measured (DESIGN "three loops"; Kairos §5.2 works from
the batch-size mix and the arrival rate). A fixed-size ring buffer of numpy arrays; pure data, the
caller passes the times. The batch-size mix and the mean batch are kept up to date as queries come
and go (counts per profile-grid size, a running sum), so a snapshot costs O(grid sizes), not
O(window): the fleet and model loops read it every tick, and the replay runs a day of ticks.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scaler.planner.batch_mix import BatchMix, mix_from_batches
from scaler.planner.replan import SHORT_HORIZON_S, STEADY_HORIZON_S


@dataclass(frozen=True)
class WindowSnapshot:
    """Plain data for the planner."""

    now: float
    count: int                  # queries in the window
    total: int                  # queries ever recorded
    arrival_qps: float          # queries per second over the last SHORT_HORIZON_S (10 s)
    mean_batch: float
    mix: BatchMix               # batch sizes rounded up to the profile grid
    span_s: float               # now − oldest arrival in the window
    steady_qps: float = 0.0     # queries per second over the last steady_s (STEADY_HORIZON_S, 60 s)


#: a window younger than the horizon is read as count ÷ span only past both of these
YOUNG_MIN_QUERIES = 20
YOUNG_MIN_SPAN_S = 1.0


class DemandWindow:
    def __init__(self, capacity: int = 10_000, granularity: int = 10) -> None:
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self.capacity = capacity
        self.granularity = granularity
        self._batch = np.zeros(capacity, dtype=np.int64)
        self._t = np.zeros(capacity, dtype=float)
        self._next = 0
        self.total = 0
        self._grid_counts = np.zeros(1, dtype=np.int64)   # queries per grid size (:meth:`_grid_index`)
        self._batch_sum = 0

    def _grid_index(self, batch_size: int) -> int:
        """Sizes 1..g at 0..g-1, then g·2, g·3, ... (``mix_from_batches``'s rounding)."""
        g = self.granularity
        return batch_size - 1 if batch_size <= g else (batch_size + g - 1) // g + g - 2

    def _grid_sizes(self, idx: np.ndarray) -> np.ndarray:
        g = self.granularity
        return np.where(idx < g, idx + 1, (idx - g + 2) * g).astype(np.int64)

    def __len__(self) -> int:
        return min(self.total, self.capacity)

    def record(self, batch_size: int, arrival: float) -> None:
        batch_size = int(batch_size)
        if self.total >= self.capacity:     # the oldest query leaves the window
            old = int(self._batch[self._next])
            self._grid_counts[self._grid_index(old)] -= 1
            self._batch_sum -= old
        k = self._grid_index(batch_size)
        if k >= self._grid_counts.size:
            self._grid_counts = np.concatenate(
                [self._grid_counts, np.zeros(k + 1 - self._grid_counts.size, dtype=np.int64)])
        self._grid_counts[k] += 1
        self._batch_sum += batch_size
        self._batch[self._next] = batch_size
        self._t[self._next] = arrival
        self._next = (self._next + 1) % self.capacity
        self.total += 1

    def batches(self) -> np.ndarray:
        """Batch sizes in the window, oldest first."""
        n = len(self)
        if n < self.capacity:
            return self._batch[:n].copy()
        return np.roll(self._batch, -self._next)

    def arrivals(self) -> np.ndarray:
        n = len(self)
        if n < self.capacity:
            return self._t[:n].copy()
        return np.roll(self._t, -self._next)

    def mix(self) -> BatchMix:
        """The batch-size mix of the window: what ``mix_from_batches(self.batches())`` computes, from
        the counts kept per grid size."""
        idx = np.flatnonzero(self._grid_counts)
        counts = self._grid_counts[idx]
        if not idx.size:
            return mix_from_batches(np.array([], dtype=np.int64), self.granularity)
        return BatchMix(self._grid_sizes(idx), counts / counts.sum())

    def arrival_rate(self, now: float, horizon_s: float | None = SHORT_HORIZON_S) -> float:
        """Queries per second over the last ``horizon_s`` seconds (a short horizon lets the fleet
        loop see a load step within seconds): the queries that arrived in it ÷ ``horizon_s``. When
        all the window holds is younger than the horizon (the ring wrapped at a high rate, or the
        load began less than ``horizon_s`` ago), count ÷ time covered, once that is at least
        :data:`YOUNG_MIN_QUERIES` queries over :data:`YOUNG_MIN_SPAN_S`; ``horizon_s`` None: the
        whole window. 0 when empty or when no time has passed.

        A handful of queries is not a rate: 3 queries in 0.1 s read as 30 q/s and once bought a
        $2.34/hr pool for an 8 q/s trace (issue #12, the live side of the replay); below those
        minimums they count over the whole horizon."""
        n = len(self)
        if n == 0:
            return 0.0
        oldest = self._t[0] if n < self.capacity else self._t[self._next]
        span = now - oldest
        if span <= 0:
            return 0.0
        if horizon_s is None or (n >= self.capacity and span <= horizon_s):
            return float(n / span)
        if span < horizon_s:    # the load began within the horizon
            if n >= YOUNG_MIN_QUERIES and span >= YOUNG_MIN_SPAN_S:
                return float(n / span)
            return float(n / horizon_s)
        recent = int(np.count_nonzero(self._t[:n] > now - horizon_s))
        return float(recent / horizon_s)

    def mean_batch(self) -> float:
        """Mean batch size of the queries in the window (0 when empty)."""
        n = len(self)
        return self._batch_sum / n if n else 0.0

    def snapshot(self, now: float, steady_s: float = STEADY_HORIZON_S) -> WindowSnapshot:
        """The window at ``now``; ``steady_qps`` is the rate over the last ``steady_s`` seconds."""
        n = len(self)
        oldest = (float(self._t[0]) if n < self.capacity else float(self._t[self._next])) if n else now
        return WindowSnapshot(now=now, count=n, total=self.total, arrival_qps=self.arrival_rate(now),
                              mean_batch=self.mean_batch(), mix=self.mix(),
                              span_s=max(now - oldest, 0.0), steady_qps=self.arrival_rate(now, steady_s))
