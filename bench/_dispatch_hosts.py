"""How many dispatcher hosts a query rate needs, from the dispatcher's CPU per query (pure; issue
#27, goal "Throughput"; used by ``bench/replica_tput_bench.py``).

The per-query path is the only hot one and scales out by partitioning (DESIGN "Beyond one control
host"): several dispatcher processes, each owning a disjoint set of workers
(``scaler.replica_assignment``), behind gRPC round_robin or a load balancer. The extrapolation
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
