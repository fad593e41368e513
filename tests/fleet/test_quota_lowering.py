"""A launch EC2 refuses for the vCPU quota lowers the known quota until Service Quotas is read again
(issue #38 deliverable 6): EC2's codes typed apart from a want of capacity, the lowered quota by hand
(``scaler.planner.quota.lowered_quotas``), the quotas planned with (config over Service Quotas, a
refusal under both: ``config.sections.quotas.merged_quotas``), the next plan within it, the daemon's
fleet tick end to end over a cloud that enforces a lower quota than the daemon was told, and the
replay where the account's quota is not the planner's."""
from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
from pathlib import Path

import pytest

from config.profiles import load_profiles_csv
from config.schema import parse_config_text
from config.sections.quotas import QuotasSpec, merged_quotas, with_overrides
from scaler.cloud.ec2 import Ec2Cloud
from scaler.cloud.fake import FakeCloud
from scaler.cloud.provider import InsufficientCapacity, ManagedInstance, VcpuLimitExceeded
from scaler.planner.joint_plan import plan_joint
from scaler.planner.quota import lowered_quotas, quota_for
from sim.slo_check import slo_check
from tests.planner.test_joint_plan import _cfg, _demand

VCPUS = {"g4dn.xlarge": 4, "g4dn.2xlarge": 8, "c5.2xlarge": 8, "r5n.large": 2}


def _live(*slots: str) -> list[str]:
    return list(slots)


def test_ec2_types_the_quota_codes_apart_from_a_want_of_capacity() -> None:
    typed = Ec2Cloud._typed("run_instances", "g4dn.xlarge")
    over = typed("VcpuLimitExceeded", "You have requested more vCPU capacity than your current vCPU limit of 12 "
                                      "allows", 1)
    assert isinstance(over, VcpuLimitExceeded) and over.instance_type == "g4dn.xlarge"
    assert str(over) == ("run_instances: VcpuLimitExceeded: You have requested more vCPU capacity than your current "
                         "vCPU limit of 12 allows")
    spot = Ec2Cloud._typed("run_instances", "g4dn.xlarge@us-east-1a")("MaxSpotInstanceCountExceeded", "Max spot "
                                                                       "instance count exceeded", 1)
    assert isinstance(spot, VcpuLimitExceeded) and spot.instance_type == "g4dn.xlarge@us-east-1a"
    short = typed("InsufficientInstanceCapacity", "none left", 1)
    assert isinstance(short, InsufficientCapacity) and not isinstance(short, VcpuLimitExceeded)


def test_three_g4dn_xlarge_running_and_a_refused_launch_make_the_g_and_vt_quota_12() -> None:
    live = _live("g4dn.xlarge", "g4dn.xlarge", "g4dn.xlarge", "c5.2xlarge", "g4dn.xlarge@us-east-1a")
    assert lowered_quotas(["g4dn.xlarge"], live, VCPUS) == {("on_demand", "g_vt"): 12}
    # a spot refusal lowers the spot quota to the spot vCPUs of the family only
    assert lowered_quotas(["g4dn.2xlarge@us-east-1b"], live, VCPUS) == {("spot", "g_vt"): 4}
    # nothing of the family runs: the launch that was refused is all the quota is known not to hold
    assert lowered_quotas(["c5.2xlarge"], ["g4dn.xlarge"], VCPUS) == {("on_demand", "standard"): 0}


def test_the_config_wins_over_service_quotas_and_a_refusal_lowers_both() -> None:
    read = {("on_demand", "g_vt"): 64, ("on_demand", "standard"): 32, ("spot", "g_vt"): 8}
    override = QuotasSpec(on_demand={"standard": 16})
    assert merged_quotas(None, {}) is None
    assert merged_quotas(override, read) == QuotasSpec(on_demand={"standard": 16, "g_vt": 64}, spot={"g_vt": 8})
    lowered = merged_quotas(override, read, {("on_demand", "g_vt"): 12, ("on_demand", "standard"): 24})
    assert lowered == QuotasSpec(on_demand={"standard": 16, "g_vt": 12}, spot={"g_vt": 8})
    assert merged_quotas(None, {}, {("spot", "inf"): 0}) == QuotasSpec(spot={"inf": 0})


