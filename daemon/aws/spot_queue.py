"""The optional SQS reader of EventBridge's spot interruption warnings (``spot.interruption_queue``,
issue #28): long-polls the queue (``receive_message``, 10 s waits, up to 10 messages) in a thread,
hands each warning (:func:`scaler.spot.events.parse_warning`) to the fleet's notice handler
(``daemon.aws.spot_wiring.FleetMarket``: the same path as a worker's IMDS notice), and deletes every
message it read (``delete_message``; a body that is not a warning is logged and deleted too: the
queue is the rule's). IAM: ``sqs:ReceiveMessage``, ``sqs:DeleteMessage``. An adapter: I/O only.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable

from config.schema import Config
from scaler.cloud.aws_client import client_error_line, make_client
from scaler.spot.events import parse_warning

log = logging.getLogger("costscale")

#: SQS long poll (s): at most this long between a warning and the fleet hearing it
WAIT_S = 10
#: after a failed receive (no permission, no network), wait this long before asking again (s)
RETRY_S = 30.0

Handler = Callable[[str, str, "float | None"], None]


def read_once(client: Any, queue_url: str, handler: Handler, wait_s: int = WAIT_S) -> int:
    """One receive: each warning to ``handler``, every message deleted; returns the warnings handed on."""
    resp = client.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=wait_s)
    n = 0
    for msg in resp.get("Messages", []):
        w = parse_warning(msg.get("Body", ""))
        if w is None:
            log.info("spot interruption queue: a message that is not a spot interruption warning; deleted")
        else:
            handler(w.instance_id, "instance-action", w.reclaim_at)
            n += 1
        client.delete_message(QueueUrl=queue_url, ReceiptHandle=msg["ReceiptHandle"])
    return n


def failure_line(queue_url: str, exc: Exception) -> str:
    """The warning a failed receive or delete logs: the queue, and the error in one line (a refusal
    names the SQS action it lacks)."""
    return f"spot interruption queue {queue_url}: {client_error_line(exc, 'sqs')}"


async def read_queue(cfg: Config, handler: Handler, wait_s: int = WAIT_S) -> None:
    """Read ``spot.interruption_queue`` until cancelled (each receive in a thread)."""
    assert cfg.spot is not None and cfg.spot.interruption_queue
    url = cfg.spot.interruption_queue
    client = make_client("sqs", cfg.region, max_attempts=cfg.aws.max_attempts, connect_timeout=5,
                         read_timeout=wait_s + 10, endpoint_url=cfg.aws.endpoint_url)
    while True:
        try:
            await asyncio.to_thread(read_once, client, url, handler, wait_s)
        except Exception as exc:  # noqa: BLE001 - the workers' IMDS watch still runs; ask again later
            log.warning("%s", failure_line(url, exc))
            await asyncio.sleep(RETRY_S)


__all__ = ["RETRY_S", "WAIT_S", "failure_line", "read_once", "read_queue"]
