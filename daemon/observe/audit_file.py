"""The audit log's own file (``audit_log`` in the config, :mod:`config.sections.retention`): every
audit event (:mod:`daemon.observe.audit`) as one JSON object per line, whatever ``log_format`` the
daemon's own log has, in a file created 0600.

Bounded two ways, as syslog daemons and nginx are:

- **logrotate** moves the file (``create``) and sends SIGHUP: the daemon reopens the file at its
  path (:func:`on_hangup`, the reload signal), so the next event starts the new file and the moved one
  is complete. ``systemd/costscale.logrotate`` is the example. No ``copytruncate`` needed (it loses the
  lines written between the copy and the truncation).
- **max_bytes** > 0: the daemon rotates by itself (:class:`logging.handlers.RotatingFileHandler`)
  before a line would take the file to ``max_bytes``: ``path.1`` is the newest copy, ``path.<backups>``
  the oldest, and the one older is deleted, so the audit log never takes more than
  ``max_bytes x (backups + 1)``.

While a file is configured the ``costscale.audit`` logger logs at INFO whatever ``--log-level`` the
daemon runs at: the file holds every event.
"""
from __future__ import annotations

import logging
import os
from logging.handlers import RotatingFileHandler
from pathlib import Path
from typing import IO, Any, Callable

from config.errors import UsageError
from config.sections.retention import AuditLogSpec
from daemon.observe.audit import AUDIT, JsonFormatter

log = logging.getLogger("costscale")

#: what the files are created with: the owner's alone (issue #14)
FILE_MODE = 0o600


class AuditFileHandler(RotatingFileHandler):
    """A :class:`RotatingFileHandler` whose files are created :data:`FILE_MODE` and that opens its
    path again on :meth:`reopen` (logrotate moved the file)."""

    def _open(self) -> IO[Any]:
        fd = os.open(self.baseFilename, os.O_WRONLY | os.O_APPEND | os.O_CREAT, FILE_MODE)
        return os.fdopen(fd, "a", encoding=self.encoding, errors=self.errors)

    def reopen(self) -> None:
        self.acquire()
        try:
            if self.stream is not None:
                self.stream.flush()
                self.stream.close()
            self.stream = self._open()
        finally:
            self.release()


def open_handler(spec: AuditLogSpec) -> AuditFileHandler:
    """The handler for ``spec`` (its folder made 0700 when missing); UsageError, one line, when the
    file cannot be opened."""
    try:
        Path(spec.path).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        handler = AuditFileHandler(spec.path, maxBytes=spec.max_bytes, backupCount=spec.backups, encoding="utf-8")
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename and str(exc.filename) != spec.path else ""
        raise UsageError(f"audit_log.path: cannot open {spec.path}: {exc.strerror or exc}{where}") from None
    handler.setFormatter(JsonFormatter())
    return handler


class AuditFile:
    """The ``costscale.audit`` logger's file, as the running config names it (or none)."""

    def __init__(self, logger: logging.Logger = AUDIT) -> None:
        self.logger = logger
        self.spec: AuditLogSpec | None = None
        self.handler: AuditFileHandler | None = None

    def start(self, spec: AuditLogSpec | None) -> None:
        """At start: the file ``spec`` names opened (UsageError, one line, when it cannot be)."""
        self._swap(spec, open_handler(spec) if spec is not None else None)

    def apply(self, spec: AuditLogSpec | None) -> None:
        """On each SIGHUP: the same ``spec`` reopens the file at its path (logrotate moved it); another
        opens that one instead; None closes it. A file that cannot be opened is one line, and the file
        open before stays."""
        try:
            if spec is not None and spec == self.spec and self.handler is not None:
                self.handler.reopen()
            else:
                self._swap(spec, open_handler(spec) if spec is not None else None)
        except (OSError, UsageError) as exc:
            log.error("audit_log: %s: the audit file open before stays", exc)

    def _swap(self, spec: AuditLogSpec | None, new: AuditFileHandler | None) -> None:
        self.close()
        if new is not None:
            self.logger.addHandler(new)
            self.logger.setLevel(logging.INFO)
        self.spec, self.handler = spec, new

    def close(self) -> None:
        if self.handler is not None:
            self.logger.removeHandler(self.handler)
            self.handler.close()
            self.logger.setLevel(logging.NOTSET)
        self.spec, self.handler = None, None


def on_hangup(reload: Callable[[], object], audit_file: AuditFile, spec: Callable[[], AuditLogSpec | None]
              ) -> Callable[[], None]:
    """The SIGHUP handler: the config reloaded (``reload``: ``Daemon.reload``), then the audit file
    reopened as the config running now names it, reload taken or refused."""
    def hup() -> None:
        try:
            reload()
        finally:
            audit_file.apply(spec())
    return hup


__all__ = ["AuditFile", "AuditFileHandler", "FILE_MODE", "on_hangup", "open_handler"]
