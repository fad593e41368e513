"""The spot config (issue #28, config.sections.spot): markets, zones, overprovision, max_price, fallback; what
``costscale validate`` and ``costscale run`` refuse (one line naming the field, exit 2), and the
shipped spot price table."""
from __future__ import annotations

from pathlib import Path

import pytest

from config.checks import config_problems, config_warnings, load_checked_config
from config.errors import ConfigError
from config.schema import parse_config_text
from config.spot_catalog import load_spot_table
from daemon.cli import main
from tests.validate_helpers import validate_text

BASE = """\
cluster: t
budget_per_hour: 2.5
models:
  - name: rm2
    qos_ms: 350
instance_types:
  - type: g4dn.xlarge
    market: both
  - type: r5n.large
launch:
  ami_id: ami-1
dispatcher:
  listen: 127.0.0.1:50051
  advertise: 10.0.0.5:50051
"""
ZONES = "spot:\n  zones: {us-east-1a: subnet-a, us-east-1c: null}\n"


def test_a_spot_section_parses_with_its_defaults() -> None:
    cfg = parse_config_text(BASE + ZONES)
    assert [t.market for t in cfg.instance_types] == ["both", "on_demand"]
    assert cfg.spot is not None and cfg.spot.zones == {"us-east-1a": "subnet-a", "us-east-1c": None}
    assert (cfg.spot.overprovision, cfg.spot.max_price, cfg.spot.fallback) == (1, None, "on_demand")
    assert config_problems(cfg) == []


def test_a_config_without_spot_is_unchanged() -> None:
    cfg = parse_config_text(BASE.replace("    market: both\n", ""))
    assert cfg.spot is None and {t.market for t in cfg.instance_types} == {"on_demand"}


def test_validate_refuses_a_spot_type_with_no_zones_in_one_line(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    code, lines = validate_text(tmp_path, BASE, capsys)
    assert code == 2 and len(lines) == 1
    assert lines[0].endswith("line 8: instance_types[0].market: both needs spot.zones (the availability zones of "
                             "us-east-1 to spread g4dn.xlarge spot instances over)")


@pytest.mark.parametrize("spot, where, msg", [
    ("spot:\n  zones: {}\n", "line 8: instance_types[0].market", "both needs spot.zones"),
    ("spot:\n  zones: {us-west-2a: null}\n", "line 16: spot.zones", "us-west-2a is not a zone of region us-east-1"),
    ("spot:\n  zones: {east: null}\n", "line 16: spot.zones", "'east' is not an availability zone name"),
    ("spot:\n  zones: {us-east-1a: null}\n  overprovision: -1\n", "line 17: spot.overprovision",
     "greater than or equal to 0"),
    ("spot:\n  zones: {us-east-1a: null}\n  fallback: maybe\n", "line 17: spot.fallback", "'on_demand' or 'none'"),
    ("spot:\n  zones: {us-east-1a: null}\n  max_price: 0\n", "line 17: spot.max_price", "greater than 0"),
])
def test_bad_spot_settings_name_the_field_and_its_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       spot: str, where: str, msg: str) -> None:
    code, lines = validate_text(tmp_path, BASE + spot, capsys)
    assert code == 2 and len(lines) == 1
    assert where in lines[0] and msg in lines[0]


def test_a_market_that_is_not_one_of_the_three_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, lines = validate_text(tmp_path, BASE.replace("market: both", "market: reserved") + ZONES, capsys)
    assert code == 2 and len(lines) == 1 and "instance_types.0.market" in lines[0].replace("[0]", ".0")


def test_a_fallback_the_budget_cannot_buy_is_refused_by_validate_and_run(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """g5.xlarge costs 1.006 $/hr on-demand: at a 0.9 $/hr budget its fallback cannot buy one."""
    text = (BASE.replace("budget_per_hour: 2.5", "budget_per_hour: 0.9").replace("g4dn.xlarge", "g5.xlarge")
            + ZONES)
    code, lines = validate_text(tmp_path, text, capsys)
    assert code == 2 and len(lines) == 1
    assert "spot.fallback: market: both cannot buy one on-demand g5.xlarge (1.006 $/hr) within budget_per_hour 0.9" \
        in lines[0]
    with pytest.raises(ConfigError, match="cannot buy one on-demand g5.xlarge"):
        load_checked_config(tmp_path / "c.yaml")          # what `costscale run` calls before it starts
    # market: spot without a fallback never buys it on-demand: accepted
    ok = text.replace("market: both", "market: spot") + "  fallback: none\n"
    assert config_problems(parse_config_text(ok)) == []


def test_minimum_counts_are_checked_at_on_demand_prices_so_a_fallback_can_hold_them() -> None:
    text = BASE.replace("    market: both\n", "    market: both\n    min: 5\n") + ZONES     # 5 x 0.526 > 2.5
    problems = config_problems(parse_config_text(text))
    assert problems == ["instance_types: the minimum counts (g4dn.xlarge×5) cost 2.630 $/hr, over budget_per_hour 2.5"]


def test_a_zone_the_shipped_table_does_not_price_is_a_warning_not_a_problem() -> None:
    cfg = parse_config_text(BASE + "spot:\n  zones: {us-east-1a: null, us-east-1e: null}\n")
    assert config_problems(cfg) == []
    warn = [w for w in config_warnings(cfg) if w.startswith("spot:")]
    assert warn == ["spot: the shipped spot price table has no price for g4dn.xlarge in us-east-1e: the daemon asks "
                    "describe_spot_price_history (IAM ec2:DescribeSpotPriceHistory); without an answer g4dn.xlarge "
                    "is planned on-demand there"]


def test_the_shipped_table_holds_the_snapshot_prices() -> None:
    table = load_spot_table("us-east-1")
    assert table["g4dn.xlarge"] == {"us-east-1a": 0.2158, "us-east-1b": 0.2, "us-east-1c": 0.2039,
                                    "us-east-1d": 0.2043, "us-east-1f": 0.202}
    assert table["r5n.large"]["us-east-1d"] == 0.0674 and table["t3.xlarge"]["us-east-1c"] == 0.0821
    assert table["c5n.2xlarge"]["us-east-1a"] == 0.2051
    assert load_spot_table("eu-west-3") == {}


def test_the_example_spot_config_is_valid(capsys: pytest.CaptureFixture[str]) -> None:
    path = Path(__file__).resolve().parents[2] / "examples" / "replay-spot.yaml"
    assert main(["validate", str(path)]) == 0
    cfg = load_checked_config(path)
    assert cfg.budget_per_hour == 2.5 and cfg.objective == "min_cost"
    assert {t.market for t in cfg.instance_types} == {"both"} and len(cfg.instance_types) == 4
    assert cfg.spot is not None and list(cfg.spot.zones) == ["us-east-1a", "us-east-1c", "us-east-1d"]
