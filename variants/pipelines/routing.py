"""Routing and early dropping for pipelines (Loki §5; issue #26). Pure: the plan's capacities and
the demand come in, routing tables and drop decisions go out.

**MostAccurateFirst** (Loki §5.1, Algorithm 1), at the granularity the dispatcher routes at (a
variant; its matching then picks the worker): the root's queries go to the root's variants in
non-increasing order of accuracy, each up to its capacity (its workers' q/s); every variant's
outgoing requests (its incoming rate times the factor of the edge, for that variant) go to each
child's variants the same way, most accurate first, and so down the tree. A variant's table for a
child lists the child's variants with the probability of sending a request to each. Demand past
every variant's capacity is spread over the child's variants in proportion to their capacity
(nothing is dropped by routing; early dropping decides that per request) and counted as
``overflow``. As Loki notes, saturating the most accurate variants first maximises the end-to-end
accuracy for the rate (accuracy is monotone in each task's).

**Early dropping with opportunistic rerouting** (Loki §5.2): each task has a latency budget (the
plan's, :attr:`variants.pipelines.planner.PipelinePlan.budgets_ms`). When a request finishes a task,
the time left of its SLO must cover its next task's variant (its expected time at the plan's
batch) and the budgets of the tasks below that one. If the variant the table routes it to fits,
it goes there; if not, it is rerouted to the most accurate variant of that task that fits and has
capacity left (Loki: "a downstream worker capable of executing within y − x"); if none fits it
cannot meet the SLO any more and is dropped there (a typed error, counted), freeing the workers for
requests that still can. Loki measures the deficit against the budgets so far (x); the time left
of the SLO is the same test without the half of the SLO the budgets keep for queueing, so a
request is dropped only when it cannot make it, not when it is merely late on a task.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from config.sections.pipeline_graph import Pipeline


@dataclass(frozen=True)
class VariantSlot:
    """A variant of a task as the plan hosts it: its accuracy, capacity (q/s over its workers) and
    its expected time per request at the plan's batch (ms)."""

    task: str
    variant: str
    accuracy: float
    capacity_qps: float
    expected_ms: float


@dataclass(frozen=True)
class RoutingTables:
    """``root``: the root's variants with probabilities; ``child[(task, variant, child task)]``: the
    child's variants for requests out of ``variant``; ``incoming``: the rate each (task, variant)
    gets; ``overflow``: per task, the rate beyond its variants' capacity."""

    root: tuple[tuple[str, float], ...]
    child: Mapping[tuple[str, str, str], tuple[tuple[str, float], ...]]
    incoming: Mapping[tuple[str, str], float]
    overflow: Mapping[str, float]


def _fill(rate: float, order: Sequence[VariantSlot], left: dict[str, float]) -> tuple[list[tuple[str, float]], float]:
    """``rate`` over ``order`` (most accurate first) within ``left`` capacity: (variant, q/s) and
    the overflow, which is spread in proportion to capacity."""
    out: dict[str, float] = {}
    rest = rate
    for s in order:
        take = min(rest, max(0.0, left[s.variant]))
        if take > 0:
            out[s.variant] = out.get(s.variant, 0.0) + take
            left[s.variant] -= take
            rest -= take
    over = max(0.0, rest)
    if over > 1e-12:
        total = sum(s.capacity_qps for s in order) or float(len(order))
        for s in order:
            share = (s.capacity_qps or 1.0) / total
            out[s.variant] = out.get(s.variant, 0.0) + over * share
    return [(v, q) for v, q in out.items()], over


