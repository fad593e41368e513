"""Batch-size distributions and the batch-size mix the planner works from.

The *mix* is the fraction of queries at or below each batch size (Kairos §5.2). It comes from a
declared distribution (sampled with a seed) or from the dispatcher's window of recent queries.

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

import numpy as np

from config.sections.batch_dist import DEFAULT_MAX_BATCH, BatchDist, parse_batch_dist


def sample_batches(dist: BatchDist | str, n: int, rng: np.random.Generator, max_batch: int = DEFAULT_MAX_BATCH) -> np.ndarray:
    """Draw ``n`` integer batch sizes in [1, max_batch]."""
    d = parse_batch_dist(dist) if isinstance(dist, str) else dist
    if d.kind == "fixed":
        x = np.full(n, d.a)
    elif d.kind == "lognormal":
        x = rng.lognormal(d.a, d.b, n)
    elif d.kind == "gaussian":
        x = rng.normal(d.a, d.b, n)
    elif d.kind == "deeprecsys":
        x = rng.lognormal(5.1, 0.2, n)
        u = rng.random(n)
        small = u < 0.08
        mid = (u >= 0.08) & (u < 0.30)
        large = (u >= 0.30) & (u < 0.35)
        keep = u >= 0.35
        x = np.where(small, rng.uniform(1, 100, n), x)
        x = np.where(mid, rng.uniform(200, 600, n), x)
        x = np.where(large, rng.uniform(600, 1000, n), x)
        out_of_range = keep & ((x < 100) | (x > 200))
        x = np.where(out_of_range, rng.uniform(190, 200, n), x)
    else:  # pragma: no cover - parse_batch_dist guards this
        raise ValueError(d.kind)
    return np.clip(np.ceil(x), 1, max_batch).astype(np.int64)


@dataclass(frozen=True)
class BatchMix:
    """Empirical batch-size mix: ``sizes`` ascending, ``fractions`` the share of queries at each size."""

    sizes: np.ndarray
    fractions: np.ndarray

    def cdf(self, batch: float) -> float:
        """Fraction of queries with batch size <= ``batch``."""
        return float(self.fractions[self.sizes <= batch].sum())

    @property
    def max_size(self) -> int:
        return int(self.sizes.max()) if len(self.sizes) else 0

    def mean(self) -> float:
        return float((self.sizes * self.fractions).sum())


def mix_from_batches(batches: np.ndarray, granularity: int = 10) -> BatchMix:
    """Mix of observed batch sizes, each above ``granularity`` rounded up to a multiple of it (the
    Kairos profile grid: 10, 20, ...). Sizes up to ``granularity`` stay as they are: a profile
    starting at 10 serves them at its first point anyway, and a variant family's (1, 2, 4, 8;
    issue #25) tells them apart, where rounding one image up to 10 made every resnet variant miss
    a 1 s SLO."""
    b = np.asarray(batches, dtype=np.int64)
    if b.size == 0:
        return BatchMix(np.array([], dtype=np.int64), np.array([], dtype=float))
    rounded = np.where(b <= granularity, b, ((b + granularity - 1) // granularity) * granularity)
    sizes, counts = np.unique(rounded, return_counts=True)
    return BatchMix(sizes, counts / counts.sum())


def mix_from_dist(dist: BatchDist | str, n: int = 10_000, seed: int = 0, max_batch: int = DEFAULT_MAX_BATCH) -> BatchMix:
    """The mix of a declared distribution, estimated from ``n`` seeded draws."""
    return mix_from_batches(sample_batches(dist, n, np.random.default_rng(seed), max_batch))
