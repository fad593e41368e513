"""The ``forecast`` config section (config.sections.forecast): defaults, YAML's off/on, and every
bad value one line, exit 2."""
from __future__ import annotations

from pathlib import Path

import pytest

from config.errors import ConfigError
from config.schema import load_config, parse_config_text
from daemon.cli import main
from tests.config.test_config import GOOD


def test_the_defaults_plan_as_before() -> None:
    f = parse_config_text(GOOD).forecast
    assert (f.mode, f.quantile, f.retention_days, f.forecasters) == ("off", 0.9, 35, ["seasonal_naive", "ets"])
    assert f.boot_delay_s == {"gpu": 90.0, "inferentia": 90.0, "cpu": 60.0}


@pytest.mark.parametrize("text,mode", [("off", "off"), ("on", "on"), ("shadow", "shadow"), ('"off"', "off")])
def test_a_bare_off_or_on_is_the_mode_not_a_boolean(text: str, mode: str) -> None:
    assert parse_config_text(GOOD + f"forecast:\n  mode: {text}\n").forecast.mode == mode


def test_a_full_section_loads() -> None:
    cfg = parse_config_text(GOOD + "forecast:\n  mode: shadow\n  quantile: 0.95\n  retention_days: 14\n"
                                   "  forecasters: [ets]\n  boot_delay_s: {g4dn.xlarge: 300, cpu: 45}\n")
    f = cfg.forecast
    assert (f.mode, f.quantile, f.retention_days, f.forecasters) == ("shadow", 0.95, 14, ["ets"])
    assert f.boot_delay_s == {"g4dn.xlarge": 300.0, "cpu": 45.0}


@pytest.mark.parametrize("text,expect", [
    ("forecast:\n  mode: sometimes\n", "forecast.mode: Input should be 'off', 'shadow' or 'on'"),
    ("forecast:\n  quantile: 1.0\n", "forecast.quantile: Input should be less than 1"),
    ("forecast:\n  quantile: 0.3\n", "forecast.quantile: Input should be greater than or equal to 0.5"),
    ("forecast:\n  retention_days: 0\n", "forecast.retention_days: Input should be greater than or equal to 1"),
    ("forecast:\n  forecasters: [ets, ets]\n", "forecast.forecasters: forecaster ets is listed twice"),
    ("forecast:\n  forecasters: [lstm]\n", "forecast.forecasters[0]: Input should be 'seasonal_naive' or 'ets'"),
    ("forecast:\n  forecasters: []\n", "forecast.forecasters: List should have at least 1 item"),
    ("forecast:\n  boot_delay_s: {tpu: 60}\n", "'tpu' is neither an instance type of the catalog nor a hardware class"),
    ("forecast:\n  boot_delay_s: {gpu: -5}\n", "forecast.boot_delay_s.gpu: Input should be greater than 0"),
    ("forecast:\n  horizon: 3\n", "forecast.horizon: unknown field"),
])
def test_a_bad_forecast_section_is_one_line_and_exit_2(text: str, expect: str, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(GOOD + text)
    with pytest.raises(ConfigError) as ei:
        load_config(f)
    assert any(expect in line for line in ei.value.lines), ei.value.lines
    assert main(["validate", str(f)]) == 2
    err = capsys.readouterr().err
    assert expect in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
