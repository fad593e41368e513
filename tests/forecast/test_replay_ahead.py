"""The replay plans ahead (issue #39 deliverable 3): ``off`` and ``shadow`` replay as the reactive
loop did, bit for bit (shadow adds its record of forecast against measured); with ``on`` a rise the
history knows launches before it comes, and with no history ``on`` is the reactive loop."""
from __future__ import annotations

from pathlib import Path

import pytest

from bench.forecast.step_day import DURATION_S, ROOT, STEP_S, run, step_history
from config.profiles import load_profiles_csv
from sim.replay.report import report


@pytest.fixture(scope="module")
def profiles():  # type: ignore[no-untyped-def]
    return load_profiles_csv(None)


def first_launch_for_the_step(r) -> float:  # type: ignore[no-untyped-def]
    """When the first target planned for the high phase (over 20 q/s) was taken."""
    return min(t.at_s for t in r.targets if t.demand_qps > 20.0)


def test_off_and_shadow_are_the_reactive_replay(tmp_path: Path, profiles) -> None:  # type: ignore[no-untyped-def]
    off = report(run("off", tmp_path, profiles, step_history()))
    shadow = report(run("shadow", tmp_path, profiles, step_history()))
    rec, priced = shadow.pop("forecast"), shadow.pop("forecast_shadow")
    for k in ("wall_s",):
        off.pop(k), shadow.pop(k)
    assert shadow == off and "forecast" not in off
    assert rec["rm2"]["forecaster"] == "seasonal_naive" and rec["rm2"]["minutes"] == 19   # the last ends with the run
    assert rec["rm2"]["minutes_forecast"] == 19 and rec["rm2"]["lead_s"] == 120.0
    # shadow's price: the pool planning ahead would have held from before the step, in planned dollars
    # (decided at 540 s, the first tick whose 120 s lead covers the step: 3.9 % more planned dollars
    # over the 20 minutes); and what each pool would have served by capacity (scaler.forecast.served):
    # minutes 0-1 are before the first pool booted (left out); in minute 10 (29.4 q/s) the applied
    # pool still holds its 15.2 q/s (the step's pool, asked for at 602 s, boots 90 s), the ahead one
    # serves it all (54.4 q/s from 630 s, 34.6 q/s over the minute)
    assert priced == {"planned_usd": 0.273715, "ahead_planned_usd": 0.284434, "ahead_extra_pct": 3.916,
                      "applied_served_pct": 95.4102, "ahead_served_pct": 100.0,
                      "served_minutes": {"applied": 17, "ahead": 17},
                      "served_by_model": {"rm2": {"applied": 95.4102, "ahead": 100.0}}}


def test_on_launches_before_a_rise_the_history_knows(tmp_path: Path, profiles) -> None:  # type: ignore[no-untyped-def]
    off = run("off", tmp_path, profiles, step_history())
    on = run("on", tmp_path, profiles, step_history())
    assert first_launch_for_the_step(off) > STEP_S          # the reactive loop sees the step once it came
    # the forecast over the lead (90 s boot + a 30 s tick) holds the step from 120 s before it
    assert STEP_S - 120.0 <= first_launch_for_the_step(on) < STEP_S
    a_off, a_on = report(off), report(on)
    assert a_on["slo_attainment"] > a_off["slo_attainment"]


def test_on_without_history_is_the_reactive_replay(tmp_path: Path, profiles) -> None:  # type: ignore[no-untyped-def]
    off, on = report(run("off", tmp_path, profiles)), report(run("on", tmp_path, profiles))
    on.pop("forecast"), on.pop("wall_s"), off.pop("wall_s")
    assert on == off


def test_replay_cli_forecast_flag_record_and_plot(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """``costscale replay --forecast shadow --history CSV --json --plot``: the forecast record in the
    JSON and the band on the picture; a bad mode is one line, exit 2."""
    import json

    from daemon.cli import main
    h = step_history()["rm2"]
    minutes, rates = h.known_minutes()
    csv = tmp_path / "h.csv"
    csv.write_text("timestamp,model,qps\n" + "".join(f"{60 * m},rm2,{q:g}\n" for m, q in zip(minutes, rates)))
    png = tmp_path / "t.png"
    rc = main(["replay", str(ROOT / "examples" / "replay-rm2.yaml"), "--pattern", "step:low=5,high=30,at_s=600",
               "--hours", str(DURATION_S / 3600), "--forecast", "shadow", "--history", str(csv), "--json",
               "--plot", str(png)])
    assert rc == 0 and png.stat().st_size > 0
    out = json.loads(capsys.readouterr().out)
    assert out["forecast"]["rm2"]["mode"] == "shadow" and out["forecast"]["rm2"]["minutes_forecast"] == 19
    assert out["history_minutes"] == {"rm2": 7 * 1440}
    assert main(["replay", str(ROOT / "examples" / "replay-rm2.yaml"), "--forecast", "maybe"]) == 2
    assert "--forecast: invalid choice: 'maybe'" in capsys.readouterr().err
