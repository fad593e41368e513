"""The worker's IMDS watch for spot interruption notices (issue #28 deliverable 4): IMDSv2 tokens,
404 until a notice, a 401 renews the token, each kind told once, and the worker CLI's flag."""
from __future__ import annotations

import asyncio
import json
from typing import Iterator

import pytest

from daemon.local.imds import LocalImds as FakeImds
from worker.spot_watch import Notice, SpotWatch, parse_instance_action, parse_rebalance


@pytest.fixture()
def imds() -> Iterator[FakeImds]:
    s = FakeImds()
    yield s
    s.close()


def test_parse_the_two_notices() -> None:
    n = parse_instance_action('{"action": "terminate", "time": "2026-11-26T10:30:00Z"}')
    assert n == Notice("instance-action", "terminate", 1795689000.0)
    assert parse_instance_action("not json") is None and parse_instance_action('{"time": "x"}') is None
    assert parse_rebalance('{"noticeTime": "2026-11-26T10:28:00Z"}') == Notice("rebalance", "", 1795688880.0)
    assert parse_rebalance("{}") is None


def test_poll_finds_nothing_until_a_notice_then_each_kind_once_and_renews_an_expired_token(imds: FakeImds) -> None:
    told: list[Notice] = []

    async def tell(n: Notice) -> bool:
        told.append(n)
        return True

    w = SpotWatch(imds.url, tell, poll_s=0.0)
    assert w.poll_once() == [] and imds.puts == 1
    imds.docs[("", "spot/instance-action")] = json.dumps({"action": "terminate", "time": "2026-11-26T10:30:00Z"})
    imds.tokens.clear()                                 # the token expired: a 401, then a new token
    got = w.poll_once()
    assert [n.kind for n in got] == ["instance-action"] and imds.unauthorized == 1 and imds.puts == 2
    w.told.add("instance-action")
    imds.docs[("", "events/recommendations/rebalance")] = json.dumps({"noticeTime": "2026-11-26T10:28:00Z"})
    assert [n.kind for n in w.poll_once()] == ["rebalance"]


def test_run_tells_again_until_the_dispatcher_has_it(imds: FakeImds) -> None:
    imds.docs[("", "spot/instance-action")] = json.dumps({"action": "terminate", "time": "2026-11-26T10:30:00Z"})
    answers = [False, True]
    told: list[str] = []

    async def tell(n: Notice) -> bool:
        told.append(n.kind)
        return answers.pop(0) if answers else True

    async def main() -> None:
        w = SpotWatch(imds.url, tell, poll_s=0.01)
        task = asyncio.create_task(w.run())
        while "instance-action" not in w.told:
            await asyncio.sleep(0.01)
        for _ in range(5):                  # told: not asked again
            await asyncio.sleep(0.01)
        task.cancel()

    asyncio.run(main())
    assert told == ["instance-action", "instance-action"]


def test_worker_flag_refuses_a_non_url_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from daemon.cli import main

    code = main(["worker", "--instance-id", "i-1", "--instance-type", "c5.2xlarge", "--imds-endpoint", "169.254.169.254"])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--imds-endpoint" in err[0]
