"""Inference pipelines as rooted trees of tasks (Loki §4.1; issue #26): the graph, the demand each
task sees through the multiplicative factors, and the augmented graph's prefixes the planner routes
over. Pure: no solver, no I/O.

A **pipeline** is a rooted tree: a query enters at the root task, and every task's outputs become
requests of each of its children. The **multiplicative factor** of an edge (parent → child) is how
many child requests one parent request produces on average (Loki §4.2: a detector that finds 4 cars
in an image sends 4 requests to the car classifier), measured at run time by the workers with the
configured value as the prior. A factor may depend on the parent's variant (Loki: "a lower accuracy
object detection model ... may detect fewer cars"): ``factors[(parent variant, child task)]``
overrides the edge's.

**Augmented graph** (Loki §4.1): one vertex per (task, variant); a *prefix* is a choice of variant
for each task on the path from the root to one task. The fraction c(π) of root queries routed along
a prefix π, times the product of the factors along it, is the rate π brings to its last task's
variant (Loki Eq. 1-2). A query's end-to-end accuracy along a root-to-leaf path is the product of
its variants' accuracies: the estimate Loki's profiled Â(p) stands in for when a pipeline has not
been profiled end to end (monotone in each single-model accuracy, as Loki §5.1 assumes).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterator, Mapping, Sequence


class PipelineError(ValueError):
    """A pipeline that is not a rooted tree over known tasks; ``field`` names where (config path)."""

    def __init__(self, field_path: str, message: str) -> None:
        super().__init__(f"{field_path}: {message}")
        self.field = field_path


@dataclass(frozen=True)
class Edge:
    child: str
    factor: float = 1.0        # child requests per parent request (Loki r; the prior)


@dataclass(frozen=True)
class Pipeline:
    """A validated rooted tree (see :func:`build`): task → its model, task → its out-edges."""

    name: str
    root: str
    models: Mapping[str, str]
    edges: Mapping[str, tuple[Edge, ...]]
    slo_ms: float
    min_accuracy: float = 0.0
    #: (parent variant, child task) -> factor, overriding the edge's (measured per variant)
    factors: Mapping[tuple[str, str], float] = field(default_factory=dict)

    @property
    def tasks(self) -> list[str]:
        """Every task, parents before children (breadth first from the root, children in order)."""
        out, todo = [], [self.root]
        while todo:
            t = todo.pop(0)
            out.append(t)
            todo.extend(e.child for e in self.edges.get(t, ()))
        return out

    def parent(self, task: str) -> str | None:
        for p, es in self.edges.items():
            if any(e.child == task for e in es):
                return p
        return None

    def leaves(self) -> list[str]:
        return [t for t in self.tasks if not self.edges.get(t)]

    def path_to(self, task: str) -> list[str]:
        """The tasks from the root to ``task``, both included."""
        out = [task]
        while (p := self.parent(out[-1])) is not None:
            out.append(p)
        return out[::-1]

    def factor(self, parent_variant: str, parent: str, child: str) -> float:
        f = self.factors.get((parent_variant, child))
        if f is not None:
            return f
        return next(e.factor for e in self.edges[parent] if e.child == child)

    def task_demand(self, root_qps: float, variant: Mapping[str, str] | None = None) -> dict[str, float]:
        """Requests per second at each task when ``root_qps`` enter the root and each task runs
        ``variant[task]`` (the factors of the variants; default: the edges'). Loki §4.1
        "Intermediate query demand"."""
        variant = variant or {}
        out = {self.root: float(root_qps)}
        for t in self.tasks:
            for e in self.edges.get(t, ()):
                f = self.factor(variant[t], t, e.child) if t in variant else e.factor
                out[e.child] = out[t] * f
        return out

    def prefixes(self, variants: Mapping[str, Sequence[str]]) -> Iterator[tuple[tuple[str, str], ...]]:
        """Every prefix of the augmented graph, parents' before their extensions: a tuple of
        (task, variant) from the root to one task."""
        todo: list[tuple[tuple[str, str], ...]] = [((self.root, v),) for v in variants[self.root]]
        while todo:
            p = todo.pop(0)
            yield p
            task, _ = p[-1]
            for e in self.edges.get(task, ()):
                todo.extend(p + ((e.child, v),) for v in variants[e.child])

    def multiplier(self, prefix: Sequence[tuple[str, str]]) -> float:
        """Requests reaching the prefix's last (task, variant) per root query routed along it: the
        product of the factors of the variants before it (Loki Eq. 1)."""
        m = 1.0
        for (t, v), (c, _) in zip(prefix, prefix[1:]):
            m *= self.factor(v, t, c)
        return m


def build(name: str, tasks: Sequence[tuple[str, str, Sequence[tuple[str, float]]]], slo_ms: float,
          root: str | None = None, min_accuracy: float = 0.0, where: str = "pipelines[0]") -> Pipeline:
    """A :class:`Pipeline` from ``(task, model, [(child, factor), ...])`` rows, or PipelineError
    naming the field (``where``.tasks[i]...): a task named twice, a child that is no task, a task
    with two parents, a cycle, no root or several, a factor that is not a finite number > 0."""
    def at(rel: str) -> str:
        return f"{where}.{rel}" if where else rel

    index: dict[str, int] = {}
    for i, (t, _, _) in enumerate(tasks):
        if t in index:
            raise PipelineError(at(f"tasks[{i}].name"), f"task {t!r} is named twice (first at tasks[{index[t]}])")
        index[t] = i
    parent: dict[str, str] = {}
    edges: dict[str, tuple[Edge, ...]] = {}
    for i, (t, _, children) in enumerate(tasks):
        out = []
        for j, (c, f) in enumerate(children):
            loc = at(f"tasks[{i}].children[{j}]")
            if c not in index:
                raise PipelineError(loc + ".task", f"no task {c!r} in this pipeline (tasks: {', '.join(index)})")
            if not (isinstance(f, (int, float)) and math.isfinite(f) and f > 0):
                raise PipelineError(loc + ".factor", f"must be a finite number > 0, got {f!r}")
            if c == t:
                raise PipelineError(loc + ".task", f"task {t!r} names itself: a pipeline is a tree")
            if c in parent:
                raise PipelineError(loc + ".task", f"task {c!r} has two parents ({parent[c]!r} and {t!r}): "
                                                   "a pipeline is a tree")
            parent[c] = t
            out.append(Edge(c, float(f)))
        edges[t] = tuple(out)
    roots = [t for t in index if t not in parent]
    if root is None:
        if not roots:
            raise PipelineError(at("tasks"), "every task has a parent: the tasks form a cycle, no root")
        if len(roots) > 1:
            raise PipelineError(at("root"), f"several tasks have no parent ({', '.join(roots)}): name the root")
        root = roots[0]
    elif root not in index:
        raise PipelineError(at("root"), f"no task {root!r} in this pipeline (tasks: {', '.join(index)})")
    elif root in parent:
        raise PipelineError(at("root"), f"task {root!r} has a parent ({parent[root]!r}): the root has none")
    seen, todo = set(), [root]
    while todo:
        t = todo.pop()
        seen.add(t)
        todo.extend(e.child for e in edges[t])
    lost = [t for t in index if t not in seen]
    if lost:
        i = index[lost[0]]
        raise PipelineError(at(f"tasks[{i}]"), f"task {lost[0]!r} is not reached from the root {root!r} "
                                                   "(a cycle, or a second tree)")
    return Pipeline(name, root, {t: m for t, m, _ in tasks}, edges, float(slo_ms), float(min_accuracy))


__all__ = ["Edge", "Pipeline", "PipelineError", "build"]
