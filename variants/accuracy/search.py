"""A quick local search over per-type worker counts for the accuracy planner (ours, not Proteus's):
from a placement that serves the most demand, moves of one or two workers that keep the served
demand and raise the accuracy-weighted throughput, until none does or the budget is spent. Pure:
options, counts and demand in, counts out.

It gives the MILP (:mod:`variants.accuracy.solve`) a start close to the best instead of step 1's
placement, where every worker runs its model's fastest variant: from there HiGHS at a 1 s budget
often stopped near that start (BENCHMARKS.md "accuracy-planner"), and from this one it does not.
It is a heuristic: it stops at the first placement no move of one or two workers improves.

**Value of a placement** (Proteus §4, the fill the planner's rates follow): per model, the groups of
workers hosting its variants take its demand most accurate first, each up to its capacity times
its workers; served = the demand taken, accuracy-weighted throughput = sum of accuracy x taken.

**Moves.** (a) One worker of a type changes what it hosts: from a variant or nothing to another
variant or nothing; the best such move is taken, lexicographically: one that serves more (by more
than ``tol``; step 1 stopped by its budget may leave some), else one that keeps the served demand
(within ``tol``) and raises the accuracy-weighted throughput by more than ``tol``. (b) When no single move does, two
at once: one that raises the accuracy but serves less, with one that serves more, on other models
(their effects add up), the pair that keeps the served demand and raises the accuracy most (among
the best ``PAIR_CANDIDATES`` of each kind, checked exactly before it is taken).
"""
from __future__ import annotations

import math
import time
from typing import Mapping, Sequence

from variants.accuracy.milp import Option

#: How many moves of each kind (more accurate but serving less; serving more) the pair search
#: combines: enough to find the pairs that help on 40 workers x 50 variants, few enough to stay
#: a few ms per round.
PAIR_CANDIDATES = 60
#: The most rounds (one move or pair taken per round) a search makes.
MAX_ROUNDS = 400


Move = dict[int, int]          # option index -> change in its worker count


class _Placement:
    """Worker counts per option, each model's (served, accuracy-weighted) value kept current."""

    def __init__(self, options: Sequence[Option], type_counts: Mapping[str, int], demand: Mapping[str, float],
                 counts: Mapping[tuple[str, str], int]) -> None:
        self.options = options
        self.type_counts = type_counts
        self.demand = {m: max(0.0, float(q)) for m, q in demand.items()}
        self.cap = [min(o.qps, self.demand.get(o.model, 0.0)) for o in options]
        self.n = [int(counts.get((o.itype, o.variant), 0)) for o in options]
        self.by_model: dict[str, list[int]] = {}
        self.by_type: dict[str, list[int]] = {t: [] for t in type_counts}
        for i, o in enumerate(options):
            self.by_model.setdefault(o.model, []).append(i)
            self.by_type[o.itype].append(i)
        for ids in self.by_model.values():   # fill order: the most accurate first
            ids.sort(key=lambda i: (-options[i].accuracy, -options[i].qps, i))
        self.value = {m: self._fill(m, {}) for m in self.by_model}

    def served(self) -> float:
        return sum(v[0] for v in self.value.values())

    def idle(self, t: str) -> int:
        return self.type_counts[t] - sum(self.n[i] for i in self.by_type[t])

    def _fill(self, model: str, move: Move) -> tuple[float, float]:
        left = self.demand.get(model, 0.0)
        served = accw = 0.0
        for i in self.by_model[model]:
            c = self.n[i] + move.get(i, 0)
            if c <= 0:
                continue
            take = min(left, self.cap[i] * c)
            served += take
            accw += self.options[i].accuracy * take
            left -= take
            if left <= 0.0:
                break
        return served, accw

    def delta(self, move: Move) -> tuple[float, float, dict[str, tuple[float, float]]]:
        """(change in served, change in accuracy-weighted throughput, the models' new values)."""
        new = {m: self._fill(m, move) for m in {self.options[i].model for i in move}}
        ds = sum(v[0] - self.value[m][0] for m, v in new.items())
        da = sum(v[1] - self.value[m][1] for m, v in new.items())
        return ds, da, new

    def feasible(self, move: Move) -> bool:
        if any(self.n[i] + c < 0 for i, c in move.items()):
            return False
        used: dict[str, int] = {}
        for i, c in move.items():
            used[self.options[i].itype] = used.get(self.options[i].itype, 0) + c
        return all(self.idle(t) - c >= 0 for t, c in used.items())

    def apply(self, move: Move, new: Mapping[str, tuple[float, float]]) -> None:
        for i, c in move.items():
            self.n[i] += c
        self.value.update(new)

    def single_moves(self) -> list[Move]:
        out: list[Move] = []
        for t, ids in self.by_type.items():
            sources: list[int | None] = [i for i in ids if self.n[i] > 0]
            if self.idle(t) > 0:
                sources.append(None)
            for s in sources:
                for d in [*ids, None]:
                    if d == s:
                        continue
                    move: Move = {}
                    if s is not None:
                        move[s] = -1
                    if d is not None:
                        move[d] = move.get(d, 0) + 1
                    if move:
                        out.append(move)
        return out


