"""The forecasters by the names the config uses (``forecast.forecasters``; issue #39; pure)."""
from __future__ import annotations

from scaler.forecast.ets import Ets
from scaler.forecast.forecaster import Forecaster, Reactive
from scaler.forecast.seasonal import SeasonalNaive

#: the forecasters by config name (config.sections.forecast.FORECASTERS); "reactive" is always a candidate
FORECASTER_NAMES = ("seasonal_naive", "ets")


def make_forecaster(name: str) -> Forecaster:
    """The forecaster of a name: ``reactive`` (no forecast), ``seasonal_naive`` or ``ets``."""
    if name == "reactive":
        return Reactive()
    if name == "seasonal_naive":
        return SeasonalNaive()
    if name == "ets":
        return Ets()
    raise ValueError(f"unknown forecaster {name!r} (known: reactive, {', '.join(FORECASTER_NAMES)})")


__all__ = ["FORECASTER_NAMES", "make_forecaster"]
