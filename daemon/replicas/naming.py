"""A dispatcher replica's address and id (pure: ``daemon.replicas.role`` and
``daemon.processes.split`` name replicas the same way)."""
from __future__ import annotations

import socket

from config.schema import Config
from config.sections.security import is_loopback


def replica_address(listen: str, port: int, hostname: str | None = None) -> str:
    """Where the other replicas reach this one: the listener's host (this host's name, ``hostname``
    or the system's, when it listens on every address) and the port it got."""
    host = listen.rpartition(":")[0]
    if host in ("", "0.0.0.0", "[::]", "::"):
        host = hostname or socket.gethostname()
    return f"{host}:{port}"


def replica_id(cfg: Config, address: str, host: str) -> str:
    """This replica's id: ``lease.replica_id``, else its address (:func:`replica_address`), with
    this ``host``'s name in place of a loopback address: every host running the same config behind
    a local proxy listens on the same 127.0.0.1:PORT, and the second one's heartbeat would be
    refused as a live duplicate of the first's."""
    if cfg.lease.replica_id:
        return cfg.lease.replica_id
    return f"{host}:{address.rpartition(':')[2]}" if is_loopback(address) else address


__all__ = ["replica_address", "replica_id"]