def _models(p: _Placement, move: Move) -> set[str]:
    return {p.options[i].model for i in move}


def _best_pair(p: _Placement, scored: list[tuple[Move, float, float]],
               tol: float) -> tuple[Move, dict[str, tuple[float, float]]] | None:
    """The best two moves at once: one that raises the accuracy but serves less with one that
    serves more, on other models (their effects add up), checked exactly before it is taken."""
    gainers = sorted((s for s in scored if s[2] > tol and s[1] < -tol), key=lambda s: -s[2])[:PAIR_CANDIDATES]
    servers = sorted((s for s in scored if s[1] > tol), key=lambda s: -s[2])[:PAIR_CANDIDATES]
    pairs = sorted(((g[2] + s[2], g, s) for g in gainers for s in servers
                    if g[1] + s[1] >= -tol and g[2] + s[2] > tol and not (_models(p, g[0]) & _models(p, s[0]))),
                   key=lambda x: -x[0])
    for _, g, s in pairs:
        move: Move = dict(g[0])
        for i, c in s[0].items():
            move[i] = move.get(i, 0) + c
        move = {i: c for i, c in move.items() if c}
        if not p.feasible(move):
            continue
        ds, da, new = p.delta(move)
        if ds >= -tol and da > tol:
            return move, new
    return None


def improve(options: Sequence[Option], type_counts: Mapping[str, int], demand: Mapping[str, float],
            counts: Mapping[tuple[str, str], int], tol: float, deadline: float,
            max_rounds: int = MAX_ROUNDS) -> dict[tuple[str, str], int]:
    """``counts`` ((type, variant) -> workers, within ``type_counts``) improved by moves of one or
    two workers (module docstring) until none improves, ``max_rounds`` moves were taken, or
    ``deadline`` (perf_counter) passed. Each move serves more, or raises the accuracy-weighted
    throughput by more than ``tol`` while the served demand stays within ``tol`` of the most it
    reached (so many moves never add up to serving less)."""
    p = _Placement(options, type_counts, demand, counts)
    floor = p.served() - tol                         # what a move that keeps the served demand keeps
    for _ in range(max_rounds):
        if time.perf_counter() >= deadline:
            break
        scored: list[tuple[Move, float, float]] = []
        best: tuple[Move, tuple[float, float], dict[str, tuple[float, float]]] | None = None
        slack = p.served() - floor
        for move in p.single_moves():
            ds, da, new = p.delta(move)
            scored.append((move, ds, da))
            gain = (ds, da) if ds > tol else (0.0, da) if ds >= -slack and da > tol else None
            if gain is not None and (best is None or gain > best[1]):
                best = (move, gain, new)
        if best is None:
            pair = _best_pair(p, scored, min(tol, slack))
            if pair is None:
                break
            best = (pair[0], (0.0, 0.0), pair[1])
        p.apply(best[0], best[2])
        floor = max(floor, p.served() - tol)
    return {(o.itype, o.variant): p.n[i] for i, o in enumerate(options) if p.n[i] > 0}


def trimmed(options: Sequence[Option], demand: Mapping[str, float],
            counts: Mapping[tuple[str, str], int]) -> dict[tuple[str, str], int]:
    """``counts`` without spare workers: per model, in fill order, each group keeps the fewest
    workers that take what it takes (none where it takes nothing); same served demand and
    accuracy-weighted throughput (:mod:`variants.accuracy.levels`, "No spare workers")."""
    p = _Placement(options, {o.itype: 0 for o in options}, demand, counts)
    out: dict[tuple[str, str], int] = {}
    for model, ids in p.by_model.items():
        left = p.demand.get(model, 0.0)
        for i in ids:
            if p.n[i] <= 0 or left <= 0.0 or p.cap[i] <= 0.0:
                continue
            need = min(p.n[i], math.ceil(left / p.cap[i] - 1e-12))
            take = min(left, p.cap[i] * p.n[i])
            while need < p.n[i] and p.cap[i] * need < take:     # ceil's rounding never drops demand
                need += 1
            out[(options[i].itype, options[i].variant)] = need
            left -= take
    return out


def placement_value(options: Sequence[Option], demand: Mapping[str, float],
                    counts: Mapping[tuple[str, str], int]) -> tuple[float, float, dict[str, float]]:
    """(served q/s, accuracy-weighted q/s, served per model) of per-type ``counts``."""
    types = {o.itype for o in options}
    p = _Placement(options, {t: 0 for t in types}, demand, counts)
    return (sum(v[0] for v in p.value.values()), sum(v[1] for v in p.value.values()),
            {m: v[0] for m, v in p.value.items()})


__all__ = ["MAX_ROUNDS", "PAIR_CANDIDATES", "improve", "placement_value", "trimmed"]
