"""The forecast benchmarks' configs: a shipped example with its ``forecast`` section set for one run
(bench only; ``ahead_bench``, ``three_bench``, ``real_traffic_bench``, ``burst_no_harm_bench``), and
what a perfect forecast could cost under a config's rules (``perfect_forecast``)."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Sequence

import yaml

from config.profiles import ProfileTable
from config.schema import Config
from scaler.planner.pools import pool_cost
from sim.replay.baselines import HINDSIGHT_WINDOW_S, PoolPlanner, minute_peaks
from sim.slo_check import slo_check
from sim.workload import Workload

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


def perfect_forecast(cfg: Config, profiles: ProfileTable, wl: Workload, dur: float) -> dict[str, float]:
    """What a perfect forecast could cost under ``cfg``'s rules, as multiples of the hindsight pools:
    each 5-minute window's cheapest pool for its peak minute (hindsight's, priced per window, no
    replay), then that peak with the config's ``headroom`` on it, then also held for
    ``intervals.scale_in_s`` after it (a window's pool covers the peaks of the windows the hold
    reaches back over). Planning ahead cannot retire before the measured hold (the acceptance
    property) and plans with the headroom, so the last figure is about the least any forecaster
    reaches on this config. The hold is counted in whole windows (``scale_in_s`` rounded to 300 s).
    One model: ``wl`` is its workload (ValueError for a config of several)."""
    if len(cfg.models) != 1:
        raise ValueError(f"perfect_forecast prices one model's pools; the config has {len(cfg.models)}")
    model = cfg.models[0].name
    pk, per = minute_peaks(wl.arrivals, dur), int(HINDSIGHT_WINDOW_S // 60)
    peaks = [float(pk[k:k + per].max()) for k in range(0, pk.size, per)]
    planner, prices = PoolPlanner(cfg, profiles, slo_check), cfg.prices(allowed_only=True)
    back = int(round(cfg.intervals.scale_in_s / HINDSIGHT_WINDOW_S))

    def usd(rates: list[float]) -> float:
        return sum(pool_cost(planner.pool("min_cost", {model: r}), prices) * HINDSIGHT_WINDOW_S / 3600.0 for r in rates)
    base = usd(peaks)
    h = 1.0 + cfg.headroom
    held = [max(peaks[max(0, i - back):i + 1]) for i in range(len(peaks))]
    return {"hindsight_pools_usd": base, "headroom": usd([p * h for p in peaks]) / base,
            "headroom_and_hold": usd([p * h for p in held]) / base}


def perfect_forecast_line(cfg: Config, pf: dict[str, float]) -> str:
    return (f"a perfect forecast under this config's rules (hindsight's pools priced per window, "
            f"${pf['hindsight_pools_usd']:.4f}): with headroom {cfg.headroom:g} {pf['headroom']:.3f}x, and held "
            f"{cfg.intervals.scale_in_s:g} s after each peak {pf['headroom_and_hold']:.3f}x")


__all__ = ["add_margin_args", "forecast_config", "headroom_on", "perfect_forecast", "perfect_forecast_line"]
