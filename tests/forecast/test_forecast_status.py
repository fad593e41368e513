"""``costscale status`` shows the forecast against the demand (issue #39 deliverable 4: "status,
metrics and the audit log show forecast against actual"): the daemon's feed hands the fleet's last
forecast per model to the dispatcher's Status, which carries it (``ModelStatus.forecast_qps``,
``forecaster``; ``StatusReply.forecast_mode``, ``forecast_lead_s``) to ``--json`` and the text view.
A model planning reactively (no forecast) has none, and a dispatcher alone shows no forecast at all."""
from __future__ import annotations

from dispatcher.api.status import FleetFacts, ShadowFacts, _model_status, set_forecast
from dispatcher.outcomes import OutcomeLedger
from dispatcher.proto import costscale_pb2 as pb
from daemon.commands.status import render, status_dict
from daemon.observe.status_feed import StatusFeed
from scaler.forecast.state import ForecastState


class _NoWorkers:
    workers: dict = {}


def _reply(facts: FleetFacts | None) -> pb.StatusReply:
    """Each model's status as the dispatcher's Status builds it (``_model_status``), for two models, and
    the reply's forecast fields as ``build_status_reply`` sets them from the daemon's facts."""
    r = pb.StatusReply(cluster="c", daemon=facts is not None)
    for name in ("rm2", "ncf"):
        r.models.append(_model_status(OutcomeLedger(started=0.0), _NoWorkers(), name, 0.0, facts))  # type: ignore[arg-type]
    if facts is not None:
        set_forecast(r, facts)
    return r


def test_the_feed_gives_each_forecast_made_and_none_for_a_reactive_model() -> None:
    fc = ForecastState(chosen={"rm2": "seasonal_naive"}, last={"rm2": 41.25, "ncf": None}, lead_s=150.0)
    feed = StatusFeed.__new__(StatusFeed)       # only the forecast part is read here
    feed.forecast, feed.forecast_mode = (lambda: fc), (lambda: "shadow")
    assert feed._forecast_facts() == {"forecast_mode": "shadow", "forecast_lead_s": 150.0,
                                      "forecasts": {"rm2": (41.25, "seasonal_naive")}, "shadow": None}
    feed.forecast = None
    assert feed._forecast_facts() == {}


def test_status_json_and_text_show_the_forecast_against_the_demand() -> None:
    facts = FleetFacts(forecast_mode="on", forecast_lead_s=150.0, forecasts={"rm2": (41.25, "ets")})
    s = status_dict(_reply(facts))
    assert s["forecast"] == {"mode": "on", "lead_s": 150.0, "shadow": None}
    assert s["models"]["rm2"]["forecast"] == {"qps": 41.25, "forecaster": "ets"}
    assert s["models"]["ncf"]["forecast"] is None
    text = render(s, "127.0.0.1:50051", 0.0)
    assert "  forecast (on, over 150 s): rm2 41.2 q/s (ets)" in text.splitlines()


def test_no_forecast_line_when_off_or_without_a_daemon() -> None:
    off = status_dict(_reply(FleetFacts(forecast_mode="off")))
    assert off["forecast"] == {"mode": "off", "lead_s": 0.0, "shadow": None}
    assert not any("forecast" in line for line in render(off, "x:1", 0.0).splitlines())
    alone = status_dict(_reply(None))
    assert alone["forecast"] is None and alone["models"]["rm2"]["forecast"] is None


def test_shadow_shows_what_planning_ahead_would_cost_and_serve() -> None:
    """``mode: shadow``: the feed hands the ledger's planned $/hr and dollars of both pools and the served
    estimate by capacity (hand-computed: 3 q/s of 4 within the applied pool's capacity in one counted
    minute, all 4 within the ahead pool's), and ``status`` prints them; before a tick priced both pools
    there is none."""
    fc = ForecastState(chosen={"rm2": "seasonal_naive"}, last={"rm2": 41.25}, lead_s=150.0)
    feed = StatusFeed.__new__(StatusFeed)
    feed.forecast, feed.forecast_mode = (lambda: fc), (lambda: "shadow")
    assert feed._forecast_facts()["shadow"] is None
    fc.shadow.note(0.0, 2.4, 2.2)
    fc.shadow.note(1800.0, 2.5, 2.2)          # half an hour at 2.4 against 2.2 $/hr
    fc.served.note(0.0, {"applied": {"rm2": 3.0}, "ahead": {"rm2": 5.0}}, ["rm2"])
    fc.served.minute(0, {"rm2": 4.0}, 0.0)
    facts = feed._forecast_facts()
    assert facts["shadow"] == ShadowFacts(2.5, 2.2, 1.2, 1.1, 100.0, 75.0)
    s = status_dict(_reply(FleetFacts(**facts)))
    assert s["forecast"]["shadow"] == {"ahead_usd_per_hr": 2.5, "applied_usd_per_hr": 2.2, "ahead_usd": 1.2,
                                       "applied_usd": 1.1, "ahead_served_pct": 100.0, "applied_served_pct": 75.0}
    assert ("  shadow: planning ahead would hold $2.500/hr against $2.200/hr applied ($1.2000 against $1.1000 "
            "so far, +9.09 %); served within SLO by capacity (estimate): ahead 100.00 %, applied 75.00 %"
            in render(s, "127.0.0.1:50051", 0.0).splitlines())