def test_the_next_plan_holds_at_most_the_lowered_quota() -> None:
    """dien at 200 q/s on 5 $/hr: the plan holds 4 g4dn.xlarge (16 vCPUs of G and VT); after a
    refusal with 3 running, the known quota is 12 and the next plan holds at most 12 vCPUs of it."""
    profiles = load_profiles_csv(None)
    cfg = _cfg([{"name": "dien", "qos_ms": 35}], budget_per_hour=5.0)
    demand = _demand(cfg, {"dien": 200.0})
    free = plan_joint(cfg, profiles, demand, slo_check=slo_check)
    assert free.pool == {"g4dn.xlarge": 4, "r5n.large": 19}
    known = cfg.model_copy(update={"quotas": merged_quotas(
        cfg.quotas, {}, lowered_quotas(["g4dn.xlarge"], ["g4dn.xlarge"] * 3 + ["r5n.large"] * 19, VCPUS))})
    q = quota_for(known, list(known.full_catalog()))
    assert q is not None and dict(q.limits) == {"g_vt": 12}
    within = plan_joint(known, profiles, demand, slo_check=slo_check)
    assert q.used(within.pool)["g_vt"] <= 12 and within.pool["g4dn.xlarge"] == 3


CONFIG = """\
cluster: quota-lowering
budget_per_hour: 5.0
models:
  - name: dien
    qos_ms: 35
instance_types:
  - type: g4dn.xlarge
  - type: r5n.large
launch:
  ami_id: ami-1
dispatcher:
  listen: 127.0.0.1:0
state_path: {state}
model_scaling:
  generate_variants: false
quotas:
  on_demand: {{g_vt: 64}}
"""


