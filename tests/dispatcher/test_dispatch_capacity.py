"""The benchmark-side arithmetic of issue #27's goal "Throughput" (``bench/replicas/replica_tput_bench.py``):
the most one and two dispatcher processes serve, and dispatcher hosts for a query rate, from the
CPU per query (``bench.dispatch._dispatch_capacity``: hand-computed cases and invariants), and a process's
CPU time read from ``/proc/PID/stat`` (``bench.dispatch._proc_cpu``)."""
from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.dispatch._dispatch_capacity import TARGET_QPS, hosts_needed, process_ceiling
from bench.dispatch._proc_cpu import cpu_s_from_stat


def test_the_7200_qps_pool_at_0_4_ms_a_query_needs_two_2_core_hosts() -> None:
    # 2 cores / 0.0004 s = 5,000 q/s a host; 7,200 / 5,000 = 1.44 -> 2 hosts
    e = hosts_needed(TARGET_QPS, 0.0004, 2)
    assert e.per_host_qps == pytest.approx(5000.0)
    assert e.hosts == 2


def test_a_rate_one_host_serves_exactly_needs_one_host() -> None:
    # 2 cores / (1/3600 s) = 7,200 q/s: exactly the target, so one host, not two
    assert hosts_needed(7200.0, 1 / 3600, 2).hosts == 1
    # 1.1 ms a query on 16 cores: 14,545 q/s a host; 7,200 q/s on one, 14,546 q/s on two
    assert hosts_needed(7200.0, 0.0011, 16).hosts == 1
    assert hosts_needed(14546.0, 0.0011, 16).hosts == 2


@given(st.floats(1.0, 1e6), st.floats(1e-6, 1e-1), st.integers(1, 192))
def test_the_hosts_are_the_fewest_that_serve_the_rate(target: float, cpu_s: float, cores: int) -> None:
    e = hosts_needed(target, cpu_s, cores)
    assert e.per_host_qps == pytest.approx(cores / cpu_s)
    assert e.hosts >= 1
    assert e.hosts * e.per_host_qps >= target * (1 - 1e-9)
    assert (e.hosts - 1) * e.per_host_qps < target or e.hosts == 1
    assert e.hosts == max(1, math.ceil(round(target * cpu_s / cores, 9)))


@pytest.mark.parametrize("args", [(0.0, 0.001, 2), (7200.0, 0.0, 2), (7200.0, 0.001, 0), (-1.0, 0.001, 2)])
def test_inputs_that_are_not_positive_are_refused(args: tuple[float, float, int]) -> None:
    with pytest.raises(ValueError, match="positive"):
        hosts_needed(*args)


def test_cpu_time_is_read_past_a_command_name_with_spaces_and_parentheses() -> None:
    # fields 14 (utime) = 250 and 15 (stime) = 50 ticks at 100 ticks/s: 3.0 s; field 16 (cutime) not counted
    stat = "4242 (py (x) y) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 70 0 20 0 5 0 123 456 789"
    assert cpu_s_from_stat(stat, ticks=100) == pytest.approx(3.0)


def test_two_processes_reach_1_6x_on_2_cores_only_when_the_rest_is_a_quarter_of_the_dispatcher() -> None:
    # d = 1 ms, r = 0.25 ms, 2 cores: one process min(1000, 2 / 0.00125 = 1600) = 1000 q/s,
    # two min(2000, 1600) = 1600 q/s: exactly 1.6x
    one, two = (process_ceiling(0.001, 0.00025, 2, k) for k in (1, 2))
    assert (one, two) == (pytest.approx(1000.0), pytest.approx(1600.0))
    # r = d = 1 ms: the machine's 2 / 0.002 = 1000 q/s binds both: 1.0x
    assert process_ceiling(0.001, 0.001, 2, 1) == pytest.approx(process_ceiling(0.001, 0.001, 2, 2)) == \
        pytest.approx(1000.0)
    # nothing else on 16 cores: the processes bind, 2 / 0.001 = 2000 q/s
    assert process_ceiling(0.001, 0.0, 16, 2) == pytest.approx(2000.0)


@given(st.floats(1e-5, 1e-2), st.floats(0.0, 1e-2), st.integers(1, 64))
def test_two_processes_never_serve_less_nor_more_than_twice_one(d: float, r: float, cores: int) -> None:
    one, two = process_ceiling(d, r, cores, 1), process_ceiling(d, r, cores, 2)
    assert one <= two <= 2 * one * (1 + 1e-12)
    assert two <= cores / (d + r) * (1 + 1e-12)


@pytest.mark.parametrize("args", [(0.0, 0.001, 2, 1), (0.001, -0.001, 2, 1), (0.001, 0.0, 0, 1), (0.001, 0.0, 2, 0)])
def test_a_ceiling_of_inputs_out_of_range_is_refused(args: tuple[float, float, int, int]) -> None:
    with pytest.raises(ValueError, match="positive"):
        process_ceiling(*args)
