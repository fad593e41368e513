"""What the dispatcher's CPU per query allows (pure; issue #27, goal "Throughput"; used by
``bench/replicas/replica_tput_bench.py``): the most one and two dispatcher processes can serve on a machine
they share with their load, and how many dispatcher hosts a query rate needs.

:func:`process_ceiling`: a dispatcher process runs its event loop on one core (Python's asyncio,
one thread holding the GIL), so one process serves at most ``1 / d`` q/s at ``d`` CPU seconds a
query, ``k`` processes ``k / d``; every process on the machine together (dispatchers, client,
workers: ``d + r`` a query) at most ``cores / (d + r)``. On 2 cores two processes reach 1.6x one
only when ``r <= d / 4``: the client and the workers may use a quarter of the dispatcher's CPU a
query at most. One core per process is itself generous to two: gRPC's event-engine threads run
beside the event loop (one probe of a 1-proc run: 1.25 of 1.60 CPU s on the main thread), so one
process can use a little more than a core, which raises the one-process ceiling and lowers the
ratio: ``process_ceiling(.., 2) / process_ceiling(.., 1)`` is an upper bound on it.

:func:`hosts_needed`: the per-query path is the only hot one and scales out by partitioning (DESIGN
"Beyond one control host"): several dispatcher processes, each owning a disjoint set of workers
(``scaler.replicas.owner_assignment``), behind gRPC round_robin or a load balancer. The extrapolation
assumes that a dispatcher host runs one dispatcher process per core and nothing else (no client,
no worker), that each core can be kept fully busy, and that a dispatcher's CPU per query stays what
it was measured at (so a host serves ``cores / cpu_s_per_query`` q/s): a ceiling, not a measured
rate; the benchmark's 2-process / 1-process ratio is what checks the linear part on real cores.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

#: the pool the extrapolation is for: ncf at 2.5 $/hr (BENCHMARKS "kairos-repro": the confirmed
#: pick 1 g4dn + 13 r5n serves 7,020 q/s, the paper oracle 7,436 q/s); issue #27's round figure
TARGET_QPS = 7200.0
#: digits kept before rounding hosts up: a quotient a float step above a whole number is that number
_ROUND_DIGITS = 9


def process_ceiling(dispatcher_s_per_query: float, rest_s_per_query: float, cores: int,
                     processes: int) -> float:
    """The most q/s ``processes`` dispatcher processes can serve on ``cores`` cores, at
    ``dispatcher_s_per_query`` CPU seconds a query in the dispatchers and ``rest_s_per_query`` in
    every other process of the run (client, workers): ``min(processes / d, cores / (d + r))`` (the
    module docstring). ValueError unless ``d``, ``cores`` and ``processes`` are positive and
    ``r`` is not negative."""
    d, r = dispatcher_s_per_query, rest_s_per_query
    if not (d > 0 and r >= 0 and cores > 0 and processes > 0):
        raise ValueError(f"process_ceiling needs positive inputs, got {d} and {r} CPU s per query, "
                         f"{cores} cores, {processes} processes")
    return min(processes / d, cores / (d + r))


@dataclass(frozen=True)
class HostEstimate:
    """``hosts`` dispatcher hosts of ``cores`` cores, each serving at most ``per_host_qps``."""

    cpu_s_per_query: float
    cores: int
    per_host_qps: float
    hosts: int


def hosts_needed(target_qps: float, cpu_s_per_query: float, cores: int) -> HostEstimate:
    """The fewest hosts of ``cores`` cores whose dispatchers, at ``cpu_s_per_query`` CPU seconds a
    query, serve ``target_qps``: ``ceil(target_qps / (cores / cpu_s_per_query))`` (the module
    docstring's assumptions). ValueError unless all three are positive."""
    if not (target_qps > 0 and cpu_s_per_query > 0 and cores > 0):
        raise ValueError(f"hosts_needed needs positive inputs, got target {target_qps} q/s, "
                         f"{cpu_s_per_query} CPU s per query, {cores} cores")
    per_host = cores / cpu_s_per_query
    hosts = max(1, math.ceil(round(target_qps / per_host, _ROUND_DIGITS)))
    return HostEstimate(cpu_s_per_query, cores, per_host, hosts)
