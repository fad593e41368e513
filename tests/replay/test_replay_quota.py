"""The replay takes the vCPU quotas as input (issue #38 deliverable 6): the replay's cloud refuses a
launch over a quota as EC2 does (VcpuLimitExceeded, ``sim.replay.fleet.quota_check``), the planner
plans within the quota so no launch is refused, and the what-if figures the README quotes (the
three-model reference hour with the G-and-VT quota at 8 and at 12 vCPUs)."""
from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

import scaler.planner.joint_plan as joint_plan
import scaler.planner.plan_inputs as plan_inputs
from daemon.cli import main

ROOT = Path(__file__).resolve().parents[2]
#: the "three" reference replay (bench/replay/reference_replays.py)
THREE = ["replay", str(ROOT / "examples" / "replay-three.yaml"), "--pattern", "diurnal:peak=60,model=rm2",
         "--pattern", "diurnal:peak=150,am=6,pm=15,model=wnd", "--pattern", "diurnal:peak=30,am=12,pm=22,model=dien",
         "--hours", "1", "--json"]


def replay(*extra: str) -> dict:  # type: ignore[type-arg]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main([*THREE, *extra]) == 0
    return json.loads(out.getvalue())


def test_no_launch_is_refused_for_a_quota_the_plan_takes_as_input() -> None:
    free = replay()
    assert "quota_refusals" not in free         # no quota: the report as before
    assert (free["cost_usd"], free["slo_attainment"], free["instance_hours"]["g4dn.xlarge"]) == (1.782792, 0.998683, 3.0)
    tight = replay("--quota", "g_vt=8")
    assert tight["quota_refusals"] == 0 and tight["errors"] == 0
    assert (tight["cost_usd"], tight["slo_attainment"], tight["instance_hours"]["g4dn.xlarge"]) == \
        (1.111517, 0.590465, 2.0)
    raised = replay("--quota", "g_vt=12")        # what raising the quota to three g4dn.xlarge buys
    assert raised["quota_refusals"] == 0
    assert (raised["cost_usd"], raised["slo_attainment"]) == (free["cost_usd"], free["slo_attainment"])


def test_a_planner_blind_to_the_quota_has_launches_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above can fail: the same replay with the planner not told the quota (the cloud
    still enforces it) has launches refused, and serves far less. A quota refusal does not take the
    type out (it is not a want of capacity) and the quota it lowers is not read by a blind planner:
    it asks again every tick (tests/fleet/test_quota_lowering.py: a planner that reads it asks once)."""
    monkeypatch.setattr(plan_inputs, "quota_for", lambda *a, **k: None)
    monkeypatch.setattr(joint_plan, "quota_for", lambda *a, **k: None)
    blind = replay("--quota", "g_vt=8")
    assert blind["quota_refusals"] == 134 and blind["slo_attainment"] == 0.264832


SPOT = ["replay", str(ROOT / "examples" / "replay-spot.yaml"), "--pattern", "diurnal:peak=20", "--hours", "3",
        "--spot-trace", str(ROOT / "examples" / "traces" / "spot-aws3-day40.csv"), "--json"]


@pytest.mark.parametrize("quotas,cost,attainment", [
    (["spot.g_vt=0"], 3.238442, 0.999833),                      # every g4dn.xlarge on demand
    (["spot.g_vt=4", "g_vt=0"], 0.512506, 0.865554),            # one g4dn.xlarge, on spot only
    (["spot.g_vt=0", "g_vt=4"], 1.661026, 0.997112),            # one g4dn.xlarge, on demand only
])
def test_spot_placement_launches_nothing_the_spot_or_on_demand_quota_refuses(quotas: list[str], cost: float,
                                                                           attainment: float) -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main([*SPOT, *[a for q in quotas for a in ("--quota", q)]]) == 0
    d = json.loads(out.getvalue())
    assert d["quota_refusals"] == 0 and d["errors"] == 0
    assert (d["cost_usd"], d["slo_attainment"]) == (cost, attainment)
