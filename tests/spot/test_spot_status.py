"""What the pool costs, reported with the market of each instance (issue #28 deliverable 2):
``costscale status`` (human and ``--json``), the Status reply, the Prometheus metrics and the
systemd STATUS line count a spot instance in its market and zone and price it at the spot price it
is billed (EC2 User Guide, "Spot Instance pricing"); with spot off they say what they said before.

Hand-computed case: one on-demand g4dn.xlarge (0.526 $/hr, config/instance_catalog.csv) running,
one r5n.large spot in us-east-1a (0.0625 $/hr) running, one in us-east-1b (0.03125 $/hr) pending:
the pool costs 0.526 + 0.0625 + 0.03125 = 0.61975 $/hr (on-demand 0.526, spot 0.09375), where the
on-demand prices would have said 0.526 + 2 x 0.149 = 0.824.
"""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given, strategies as hs
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from config.profiles import load_profiles_csv
from config.schema import Config
from daemon.commands.status import pool_lines, render, status_dict
from daemon.observe.metrics import families
from daemon.aws.spot_wiring import FleetMarket
from daemon.observe.status_feed import status_line
from daemon.observe.status_watchers import billed_at
from dispatcher.latency_model import LatencyModel
from dispatcher.proto import costscale_pb2 as pb
from dispatcher.server import Dispatcher
from dispatcher.api.status import billed_price, cost_by_market, pool_cost_per_hour
from scaler.cloud.provider import ManagedInstance
from scaler.spot.market import SpotMarket

G4, R5 = 0.526, 0.149                       # on-demand $/hr (config/instance_catalog.csv)
SPOT_A, SPOT_B = 0.0625, 0.03125            # r5n.large spot $/hr in us-east-1a, us-east-1b (given)
STATES = ("pending", "running", "parked", "draining")


def spot_config() -> Config:
    return Config.model_validate({
        "cluster": "spot", "budget_per_hour": 2.0, "region": "us-east-1",
        "models": [{"name": "ncf", "qos_ms": 1000, "max_batch": 100}],
        "instance_types": [{"type": "g4dn.xlarge"}, {"type": "r5n.large", "market": "spot"}],
        "spot": {"zones": {"us-east-1a": None, "us-east-1b": None}},
        "launch": {"ami_id": "ami-0123456789abcdef0"},
        "dispatcher": {"listen": "127.0.0.1:0"},
    })


def on_demand_config() -> Config:
    return Config.model_validate({
        "cluster": "od", "budget_per_hour": 2.0,
        "models": [{"name": "ncf", "qos_ms": 1000, "max_batch": 100}],
        "instance_types": [{"type": "g4dn.xlarge"}, {"type": "r5n.large"}],
        "launch": {"ami_id": "ami-0123456789abcdef0"},
        "dispatcher": {"listen": "127.0.0.1:0"},
    })


def listing() -> list[ManagedInstance]:
    """The cloud's listing as ``Ec2Cloud.list_managed`` gives it: a spot instance at its slot."""
    return [ManagedInstance("i-od", "g4dn.xlarge", "running"),
            ManagedInstance("i-sa", "r5n.large@us-east-1a", "running"),
            ManagedInstance("i-sb", "r5n.large@us-east-1b", "pending"),
            ManagedInstance("i-gone", "r5n.large@us-east-1a", "shutting-down")]   # not live: not counted


def spot_dispatcher() -> Dispatcher:
    cfg = spot_config()
    d = Dispatcher(cfg, LatencyModel.from_profiles(load_profiles_csv()))
    market = SpotMarket.from_config(cfg, {"r5n.large": {"us-east-1a": SPOT_A, "us-east-1b": SPOT_B}})
    fm = FleetMarket(SimpleNamespace(catalog=cfg.catalog()), cloud=None,   # type: ignore[arg-type]
                     spot=SimpleNamespace(market=market))                  # type: ignore[arg-type]
    fm.on_prices = d.set_spot_prices          # what Daemon.start wires
    fm.publish_prices()
    d.set_cloud_view(listing())
    return d


