"""Which of the host's processes this one is (``COSTSCALE_PROCESS=I/N``, set by
:mod:`daemon.processes.supervisor`), and the config it runs: read at start (``daemon.process``)
and again at each reload (``daemon.reload``), so a reloaded file is split exactly as at start."""
from __future__ import annotations

import logging
import os
import socket
from typing import Mapping

from config.errors import UsageError
from config.schema import Config
from daemon.aws.cluster_token import with_cluster_token
from daemon.processes.split import PROCESS_ENV, parse_slot, process_config


def this_slot(env: Mapping[str, str] | None = None) -> tuple[int, int] | None:
    """(index, count) of this process, or None (not started by the supervisor). UsageError (one
    line, exit 2) for a malformed value."""
    text = (os.environ if env is None else env).get(PROCESS_ENV)
    if not text:
        return None
    try:
        return parse_slot(text)
    except ValueError as exc:
        raise UsageError(f"run: {exc}") from None


def for_this_process(cfg: Config, env: Mapping[str, str] | None = None) -> Config:
    """``cfg`` as this process runs it (``daemon.processes.split.process_config``), unchanged when
    the supervisor did not start it. The generated cluster token is named beside the config's own
    state path (the supervisor wrote it), so every process checks the same token."""
    slot = this_slot(env)
    if slot is None:
        return cfg
    token = with_cluster_token(cfg, create=False).dispatcher.cluster_token_file
    return process_config(cfg, slot[0], slot[1], socket.gethostname(), token)


class _Tag(logging.Filter):
    """Every line this process logs starts with its tag (``p1: ...``)."""

    def __init__(self, tag: str) -> None:
        super().__init__()
        self.tag = tag

    def filter(self, record: logging.LogRecord) -> bool:
        if not getattr(record, "process_tag", None):
            record.process_tag = self.tag
            record.msg = f"{self.tag}: {record.msg}"
        return True


def tag_lines(tag: str) -> None:
    """Tag the lines of every handler of the root logger (``daemon.observe.audit.configure_logging``'s)."""
    for handler in logging.getLogger().handlers:
        handler.addFilter(_Tag(tag))


__all__ = ["for_this_process", "tag_lines", "this_slot"]
