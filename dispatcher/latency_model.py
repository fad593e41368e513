"""Online latency model: predicted service time (ms) of a query per (model or variant, instance type).

Kairos §5.1, "Remarks on assumptions and overhead": inference latency is almost linear in the batch
size (Pearson > 0.99), so Kairos starts with a *linear model* fitted online from a handful of
queries and "quickly transitions into a lookup table after processing more queries".

Prediction order for a pair (model, instance type), first that applies:

1. **lookup**: the batch falls in a grid bucket (batch rounded up to a multiple of ``granularity``,
   the profile grid) that has at least ``lookup_min_samples`` observations: their mean; for a
   profiled pair, the profile there times the bucket's mean measured ÷ profiled ratio, so a bucket
   keeps the profile's shape inside it (a small-batch family's calls of 1 and of 5 queries share
   bucket 10: their plain mean once predicted 5 queries of a 100 ms variant at 100 ms, and SlackFit
   chose the slow variant for a backlog it could not serve in time).
2. **profile**: a seeded latency profile (``from_profiles``), rounded up to the profile grid
   (``config.profiles.LatencyProfile.latency_ms``).
3. **linear**: a least-squares line ``a + s·batch`` over the pair's observations (>= 2 distinct
   batch sizes; with one size only, that size's mean scaled proportionally to the batch).
4. **fallback** (no data at all for the pair): the median, over the model's *other* instance types
   that have a profile or observations, of their prediction for this batch; when the model has no
   data anywhere, ``fallback_ms + fallback_ms_per_item · batch`` (default 1 ms + 0.01 ms/item).

Profiled pairs also accept observations: buckets with enough samples then override the profile
(measurements beat the prior). The model is plain data and pure: no clock, no I/O.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from config.profiles import ProfileTable, Stat

_DENSE_MAX = 1000  # dense per-integer-batch tables cover 0..max(_DENSE_MAX, largest profiled size)


@dataclass
class _PairStats:
    """Observations of one (model, type) pair, bucketed on the profile grid."""

    granularity: int
    n: int = 0
    sb: float = 0.0
    sm: float = 0.0
    sbb: float = 0.0
    sbm: float = 0.0
    bucket_sum: dict[int, float] = field(default_factory=dict)
    bucket_n: dict[int, int] = field(default_factory=dict)
    #: per bucket, measured ÷ profiled ms summed over the observations made against a profile
    ratio_sum: dict[int, float] = field(default_factory=dict)
    ratio_n: dict[int, int] = field(default_factory=dict)

    def bucket(self, batch: float) -> int:
        return math.ceil(batch / self.granularity) * self.granularity

    def add_ratio(self, batch: float, ratio: float) -> None:
        k = self.bucket(batch)
        self.ratio_sum[k] = self.ratio_sum.get(k, 0.0) + ratio
        self.ratio_n[k] = self.ratio_n.get(k, 0) + 1

    def add(self, batch: float, ms: float) -> None:
        self.n += 1
        self.sb += batch
        self.sm += ms
        self.sbb += batch * batch
        self.sbm += batch * ms
        k = self.bucket(batch)
        self.bucket_sum[k] = self.bucket_sum.get(k, 0.0) + ms
        self.bucket_n[k] = self.bucket_n.get(k, 0) + 1

    def line(self) -> tuple[float, float] | None:
        """(intercept, slope) of the least-squares line; None without observations."""
        if self.n == 0:
            return None
        var = self.sbb - self.sb * self.sb / self.n
        mean_b, mean_m = self.sb / self.n, self.sm / self.n
        if var <= 1e-9 * max(1.0, self.sbb):
            # one batch size only: proportional to the batch through the origin
            return 0.0, (mean_m / mean_b if mean_b > 0 else 0.0)
        slope = (self.sbm - self.sb * self.sm / self.n) / var
        return mean_m - slope * mean_b, slope


class LatencyModel:
    """Implements :class:`dispatcher.policy.LatencyPredictor` (Kairos §5.1 remarks).

    ``predict_many`` is a single fancy-index into a dense per-batch table cached per pair (rebuilt
    lazily after an observation), so the matching's hot path does no Python work per query.
    ``predict_grid`` answers for several instance types at once from a stacked copy of their tables
    (one fancy-index for the whole m × k matrix), patched in place by :meth:`observe`.
    """

    def __init__(self, *, stat: Stat = "mean", granularity: int = 10, lookup_min_samples: int = 3,
                 fallback_ms: float = 1.0, fallback_ms_per_item: float = 0.01) -> None:
        self.stat: Stat = stat
        self.granularity = granularity
        self.lookup_min_samples = lookup_min_samples
        self.fallback_ms = fallback_ms
        self.fallback_ms_per_item = fallback_ms_per_item
        self.profiles = ProfileTable()
        self._obs: dict[tuple[str, str], _PairStats] = {}
        self._tables: dict[tuple[str, str], np.ndarray] = {}
        #: :attr:`_tables` as Python lists, for :meth:`predict_ms` (a hot path: a list reads a float
        #: faster than an array); kept as the tables are: dropped with them, patched with them
        self._lists: dict[tuple[str, str], list[float]] = {}
        self._types_by_model: dict[str, set[str]] = {}
        #: per model: (types...) -> (N+1) × k stacked tables, N = the shortest table's top batch
        self._stacks: dict[str, dict[tuple[str, ...], np.ndarray]] = {}
        #: pairs whose cached table came from the fallback rule (stale after any observation)
        self._fallback_built: set[tuple[str, str]] = set()
        #: a profiled pair's profile over batch 0..N (the prior its observations are measured against)
        self._priors: dict[tuple[str, str], np.ndarray] = {}

    @classmethod
    def from_profiles(cls, profiles: ProfileTable, stat: Stat = "mean", **kw: float) -> "LatencyModel":
        m = cls(stat=stat, **kw)  # type: ignore[arg-type]
        m.profiles = profiles
        for model, itype in profiles.profiles:
            m._types_by_model.setdefault(model, set()).add(itype)
        return m

    def add_profiles(self, table: ProfileTable) -> None:
        """Profiles measured after the start (a model profiled on the fleet): added to (or replacing
        in) the seeded table, and every cached prediction rebuilt from them."""
        self.profiles.profiles.update(table.profiles)
        for model, itype in table.profiles:
            self._types_by_model.setdefault(model, set()).add(itype)
        self._tables.clear()
        self._lists.clear()
        self._stacks.clear()
        self._fallback_built.clear()
        self._priors.clear()

    def observed_means(self, model: str, instance_type: str) -> dict[int, tuple[int, float]]:
        """Bucket (batch rounded up to ``granularity``) -> (observations, mean ms) of measured queries."""
        st = self._obs.get((model, instance_type))
        if st is None:
            return {}
        return {k: (n, st.bucket_sum[k] / n) for k, n in sorted(st.bucket_n.items()) if n > 0}

    # -- introspection ---------------------------------------------------------------------------
    def source(self, model: str, instance_type: str, batch_size: float | None = None) -> str:
        """Which rule predicts this pair: "lookup" (only when ``batch_size`` hits a full bucket),
        "profile", "linear" or "fallback"."""
        key = (model, instance_type)
        st = self._obs.get(key)
        if st is not None and batch_size is not None:
            k = st.bucket(batch_size)
            if st.bucket_n.get(k, 0) >= self.lookup_min_samples:   # (ratio_n <= bucket_n)
                return "lookup"
        if self.profiles.has(model, instance_type):
            return "profile"
        if st is not None and st.n > 0:
            return "linear"
        return "fallback"

    def has_data(self, model: str, instance_type: str) -> bool:
        st = self._obs.get((model, instance_type))
        return self.profiles.has(model, instance_type) or (st is not None and st.n > 0)

    def observations(self, model: str, instance_type: str) -> int:
        st = self._obs.get((model, instance_type))
        return st.n if st is not None else 0

    # -- learning --------------------------------------------------------------------------------
    def observe(self, model: str, instance_type: str, batch: float, ms: float) -> None:
        """Record one measured service time."""
        if not (batch > 0 and ms >= 0 and np.isfinite(ms)):
            return
        key = (model, instance_type)
        st = self._obs.get(key)
        if st is None:
            st = self._obs[key] = _PairStats(self.granularity)
            self._types_by_model.setdefault(model, set()).add(instance_type)
        # types of this model without data of their own predict by the fallback (median of the types
        # with data, this one included): their cached tables are stale after any observation
        stale = [k for k in self._fallback_built if k[0] == model and k != key]
        for k in stale:
            self._forget_table(k)
        st.add(float(batch), float(ms))
        profiled = self.profiles.has(model, instance_type)
        if profiled:
            priors = self._prior(model, instance_type)
            b = math.ceil(batch)
            prior = float(priors[b]) if b < len(priors) else float(
                self.profiles.get(model, instance_type).latency_ms(float(batch), self.stat))
            if prior > 0:
                st.add_ratio(float(batch), float(ms) / prior)
        tab = self._tables.get(key)
        stacks = self._stacks.get(model)
        if tab is not None and profiled:
            # a profiled pair only changes in this observation's bucket: patch the cached table
            g = self.granularity
            k = st.bucket(batch)
            lo, hi = (0 if k == g else k - g + 1), min(k, len(tab) - 1)
            full = st.bucket_n.get(k, 0) >= self.lookup_min_samples   # ratio_n <= bucket_n: add counts both
            if full and lo <= hi:                # (below that, the table there is the profile still)
                v = self._bucket_rule(st, k, self._prior(model, instance_type)[lo: hi + 1])
                tab[lo: hi + 1] = v
                lst = self._lists.get(key)
                if lst is not None:
                    lst[lo: hi + 1] = tab[lo: hi + 1].tolist()
                for types, stack in list((stacks or {}).items()):
                    if instance_type not in types:
                        continue
                    if hi < len(stack):
                        stack[lo: hi + 1, types.index(instance_type)] = v
                    else:                       # shorter than this table: rebuilt on its next use
                        del stacks[types]
            if stale and stacks:
                self._stacks.pop(model, None)
        else:
            self._forget_table(key)
            self._stacks.pop(model, None)

    def _forget_table(self, key: tuple[str, str]) -> None:
        """Drop a pair's cached table (and its list): :meth:`table` builds it again on its next use."""
        self._tables.pop(key, None)
        self._lists.pop(key, None)
        self._fallback_built.discard(key)

    # -- prediction ------------------------------------------------------------------------------
    def predict_ms(self, model: str, instance_type: str, batch_size: float) -> float:
        lst = self._lists.get((model, instance_type))      # table()'s cache as a list (a hot path)
        if lst is None:
            lst = self._lists[(model, instance_type)] = self.table(model, instance_type).tolist()
        b = math.ceil(batch_size)
        if 0 <= b < len(lst):
            return lst[b]
        return float(self._lookup(self.table(model, instance_type), np.asarray([batch_size], dtype=float))[0])

    def predict_many(self, model: str, instance_type: str, batch_sizes: np.ndarray) -> np.ndarray:
        return self._lookup(self.table(model, instance_type), batch_sizes)

    def predict_grid(self, model: str, types: Sequence[str], batch_sizes: np.ndarray) -> np.ndarray:
        """``len(batch_sizes) × len(types)`` predictions: column k is ``predict_many(model, types[k],
        batch_sizes)``, read with one fancy-index from the types' stacked tables."""
        key = tuple(types)
        per_model = self._stacks.setdefault(model, {})
        stack = per_model.get(key)
        if stack is None:
            tabs = [self.table(model, t) for t in key]
            top = min(len(t) for t in tabs)
            stack = np.empty((top, len(tabs)), dtype=float)
            for k, t in enumerate(tabs):
                stack[:, k] = t[:top]
            per_model[key] = stack
        b = np.ceil(np.asarray(batch_sizes, dtype=float))
        if b.size and b.max() < len(stack):
            return stack.take(b.astype(np.intp), axis=0, mode="clip")   # batch <= 0 reads row 0
        out = np.empty((b.size, len(key)), dtype=float)
        for k, t in enumerate(key):
            out[:, k] = self.predict_many(model, t, b)
        return out

    def _lookup(self, tab: np.ndarray, batch_sizes: np.ndarray) -> np.ndarray:
        b = np.ceil(np.asarray(batch_sizes, dtype=float))
        top = len(tab) - 1
        if b.size == 0 or b.max() <= top:
            return tab[np.maximum(b, 0).astype(np.intp)]
        g = min(self.granularity, top)
        slope = (tab[top] - tab[top - g]) / g          # the last two grid points, as the profile does
        inside = tab[np.clip(b, 0, top).astype(np.intp)]
        return np.where(b > top, tab[top] + slope * (b - top), inside)

    def table(self, model: str, instance_type: str) -> np.ndarray:
        """Dense predictions for batch 0..N (index = integer batch size); cached."""
        key = (model, instance_type)
        tab = self._tables.get(key)
        if tab is None:
            tab = self._build(model, instance_type, set())
            self._tables[key] = tab
            if not self.has_data(model, instance_type):
                self._fallback_built.add(key)
        return tab

    def _size(self, model: str, instance_type: str) -> int:
        n = _DENSE_MAX
        if self.profiles.has(model, instance_type):
            n = max(n, int(self.profiles.get(model, instance_type).batch_sizes.max()))
        return n

    def _build(self, model: str, instance_type: str, visiting: set[str]) -> np.ndarray:
        key = (model, instance_type)
        b = np.arange(self._size(model, instance_type) + 1, dtype=float)
        st = self._obs.get(key)
        if self.profiles.has(model, instance_type):
            base = self._prior(model, instance_type).copy()   # the table is patched in place
        elif st is not None and st.n > 0:
            line = st.line()
            assert line is not None
            base = np.maximum(line[0] + line[1] * b, 0.0)
        else:
            base = self._fallback(model, instance_type, b, visiting | {instance_type})
        base = np.asarray(base, dtype=float)
        if st is None or not st.bucket_n:
            return base
        return self._observed(st, b, base, profiled=self.profiles.has(model, instance_type))

    def _prior(self, model: str, instance_type: str) -> np.ndarray:
        """A profiled pair's profile at batch 0..N (index = batch; 0 reads batch 1); cached."""
        key = (model, instance_type)
        got = self._priors.get(key)
        if got is None:
            b = np.arange(self._size(model, instance_type) + 1, dtype=float)
            got = self._priors[key] = np.asarray(
                self.profiles.get(model, instance_type).latency_ms(np.maximum(b, 1.0), self.stat), dtype=float)
        return got

    def _observed(self, st: _PairStats, b: np.ndarray, base: np.ndarray, profiled: bool) -> np.ndarray:
        """The lookup rule over ``base`` (the prior's predictions for batches ``b``): where a batch's
        bucket holds ``lookup_min_samples`` observations, their mean; for a profiled pair (``base``
        is then the profile) the profile times the bucket's mean measured ÷ profiled ratio first."""
        buckets = (np.ceil(np.maximum(b, 1.0) / self.granularity) * self.granularity).astype(np.int64)
        out = base
        means = self._full_buckets(st.bucket_n, st.bucket_sum, buckets)
        if means is not None:
            out = np.where(means[0], means[1], out)
        ratios = self._full_buckets(st.ratio_n, st.ratio_sum, buckets) if profiled else None
        if ratios is not None:
            out = np.where(ratios[0], base * ratios[1], out)
        return out

    def _bucket_rule(self, st: _PairStats, k: int, prior: np.ndarray) -> np.ndarray:
        """:meth:`_observed` for the batches of one bucket ``k`` of a profiled pair (``prior``: the
        profile there), on scalars: the per-observation patch of a cached table."""
        rn, n = st.ratio_n.get(k, 0), st.bucket_n.get(k, 0)
        if rn >= self.lookup_min_samples:
            return prior * (st.ratio_sum[k] / rn)
        if n >= self.lookup_min_samples:
            return np.full_like(prior, st.bucket_sum[k] / n)
        return prior

    def _full_buckets(self, counts: dict[int, int], sums: dict[int, float], buckets: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray] | None:
        """For each of ``buckets``: whether it holds ``lookup_min_samples`` observations, and their
        mean (``sums`` ÷ ``counts``); None when no bucket does."""
        ks = np.array(sorted(k for k, n in counts.items() if n >= self.lookup_min_samples), dtype=np.int64)
        if not ks.size:
            return None
        means = np.array([sums[k] / counts[k] for k in ks])
        pos = np.minimum(np.searchsorted(ks, buckets), len(ks) - 1)
        return ks[pos] == buckets, means[pos]

    def _fallback(self, model: str, instance_type: str, b: np.ndarray, visiting: set[str]) -> np.ndarray:
        others = sorted(t for t in self._types_by_model.get(model, ()) if t not in visiting and self.has_data(model, t))
        if others:
            preds = []
            for t in others:
                tab = self._tables.get((model, t))
                if tab is None:
                    tab = self._build(model, t, visiting)
                preds.append(np.interp(b, np.arange(len(tab)), tab) if len(tab) != len(b) else tab)
            return np.median(np.vstack(preds), axis=0)
        return self.fallback_ms + self.fallback_ms_per_item * b
