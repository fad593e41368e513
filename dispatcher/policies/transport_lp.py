"""The transportation LP behind the class matching (dispatcher/policies/class_match.py).

Classes of identical queries (supply ``count[r]``) against groups of workers (capacity ``cap[g]``),
at a cost per (class, group): ``min Σ cost[r, g]·x[r, g]`` with ``x >= 0`` and either every worker
used (``Σ_r x[r, g] = cap[g]``, ``Σ_g x[r, g] <= count[r]``: at least as many queries as workers,
Kairos §5.1 Eq. 7) or every query served (``Σ_g x[r, g] = count[r]``, ``Σ_r x[r, g] <= cap[g]``:
Eq. 6). The constraint matrix is a bipartite incidence matrix, totally unimodular, so a basic
optimal solution is integral: HiGHS's simplex (presolve off, which returns the basis it pivoted
to) gives one. ``highspy`` where installed (the ``accuracy`` extra), else SciPy's own copy of HiGHS
through ``scipy.optimize.linprog(method="highs-ds")``.
"""
from __future__ import annotations

import numpy as np
from scipy import sparse
from scipy.optimize import linprog

try:
    import highspy
except ImportError:  # pragma: no cover - exercised where highspy is not installed
    highspy = None

#: how far from an integer a basic solution's value may be before it is refused (never seen)
INTEGRAL_TOL = 1e-6


def solve_transport(cost: np.ndarray, count: np.ndarray, cap: np.ndarray, fill_workers: bool,
                    on: np.ndarray | None = None, piece_cost: np.ndarray | None = None,
                    piece_class: np.ndarray | None = None) -> np.ndarray | None:
    """The integral optimal flows x (R × G), or None when the solver did not prove an integral
    optimum (the caller then solves the dense problem).

    With ``piece_cost`` (one per query, ascending within its class ``piece_class``), a class's
    flow into the groups where ``on[r, g]`` passes through unit pieces at those costs: the k
    cheapest pieces of a class are what its k on-time queries add (the ``extra`` of
    dispatcher/policies/pair_costs.py), so queries of one class whose extras differ still share
    one class. Still a network (source → class → its on-time split → group → sink): integral."""
    R, G = cost.shape
    if R == 0 or G == 0:
        return np.zeros((R, G), dtype=np.int64)
    cnt = count.astype(float)
    cp = cap.astype(float)
    row_lo = np.concatenate([np.zeros(R) if fill_workers else cnt, cp if fill_workers else np.zeros(G)])
    row_hi = np.concatenate([cnt, cp])
    A = _incidence(R, G)
    c = np.ascontiguousarray(cost, dtype=float).ravel()
    col_hi = np.full(R * G, np.inf)
    if piece_cost is not None and on is not None and piece_class is not None:
        A, c, col_hi, row_lo, row_hi = _with_pieces(A, c, col_hi, row_lo, row_hi, on, piece_cost, piece_class)
    x = solve_integral(A, c, col_hi, row_lo, row_hi)
    return None if x is None else x[: R * G].reshape(R, G)


def solve_integral(A: sparse.csc_matrix, c: np.ndarray, col_hi: np.ndarray, row_lo: np.ndarray,
                   row_hi: np.ndarray) -> np.ndarray | None:
    """``min c·x`` subject to ``row_lo <= A·x <= row_hi`` and ``0 <= x <= col_hi`` (``inf``: no upper
    bound) by HiGHS's simplex, for an ``A`` that is totally unimodular (a network matrix, up to the
    sign of its rows) with integral bounds: the basic optimum as integers, or None where the solver
    proved no optimum or the solution is not integral (the caller then solves the dense problem)."""
    x = _highspy(A, c, col_hi, row_lo, row_hi) if highspy is not None else _linprog(A, c, col_hi, row_lo, row_hi)
    if x is None:
        return None
    xi = np.rint(x)
    if np.abs(x - xi).max(initial=0.0) > INTEGRAL_TOL or (xi < 0).any():
        return None
    return xi.astype(np.int64)


