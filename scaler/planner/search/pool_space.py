"""The space of pools the planner ranks, described instead of listed (issue #29; pure): the types in
``scaler.planner.upper_bound.enumerate_pools``'s column order, their prices and per-type bounds, the budget
and the bound's parameters (:class:`PoolSpace`); pools found in it (:class:`Pools`); which rows
enumeration itself would list, by its budget rule type by type to the float (:func:`in_space`);
and which are maximal, no further instance of any type fitting (:func:`maximal`). The search
(:mod:`scaler.planner.search.pool_search`), the count (:mod:`scaler.planner.search.pool_count`) and the planner share it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from config.budget import BUDGET_EPS
from scaler.planner.base_aux import BoundParams, PlanError
from scaler.planner.upper_bound import upper_bounds

#: a type without a maximum count (kept well inside int32 for the search's arithmetic)
NO_CAP = np.iinfo(np.int32).max // 4


@dataclass(frozen=True)
class PoolSpace:
    """The pools ``enumerate_pools`` would list (types in its column order) and their bound's inputs."""

    types: tuple[str, ...]
    prices: np.ndarray          # (T,) $/hr
    lo: np.ndarray              # (T,) per-type minimum
    cap: np.ndarray             # (T,) per-type maximum (NO_CAP: none)
    budget: float
    params: BoundParams
    base_col: int
    aux_cols: np.ndarray        # (n,) column of auxiliary i (the params' order)
    #: the vCPU quotas as (A, b): a pool c is within them iff A @ c <= b (None: no quota;
    #: scaler.planner.quota)
    quota: tuple[np.ndarray, np.ndarray] | None = None

    @classmethod
    def build(cls, types: Sequence[str], prices: Sequence[float], mins: Sequence[int],
              maxs: Sequence[int | None], budget: float, base_type: str, aux_types: Sequence[str],
              params: BoundParams, quota: tuple[np.ndarray, np.ndarray] | None = None) -> "PoolSpace":
        pr = np.asarray(prices, dtype=float)
        if (pr <= 0).any():
            raise PlanError("every instance type needs a positive price")
        col = {t: j for j, t in enumerate(types)}
        cap = np.array([NO_CAP if m is None else min(int(m), NO_CAP) for m in maxs], dtype=np.int64)
        return cls(tuple(types), pr, np.asarray(mins, dtype=np.int64), cap, float(budget), params,
                   col[base_type], np.array([col[t] for t in aux_types], dtype=np.int64),
                   quota if quota is not None and len(quota[1]) else None)

    def within_quota(self, counts: np.ndarray) -> np.ndarray:
        """Mask of the rows (pools, or partial pools with the free types at their minimum) within
        every vCPU quota."""
        c = np.asarray(counts, dtype=np.int64).reshape(-1, len(self.types))
        if self.quota is None:
            return np.ones(len(c), dtype=bool)
        a, b = self.quota
        return np.all(c @ a.T <= b[None, :], axis=1)

    def quota_room(self, counts: np.ndarray) -> np.ndarray:
        """(N, T) mask: one more instance of each type fits its quotas beside each row."""
        c = np.asarray(counts, dtype=np.int64).reshape(-1, len(self.types))
        if self.quota is None:
            return np.ones(c.shape, dtype=bool)
        a, b = self.quota
        left = b[None, :] - c @ a.T
        return np.all((a[None, :, :] == 0) | (a[None, :, :] <= left[:, :, None]), axis=1)

    @property
    def reserve(self) -> np.ndarray:
        """Cost of the minimum counts of the types after each one (enumeration's own expression)."""
        min_cost = self.lo * self.prices
        return np.concatenate([np.cumsum(min_cost[::-1])[::-1][1:], [0.0]])

    def bounds(self, counts: np.ndarray) -> np.ndarray:
        """``upper_bounds`` of full pools (rows over ``types``), as ``scaler.planner.choose.rank_inputs`` computes them."""
        v = counts[:, self.aux_cols] if len(self.aux_cols) else np.zeros((len(counts), 0))
        return upper_bounds(counts[:, self.base_col], v, self.params)


@dataclass(frozen=True)
class Pools:
    """Pools found by a search, in the order asked for: ``counts`` (N, T), ``cost``, ``bound``."""

    counts: np.ndarray
    cost: np.ndarray
    bound: np.ndarray

    def __len__(self) -> int:
        return int(self.counts.shape[0])

    def head(self, k: int) -> "Pools":
        return Pools(self.counts[:k], self.cost[:k], self.bound[:k])


def in_space(space: PoolSpace, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Which rows ``enumerate_pools`` lists (its budget rule, type by type, to the float; the bounds;
    not empty) and their cost as it computes it."""
    c = np.asarray(counts).reshape(-1, len(space.types))
    ok = np.all((c >= space.lo) & (c <= space.cap), axis=1) & c.any(axis=1)
    cost = np.zeros(len(c))
    reserve = space.reserve
    for k in range(len(space.types)):
        room = space.budget + BUDGET_EPS - cost - reserve[k]
        ok &= c[:, k] <= np.floor(np.maximum(room, -1.0) / space.prices[k])
        cost = cost + c[:, k].astype(np.int32) * space.prices[k]
    return ok & space.within_quota(c), cost


def maximal(space: PoolSpace, counts: np.ndarray, cost: np.ndarray) -> np.ndarray:
    """``scaler.planner.choose.maximal_pools`` for these rows: no further instance of any type fits."""
    room = (counts < space.cap[None, :]) & space.quota_room(counts)
    add = np.where(room, space.prices[None, :], np.inf).min(axis=1)
    return cost + add > space.budget + BUDGET_EPS


__all__ = ["NO_CAP", "Pools", "PoolSpace", "in_space", "maximal"]
