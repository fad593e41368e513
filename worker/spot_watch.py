"""The worker's watch on EC2's spot interruption notice (issue #28, deliverable 4).

EC2 gives a spot instance two minutes' notice before it reclaims it: the instance metadata service
(IMDS) then answers ``/latest/meta-data/spot/instance-action`` with ``{"action": "terminate",
"time": "2026-11-26T10:30:00Z"}`` (404 until then), and may earlier answer
``/latest/meta-data/events/recommendations/rebalance`` with ``{"noticeTime": ...}`` (a rebalance
recommendation: the instance is at elevated risk). AWS's guidance is to poll every 5 s
(:data:`POLL_S`) with IMDSv2: a session token from ``PUT /latest/api/token``
(``X-aws-ec2-metadata-token-ttl-seconds``), sent as ``X-aws-ec2-metadata-token`` on every GET; a
401 means the token expired and a new one is asked for.

What the worker does with a notice: it tells its dispatcher once per kind
(``Control.SpotNotice``), which hands it to the fleet loop: the fleet drains the worker before EC2
reclaims it and places a replacement at once (``daemon/aws/spot_wiring.py``, through
``scaler.spot.market``'s notice decisions). The endpoint is overridable (``--imds-endpoint``,
``$COSTSCALE_IMDS_ENDPOINT``) so tests serve IMDS from a local HTTP server.

:func:`parse_instance_action` and :func:`parse_rebalance` are pure; :class:`SpotWatch` does the I/O.
"""
from __future__ import annotations

import asyncio
import json
import logging
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Awaitable, Callable

if TYPE_CHECKING:
    import grpc

log = logging.getLogger("costscale.worker")

#: the IMDS address on an EC2 instance
DEFAULT_IMDS = "http://169.254.169.254"
#: how often IMDS is asked (s): AWS's recommendation for the interruption notice
POLL_S = 5.0
#: the IMDSv2 session token's lifetime asked for (s)
TOKEN_TTL_S = 21600
#: one IMDS request's timeout (s)
HTTP_TIMEOUT_S = 2.0
INSTANCE_ACTION = "spot/instance-action"
REBALANCE = "events/recommendations/rebalance"


@dataclass(frozen=True)
class Notice:
    """What IMDS said: ``kind`` instance-action or rebalance; ``action`` terminate/stop/hibernate
    (instance-action only); ``at``: the reclaim time (instance-action) or notice time, epoch s."""

    kind: str
    action: str
    at: float | None


def _epoch(stamp: object) -> float | None:
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def parse_instance_action(body: str) -> Notice | None:
    """``spot/instance-action``'s JSON body as a :class:`Notice`; None when it is not one."""
    try:
        data = json.loads(body)
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("action"), str):
        return None
    return Notice("instance-action", data["action"], _epoch(data.get("time")))


def parse_rebalance(body: str) -> Notice | None:
    """``events/recommendations/rebalance``'s JSON body as a :class:`Notice`; None when it is not one."""
    try:
        data = json.loads(body)
    except ValueError:
        return None
    if not isinstance(data, dict) or "noticeTime" not in data:
        return None
    return Notice("rebalance", "", _epoch(data.get("noticeTime")))


class SpotWatch:
    """Polls IMDS every ``poll_s`` for the two notices and hands each new one to ``tell`` (which
    returns True once the dispatcher has it; a notice not yet told is told again next poll)."""

    def __init__(self, endpoint: str, tell: Callable[[Notice], Awaitable[bool]], poll_s: float = POLL_S) -> None:
        self.endpoint = endpoint.rstrip("/")
        self.tell, self.poll_s = tell, poll_s
        self._token: str | None = None
        self.told: set[str] = set()      # kinds the dispatcher has

    def _token_now(self) -> str:
        req = urllib.request.Request(f"{self.endpoint}/latest/api/token", method="PUT",
                                     headers={"X-aws-ec2-metadata-token-ttl-seconds": str(TOKEN_TTL_S)})
        with urllib.request.urlopen(req, timeout=HTTP_TIMEOUT_S) as resp:
            return resp.read().decode()

    def get(self, path: str) -> str | None:
        """GET ``/latest/meta-data/{path}`` with an IMDSv2 token: the body, or None on 404."""
        for _ in range(2):
            if self._token is None:
                self._token = self._token_now()
            req = urllib.request.Request(f"{self.endpoint}/latest/meta-data/{path}",
                                         headers={"X-aws-ec2-metadata-token": self._token})
            try:
                with urllib.request.urlopen(req, timeout=HTTP_TIMEOUT_S) as resp:
                    return resp.read().decode()
            except urllib.error.HTTPError as exc:
                if exc.code == 404:
                    return None
                if exc.code == 401:          # the token expired: a new one, once
                    self._token = None
                    continue
                raise
        return None

    def poll_once(self) -> list[Notice]:
        """One poll: the notices IMDS gives now that the dispatcher does not have yet."""
        out: list[Notice] = []
        for kind, path, parse in (("instance-action", INSTANCE_ACTION, parse_instance_action),
                                  ("rebalance", REBALANCE, parse_rebalance)):
            if kind in self.told:
                continue
            body = self.get(path)
            n = parse(body) if body is not None else None
            if n is not None:
                out.append(n)
        return out

    async def run(self) -> None:
        """Poll until cancelled; an IMDS that does not answer is logged and asked again."""
        while True:
            try:
                for n in await asyncio.to_thread(self.poll_once):
                    log.warning("spot %s notice (%s, at %s): telling the dispatcher", n.kind, n.action or "-", n.at)
                    if await self.tell(n):
                        self.told.add(n.kind)
            except (OSError, urllib.error.URLError) as exc:
                log.debug("IMDS %s: %s", self.endpoint, exc)
            await asyncio.sleep(self.poll_s)




async def tell_dispatcher(channel: Callable[[], "grpc.aio.Channel"], instance_id: str, token: Callable[[], str],
                          n: Notice) -> bool:
    """``Control.SpotNotice``: True once the dispatcher has the notice (else it is told again)."""
    import grpc

    from dispatcher.proto import costscale_pb2 as pb, costscale_pb2_grpc as pbg

    req = pb.SpotNoticeRequest(instance_id=instance_id, kind=n.kind, action=n.action, reclaim_at_unix=n.at or 0.0,
                               token=token())
    try:
        async with channel() as ch:
            reply = await pbg.ControlStub(ch).SpotNotice(req, timeout=5.0)
    except grpc.aio.AioRpcError as exc:
        log.warning("spot notice to the dispatcher failed: %s", exc.code().name)
        return False
    if not reply.accepted:
        log.warning("the dispatcher did not take the spot notice: %s", reply.message)
    return bool(reply.accepted)


def start_watch(endpoint: str, poll_s: float, instance_id: str, channel: Callable[[], "grpc.aio.Channel"],
                token: Callable[[], str]) -> "asyncio.Task[None]":
    """The watch as a task of the running loop, telling the dispatcher over ``channel``."""
    watch = SpotWatch(endpoint, lambda n: tell_dispatcher(channel, instance_id, token, n), poll_s)
    return asyncio.get_running_loop().create_task(watch.run())


__all__ = ["DEFAULT_IMDS", "INSTANCE_ACTION", "Notice", "POLL_S", "REBALANCE", "SpotWatch", "parse_instance_action",
           "parse_rebalance", "start_watch", "tell_dispatcher"]
