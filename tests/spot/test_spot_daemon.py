"""The daemon's spot wiring (issue #28 phase 2): daemon.aws.spot_wiring.FleetMarket on a fake cloud
(a notice dooms the instance, puts its zone out on the actuator's clock, runs a fleet tick at once
and drains the worker DRAIN_LEAD_S before the reclaim; duplicate, unknown and on-demand notices
change nothing; spot off: the hooks are the identity), the EventBridge warning's parser, and the
SQS reader against moto."""
from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from config.schema import load_config
from daemon.aws.spot_wiring import FleetMarket, open_market
from scaler.fleet.actuator import FleetActuator
from scaler.cloud.fake import FakeCloud
from scaler.spot.events import parse_warning
from scaler.spot.fleet import SpotFleet
from scaler.spot.market import DRAIN_LEAD_S, NOTICE_S, ZONE_COOLDOWN_S, SpotMarket
from scaler.fleet.state import StateStore

ROOT = Path(__file__).resolve().parents[2]
SPOT_YAML = ROOT / "examples" / "replay-spot.yaml"
PRICES = {"r5n.large": {"us-east-1a": 0.05, "us-east-1c": 0.06, "us-east-1d": 0.07}}


def _market(tmp_path: Path) -> tuple[FleetMarket, FakeCloud, FleetActuator]:
    cfg = load_config(SPOT_YAML)
    cloud = FakeCloud(cfg.cluster)
    store = StateStore.open(tmp_path / "state.db")
    act = FleetActuator(cloud, store, cfg.catalog(), cfg.budget_per_hour, other_prices=cfg.table_prices())
    spot = SpotFleet(cfg, SpotMarket.from_config(cfg, PRICES), act, cloud.list_managed)
    return FleetMarket(act, cloud, spot), cloud, act


def test_a_notice_dooms_marks_the_zone_out_ticks_at_once_and_drains_before_the_reclaim(tmp_path: Path) -> None:
    fm, cloud, act = _market(tmp_path)
    rep = fm.actuate({"r5n.large": 2}, "p1", [], cloud.list_managed())
    slots = sorted(s for s, ids in rep.launched.items() for _ in ids)
    assert slots == ["r5n.large@us-east-1a", "r5n.large@us-east-1c"]      # spread: fewest, then cheapest
    victim = next(i for i in cloud.list_managed() if i.instance_type == "r5n.large@us-east-1c")
    od = cloud.launch("r5n.large", 1, "od-token")[0]
    ticks: list[str] = []
    drained: list[tuple[str, float]] = []

    async def main() -> None:
        lock = asyncio.Lock()

        async def drain(iid: str) -> bool:
            drained.append((iid, time.monotonic()))
            return True

        handle = fm.on_notice(lock, drain, ticks.append, asyncio.get_running_loop())
        t0, reclaim = time.monotonic(), time.time() + DRAIN_LEAD_S + 0.3
        handle(victim.instance_id, "instance-action", reclaim)
        handle(od.instance_id, "instance-action", reclaim)                  # on-demand: ignored
        handle("i-stranger", "instance-action", reclaim)                     # not ours: ignored
        handle(victim.instance_id, "rebalance", None)                        # a recommendation: noted only
        while not drained:
            await asyncio.sleep(0.01)
        handle(victim.instance_id, "instance-action", reclaim)               # told again (SQS): no second tick
        while len(fm.notices) < 5:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0)
        assert drained[0][0] == victim.instance_id and 0.2 <= drained[0][1] - t0 < 2.0
        await fm.close()

    asyncio.run(main())
    assert ticks == ["spot interruption"]
    assert set(fm.spot.state.doomed) == {victim.instance_id}
    assert "r5n.large@us-east-1c" in act.unavailable_types()
    out_until = act.store.unavailable_types(time.time())["r5n.large@us-east-1c"]   # on the actuator's (epoch) clock
    assert abs(out_until - (time.time() + ZONE_COOLDOWN_S)) < 5
    # the replacement: the doomed one held, a new spot in the zone not yet used; parking does not see the doomed
    rep2 = fm.actuate({"r5n.large": 2}, "p2", [], cloud.list_managed())
    assert [s for s, ids in rep2.launched.items() if ids] == ["r5n.large@us-east-1d"]
    assert victim.instance_id not in {i.instance_id for i in fm.parking_view(cloud.list_managed())}


def test_a_notice_without_a_time_is_reclaimed_two_minutes_later(tmp_path: Path) -> None:
    fm, cloud, _ = _market(tmp_path)
    fm.actuate({"r5n.large": 1}, "p1", [], cloud.list_managed())
    iid = cloud.list_managed()[0].instance_id
    at = fm.spot.notice(iid, cloud.list_managed()[0].instance_type, 1000.0)
    assert at == 1000.0 + NOTICE_S
    at2 = fm.spot.notice(iid, cloud.list_managed()[0].instance_type, 1010.0, 1050.0)
    assert at2 == at                                                      # the first notice stands


def test_spot_off_the_hooks_are_what_the_daemon_did_before(tmp_path: Path) -> None:
    cfg = load_config(SPOT_YAML)
    cfg = cfg.model_copy(update={"spot": None, "instance_types": [t.model_copy(update={"market": "on_demand"})
                                                                   for t in cfg.instance_types]})
    cloud = FakeCloud(cfg.cluster)
    act = FleetActuator(cloud, StateStore.open(tmp_path / "s.db"), cfg.catalog(), cfg.budget_per_hour,
                        other_prices=cfg.table_prices())
    fm = asyncio.run(open_market(cfg, act, cloud))
    assert fm.spot is None and fm.prices is None
    assert fm.deciding(cfg) == (cfg, []) and fm.plan_key() == frozenset()
    assert fm.extend_target({"r5n.large": 2}) == {"r5n.large": 2}
    rep = fm.actuate({"r5n.large": 2}, "p1", [], None)
    assert sorted(rep.launched) == ["r5n.large"]
    listed = cloud.list_managed()
    assert fm.typed(listed) == listed and fm.parking_view(listed) == listed