def test_the_daemons_tick_lowers_the_quota_on_a_refusal_and_plans_within_it(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The daemon was told 64 vCPUs of G and VT (a stale config); the account lets the cluster run 12
    (the cloud refuses beyond). 3 g4dn.xlarge run; the plan asks for 5: the launch of 2 is refused,
    the known quota becomes 12, and the same tick plans again within it: 3, and no more refusal."""
    from daemon.app import Daemon
    from sim.replay.fleet import quota_check

    cfg = parse_config_text(CONFIG.format(state=tmp_path / "state.db"))
    account = quota_check(with_overrides(cfg, ["g_vt=12"]))
    cloud = FakeCloud("quota-lowering", quota_check=account)
    cloud.launch("g4dn.xlarge", 3, "before-start")
    asked: list[int | None] = []

    def decide(demand, keep=None):  # type: ignore[no-untyped-def]
        q = quota_for(d.cfg, ["g4dn.xlarge"])       # as the planner reads it: the config the daemon plans with
        limit = q.limits.get("g_vt") if q is not None else None
        asked.append(limit)
        return {"g4dn.xlarge": 5 if limit is None or limit >= 20 else limit // 4}, None

    async def scenario() -> None:
        nonlocal d
        d = Daemon(cfg, None, cloud=cloud, listen="127.0.0.1:0", generate_variants=False)
        await d.start()
        try:
            d.decide = decide  # type: ignore[method-assign]
            await d.fleet_tick("test")
            await d.fleet_tick("again")
        finally:
            await d.stop(grace=0.0)

    d: Daemon = None  # type: ignore[assignment]
    with caplog.at_level(logging.INFO):
        asyncio.run(scenario())
    assert asked == [64, 12, 12]
    assert cloud.quota_refusals == 1
    assert sorted(i.instance_type for i in cloud.list_managed() if i.live) == ["g4dn.xlarge"] * 3
    assert d.cfg.quotas == QuotasSpec(on_demand={"g_vt": 12})
    assert d.quotas.override == QuotasSpec(on_demand={"g_vt": 64})
    lines = [r.getMessage() for r in caplog.records if "vCPU quota refused" in r.getMessage()]
    assert lines == ["vCPU quota refused a launch of g4dn.xlarge: planning within on-demand g_vt 12 (running now) "
                     "until Service Quotas is read again"]


THREE = ["replay", str(Path(__file__).resolve().parents[2] / "examples" / "replay-three.yaml"), "--pattern",
         "diurnal:peak=60,model=rm2", "--pattern", "diurnal:peak=150,am=6,pm=15,model=wnd", "--pattern",
         "diurnal:peak=30,am=12,pm=22,model=dien", "--hours", "1", "--json"]


def _replay() -> dict:  # type: ignore[type-arg]
    from daemon.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(THREE) == 0
    return json.loads(out.getvalue())


def test_in_a_replay_the_first_refusal_lowers_the_quota_and_no_launch_is_refused_after(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The three-model reference hour where the account allows 8 vCPUs of G and VT and the planner
    is told nothing (Service Quotas not read, no ``quotas``): the first plan's launch of g4dn.xlarge
    is refused, the known quota drops to what runs (none), and not one launch is refused after; with
    the lowering off, the planner asks again every tick."""
    import sim.replay.fleet as replay_fleet

    enforce = replay_fleet.quota_check
    monkeypatch.setattr(replay_fleet, "quota_check", lambda cfg: enforce(with_overrides(cfg, ["g_vt=8"])))
    lowered = _replay()
    assert lowered["quota_refusals"] == 1 and "g4dn.xlarge" not in lowered["instance_hours"]
    monkeypatch.setattr(replay_fleet.ReplayFleet, "_quota_refused", lambda self, refused, listed: False)
    blind = _replay()
    assert blind["quota_refusals"] == 133


def test_a_refused_launch_is_reported_and_does_not_take_the_type_out() -> None:
    """The actuator reports a quota refusal apart (``quota_refused``) and leaves the type plannable
    (a want of capacity takes it out for the cooldown)."""
    from scaler.fleet.actuator import FleetActuator
    from scaler.fleet.state import StateStore
    from config.catalog import load_catalog

    def refuse(slot: str, live: list[ManagedInstance], n: int) -> str | None:
        return "VcpuLimitExceeded: over" if slot == "g4dn.xlarge" else None
    cloud = FakeCloud("act", quota_check=refuse)
    with contextlib.closing(StateStore.open(":memory:")) as store:
        act = FleetActuator(cloud, store, load_catalog(), 5.0)
        rep = act.apply({"g4dn.xlarge": 2, "r5n.large": 1}, "p1")
        assert rep.quota_refused == ["g4dn.xlarge"] and rep.unavailable == []
        assert act.unavailable_types() == set()
        assert [len(v) for v in rep.launched.values()] == [1] and "over the vCPU quota: g4dn.xlarge" in rep.summary()


def test_a_refused_spot_launch_lowers_the_spot_quota_and_the_placement_goes_on_demand(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The spot replay (``tests/replay/test_replay_quota.py``'s) where the account allows no G-and-VT
    Spot vCPUs and the planner is told nothing: the first spot launch is refused
    (``MaxSpotInstanceCountExceeded`` on AWS), the Spot quota drops to 0 and the placement puts the
    g4dn.xlarge on demand from then on; with the lowering off, every tick asks spot again."""
    import sim.replay.fleet as replay_fleet
    from daemon.cli import main
    from tests.replay.test_replay_quota import SPOT

    def run() -> dict:  # type: ignore[type-arg]
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert main(SPOT) == 0
        return json.loads(out.getvalue())

    enforce = replay_fleet.quota_check
    monkeypatch.setattr(replay_fleet, "quota_check", lambda cfg: enforce(with_overrides(cfg, ["spot.g_vt=0"])))
    lowered = run()
    assert (lowered["quota_refusals"], lowered["errors"], lowered["cost_usd"], lowered["slo_attainment"]) == \
        (1, 0, 2.800693, 0.998806)
    monkeypatch.setattr(replay_fleet.ReplayFleet, "_quota_refused", lambda self, refused, listed: False)
    assert run()["quota_refusals"] == 220
