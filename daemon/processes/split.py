"""Each process's config when one host runs ``dispatcher.processes: N`` (issue #41, deliverable 4).

Pure: the config a process runs with, from the user's config, the process's index and count and
this host's name. ``costscale run`` with N > 1 is a supervisor (:mod:`daemon.processes.supervisor`)
that starts N ``costscale run`` processes, each given ``COSTSCALE_PROCESS=I/N``; process I runs
:func:`process_config`'s config:

* the same ``dispatcher.listen`` for all: each binds it with SO_REUSEPORT and the kernel spreads
  new connections over them (one connection stays on one process), plus a private port of its own
  (the same host, port 0) where the other processes forward to it (:mod:`dispatcher.forwarding`);
* ``lease.replicas`` on, with the replica id ``pI@HOST:PORT`` (``lease.replica_id``, when set, in
  place of ``HOST:PORT``): the N processes are replicas of one cluster, so one of them holds the
  lease and runs the fleet, and the workers are shared by the replica ownership that exists
  (``scaler.replicas.owning_replicas``: each worker matched by one process at a time);
* its own files where two processes cannot share one: the state store (SQLite, locked by one
  daemon) and what lives beside it, the audit log, the metrics port. Process 0 keeps the names
  the config gives (``state.db``, ``audit.log``, port 9464); process I > 0 gets ``state.pI.db``,
  ``audit.pI.log`` and the metrics port + I;
* the generated cluster token (``daemon.aws.cluster_token``: beside the state store) stays the
  one beside the config's state path, so every process checks the same token.
"""
from __future__ import annotations

from pathlib import PurePath

from config.schema import Config
from daemon.replicas.naming import replica_address, replica_id

#: the environment variable the supervisor gives each process: ``I/N``
PROCESS_ENV = "COSTSCALE_PROCESS"


def process_replica_id(index: int, base: str) -> str:
    """Process ``index``'s replica id on the host whose replica id is ``base``: ``pI@BASE``."""
    return f"p{index}@{base}"


def process_of(replica: str) -> tuple[int, str] | None:
    """(index, the host's id) of a process's replica id (:func:`process_replica_id`), or None for a
    replica that is not one of several processes of a host."""
    proc, at, base = replica.partition("@")
    if at and proc[:1] == "p" and proc[1:].isdigit():
        return int(proc[1:]), base
    return None


def parse_slot(text: str) -> tuple[int, int]:
    """``I/N`` from :data:`PROCESS_ENV`; ValueError when it is not 0 <= I < N."""
    i, _, n = text.partition("/")
    index, count = int(i), int(n)
    if not 0 <= index < count:
        raise ValueError(f"{PROCESS_ENV}={text}: want I/N with 0 <= I < N")
    return index, count


def suffixed(path: str, index: int) -> str:
    """``path`` for process ``index``: unchanged for 0, ``.pI`` before the last suffix otherwise
    (``/var/lib/costscale/state.db`` → ``state.p1.db``; ``audit.log`` → ``audit.p1.log``; a
    name without a suffix gets ``.pI`` at its end)."""
    if index == 0 or path == ":memory:":
        return path
    p = PurePath(path)
    return str(p.with_name(f"{p.stem}.p{index}{p.suffix}")) if p.suffix else f"{path}.p{index}"


def _port_plus(hostport: str, index: int) -> str:
    host, _, port = hostport.rpartition(":")
    return hostport if int(port) == 0 else f"{host}:{int(port) + index}"


def base_replica_id(cfg: Config, host: str) -> str:
    """The host's replica id before the process index: what one daemon on ``dispatcher.listen`` is
    (``daemon.replicas.naming.replica_id``: ``lease.replica_id``, else HOST:PORT with this host's name for
    a loopback or wildcard HOST)."""
    port = int(cfg.dispatcher.listen.rpartition(":")[2])
    return replica_id(cfg, replica_address(cfg.dispatcher.listen, port, host), host)


def process_config(cfg: Config, index: int, count: int, host: str, token_file: str | None = None) -> Config:
    """The config process ``index`` of ``count`` runs (module docstring). ``token_file``: the
    generated cluster token's file (beside the config's state path), kept for every process."""
    d, lease = cfg.dispatcher, cfg.lease
    upd_d: dict[str, object] = {"processes": count}
    if token_file and not (d.cluster_token or d.cluster_token_file):
        upd_d["cluster_token_file"] = token_file
    update: dict[str, object] = {
        "dispatcher": d.model_copy(update=upd_d),
        "lease": lease.model_copy(update={"replicas": True,
                                          "replica_id": process_replica_id(index, base_replica_id(cfg, host))}),
        "state_path": suffixed(cfg.state_path, index),
    }
    if cfg.metrics.listen:
        update["metrics"] = cfg.metrics.model_copy(update={"listen": _port_plus(cfg.metrics.listen, index)})
    if cfg.audit_log is not None:
        update["audit_log"] = cfg.audit_log.model_copy(update={"path": suffixed(cfg.audit_log.path, index)})
    return cfg.model_copy(update=update)


__all__ = ["PROCESS_ENV", "base_replica_id", "parse_slot", "process_config", "process_of",
           "process_replica_id", "suffixed"]
