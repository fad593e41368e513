"""Does the shape repeat (scaler.forecast.repeat), and the lead (scaler.forecast.lead): the boot
delay learned per type by an EWMA, the config's value until then, plus a fleet tick."""
from __future__ import annotations

import math

import numpy as np
import pytest

from scaler.forecast.history import DAY_MIN, DemandHistory
from scaler.forecast.lead import DEFAULT_BOOT_S, BootDelays, configured_boot_s, lead_s
from scaler.forecast.repeat import day_correlations, hourly_profiles, shape_correlation, shape_repeats

DAY_S = 86400.0
PROFILE = 20.0 + 10.0 * np.sin(2 * np.pi * np.arange(DAY_MIN) / DAY_MIN)


def test_a_daily_shape_repeats_and_noise_does_not() -> None:
    rng = np.random.default_rng(11)
    days = 8
    repeating = DemandHistory.from_minutes(np.arange(days * DAY_MIN),
                                           np.tile(PROFILE, days) + rng.normal(0, 1.0, days * DAY_MIN))
    c = shape_correlation(repeating, days * DAY_S)
    assert c is not None and c > 0.95 and shape_repeats(repeating, days * DAY_S) is True
    # the same minutes shuffled within each day (the "shuffled days"): the hours no longer line up
    x = np.tile(PROFILE, days).reshape(days, DAY_MIN)
    shuffled = np.stack([rng.permutation(d) for d in x]).ravel()
    noise = DemandHistory.from_minutes(np.arange(days * DAY_MIN), shuffled)
    c = shape_correlation(noise, days * DAY_S)
    assert c is not None and abs(c) < 0.4 and shape_repeats(noise, days * DAY_S) is False


def test_the_hourly_profile_is_the_mean_of_measured_minutes_and_needs_half_of_them() -> None:
    mins = np.arange(2 * DAY_MIN)
    rates = (mins // 60 % 24).astype(float)        # hour h of each day at h q/s
    keep = ~((mins >= 60) & (mins < 60 + 31))      # hour 1 of day 0: 29 of 60 minutes left
    h = DemandHistory.from_minutes(mins[keep], rates[keep])
    prof = hourly_profiles(h, 2 * DAY_S, days=2)
    assert math.isnan(prof[0, 1]) and prof[0, 2] == 2.0 and prof[1].tolist() == list(map(float, range(24)))
    assert day_correlations(h, 2 * DAY_S, days=2) == [pytest.approx(1.0)]


def test_no_pair_of_days_no_answer() -> None:
    one_day = DemandHistory.from_minutes(np.arange(DAY_MIN), PROFILE)
    assert shape_correlation(one_day, DAY_S) is None and shape_repeats(one_day, DAY_S) is None
    flat = DemandHistory.from_minutes(np.arange(3 * DAY_MIN), np.full(3 * DAY_MIN, 4.0))
    assert shape_correlation(flat, 3 * DAY_S) is None       # a flat day has no shape to compare


def test_the_boot_delay_is_an_ewma_per_type_and_the_configs_until_measured() -> None:
    d = BootDelays()
    assert d.boot_s("g4dn.xlarge", 90.0) == 90.0
    d = d.observe("g4dn.xlarge", 100.0).observe("g4dn.xlarge", 200.0)
    assert d.boot_s("g4dn.xlarge", 90.0) == pytest.approx(0.3 * 200 + 0.7 * 100)   # 130
    assert d.launches == {"g4dn.xlarge": 2} and d.boot_s("r5n.large", 60.0) == 60.0
    for bad in (-1.0, 0.0, math.nan, math.inf, 5 * 3600.0):
        assert d.observe("g4dn.xlarge", bad) is d
    assert lead_s(d, "g4dn.xlarge", 90.0, 60.0) == pytest.approx(190.0)
    assert lead_s(d, "r5n.large", 60.0, 30.0) == 90.0


def test_the_configured_boot_delay_by_type_then_hardware_then_default() -> None:
    conf = {"g4dn.xlarge": 240.0, "gpu": 120.0}
    assert configured_boot_s(conf, "g4dn.xlarge", "gpu") == 240.0
    assert configured_boot_s(conf, "p3.2xlarge", "gpu") == 120.0
    assert configured_boot_s(conf, "r5n.large", "cpu") == DEFAULT_BOOT_S["cpu"] == 60.0


def test_every_forecaster_the_config_names_exists() -> None:
    from config.sections.forecast import FORECASTERS
    from scaler.forecast.registry import FORECASTER_NAMES, make_forecaster

    assert FORECASTERS == FORECASTER_NAMES
    assert [make_forecaster(n).name for n in ("reactive", *FORECASTERS)] == ["reactive", "seasonal_naive", "ets"]
    with pytest.raises(ValueError, match="unknown forecaster 'lstm'"):
        make_forecaster("lstm")