def _event(iid: str, stamp: str = "2026-11-26T10:28:00Z") -> str:
    return json.dumps({"version": "0", "source": "aws.ec2", "detail-type": "EC2 Spot Instance Interruption Warning",
                       "time": stamp, "region": "us-east-1",
                       "detail": {"instance-id": iid, "instance-action": "terminate"}})


def test_parse_warning_reclaims_two_minutes_after_the_event() -> None:
    w = parse_warning(_event("i-1"))
    assert w is not None and w.instance_id == "i-1" and w.action == "terminate"
    assert w.reclaim_at == 1795688880.0 + 120.0
    assert parse_warning("nope") is None
    assert parse_warning(json.dumps({"detail-type": "EC2 Instance Rebalance Recommendation", "detail": {}})) is None
    assert parse_warning(json.dumps({"detail-type": "EC2 Spot Instance Interruption Warning", "detail": {}})) is None


def test_sqs_reader_hands_each_warning_on_and_deletes_every_message(moto_endpoint: str) -> None:
    import boto3

    from daemon.aws.spot_queue import read_once

    sqs = boto3.client("sqs", region_name="us-east-1", endpoint_url=moto_endpoint)
    url = sqs.create_queue(QueueName="spot-warnings")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody=_event("i-0abc"))
    sqs.send_message(QueueUrl=url, MessageBody="not an event")
    got: list[tuple[str, str, float | None]] = []
    n = 0
    for _ in range(4):
        n += read_once(sqs, url, lambda *a: got.append(a), wait_s=0)
    assert n == 1 and got == [("i-0abc", "instance-action", 1795688880.0 + 120.0)]
    left = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages",
                                                                  "ApproximateNumberOfMessagesNotVisible"])
    assert left["Attributes"] == {"ApproximateNumberOfMessages": "0", "ApproximateNumberOfMessagesNotVisible": "0"}


@pytest.mark.parametrize("url", ["sqs-queue", "arn:aws:sqs:us-east-1:1:q"])
def test_a_bad_interruption_queue_is_one_line_naming_the_field(tmp_path: Path, url: str) -> None:
    from config.errors import ConfigError

    text = SPOT_YAML.read_text().replace("  fallback: on_demand", f"  fallback: on_demand\n  interruption_queue: {url}")
    p = tmp_path / "c.yaml"
    p.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(p)
    assert "spot.interruption_queue" in str(err.value) and "\n" not in str(err.value)


class _Prices:
    """A price source standing in for scaler.pricing.spot.SpotPriceSource (its ``lookup``)."""

    def __init__(self, prices: dict[str, dict[str, float]]) -> None:
        self.prices = prices

    def lookup(self, types, zones, fetch=True):  # type: ignore[no-untyped-def]
        return {t: dict(z) for t, z in self.prices.items() if t in types}, None


def test_a_spot_price_that_moved_reprices_the_slots_and_says_so(tmp_path: Path) -> None:
    fm, cloud, act = _market(tmp_path)
    cfg = load_config(SPOT_YAML)
    src = _Prices({**{t: dict(z) for t, z in PRICES.items()}})
    fm.prices = src  # type: ignore[assignment]
    lock = asyncio.Lock()
    assert act.price("r5n.large@us-east-1c") == 0.06
    assert asyncio.run(fm.refresh(cfg, lock)) is False            # the same prices: nothing moves
    src.prices["r5n.large"]["us-east-1c"] = 0.09
    assert asyncio.run(fm.refresh(cfg, lock)) is True
    assert act.price("r5n.large@us-east-1c") == 0.09 and fm.spot.market.price("r5n.large@us-east-1c") == 0.09


def test_a_zone_without_capacity_moves_the_launch_to_the_next_zone_then_on_demand(tmp_path: Path) -> None:
    fm, cloud, act = _market(tmp_path)
    cloud.fail_capacity("r5n.large@us-east-1a")
    rep = fm.actuate({"r5n.large": 1}, "p1", [], cloud.list_managed())
    assert [s for s, ids in rep.launched.items() if ids] == ["r5n.large@us-east-1c"]   # a refused: the next zone
    assert "r5n.large@us-east-1a" in act.unavailable_types()
    for z in ("us-east-1c", "us-east-1d"):
        cloud.fail_capacity(f"r5n.large@{z}")
    rep = fm.actuate({"r5n.large": 3}, "p2", [], cloud.list_managed())
    got = sorted(s for s, ids in rep.launched.items() for _ in ids)
    assert got == ["r5n.large", "r5n.large"]            # no spot zone left: market both falls back to on-demand


def test_a_reload_rebuilds_the_market_from_the_new_spot_settings(tmp_path: Path) -> None:
    fm, cloud, act = _market(tmp_path)
    cfg = load_config(SPOT_YAML)
    new = cfg.model_copy(update={"spot": cfg.spot.model_copy(update={"overprovision": 2, "max_price": 0.065})})
    fm.reload(new)
    m = fm.spot.market
    assert (m.overprovision, m.max_price) == (2, 0.065) and fm.spot.cfg is new
    assert m.spot["r5n.large"] == PRICES["r5n.large"]                                    # the prices held now
    assert m.open_zones("r5n.large") == ["us-east-1a", "us-east-1c"]                     # 1d's 0.07 is over max_price
    assert act.price("r5n.large@us-east-1d") == 0.07