def scrape(reply: pb.StatusReply, types: list[str]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    class One(Collector):
        def collect(self):  # type: ignore[no-untyped-def]
            yield from families(reply, {}, types)
    reg = CollectorRegistry(auto_describe=False)
    reg.register(One())
    text = generate_latest(reg).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_status_counts_each_market_and_zone_and_prices_spot_at_its_spot_price() -> None:
    d = spot_dispatcher()
    reply = d.status_reply()
    got = sorted((c.instance_type, c.market, c.zone, c.state, c.count) for c in reply.instances)
    assert got == [("g4dn.xlarge", "on_demand", "", "running", 1),
                   ("r5n.large", "spot", "us-east-1a", "running", 1),
                   ("r5n.large", "spot", "us-east-1b", "pending", 1)]
    assert reply.cost_per_hour == pytest.approx(0.61975, abs=1e-12)
    assert d.cost_per_hour() == pytest.approx(0.61975, abs=1e-12)       # the spend meter's and STATUS line's
    assert dict(reply.cost_per_hour_by_market) == pytest.approx({"on_demand": 0.526, "spot": 0.09375}, abs=1e-12)
    assert dict(reply.pool) == {"g4dn.xlarge": 1, "r5n.large": 2}          # by type, as before
    st = status_dict(reply)
    assert st["instances"] == {"g4dn.xlarge": {"running": 1}, "r5n.large": {"running": 1, "pending": 1}}
    assert st["instances_by_market"] == [
        {"instance_type": "g4dn.xlarge", "market": "on_demand", "zone": None, "states": {"running": 1}},
        {"instance_type": "r5n.large", "market": "spot", "zone": "us-east-1a", "states": {"running": 1}},
        {"instance_type": "r5n.large", "market": "spot", "zone": "us-east-1b", "states": {"pending": 1}}]
    assert st["pool_cost_per_hour"] == 0.61975
    assert st["pool_cost_per_hour_by_market"] == {"on_demand": 0.526, "spot": 0.09375}
    text = render(st, "127.0.0.1:50051", 0.0)
    assert "spend    0.620 $/hr of 2 budget (31%)" in text
    rows = [line.split() for line in text.splitlines()]
    assert ["r5n.large", "spot", "us-east-1a", "0", "1", "0", "0"] in rows
    assert ["r5n.large", "spot", "us-east-1b", "1", "0", "0", "0"] in rows
    assert ["g4dn.xlarge", "on_demand", "0", "1", "0", "0"] in rows
    assert "  $/hr by market: on_demand 0.526, spot 0.094" in text.splitlines()


def test_a_price_move_reprices_the_pool_and_a_parked_spot_instance_stays_in_its_zone() -> None:
    d = spot_dispatcher()
    d.mark_parked("i-sa")
    d.set_spot_prices({"r5n.large@us-east-1a": 0.125, "r5n.large@us-east-1b": SPOT_B, "g4dn.xlarge": 9.0})
    reply = d.status_reply()
    assert ("r5n.large", "spot", "us-east-1a", "parked", 1) in [
        (c.instance_type, c.market, c.zone, c.state, c.count) for c in reply.instances]
    # an on-demand type's price stays the catalog's (set_spot_prices takes spot slots only)
    assert reply.cost_per_hour == pytest.approx(G4 + 0.125 + SPOT_B, abs=1e-12)


def test_metrics_label_instances_by_market_and_zone_and_split_the_cost() -> None:
    reply = spot_dispatcher().status_reply()
    m = scrape(reply, ["g4dn.xlarge", "r5n.large"])

    def inst(t: str, market: str, zone: str, state: str) -> float:
        return m[("costscale_instances", (("instance_type", t), ("market", market), ("state", state),
                                          ("zone", zone)))]
    assert inst("r5n.large", "spot", "us-east-1a", "running") == 1
    assert inst("r5n.large", "spot", "us-east-1b", "pending") == 1
    assert inst("r5n.large", "spot", "us-east-1b", "running") == 0
    assert inst("g4dn.xlarge", "on_demand", "", "running") == 1
    assert inst("r5n.large", "on_demand", "", "running") == 0          # a configured type: zeros too
    assert sum(v for (name, _), v in m.items() if name == "costscale_instances") == 3
    assert m[("costscale_pool_cost_dollars_per_hour", ())] == pytest.approx(0.61975, abs=1e-12)
    assert m[("costscale_pool_cost_by_market_dollars_per_hour", (("market", "spot"),))] == pytest.approx(0.09375)
    assert m[("costscale_pool_cost_by_market_dollars_per_hour", (("market", "on_demand"),))] == pytest.approx(G4)


def test_spot_off_status_says_what_it_said_before() -> None:
    d = Dispatcher(on_demand_config(), LatencyModel.from_profiles(load_profiles_csv()))
    fm = FleetMarket(SimpleNamespace(catalog=on_demand_config().catalog()), cloud=None)  # type: ignore[arg-type]
    fm.on_prices = d.set_spot_prices
    fm.publish_prices()                       # on-demand only: the catalog's prices, no spot slot
    assert d.billed_prices() == {"g4dn.xlarge": G4, "r5n.large": R5}
    d.set_cloud_view([ManagedInstance("i-1", "g4dn.xlarge", "running"), ManagedInstance("i-2", "r5n.large", "pending"),
                      ManagedInstance("i-3", "r5n.large", "running")])
    reply = d.status_reply()
    assert {(c.market, c.zone) for c in reply.instances} == {("on_demand", "")}
    assert reply.cost_per_hour == pytest.approx(G4 + 2 * R5, abs=1e-12)
    st = status_dict(reply)
    assert st["instances"] == {"g4dn.xlarge": {"running": 1}, "r5n.large": {"pending": 1, "running": 1}}
    # the pool table exactly as before spot: a row per type, no market column, no split line
    assert pool_lines(st) == [f"{'pool':22}" + "".join(f"{x:>9}" for x in STATES),
                              f"  {'g4dn.xlarge':20}" + "".join(f"{n:>9}" for n in (0, 1, 0, 0)),
                              f"  {'r5n.large':20}" + "".join(f"{n:>9}" for n in (1, 1, 0, 0))]
    m = scrape(reply, ["g4dn.xlarge", "r5n.large"])
    assert {dict(labels)["market"] for name, labels in m if name == "costscale_instances"} == {"on_demand"}
    assert m[("costscale_pool_cost_by_market_dollars_per_hour", (("market", "on_demand"),))] == pytest.approx(G4 + 2 * R5)


def test_an_older_reply_without_markets_reads_as_on_demand() -> None:
    reply = pb.StatusReply(cluster="old", budget_per_hour=1.0, cost_per_hour=0.3)
    reply.instances.add(instance_type="r5n.large", state="running", count=2)
    st = status_dict(reply)
    assert st["instances_by_market"] == [{"instance_type": "r5n.large", "market": "on_demand", "zone": None,
                                          "states": {"running": 2}}]
    assert pool_lines(st)[1] == f"  {'r5n.large':20}" + "".join(f"{n:>9}" for n in (0, 2, 0, 0))


def test_billed_prices_fall_back_to_the_type_for_an_unpriced_spot_slot() -> None:
    prices = {"r5n.large": R5, "r5n.large@us-east-1a": SPOT_A}
    assert billed_price("r5n.large@us-east-1a", prices) == SPOT_A
    assert billed_price("r5n.large@us-east-1c", prices) == R5       # no price known: on-demand, never less
    assert billed_price("m5.large", prices) == 0.0                  # not an allowed type (as before)
    pool = {"r5n.large": 1, "r5n.large@us-east-1a": 2, "r5n.large@us-east-1c": 1}
    assert pool_cost_per_hour(pool, prices) == pytest.approx(R5 + 2 * SPOT_A + R5, abs=1e-12)
    assert cost_by_market(pool, prices) == pytest.approx({"on_demand": R5, "spot": 2 * SPOT_A + R5})


def test_systemd_status_line_carries_the_billed_cost() -> None:
    assert status_line({"g4dn.xlarge": 1, "r5n.large": 2}, 12.25, 0.61975, 2.0) == (
        "STATUS=pool g4dn.xlarge×1, r5n.large×2 at 0.620 of 2 $/hr; demand 12.2 q/s")
    assert status_line({}, 0.0, 0.0, 1.0, "; profiling ncf") == "STATUS=pool none at 0.000 of 1 $/hr; demand 0.0 q/s; profiling ncf"


def test_audit_prices_the_pool_after_a_spot_launch_at_the_spot_price() -> None:
    d = spot_dispatcher()
    daemon = SimpleNamespace(dispatcher=d, actuator=SimpleNamespace(price=lambda t: 99.0))
    assert billed_at(daemon.dispatcher.billed_prices, daemon.actuator.price, "r5n.large@us-east-1b") == SPOT_B
    assert billed_at(daemon.dispatcher.billed_prices, daemon.actuator.price, "g4dn.xlarge") == G4
    assert sorted(d.worker_registry.cloud_slots.values()) == ["g4dn.xlarge", "r5n.large@us-east-1a",
                                                             "r5n.large@us-east-1b"]


def test_audit_launch_of_a_spot_slot_names_it_and_prices_the_pool_after_at_billed_prices(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from scaler.fleet.state import StateStore
    from tests.daemon.test_status import _stub_daemon, stub_feed

    t0 = 1_700_000_000.0
    daemon = _stub_daemon(tmp_path)
    daemon.dispatcher = spot_dispatcher()                       # the pool before: 0.61975 $/hr
    daemon.actuator = SimpleNamespace(price=lambda t: 99.0)     # not what the audit prices at
    daemon.store = StateStore.open(":memory:")
    feed = stub_feed(daemon, clock=lambda: t0)
    caplog.set_level("INFO", logger="costscale.audit")
    daemon.store.record_intent("tok-s", "launch", "g1-s", "r5n.large@us-east-1b", 1, 0, t0)
    daemon.store.set_intent_status("tok-s", "done", t0 + 1, instance_ids=["i-new"])
    feed.observe(sample=False)
    launch = [r.audit for r in caplog.records if getattr(r, "audit", {}).get("event") == "launch"]
    assert len(launch) == 1 and launch[0]["instance_type"] == "r5n.large@us-east-1b"
    assert launch[0]["cost_per_hour_after"] == pytest.approx(0.61975 + SPOT_B, abs=1e-6)   # 0.651
    assert feed.facts().decisions[-1].summary == "launch i-new (r5n.large@us-east-1b); pool 0.651 $/hr after"


def test_a_spot_price_refresh_reprices_what_status_reports(tmp_path: Path) -> None:
    import asyncio

    from tests.spot.test_spot_daemon import PRICES, _market, _Prices

    fm, _cloud, _act = _market(tmp_path)          # examples/replay-spot.yaml, r5n.large spot in 1a/1c/1d
    cfg = fm.spot.cfg
    d = Dispatcher(cfg, LatencyModel.from_profiles(load_profiles_csv()))
    fm.on_prices = d.set_spot_prices
    fm.publish_prices()
    d.set_cloud_view([ManagedInstance("i-1", "r5n.large@us-east-1c", "running")])
    assert d.cost_per_hour() == pytest.approx(0.06, abs=1e-12)
    src = _Prices({t: dict(z) for t, z in PRICES.items()})
    fm.prices = src  # type: ignore[assignment]
    src.prices["r5n.large"]["us-east-1c"] = 0.09
    assert asyncio.run(fm.refresh(cfg, asyncio.Lock())) is True
    assert d.cost_per_hour() == pytest.approx(0.09, abs=1e-12)
    fm.reload(cfg)                                 # a reload publishes the same prices again
    assert d.status_reply().cost_per_hour == pytest.approx(0.09, abs=1e-12)


@given(hs.dictionaries(hs.sampled_from(["g4dn.xlarge", "r5n.large", "r5n.large@us-east-1a", "r5n.large@us-east-1b",
                                        "g4dn.xlarge@us-east-1a"]), hs.integers(0, 5)),
       hs.floats(0.0, 1.0), hs.floats(0.0, 1.0))
def test_cost_by_market_sums_to_the_pool_cost_and_spot_never_costs_more_than_on_demand(
        pool: dict[str, int], a: float, b: float) -> None:
    prices = {"g4dn.xlarge": G4, "r5n.large": R5, "r5n.large@us-east-1a": R5 * a, "r5n.large@us-east-1b": R5 * b}
    total = pool_cost_per_hour(pool, prices)
    assert sum(cost_by_market(pool, prices).values()) == pytest.approx(total, abs=1e-12)
    at_on_demand = sum(prices[slot.split("@")[0]] * n for slot, n in pool.items())
    assert total <= at_on_demand + 1e-12          # spot at most on-demand; an unpriced slot (1b of g4dn) at it
