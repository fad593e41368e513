"""Probes are always terminated: a failure while they boot, or a cancellation (Ctrl-C), still ends
with every probe terminated and the budget held (``daemon.profiling.probing.Prober`` on the in-memory cloud)."""
from __future__ import annotations

import asyncio

import pytest

from config.catalog import load_catalog
from daemon.profiling.probing import Prober
from scaler.fleet.actuator import FleetActuator
from scaler.cloud.fake import FakeCloud
from scaler.fleet.state import StateStore


class StubDispatcher:
    """What the prober uses of the dispatcher: no worker ever registers."""

    def __init__(self) -> None:
        self.workers: dict = {}
        self.allowed: dict[str, str] = {}
        self.parked: set[str] = set()
        self.forgotten: list[str] = []

    def allow_instance(self, iid: str, itype: str) -> None:
        self.allowed[iid] = itype

    def mark_parked(self, iid: str) -> None:
        self.parked.add(iid)

    def forget_instance(self, iid: str) -> None:
        self.forgotten.append(iid)


def _prober(on_fleet_change=None, budget: float = 1.0):  # noqa: ANN001, ANN202
    cloud = FakeCloud("c")
    cloud.launch("r5n.large", 1, "held-before")          # a pool already held: 0.149 $/hr
    actuator = FleetActuator(cloud, StateStore.open(":memory:"), load_catalog(), budget)
    return Prober(actuator, cloud, StubDispatcher(), on_fleet_change=on_fleet_change, register_timeout_s=60), cloud


async def _never(client, instance_type):  # noqa: ANN001, ANN202
    raise AssertionError("no worker registers here")


def test_a_failure_while_probes_boot_terminates_them() -> None:
    async def boom(instances):  # noqa: ANN001
        raise RuntimeError("runner died")

    prober, cloud = _prober(boom)
    with pytest.raises(RuntimeError, match="runner died"):
        asyncio.run(prober.run(["g4dn.xlarge", "t3.xlarge"], _never))
    live = {i.instance_type for i in cloud.list_managed() if i.live}
    assert live == {"r5n.large"}                           # the pool held before, and no probe
    assert sorted(prober.dispatcher.forgotten) == sorted(prober.dispatcher.allowed)


def test_cancelling_a_probe_round_terminates_its_probes() -> None:
    launched: list[set[str]] = []

    async def seen(instances):  # noqa: ANN001
        launched.append({i.instance_type for i in instances if i.live})

    async def scenario() -> None:
        prober, cloud = _prober(seen)
        task = asyncio.create_task(prober.run(["g4dn.xlarge"], _never))
        while not launched:                                 # the probe is up, its worker awaited
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert {i.instance_type for i in cloud.list_managed() if i.live} == {"r5n.large"}

    asyncio.run(scenario())
    assert launched[0] == {"r5n.large", "g4dn.xlarge"}


def test_probes_beyond_the_budget_are_not_launched() -> None:
    prober, cloud = _prober(budget=0.5)                     # 0.351 $/hr left beside the r5n.large
    out = asyncio.run(prober.run(["g4dn.xlarge"], _never))
    assert list(out.failed) == ["g4dn.xlarge"] and "does not fit the budget" in out.failed["g4dn.xlarge"]
    assert out.instances == {} and cloud.run_instances_calls == 1
    assert out.cost_line() == "probes: none launched"
