from __future__ import annotations

import numpy as np

from scaler.planner.batch_mix import BatchMix, mix_from_dist
from scaler.planner.choose import choose_pool
from scaler.planner.plan_inputs import plan_inputs_from_config
from config.profiles import load_profiles_csv
from config.schema import parse_config_text
from sim.slo_check import batches_from_mix, slo_check

CFG = """\
cluster: t
budget_per_hour: 2.5
objective: min_cost
models:
  - name: rm2
    qos_ms: 350
instance_types:
  - type: g4dn.xlarge
  - type: c5n.2xlarge
  - type: r5n.large
  - type: t3.xlarge
launch:
  ami_id: ami-1
"""


def test_batches_from_mix_follow_fractions() -> None:
    mix = BatchMix(np.array([10, 20]), np.array([0.25, 0.75]))
    b = batches_from_mix(mix, 4000, np.random.default_rng(0))
    assert set(np.unique(b)) == {10, 20}
    assert abs(float(np.mean(b == 20)) - 0.75) < 0.03


def test_checked_min_cost_is_verified_and_never_cheaper_than_needed() -> None:
    profiles = load_profiles_csv()
    cfg = parse_config_text(CFG)
    mix = mix_from_dist("deeprecsys", seed=0)
    inputs = plan_inputs_from_config(cfg, profiles, "rm2", mix)
    demand = 12.0
    meets = slo_check("rm2", profiles, 350.0, demand * 1.1, mix, n_queries=1500)
    bound_only = choose_pool(inputs, objective="min_cost", demand_qps=demand)
    checked = choose_pool(inputs, objective="min_cost", demand_qps=demand, meets=meets)
    assert checked.rule == "min-cost-checked"
    assert meets(checked.chosen)
    # The bound-only pick runs at the edge of its fluid bound: the check must not pick anything cheaper.
    assert checked.cost_per_hour >= bound_only.cost_per_hour - 1e-9
    assert checked.cost_per_hour <= cfg.budget_per_hour


def test_checked_min_cost_flags_unmet_when_nothing_verifies() -> None:
    profiles = load_profiles_csv()
    cfg = parse_config_text(CFG)
    inputs = plan_inputs_from_config(cfg, profiles, "rm2", mix_from_dist("deeprecsys", seed=0))
    plan = choose_pool(inputs, objective="min_cost", demand_qps=5.0, meets=lambda pool, base: False, max_checks=3)
    assert plan.rule == "min-cost-unmet" and plan.demand_unmet
