"""The ``quotas`` section and ``--quota`` (config.sections.quotas, config.quota_families; issue #38
deliverable 6): the AWS families by type name, and every bad value one line, exit 2."""
from __future__ import annotations

from pathlib import Path

import pytest

from config.errors import ConfigError, UsageError
from config.quota_families import quota_family
from config.schema import load_config
from config.sections.quotas import parse_quota_flag, with_overrides
from daemon.cli import main
from tests.config.test_config import GOOD


@pytest.mark.parametrize("itype,family", [
    ("g4dn.xlarge", "g_vt"), ("g5.xlarge", "g_vt"), ("vt1.3xlarge", "g_vt"), ("inf1.xlarge", "inf"),
    ("inf2.xlarge", "inf"), ("c5n.2xlarge", "standard"), ("r5n.large", "standard"), ("t3.xlarge", "standard"),
    ("i3.large", "standard"), ("d3.xlarge", "standard"), ("z1d.large", "standard"), ("p3.2xlarge", "p"),
    ("dl1.24xlarge", "dl"), ("trn1.2xlarge", "trn"), ("x2iedn.xlarge", "x"), ("f1.2xlarge", "f"),
    ("u-6tb1.metal", "high_memory"),
])
def test_each_type_counts_against_the_family_aws_lists_it_under(itype: str, family: str) -> None:
    assert quota_family(itype) == family


def test_a_config_with_quotas_loads_and_without_them_is_unlimited(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(GOOD)
    assert load_config(f).quotas is None
    f.write_text(GOOD + "quotas:\n  on_demand: {g_vt: 8, standard: 64}\n  spot: {g_vt: 4}\n")
    cfg = load_config(f)
    assert cfg.quotas is not None and cfg.quotas.on_demand == {"g_vt": 8, "standard": 64}
    assert with_overrides(cfg, ["g_vt=16", "spot.standard=32"]).quotas.model_dump() == \
        {"on_demand": {"g_vt": 16, "standard": 64}, "spot": {"g_vt": 4, "standard": 32}}


@pytest.mark.parametrize("text,expect", [
    ("quotas:\n  on_demand: {gpu: 8}\n", "line 13: quotas.on_demand: unknown quota family gpu (known: standard, "
                                         "g_vt, p, inf, f, x, dl, trn, high_memory)"),
    ("quotas:\n  spot: {g_vt: -4}\n", "quotas.spot.g_vt: Input should be greater than or equal to 0"),
    ("quotas:\n  on_demand: {g_vt: 2.5}\n", "quotas.on_demand.g_vt: Input should be a valid integer"),
    ("quotas:\n  reserved: {g_vt: 4}\n", "quotas.reserved: unknown field"),
])
def test_a_bad_quota_is_one_line_and_exit_2(text: str, expect: str, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(GOOD + text)
    with pytest.raises(ConfigError) as ei:
        load_config(f)
    assert any(expect in line for line in ei.value.lines), ei.value.lines
    assert main(["validate", str(f)]) == 2
    err = capsys.readouterr().err
    assert expect in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("flag,expect", [
    ("g_vt", "expected FAMILY=VCPUS or spot.FAMILY=VCPUS"),
    ("gpu=4", "FAMILY one of standard, g_vt"),
    ("g_vt=-1", "VCPUS must be a whole number >= 0"),
    ("g_vt=four", "VCPUS must be a whole number >= 0"),
    ("reserved.g_vt=4", "the market before '.' must be spot or on_demand"),
])
def test_a_bad_quota_flag_is_one_line(flag: str, expect: str) -> None:
    with pytest.raises(UsageError, match=expect):
        parse_quota_flag(flag)


def test_plan_with_a_bad_quota_flag_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(GOOD)
    assert main(["plan", str(f), "--quota", "gpu=4"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("costscale: plan: --quota 'gpu=4'") and len(err.strip().splitlines()) == 1
