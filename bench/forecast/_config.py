"""The forecast benchmarks' configs: a shipped example with its ``forecast`` section set for one run
(bench only; ``ahead_bench``, ``three_bench``, ``real_traffic_bench``, ``burst_no_harm_bench``)."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Sequence

import yaml

from config.schema import Config

ROOT = Path(__file__).resolve().parents[2]


def forecast_config(example: str, name: str, mode: str, *, boot_gpu: float | None = None,
                    boot_cpu: float | None = None, quantile: float | None = None, headroom: float | None = None,
                    scale_in_s: float | None = None, park_s: float | None = None,
                    forecasters: Sequence[str] | None = None, models: Sequence[str] | None = None,
                    keep_cluster: bool = False) -> Config:
    """``examples/EXAMPLE`` as cluster ``NAME-MODE`` (the example's own with ``keep_cluster``), its state
    file ``/tmp/costscale-NAME-MODE.db``, ``forecast.mode`` ``mode``;
    each other argument, when given, set as named: the boot delays (GPU and Inferentia, CPU), the
    quantile, the headroom, ``intervals.scale_in_s``, ``model_scaling.vm_park_s``, the forecasters,
    and the models kept (by name)."""
    raw = yaml.safe_load((ROOT / "examples" / example).read_text())
    if not keep_cluster:
        raw["cluster"] = f"{name}-{mode}"
    raw["state_path"] = f"/tmp/costscale-{name}-{mode}.db"
    fc: dict = {"mode": mode}  # type: ignore[type-arg]
    if quantile is not None:
        fc["quantile"] = quantile
    if boot_gpu is not None and boot_cpu is not None:
        fc["boot_delay_s"] = {"gpu": boot_gpu, "inferentia": boot_gpu, "cpu": boot_cpu}
    if forecasters is not None:
        fc["forecasters"] = list(forecasters)
    raw["forecast"] = fc
    if headroom is not None:
        raw["headroom"] = headroom
    if scale_in_s is not None:
        raw.setdefault("intervals", {})["scale_in_s"] = scale_in_s
    if park_s is not None:
        raw.setdefault("model_scaling", {})["vm_park_s"] = park_s
    if models is not None:
        raw["models"] = [m for m in raw["models"] if m["name"] in models]
    return Config.model_validate(raw)


def add_margin_args(ap: argparse.ArgumentParser) -> None:
    """The planning margin's options the single-model benches share: ``--quantile``, ``--headroom``,
    ``--headroom-on`` (read the last with :func:`headroom_on`)."""
    ap.add_argument("--quantile", type=float, default=0.9, help="forecast.quantile")
    ap.add_argument("--headroom", type=float, default=None, help="the config's headroom for every run (default: "
                    "the example's 0.1)")
    ap.add_argument("--headroom-on", type=float, default=None, help="the config's headroom for the runs planning "
                    "ahead only (default: --headroom)")


def headroom_on(args: argparse.Namespace) -> float | None:
    """The headroom of the runs planning ahead: ``--headroom-on``, else ``--headroom``."""
    return args.headroom_on if args.headroom_on is not None else args.headroom


__all__ = ["add_margin_args", "forecast_config", "headroom_on"]
