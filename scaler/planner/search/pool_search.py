"""The planner's pools found without listing them: an exact branch and bound on the upper bound
(issue #29; pure).

``scaler.planner.upper_bound.enumerate_pools`` lists every pool within the budget; with the 12 types of the
catalog at 20 $/hr that is about 1.7e13 pools. This module answers the planner's questions about
that same set of pools (the same budget rule, to the float, and the same per-type bounds) without
listing it: the top-K pools in the ranking's order, the first maximal pool holding given counts,
the cheapest pools whose bound covers a demand, and how many pools there are.

**The bound is not monotone in the counts.** Adding one instance of an auxiliary type whose
QoS region is larger than that of every auxiliary type in the pool moves Eq. 15's ``f'`` and the
region every ``Q_a^i`` is taken over, and can lower the bound (on the shipped profiles, wnd at
25 ms with the deeprecsys mix: 5 g4dn.xlarge + 8 t3.xlarge bound 1764.6 q/s, and 1760.1 with one
r5n.large more; tests/planner/test_pool_search.py). Pruning on "the pool
with every free type at its maximum" would therefore be wrong. What holds instead, with ``j`` the
auxiliary of the largest region present (``j*`` of Eq. 15): the bound is

    F_j(u, v) = min(alpha_j * u,  Q_b * u + sum_{i <= j} beta_ji * v_i)

with ``alpha_j = Q_b^{s_j+} / (1 - f_j)`` and ``beta_ji = Q_a[j, i] * (1 - (1 - f_j) Q_b / Q_b^{s_j+}) / f_j``
(Eq. 15's two branches rewritten: ``u Q_b^{s+} <= C`` is exactly the first term being the smaller;
``f_j = 1`` or ``0``: ``alpha_j`` is infinite). ``(1 - f_j) Q_b / Q_b^{s_j+}`` is the share of the
base's busy time spent on the queries above ``s_j``, at most 1, so ``beta_ji >= 0`` and ``F_j`` is
nondecreasing in every count: for a *fixed* ``j*`` the bound is monotone.

**The pruning bound** of a partial pool (some counts fixed, the others free within their bounds and
the money left, ``R``) is the largest over the ``j`` that can still be ``j*`` (no auxiliary above
``j`` present, ``j`` present or still affordable) of the linear relaxation of ``F_j``: ``x`` dollars
on more base instances (at most as many as fit and the type's maximum allows), the rest at the best
``beta_ji / price_i`` of the free auxiliary types ``i <= j``, maximised over ``x`` (the minimum of two
linear functions of ``x``: at an end or where they cross). Every pool of the subtree spends at most
``R`` on its free instances, so its bound is at most this value. Partial pools whose pruning bound
is below a threshold are dropped, level by level (one type per level, the base type first, then
the dearest; vectorised over the level), so a pass returns every pool with a bound at or above the
threshold, with the cost, budget rule and bound enumeration gives them (the pools found are checked
against enumeration's own float rule, type by type in its column order, and bounded by
``upper_bounds`` itself). Sorting them as the ranking does gives its top K exactly.

- Top K (:func:`top_pools`): a beam pass (the ``BEAM`` partial pools of highest pruning bound per
  level) finds K real pools; the K-th best bound among them is the threshold of the exact pass. A
  pass that generates more than ``RETRY_WORK`` partial pools is retried with a beam 8x wider, up to
  ``MAX_BEAM``; the last try stops at ``WORK_LIMIT`` with one PlanError line (``SearchTooLarge``).
- The cheapest pools covering a demand (:func:`cheapest_pools`, ``min_cost``): the threshold is the
  demand, and a cost cap prunes too (the pruning bound then uses the money below the cap). The cap
  starts at the least money whose pruning bound over the whole space reaches the demand (no pool
  below it can) and rises in growing steps until K pools lie under it; a step that finds too much
  to search is cut back.

**The count** (``Plan.pools_ranked``) is :mod:`scaler.planner.search.pool_count`'s; the space searched, and
enumeration's budget rule on the pools found, are :mod:`scaler.planner.search.pool_space`'s.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from config.budget import BUDGET_EPS
from scaler.planner.base_aux import BoundParams, PlanError
from scaler.planner.search.pool_space import Pools, PoolSpace, in_space, maximal

#: partial pools one pass may generate before it stops with a PlanError
WORK_LIMIT = 60_000_000
#: children generated per chunk (memory: chunk x types x 4 bytes)
CHUNK = 1_000_000
#: partial pools kept per level by the beam pass that sets the threshold (x8 per retry up to MAX_BEAM)
BEAM = 32
MAX_BEAM = 4096
#: work after which a pass under a beam's threshold is retried with a wider beam
RETRY_WORK = 4_000_000
#: budget slack of the search passes: the exact budget rule is applied to the pools found
SLACK = 1e-7


# --- the pruning bound ---------------------------------------------------------------------------

@dataclass(frozen=True)
class _Relax:
    alpha: np.ndarray       # (n,) inf where Eq. 15 has no first branch
    qb: np.ndarray          # (n,) the base's slope in the second term
    beta: np.ndarray        # (n, n) beta[j, i] >= 0 for i <= j, 0 above
    usable: bool            # every parameter finite (else no pruning)


def _relax(p: BoundParams) -> _Relax:
    n = len(p.f)
    f = np.asarray(p.f, dtype=float)
    alpha = np.full(n, np.inf)
    qb = np.full(n, float(p.q_b))
    beta = np.zeros((n, n))
    usable = bool(np.isfinite(p.q_b) and np.isfinite(p.q_a).all() and np.isfinite(p.q_b_splus).all())
    for j in range(n):
        if f[j] >= 1:
            beta[j, : j + 1] = p.q_a[j, : j + 1]
        elif f[j] > 0:
            share = (1.0 - f[j]) * p.q_b / p.q_b_splus[j] if p.q_b_splus[j] > 0 else np.inf
            a = p.q_b_splus[j] / (1.0 - f[j])
            if share <= 1.0 + 1e-12:
                alpha[j] = a
                beta[j, : j + 1] = p.q_a[j, : j + 1] * max(1.0 - share, 0.0) / f[j]
            else:       # cannot happen for a mix whose fractions sum to 1; still a valid bound: u max(a, Q_b)
                qb[j] = max(a, p.q_b)
    return _Relax(alpha, qb, np.maximum(beta, 0.0), usable)


@dataclass(frozen=True)
class _Level:
    base_free: bool
    rho: np.ndarray         # (n,) best beta_ji / price_i over the free auxiliaries i <= j
    aux_free: np.ndarray    # (n,) auxiliary i still free


def _level(space: PoolSpace, free: set[int], rx: _Relax) -> _Level:
    n = len(space.aux_cols)
    aux_free = np.array([int(c) in free for c in space.aux_cols], dtype=bool)
    rho = np.zeros(n)
    for j in range(n):
        ratios = [rx.beta[j, i] / space.prices[space.aux_cols[i]] for i in range(j + 1) if aux_free[i]]
        rho[j] = max(ratios, default=0.0)
    return _Level(space.base_col in free, rho, aux_free)


def _optimistic(space: PoolSpace, rx: _Relax, lv: _Level, counts: np.ndarray, r: np.ndarray) -> np.ndarray:
    """The pruning bound (module doc) of partial pools: ``counts`` holds the fixed counts and the
    free ones at their minimum; ``r`` is the money left for more instances of the free types."""
    if not rx.usable:
        return np.full(len(r), np.inf)
    r = np.maximum(r, 0.0)
    n = len(space.aux_cols)
    u0 = counts[:, space.base_col].astype(float)
    pb = space.prices[space.base_col]
    if lv.base_free:
        u_hi = np.minimum(u0 + np.floor(r / pb), float(space.cap[space.base_col]))
        x_max = (u_hi - u0) * pb
    else:
        u_hi, x_max = u0, np.zeros_like(u0)
    v0 = counts[:, space.aux_cols].astype(float) if n else np.zeros((len(r), 0))
    present = v0 > 0
    # no auxiliary at all: Eq. 15 is u Q_b
    best = np.where(present.any(axis=1), -np.inf, space.params.q_b * u_hi)
    if n == 0:
        return best
    last = np.where(present.any(axis=1), n - 1 - np.argmax(present[:, ::-1], axis=1), -1)
    b0 = u0[:, None] * rx.qb[None, :] + v0 @ rx.beta.T + r[:, None] * lv.rho[None, :]     # B at x = 0
    slope_b = (rx.qb / pb if lv.base_free else 0.0) - lv.rho                              # dB/dx
    fin = np.isfinite(rx.alpha)
    alpha = np.where(fin, rx.alpha, 0.0)
    slope_a = alpha / pb if lv.base_free else np.zeros(n)
    a0 = u0[:, None] * alpha[None, :]
    xm = x_max[:, None]
    b_end = b0 + slope_b[None, :] * xm
    a_end = a0 + slope_a[None, :] * xm
    denom = slope_a - slope_b
    with np.errstate(divide="ignore", invalid="ignore"):
        xs = np.where(denom[None, :] > 0, np.clip((b0 - a0) / denom[None, :], 0.0, xm), 0.0)
    mid = np.minimum(a0 + slope_a[None, :] * xs, b0 + slope_b[None, :] * xs)
    val_a = np.maximum(np.maximum(np.minimum(a0, b0), np.minimum(a_end, b_end)), mid)
    val = np.where(fin[None, :], val_a, np.maximum(b0, b_end))      # alpha infinite: B alone
    j = np.arange(n)[None, :]
    reach = lv.aux_free[None, :] & (space.prices[space.aux_cols][None, :] <= r[:, None]) \
        & (space.cap[space.aux_cols][None, :] >= 1)
    ok = (j == last[:, None]) | ((j > last[:, None]) & reach)
    return np.maximum(best, np.where(ok, val, -np.inf).max(axis=1))


# --- the passes ----------------------------------------------------------------------------------

def _order(space: PoolSpace) -> list[int]:
    """Search order: the base type first (it caps Eq. 15's first term), then the others by price,
    dearest first (fewest children near the root)."""
    rest = sorted((j for j in range(len(space.types)) if j != space.base_col), key=lambda j: -space.prices[j])
    return [space.base_col] + rest


class SearchTooLarge(PlanError):
    """A search pass went past its work limit (one line: set per-type max counts)."""


def _empty_pools(t: int) -> Pools:
    return Pools(np.zeros((0, t), dtype=np.int32), np.zeros(0), np.zeros(0))


def _pass(space: PoolSpace, tau: float, *, lo: np.ndarray | None = None, cap: np.ndarray | None = None,
          cost_cap: float | None = None, beam: int | None = None, positive: bool = False,
          work_limit: int | None = None) -> Pools:
    """Every pool of the space within ``lo <= counts <= cap`` (defaults: the space's), of cost at most
    ``cost_cap``, whose bound is at least ``tau`` (and > 0 if ``positive``), unordered — or with
    ``beam``, some of them (the best ``beam`` partial pools per level)."""
    t = len(space.types)
    work_limit = WORK_LIMIT if work_limit is None else work_limit
    lo = space.lo.copy() if lo is None else np.maximum(np.asarray(lo, dtype=np.int64), space.lo)
    cap = space.cap.copy() if cap is None else np.minimum(np.asarray(cap, dtype=np.int64), space.cap)
    rx = _relax(space.params)
    order = _order(space)
    money = space.budget + BUDGET_EPS + SLACK
    if cost_cap is not None:
        money = min(money, cost_cap + 1e-6 + SLACK)
    tol = 1e-7 * max(1.0, abs(tau)) if np.isfinite(tau) else 0.0
    counts = lo[None, :].astype(np.int32)
    cost = np.zeros(1)
    if float((lo * space.prices).sum()) > money or (lo > cap).any():
        return _empty_pools(t)
    work = 0
    for k, col in enumerate(order):
        free = order[k + 1:]
        free_min = float(sum(lo[c] * space.prices[c] for c in free))
        lv = _level(space, set(free), rx)
        top = np.minimum(np.floor(np.maximum(money - cost - free_min, -1.0) / space.prices[col]), cap[col])
        width = np.maximum(top.astype(np.int64) - lo[col] + 1, 0)
        work += int(width.sum())
        if work > work_limit:
            raise SearchTooLarge(f"the pool search needs more than {work_limit:,} steps at budget {space.budget:g} $/hr "
                            f"over {t} types; set per-type max counts")
        kept_c, kept_cost, kept_opt = [], [], []
        for s, e in _chunks(width):
            w = width[s:e]
            par = np.repeat(np.arange(s, e), w)
            n = (np.arange(int(w.sum())) - np.repeat(np.cumsum(w) - w, w)) + lo[col]
            cc = counts[par]
            cc[:, col] = n
            cs = cost[par] + n * space.prices[col]
            if k == t - 1:
                kept_c.append(cc)
                kept_cost.append(cs)
                continue
            opt = _optimistic(space, rx, lv, cc, money - cs - free_min)
            keep = (opt >= tau - tol) & space.within_quota(cc)   # the free types at their minimum
            if positive:
                keep &= opt > 0
            kept_c.append(cc[keep])
            kept_cost.append(cs[keep])
            kept_opt.append(opt[keep])
        counts = np.concatenate(kept_c) if kept_c else np.zeros((0, t), dtype=np.int32)
        cost = np.concatenate(kept_cost) if kept_cost else np.zeros(0)
        if beam is not None and kept_opt and len(cost) > beam:
            sel = np.argpartition(-np.concatenate(kept_opt), beam)[:beam]
            counts, cost = counts[sel], cost[sel]
        if not len(cost):
            return _empty_pools(t)
    ok, exact = in_space(space, counts)
    ok &= np.all((counts >= lo) & (counts <= cap), axis=1)
    if cost_cap is not None:
        ok &= exact <= cost_cap + 1e-6
    counts, exact = counts[ok], exact[ok]
    bound = space.bounds(counts)
    keep = bound >= tau - tol
    if positive:
        keep &= bound > 0
    return Pools(counts[keep], exact[keep], bound[keep])


def _chunks(width: np.ndarray) -> list[tuple[int, int]]:
    out, s, acc = [], 0, 0
    for i, w in enumerate(width.tolist()):
        acc += w
        if acc >= CHUNK:
            out.append((s, i + 1))
            s, acc = i + 1, 0
    if s < len(width):
        out.append((s, len(width)))
    return out


def rank_order(p: Pools) -> Pools:
    """The ranking's order: bound descending, cost ascending, then the counts lexicographically."""
    keys = tuple(p.counts[:, j] for j in range(p.counts.shape[1] - 1, -1, -1)) + (p.cost, -p.bound)
    o = np.lexsort(keys)
    return Pools(p.counts[o], p.cost[o], p.bound[o])


def cost_order(p: Pools) -> Pools:
    """``min_cost``'s candidate order: cost (to 9 decimals), bound descending, then the ranking's order."""
    keys = tuple(p.counts[:, j] for j in range(p.counts.shape[1] - 1, -1, -1)) + (p.cost, -p.bound,
                                                                                  np.round(p.cost, 9))
    o = np.lexsort(keys)
    return Pools(p.counts[o], p.cost[o], p.bound[o])


def top_pools(space: PoolSpace, k: int, *, lo: np.ndarray | None = None, cap: np.ndarray | None = None,
              maximal_only: bool = False, at_least: float = -np.inf) -> Pools:
    """The first ``k`` pools of the ranking (``rank_order``) among those within ``lo``/``cap`` (and
    maximal, when asked) with a bound of at least ``at_least``."""
    k = max(int(k), 1)

    def keep(p: Pools) -> Pools:
        m = p.bound >= at_least
        if maximal_only:
            m &= maximal(space, p.counts, p.cost)
        return Pools(p.counts[m], p.cost[m], p.bound[m])
    beam = max(BEAM, 4 * k)
    while True:     # a wider beam when its threshold leaves too much to search
        seed = keep(_pass(space, at_least, lo=lo, cap=cap, beam=beam))
        tau = at_least
        if len(seed) >= k:
            tau = max(tau, float(np.partition(seed.bound, len(seed) - k)[len(seed) - k]))
        last = beam >= MAX_BEAM
        try:
            found = _pass(space, tau, lo=lo, cap=cap, work_limit=WORK_LIMIT if last else RETRY_WORK)
        except SearchTooLarge:
            if last:
                raise
            beam = min(beam * 8, MAX_BEAM)
            continue
        return rank_order(keep(found)).head(k)


def cheapest_pools(space: PoolSpace, need: float, k: int) -> Pools:
    """The first ``k`` pools in ``cost_order`` among those whose bound is at least ``need`` and above 0.

    Passes under a rising cost cap, from the least money whose pruning bound reaches ``need`` up in
    growing steps (a step that finds too much to search is halved), until ``k`` pools are found
    below the cap (then none left out can come before them) or the cap is the budget."""
    k = max(int(k), 1)
    floor = _cost_floor(space, float(need))
    cap, step = floor, float(space.prices.min()) / 4
    while True:
        tight = cap - floor < 1e-3 or cap >= space.budget
        try:
            found = _pass(space, float(need), cost_cap=cap, positive=True,
                          work_limit=WORK_LIMIT if tight else RETRY_WORK)
        except SearchTooLarge:
            if tight:
                raise
            cap, step = 0.5 * (floor + cap), step / 4
            continue
        m = found.bound >= need
        found = cost_order(Pools(found.counts[m], found.cost[m], found.bound[m]))
        if cap >= space.budget or (len(found) >= k and round(float(found.cost[k - 1]), 9) <= round(cap, 9)):
            return found.head(k)
        if not len(found):
            floor = cap             # nothing up to here: the next halving starts above it
        cap, step = min(cap + step, space.budget), step * 1.5


def _cost_floor(space: PoolSpace, need: float) -> float:
    """The least money whose pruning bound over the whole space reaches ``need`` (bisection): no
    pool that costs less covers ``need``."""
    rx = _relax(space.params)
    lv = _level(space, set(range(len(space.types))), rx)
    root = space.lo[None, :].astype(np.int32)
    floor_cost = float((space.lo * space.prices).sum())

    def reach(m: float) -> bool:
        b = float(_optimistic(space, rx, lv, root, np.array([m - floor_cost]))[0])
        return b >= need - 1e-7 * max(1.0, abs(need)) and b > 0
    lo_m, hi_m = floor_cost, space.budget
    if not reach(hi_m):
        return space.budget
    for _ in range(50):
        mid = 0.5 * (lo_m + hi_m)
        lo_m, hi_m = (lo_m, mid) if reach(mid) else (mid, hi_m)
    return lo_m


__all__ = ["BEAM", "CHUNK", "MAX_BEAM", "RETRY_WORK", "SLACK", "SearchTooLarge", "WORK_LIMIT", "cheapest_pools",
           "cost_order", "rank_order", "top_pools"]
