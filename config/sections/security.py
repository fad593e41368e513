"""Who may talk to the daemon, and over what: the TLS and client-authentication parts of the config,
the loopback rule, and reading the files they name (certificates, keys, tokens) with one-line errors.

The rule (issue #14, deliverable 4): nothing listens beyond loopback without client
authentication. A client authenticates with a bearer token (``dispatcher.auth_token_file``, sent
as ``authorization: Bearer <token>`` metadata, compared in constant time) or a client certificate
(mutual TLS, ``dispatcher.tls.client_ca_file``). Workers register with the cluster token, which the
daemon generates (0600) when ``listen`` is not loopback and the config names none.
"""
from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ConfigDict, Field

from config.errors import ConfigError
from config.hostport import split_hostport

#: the config (``config.schema.Config``, not imported: the schema builds on this module)
ConfigT = TypeVar("ConfigT", bound=BaseModel)

#: the server name a worker's certificate carries (a DNS SAN), checked by the dispatcher whatever
#: address the worker has: instances come and go with addresses no certificate can name in advance
DEFAULT_WORKER_SERVER_NAME = "costscale-worker"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TlsSpec(_Strict):
    """TLS on the dispatcher's port (clients, OIP clients and worker registration)."""

    cert_file: str = Field(..., description="PEM certificate chain the dispatcher presents")
    key_file: str = Field(..., description="PEM private key of that certificate")
    client_ca_file: str | None = Field(
        None, description="mutual TLS: clients must present a certificate signed by this PEM CA bundle")

    @property
    def mutual(self) -> bool:
        return self.client_ca_file is not None


class WorkerTlsSpec(_Strict):
    """TLS on the dispatcher's channels to its workers (Infer, Health, Load/UnloadVariant)."""

    ca_file: str = Field(..., description="PEM CA bundle that signed the workers' certificates")
    cert_file: str | None = Field(None, description="the dispatcher's client certificate (workers with mTLS)")
    key_file: str | None = Field(None, description="its private key")
    server_name: str = Field(DEFAULT_WORKER_SERVER_NAME,
                             description="the name (DNS SAN) every worker certificate carries")


#: where a launched worker finds its TLS files (baked into the AMI, or written by launch.user_data)
WORKER_TLS_DIR = "/etc/costscale/tls"


def worker_tls_flags(tls: TlsSpec | None, worker_tls: WorkerTlsSpec | None) -> list[str]:
    """The ``costscale worker`` flags a launched worker needs for the configured TLS: the CA of the
    dispatcher's certificate (``ca.crt``) to register over TLS, and its own certificate and key
    (``worker.crt``, ``worker.key``; presented to a dispatcher under mutual TLS as well), with
    ``ca.crt`` as the CA its clients need when the dispatcher presents a client certificate."""
    flags: list[str] = []
    ca = f"{WORKER_TLS_DIR}/ca.crt"
    if tls is not None:
        flags += ["--dispatcher-ca", ca]
    if worker_tls is not None or (tls is not None and tls.mutual):
        flags += ["--tls-cert", f"{WORKER_TLS_DIR}/worker.crt", "--tls-key", f"{WORKER_TLS_DIR}/worker.key"]
    if worker_tls is not None and worker_tls.cert_file:
        flags += ["--tls-client-ca", ca]
    return flags


def is_loopback(hostport: str) -> bool:
    """True when HOST of HOST:PORT is a loopback address or ``localhost`` (not ``0.0.0.0``)."""
    host, _ = split_hostport(hostport)
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def client_auth_missing(listen: str, auth_token_file: str | None, tls: TlsSpec | None) -> str | None:
    """The one line why a dispatcher may not listen on ``listen`` (not loopback, and neither a
    bearer token nor mutual TLS authenticates clients); None when it may."""
    if is_loopback(listen) or auth_token_file or (tls is not None and tls.mutual):
        return None
    return (f"dispatcher: listen {listen} is not loopback and no client authentication is configured: "
            "set dispatcher.auth_token_file (bearer token) or dispatcher.tls.client_ca_file (mutual TLS)")


#: what the daemon reads once, at start, by config section (None: every field of it): the addresses
#: it binds, the certificates and tokens it loads, the interceptors it builds from them, and the
#: whole dispatcher (its policy, queue limit, deadline rule, batching and payload limit are built
#: into the Dispatcher at start; a reload once logged them as applied and kept the old ones).
#: A reload keeps the running values and says which changed.
RESTART_ONLY: dict[str, tuple[str, ...] | None] = {
    "dispatcher": None,
    "metrics": ("listen", "public"),
    "lease": None,          # the lease, its table and the replica role are taken at start (daemon.aws.wiring, daemon.replicas.role)
    "state_retention": ("every_s",),   # the prune job's interval (daemon.loops.fleet_upkeep.schedule_pruning)
}


def restart_only_changes(running: ConfigT, new: ConfigT) -> tuple[ConfigT, list[str]]:
    """``new`` with the running values of the :data:`RESTART_ONLY` settings, and the names of those
    it changed (``dispatcher.tls``, ...; names only: a token is a secret)."""
    changed: list[str] = []
    kept = {}
    for section, only in RESTART_ONLY.items():
        old, now = getattr(running, section), getattr(new, section)
        fields = only if only is not None else tuple(type(old).model_fields)
        changed += [f"{section}.{f}" for f in fields if getattr(now, f) != getattr(old, f)]
        kept[section] = now.model_copy(update={f: getattr(old, f) for f in fields})
    if new.pipelines != running.pipelines:  # type: ignore[attr-defined]      # the dispatcher builds its pipeline runner at start
        changed.append("pipelines")
        kept["pipelines"] = running.pipelines  # type: ignore[attr-defined]
    return new.model_copy(update=kept), changed


def read_file_bytes(path: str, field: str) -> bytes:
    """The bytes of a file the config names; ConfigError (one line naming the field) otherwise."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"{field}: cannot read {path} ({exc.strerror or exc})") from None
    if not data:
        raise ConfigError(f"{field}: {path} is empty")
    return data


def read_pem(path: str, field: str) -> bytes:
    """A PEM file (certificate, key or CA bundle); ConfigError when unreadable or not PEM."""
    data = read_file_bytes(path, field)
    if b"-----BEGIN " not in data:
        raise ConfigError(f"{field}: {path} is not a PEM file")
    return data


def read_token(path: str, field: str) -> str:
    """A secret token: the file's text, stripped; ConfigError when unreadable or empty."""
    try:
        token = read_file_bytes(path, field).decode("utf-8").strip()
    except UnicodeDecodeError:
        raise ConfigError(f"{field}: {path} is not UTF-8 text") from None
    if not token:
        raise ConfigError(f"{field}: {path} is empty")
    return token
