"""Joining queued queries into one worker call (issue #13 deliverable 4 on the live path; Proteus §5,
work-conserving as Nexus runs it): when a query is dispatched to a worker, the queries waiting for
the same variant (or model) that fit join it, and the worker runs them as one batch.

Which join (:func:`followers`, pure): in queue order, each one whose inputs can be stacked with the
head's, while the batch stays within the model's ``max_batch`` and its predicted latency on the
worker's type stays within the slack of every query in it (ξ·T_qos − waited, Kairos Eq. 5, the same
test the matching uses). The first that does not fit ends the batch (first come, first served).

**Work-conserving, not Proteus's wait** (ours, measured): Proteus §5 lets a worker idle until
T_exp(head) − T_process(n+1) to fill a batch. In the accuracy simulator (BENCHMARKS.md
"accuracy-scaling", "Adaptive batching") the work-conserving batcher missed 0.27–0.68x as many SLOs
as Proteus's on Poisson and Gamma arrivals, on both the ResNet family and rm2, so the live path sends
what fits at once and never holds an idle worker back.

Stacking (:func:`stack`, :func:`split`): queries that carry tensors are concatenated along the first
(batch) dimension, name by name, and each query's rows of every output are cut back out; queries
with only a ``batch_size`` (the worker makes inputs) join only each other.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from dispatcher.policy import LatencyPredictor, QueryView
from dispatcher.proto import costscale_pb2 as pb
from dispatcher.proto.tensors import array_to_tensor, tensor_to_array

#: at most this many queries in one call (the batch's sizes are bounded by max_batch too)
MAX_QUERIES = 64
#: how far down the queue a dispatched query looks for queries to join it
JOIN_SCAN = 1024


def signature(inputs: Sequence[pb.Tensor], batch: int) -> tuple | None:
    """What must match for two queries' inputs to stack: per input its name, dtype and the shape
    after the batch dimension; () for a query without tensors; None (joins nothing) when an input's
    first dimension is not the query's batch size."""
    if any(not t.shape or int(t.shape[0]) != batch for t in inputs):
        return None
    return tuple((t.name, t.dtype, tuple(t.shape[1:])) for t in inputs)


def followers(head: QueryView, head_sig: tuple | None, waiting: Sequence[tuple[QueryView, tuple | None]],
              instance_type: str, predictor: LatencyPredictor, now: float, max_batch: int, xi: float) -> list[int]:
    """Indexes into ``waiting`` (queued queries of the head's group, in queue order, each with its
    :func:`signature`) of those that join the head on a worker of ``instance_type``."""
    if head_sig is None:
        return []
    total = head.batch_size
    slack = xi * head.qos_ms - 1000.0 * (now - head.arrival)
    out: list[int] = []
    for i, (q, sig) in enumerate(waiting):
        if len(out) + 1 >= MAX_QUERIES:
            break
        if sig != head_sig:
            continue
        s = min(slack, xi * q.qos_ms - 1000.0 * (now - q.arrival))
        if total + q.batch_size > max_batch or predictor.predict_ms(head.model, instance_type, total + q.batch_size) > s:
            break
        out.append(i)
        total += q.batch_size
        slack = s
    return out


def stack(parts: Sequence[Sequence[pb.Tensor]]) -> list[pb.Tensor]:
    """The inputs of several queries as one batch (same :func:`signature`); [] when they carry none."""
    if not parts or not parts[0]:
        return []
    return [array_to_tensor(t.name, np.concatenate([tensor_to_array(p[k]) for p in parts], axis=0))
            for k, t in enumerate(parts[0])]


def split(outputs: Sequence[pb.Tensor], rows: Sequence[int]) -> list[list[pb.Tensor]]:
    """Each query's slice of the batch's ``outputs``, by its number of ``rows`` (its batch size);
    ValueError when an output does not have the batch's rows first."""
    bounds = np.cumsum([0, *rows])
    arrays = [(t.name, tensor_to_array(t)) for t in outputs]
    for name, a in arrays:
        if a.ndim == 0 or a.shape[0] != bounds[-1]:
            raise ValueError(f"output {name!r} has shape {list(a.shape)}, not {int(bounds[-1])} rows first")
    return [[array_to_tensor(name, a[bounds[i]:bounds[i + 1]]) for name, a in arrays] for i in range(len(rows))]


__all__ = ["MAX_QUERIES", "followers", "signature", "split", "stack"]