def _incidence(R: int, G: int) -> sparse.csc_matrix:
    """x[r, g] (column r·G + g) counts in row r (its class) and in row R + g (its group)."""
    idx = np.empty(2 * R * G, dtype=np.int32)
    idx[0::2] = np.repeat(np.arange(R, dtype=np.int32), G)
    idx[1::2] = R + np.tile(np.arange(G, dtype=np.int32), R)
    return sparse.csc_matrix((np.ones(2 * R * G), idx, np.arange(0, 2 * R * G + 1, 2, dtype=np.int32)),
                             shape=(R + G, R * G))


def _with_pieces(A: sparse.csc_matrix, c: np.ndarray, col_hi: np.ndarray, row_lo: np.ndarray,
                 row_hi: np.ndarray, on: np.ndarray, piece_cost: np.ndarray, piece_class: np.ndarray
                 ) -> tuple[sparse.csc_matrix, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One more row per class (its on-time split: pieces in = on-time flows out) and one column
    per piece (in [0, 1], at its cost; it counts in its class's supply instead of the on-time
    flows, which leave the class's supply row)."""
    R, G = on.shape
    m = len(piece_cost)
    A = A.tolil()
    cells = np.nonzero(on.ravel())[0]
    A[cells // G, cells] = 0.0                              # on-time flows leave the supply row
    A = A.tocsc()
    split = sparse.csc_matrix((-np.ones(len(cells)), (cells // G, cells)), shape=(R, R * G))
    pieces_supply = sparse.csc_matrix((np.ones(m), (piece_class, np.arange(m))), shape=(R + G, m))
    pieces_split = sparse.csc_matrix((np.ones(m), (piece_class, np.arange(m))), shape=(R, m))
    A = sparse.bmat([[A, pieces_supply], [split, pieces_split]], format="csc")
    return (A, np.concatenate([c, piece_cost]), np.concatenate([col_hi, np.ones(m)]),
            np.concatenate([row_lo, np.zeros(R)]), np.concatenate([row_hi, np.zeros(R)]))


def _highspy(A: sparse.csc_matrix, c: np.ndarray, col_hi: np.ndarray, row_lo: np.ndarray,
             row_hi: np.ndarray) -> np.ndarray | None:
    # the core class: highspy.Highs's constructor logs a banner before output_flag can be set
    h = highspy._core._Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("threads", 1)
    h.setOptionValue("presolve", "off")
    h.setOptionValue("solver", "simplex")
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = A.shape[1], A.shape[0]
    lp.col_cost_ = c
    lp.col_lower_ = np.zeros(len(c))
    lp.col_upper_ = np.where(np.isinf(col_hi), highspy.kHighsInf, col_hi)
    lp.row_lower_ = row_lo
    lp.row_upper_ = row_hi
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = A.indptr
    lp.a_matrix_.index_ = A.indices
    lp.a_matrix_.value_ = A.data
    h.passModel(lp)
    h.run()
    if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        return None
    return np.asarray(h.getSolution().col_value, dtype=float)


def _linprog(A: sparse.csc_matrix, c: np.ndarray, col_hi: np.ndarray, row_lo: np.ndarray,
             row_hi: np.ndarray) -> np.ndarray | None:
    eq = row_lo == row_hi
    lo = ~eq & (row_lo > 0)
    A = A.tocsr()
    res = linprog(c, A_ub=sparse.vstack([A[~eq], -A[lo]]), b_ub=np.concatenate([row_hi[~eq], -row_lo[lo]]),
                  A_eq=A[eq], b_eq=row_hi[eq], bounds=np.column_stack([np.zeros(len(c)), col_hi]),
                  method="highs-ds", options={"presolve": False})
    return np.asarray(res.x, dtype=float) if res.status == 0 else None
