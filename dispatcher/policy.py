"""The query-loop decision interface (Kairos §5.1): which idle worker serves which waiting query.

A policy is pure: it takes a snapshot of the queue and the workers and a time ``now`` (seconds on
the caller's clock) and returns assignments. The live dispatcher and the simulator call the very
same objects. Only idle workers may receive a query (one query per worker at a time); queries not
assigned stay queued.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, NamedTuple, Protocol, Sequence

import numpy as np

if TYPE_CHECKING:
    from config.schema import Config


# The three are named tuples, not frozen dataclasses: the query loops (live, the simulator's and the
# replay's) build one per waiting query, per worker change and per dispatch, and a frozen
# dataclass's __init__ costs several times a tuple's (issue #39, replay speed). Immutable and
# hashable as before; ``_replace`` instead of ``dataclasses.replace``.
class QueryView(NamedTuple):
    query_id: str
    model: str
    batch_size: int
    arrival: float          # seconds, same clock as ``now``
    qos_ms: float           # this query's p99 latency target


class WorkerView(NamedTuple):
    worker_id: str
    instance_type: str
    busy_until: float       # when its in-flight query is predicted to finish (<= now: idle)
    idle: bool              # no query in flight (only idle workers may be assigned)


class Assignment(NamedTuple):
    query_id: str
    worker_id: str


class LatencyPredictor(Protocol):
    """Predicted service time (ms) of a batch on an instance type (see dispatcher.latency_model)."""

    def predict_ms(self, model: str, instance_type: str, batch_size: float) -> float: ...

    def predict_many(self, model: str, instance_type: str, batch_sizes: np.ndarray) -> np.ndarray: ...


def pick_base_type(types: Sequence[str], latency_ms: Callable[[str], float]) -> str:
    """Kairos §5.1 Definition 1 / §7: the base type is the one that serves the largest query
    fastest (``latency_ms(type)`` at that batch); ties go to the name order."""
    if not types:
        raise ValueError("no instance type to pick a base from")
    return min(sorted(types), key=lambda t: (float(latency_ms(t)), t))

#: the dispatcher's tunables, one source for the daemon and the replay: ξ, the share of a query's
#: SLO a placement may use (Kairos §5.1), and the routing round's view of ``view_factor`` x (live
#: workers) oldest waiting queries
DISPATCH_XI = 0.98
DISPATCH_VIEW_FACTOR = 2


def default_base_type(cfg: "Config", latency_ms: Callable[[str, str, float], float], model: str | None = None) -> str:
    """The base type before the planner names one: :func:`pick_base_type` over the configured types
    for ``model``'s (default: the first model's) largest batch, ``latency_ms(profile name, type, batch)``
    being the latency model's mean."""
    from config.sections.batch_dist import DEFAULT_MAX_BATCH

    m = cfg.model(model)
    b = float(min(m.max_batch, DEFAULT_MAX_BATCH))
    return pick_base_type([t.type for t in cfg.instance_types], lambda t: latency_ms(m.profile_name, t, b))


class Policy(Protocol):
    name: str

    def match(self, queue: Sequence[QueryView], workers: Sequence[WorkerView], now: float) -> list[Assignment]: ...


class FirstIdlePolicy:
    """The simplest routing: oldest query to the first idle worker. Baseline and fallback."""

    name = "first-idle"

    def match(self, queue: Sequence[QueryView], workers: Sequence[WorkerView], now: float) -> list[Assignment]:
        idle = [w for w in workers if w.idle]
        ordered = sorted(queue, key=lambda q: q.arrival)
        return [Assignment(q.query_id, w.worker_id) for q, w in zip(ordered, idle)]
