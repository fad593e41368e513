"""The audit log: one event per decision, on the ``costscale.audit`` logger, so that what was
spent and why can be reconstructed from the daemon's log alone.

Events (``event`` field): ``plan`` (the new target, its $/hr, the planner's rule, the demand it
planned for), ``launch`` and ``terminate`` (instance ids, type, intent id -- the write-ahead
ClientToken -- and the pool's $/hr after), ``park`` and ``unpark``, ``load`` and ``unload`` (a
variant on a worker), ``vm_add`` and ``vm_remove`` (the VM autoscaler, with its reason),
``accuracy_plan`` (accuracy scaling: a new placement, the demand it serves and at what accuracy), and
``error``. :class:`daemon.observe.status_feed.StatusFeed` emits them as it sees the loops' decisions.

With ``costscale run --log-format json`` every log record, audit events included, is one JSON
object per line (``ts``, ``level``, ``logger``, ``message``, and an audit event's fields);
otherwise audit events are plain lines ``audit <event>: <summary> -- <reason>``.
"""
from __future__ import annotations

import json
import logging
from datetime import datetime, timezone
from typing import Any

AUDIT = logging.getLogger("costscale.audit")
LOG_FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def emit(event: str, summary: str, reason: str = "", **fields: Any) -> None:
    """One audit event: a log record at INFO carrying its fields (an error is also logged by the
    loop that met it, at ERROR; the audit event is its record in the trail)."""
    data = {"event": event, "summary": summary, "reason": reason, **fields}
    AUDIT.info("audit %s: %s%s", event, summary, f" -- {reason}" if reason else "", extra={"audit": data})


class JsonFormatter(logging.Formatter):
    """One JSON object per record; an audit record's fields at the top level."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname, "logger": record.name, "message": record.getMessage()}
        audit = getattr(record, "audit", None)
        if isinstance(audit, dict):
            out.update(audit)
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def configure_logging(level: str = "INFO", log_format: str = "text") -> None:
    """The process's root handler: text lines, or JSON lines (``log_format="json"``)."""
    if log_format not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}, got {log_format!r}")
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO), handlers=[handler])
