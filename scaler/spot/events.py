"""EventBridge's "EC2 Spot Instance Interruption Warning" as the fleet reads it from SQS (issue #28).

EC2 sends the warning two minutes before it reclaims a spot instance (AWS "Spot Instance
interruption notices"); an EventBridge rule on ``source: aws.ec2``, ``detail-type: EC2 Spot
Instance Interruption Warning`` can deliver it to an SQS queue (``spot.interruption_queue``). The
event: ``{"source": "aws.ec2", "detail-type": "EC2 Spot Instance Interruption Warning", "time":
"2026-11-26T10:28:00Z", "detail": {"instance-id": "i-...", "instance-action": "terminate"}}``; the
instance is reclaimed two minutes after ``time`` (:data:`scaler.spot.market.NOTICE_S`).

Pure: the message body in, the notice out.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from scaler.spot.market import NOTICE_S

DETAIL_TYPE = "EC2 Spot Instance Interruption Warning"


@dataclass(frozen=True)
class InterruptionWarning:
    """One warning: the instance, its action, and when EC2 reclaims it (epoch s; None: unknown)."""

    instance_id: str
    action: str
    reclaim_at: float | None


def parse_warning(body: str) -> InterruptionWarning | None:
    """An SQS message body as a warning; None for anything else (another event, not JSON)."""
    try:
        event = json.loads(body)
    except ValueError:
        return None
    if not isinstance(event, dict) or event.get("detail-type") != DETAIL_TYPE:
        return None
    detail = event.get("detail")
    if not isinstance(detail, dict) or not isinstance(detail.get("instance-id"), str):
        return None
    at: float | None = None
    stamp = event.get("time")
    if isinstance(stamp, str):
        try:
            at = datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() + NOTICE_S
        except ValueError:
            at = None
    return InterruptionWarning(detail["instance-id"], str(detail.get("instance-action", "terminate")), at)


__all__ = ["DETAIL_TYPE", "InterruptionWarning", "parse_warning"]
