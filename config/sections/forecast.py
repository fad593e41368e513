"""The ``forecast`` section: planning ahead of demand (issue #39).

```yaml
forecast:
  mode: shadow                 # off (default) | shadow | on
  quantile: 0.9                # the upper quantile of the rate over the lead that a forecast gives
  retention_days: 35           # the per-minute demand history kept in the state store
  forecasters: [seasonal_naive, ets]    # the candidates beside reacting (reactive is always one)
  boot_delay_s: {gpu: 90, cpu: 60}      # launch to first answer until measured: by type or hardware class
  choose_days: 1               # the days of history replayed per candidate, daily, to choose each model's
                               # forecaster by dollars (0: no replays; the first of forecasters)
```

``mode``: ``off`` plans on the measured demand, as before; ``shadow`` plans on it too and records
what the forecast would have planned; ``on`` plans for the larger of the measured demand and the
forecast over the lead (:mod:`scaler.fleet.ahead`), retiring only what the reactive plan retires.

YAML 1.1 reads a bare ``off`` and ``on`` as booleans: ``mode: off`` and ``mode: on`` are taken as
written.
"""
from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from config.catalog import load_catalog
from config.fields import Strict

#: the forecasters the config may name (scaler.forecast.registry.FORECASTER_NAMES)
FORECASTERS = ("seasonal_naive", "ets")
HARDWARE = ("gpu", "cpu", "inferentia")

BootSeconds = Annotated[float, Field(gt=0, le=3 * 3600)]


class ForecastSpec(Strict):
    """Planning ahead of demand (module docstring)."""

    mode: Literal["off", "shadow", "on"] = Field(
        "off", description="off: plan on measured demand; shadow: also record the forecast against it; "
                           "on: plan for the larger of the two")
    quantile: Annotated[float, Field(ge=0.5, lt=1.0)] = Field(
        0.9, description="the upper quantile of the rate over the lead that a forecast gives")
    retention_days: Annotated[int, Field(ge=1, le=400)] = Field(
        35, description="days of per-minute demand history kept in the state store (the weekly season needs >= 8)")
    forecasters: Annotated[list[Literal["seasonal_naive", "ets"]], Field(min_length=1)] = Field(
        default_factory=lambda: list(FORECASTERS),
        description="the forecasters chosen among (reactive, no forecast, is always a candidate)")
    boot_delay_s: dict[str, BootSeconds] = Field(
        default_factory=lambda: {"gpu": 90.0, "inferentia": 90.0, "cpu": 60.0},
        description="launch to first answer, by instance type or hardware class, until measured")
    choose_days: Annotated[int, Field(ge=0, le=7)] = Field(
        1, description="days of history replayed per candidate once a day to choose each model's forecaster by "
                       "dollars (0: none; the first of forecasters)")

    @field_validator("mode", mode="before")
    @classmethod
    def _yaml_bools(cls, v: Any) -> Any:
        if v is False:
            return "off"
        if v is True:
            return "on"
        return v

    @field_validator("forecasters")
    @classmethod
    def _unique(cls, v: list[str]) -> list[str]:
        dup = sorted({f for f in v if v.count(f) > 1})
        if dup:
            raise ValueError(f"forecaster {dup[0]} is listed twice")
        return v

    @field_validator("boot_delay_s")
    @classmethod
    def _known_keys(cls, v: dict[str, float]) -> dict[str, float]:
        known = set(HARDWARE) | set(load_catalog())
        bad = sorted(set(v) - known)
        if bad:
            raise ValueError(f"{bad[0]!r} is neither an instance type of the catalog nor a hardware class "
                             f"({', '.join(HARDWARE)})")
        return v


__all__ = ["FORECASTERS", "ForecastSpec"]
