"""Service times of queries on simulated workers, from the latency profiles (Kairos §7 data).

Two kinds:
- ``"mean"``: every query of a batch size takes the profile's mean service time (deterministic).
- ``"sampled"``: a lognormal fitted to the profile's p50 and p99 (median = p50,
  ``sigma = ln(p99/p50) / z_0.99``), drawn per query.
Optionally each draw is multiplied by ``max(1 + noise * Z, 0.05)``, Z standard normal: Gaussian
noise of relative size ``noise`` (Kairos §8.6 injects Gaussian noise into latency to emulate
cloud performance variability). The *prediction* a policy sees (``predicted_ms``) stays the profile
mean, so noise and sampling make predictions imperfect, as in §8.6.

Expectations and probabilities (for the oracle) are computed exactly for the lognormal and with a
deterministic midpoint-quantile grid over the noise factor — no random numbers.

:class:`ServiceTimes` is the replay's query loop's view of one model's service: the dispatcher's
predicted ms and the ms a call actually takes, per (type, batch), tabulated once per type; the
actual ones are the profile mean, or the lognormal drawn once per query (``z``), times the
variant's speed factor (1.0: the base variant).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from scipy.stats import norm

from config.profiles import ProfileTable
from dispatcher.policy import LatencyPredictor

ServiceKind = Literal["mean", "sampled"]
Z99 = float(norm.ppf(0.99))
NOISE_FLOOR = 0.05
_GRID = norm.ppf((np.arange(256) + 0.5) / 256)  # midpoint quantiles of N(0,1)


@dataclass(frozen=True)
class ServiceModel:
    """How long a query of a batch size keeps an instance of a type busy (ms)."""

    profiles: ProfileTable
    model: str
    kind: ServiceKind = "mean"
    noise: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in ("mean", "sampled"):
            raise ValueError(f"service must be 'mean' or 'sampled', not {self.kind!r}")
        if not self.noise >= 0:
            raise ValueError(f"noise must be >= 0, not {self.noise!r}")

    def predicted_ms(self, itype: str, batches: np.ndarray) -> np.ndarray:
        """What a latency predictor expects: the profile mean (rounded up to the profile grid)."""
        return np.asarray(self.profiles.latency_ms(self.model, itype, batches, "mean"), dtype=float)

    def lognormal_params(self, itype: str, batches: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(mu, sigma) of the ``"sampled"`` kind's lognormal (ln ms) per batch size."""
        return self._lognormal(itype, batches)

    def _lognormal(self, itype: str, batches: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        p50 = np.asarray(self.profiles.latency_ms(self.model, itype, batches, "p50"), dtype=float)
        p99 = np.asarray(self.profiles.latency_ms(self.model, itype, batches, "p99"), dtype=float)
        p50 = np.maximum(p50, 1e-9)
        sigma = np.maximum(np.log(np.maximum(p99, p50) / p50), 0.0) / Z99
        return np.log(p50), sigma

    def sample(self, itype: str, batches: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One service time (ms) per query in ``batches`` on an instance of ``itype``."""
        b = np.asarray(batches)
        if self.kind == "mean":
            out = self.predicted_ms(itype, b)
        else:
            mu, sigma = self._lognormal(itype, b)
            out = np.exp(mu + sigma * rng.standard_normal(b.shape))
        if self.noise > 0:
            out = out * np.maximum(1.0 + self.noise * rng.standard_normal(b.shape), NOISE_FLOOR)
        return out

    def _noise_factors(self) -> np.ndarray:
        if self.noise <= 0:
            return np.ones(1)
        return np.maximum(1.0 + self.noise * _GRID, NOISE_FLOOR)

    def expected_ms(self, itype: str, batches: np.ndarray) -> np.ndarray:
        """Expected service time (ms) per batch size."""
        b = np.asarray(batches)
        if self.kind == "mean":
            base = self.predicted_ms(itype, b)
        else:
            mu, sigma = self._lognormal(itype, b)
            base = np.exp(mu + sigma**2 / 2)
        return base * float(self._noise_factors().mean())

    def prob_within(self, itype: str, batches: np.ndarray, limit_ms: float) -> np.ndarray:
        """Probability that a query's service time is <= ``limit_ms``, per batch size."""
        b = np.asarray(batches)
        f = self._noise_factors()[:, None]
        if self.kind == "mean":
            base = self.predicted_ms(itype, b)[None, :]
            return (base * f <= limit_ms).mean(axis=0)
        mu, sigma = self._lognormal(itype, b)
        z = (np.log(limit_ms / f) - mu[None, :]) / np.where(sigma > 0, sigma, 1.0)[None, :]
        p = np.where(sigma[None, :] > 0, norm.cdf(z), (np.exp(mu)[None, :] * f <= limit_ms).astype(float))
        return p.mean(axis=0)


@dataclass
class ServiceTimes:
    """Predicted (the dispatcher's latency model) and actual service times per (type, batch)."""

    model: str
    predictor: LatencyPredictor
    service: ServiceModel
    z: np.ndarray | None = None                 # one standard normal per query ("sampled")
    speed: float = 1.0
    _pred: dict[str, list[float]] = field(default_factory=dict)
    _logn: dict[str, tuple[list[float], list[float]]] = field(default_factory=dict)
    _mean: dict[str, list[float]] = field(default_factory=dict)
    max_batch: int = 1000

    def pred_ms(self, itype: str) -> list[float]:
        tab = self._pred.get(itype)
        if tab is None:
            pred = self.predictor.predict_many(self.model, itype, self._grid().astype(float))
            tab = self._pred[itype] = [float(x) for x in pred]
        return tab

    def _grid(self) -> np.ndarray:
        b = np.arange(self.max_batch + 1)
        b[0] = 1
        return b

    def actual_s(self, itype: str, q: int, batch: int) -> float:
        """Service seconds of query ``q`` (batch ``batch``) on ``itype``."""
        if self.service.kind == "mean" or self.z is None:
            tab = self._mean.get(itype)
            if tab is None:
                tab = self._mean[itype] = self.service.predicted_ms(itype, self._grid()).tolist()
            return self.speed * tab[batch] / 1000.0
        par = self._logn.get(itype)
        if par is None:
            mu, sig = self.service.lognormal_params(itype, self._grid())
            par = self._logn[itype] = (mu.tolist(), sig.tolist())
        return self.speed * math.exp(par[0][batch] + par[1][batch] * float(self.z[q])) / 1000.0