def most_accurate_first(pipe: Pipeline, slots: Sequence[VariantSlot], root_qps: float) -> RoutingTables:
    """Loki Algorithm 1 over ``slots`` (see the module docstring). ValueError for a task no slot serves."""
    by_task: dict[str, list[VariantSlot]] = {}
    for s in slots:
        by_task.setdefault(s.task, []).append(s)
    for t in pipe.tasks:
        if t not in by_task:
            raise ValueError(f"pipeline {pipe.name}: no variant of task {t!r} is placed")
        by_task[t].sort(key=lambda s: (-s.accuracy, s.variant))
    left = {s.variant: s.capacity_qps for s in slots}
    incoming: dict[tuple[str, str], float] = {}
    overflow: dict[str, float] = {t: 0.0 for t in pipe.tasks}
    routes, over = _fill(max(0.0, root_qps), by_task[pipe.root], left)
    overflow[pipe.root] += over
    root = tuple((v, q / root_qps) for v, q in routes) if root_qps > 0 else ((by_task[pipe.root][0].variant, 1.0),)
    for v, q in routes:
        incoming[(pipe.root, v)] = q
    child: dict[tuple[str, str, str], tuple[tuple[str, float], ...]] = {}
    for task in pipe.tasks:
        for s in by_task[task]:
            rate = incoming.get((task, s.variant), 0.0)
            for e in pipe.edges.get(task, ()):
                out = rate * pipe.factor(s.variant, task, e.child)
                if out <= 0:
                    child[(task, s.variant, e.child)] = ((by_task[e.child][0].variant, 1.0),)
                    continue
                routes, over = _fill(out, by_task[e.child], left)
                overflow[e.child] += over
                child[(task, s.variant, e.child)] = tuple((v, q / out) for v, q in routes)
                for v, q in routes:
                    incoming[(e.child, v)] = incoming.get((e.child, v), 0.0) + q
    return RoutingTables(root, child, incoming, overflow)


@dataclass(frozen=True)
class Hop:
    """What happens to a request after a task: go on to ``variant`` (``rerouted``: a faster one than
    the table's, to make up a deficit) or ``drop`` (None variant)."""

    variant: str | None
    rerouted: bool = False

    @property
    def drop(self) -> bool:
        return self.variant is None


def next_hop(remaining_ms: float, rest_ms: float, routed: VariantSlot, options: Sequence[VariantSlot],
             spare: Mapping[str, float] | None = None) -> Hop:
    """Where a request goes after a task (see the module docstring): ``remaining_ms`` of its SLO is
    left; after the next task it still needs ``rest_ms`` (:func:`rest_below`). The table's
    ``routed`` variant when ``routed.expected_ms + rest_ms <= remaining_ms``; else the most accurate
    of ``options`` (the next task's variants) that fits and has spare capacity (``spare``: variant
    -> q/s left; None: every option has), rerouted; else drop: it cannot meet the SLO any more."""
    if routed.expected_ms + rest_ms <= remaining_ms + 1e-9:
        return Hop(routed.variant)
    fits = [s for s in options if s.expected_ms + rest_ms <= remaining_ms + 1e-9
            and (spare is None or spare.get(s.variant, 0.0) > 0)]
    if not fits:
        return Hop(None)
    best = min(fits, key=lambda s: (-s.accuracy, s.expected_ms, s.variant))
    return Hop(best.variant, rerouted=True)


def rest_below(pipe: Pipeline, budgets_ms: Mapping[str, float], task: str) -> float:
    """The time a request still needs after ``task`` (excluded): the largest sum of the budgets along
    the paths from its children to the leaves (0 at a leaf)."""
    return max((budgets_ms.get(e.child, 0.0) + rest_below(pipe, budgets_ms, e.child) for e in pipe.edges.get(task, ())),
               default=0.0)


def step_slo(pipe: Pipeline, budgets_ms: Mapping[str, float], task: str, left_ms: float) -> float | None:
    """The SLO a request of ``task`` gets when ``left_ms`` of the pipeline's are left: that less what
    the tasks below it still need (:func:`rest_below`); None when the task's own budget and theirs no
    longer fit: it cannot meet the SLO any more, drop it (Loki §5.2). The live runner and the
    replay both ask this before a request is made."""
    rest = rest_below(pipe, budgets_ms, task)
    if left_ms < budgets_ms.get(task, 0.0) + rest - 1e-9:
        return None
    return left_ms - rest


__all__ = ["Hop", "RoutingTables", "VariantSlot", "most_accurate_first", "next_hop", "rest_below", "step_slo"]
