"""The cluster token workers register with, when the config names none: a dispatcher that listens
beyond loopback must not accept a worker on its instance id alone (instance ids are not secrets), so
at first start the daemon generates a token into ``<state_path>.cluster-token`` (mode 0600, created
exclusively) and reads it back on every later start, reload and launch. On loopback, and when the
config names a token or a token file, nothing is generated. The token is never logged.
"""
from __future__ import annotations

import logging
import os
import secrets
from pathlib import Path

from config.errors import ConfigError
from config.schema import Config
from config.sections.security import is_loopback

log = logging.getLogger(__name__)

#: bytes of randomness in a generated token (256 bits, URL-safe base64 text)
TOKEN_BYTES = 32


def cluster_token_path(cfg: Config) -> Path:
    return Path(cfg.state_path + ".cluster-token")


def _create(path: Path) -> None:
    """Write a fresh token, 0600 whatever the umask; a file already there is kept (two starts race)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(secrets.token_urlsafe(TOKEN_BYTES) + "\n")
    log.info("generated a cluster token into %s (mode 0600); launched workers are given it", path)


def with_cluster_token(cfg: Config, listen: str | None = None, create: bool = True) -> Config:
    """``cfg``, with ``dispatcher.cluster_token_file`` set to the generated token's file when the
    dispatcher listens (on ``listen``, default ``dispatcher.listen``) beyond loopback and the config
    names no token; unchanged otherwise. ConfigError (one line) when the file cannot be written.
    ``create`` False (a reload: the dispatcher runs with the token it started with): the file is
    named, not written."""
    d = cfg.dispatcher
    if d.cluster_token or d.cluster_token_file or is_loopback(listen or d.listen):
        return cfg
    path = cluster_token_path(cfg)
    try:
        if create:
            _create(path)
    except OSError as exc:
        raise ConfigError(f"dispatcher.cluster_token_file: cannot create {path} ({exc.strerror or exc}); "
                          "name a token file in the config") from None
    return cfg.model_copy(update={"dispatcher": d.model_copy(update={"cluster_token_file": str(path)})})
