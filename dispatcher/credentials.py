"""gRPC transport credentials from the config's TLS parts (:mod:`config.sections.security`): the
dispatcher's server credentials, its channel credentials to workers, and a worker's to the
dispatcher. grpc's own TLS (BoringSSL) does the work; this module only reads the PEM files and
says, in one line naming the field, when one is missing or not PEM.

The worker runtime imports this module too (it sits above the dispatcher), so both ends of a
channel read certificates the same way.
"""
from __future__ import annotations

from typing import Sequence

import grpc

from config.errors import ConfigError
from config.sections.security import TlsSpec, WorkerTlsSpec, read_pem


_CONFIG_FIELDS = ("dispatcher.tls.cert_file", "dispatcher.tls.key_file", "dispatcher.tls.client_ca_file")


def server_credentials(cert_file: str, key_file: str, client_ca_file: str | None = None,
                       fields: tuple[str, str, str] = _CONFIG_FIELDS) -> grpc.ServerCredentials:
    """TLS server credentials; with ``client_ca_file``, mutual TLS: a client without a certificate
    signed by that CA is refused during the handshake. ``fields`` name the three files in errors
    (config fields, or a worker's flags)."""
    cert = read_pem(cert_file, fields[0])
    key = read_pem(key_file, fields[1])
    ca = read_pem(client_ca_file, fields[2]) if client_ca_file else None
    return grpc.ssl_server_credentials([(key, cert)], root_certificates=ca, require_client_auth=ca is not None)


def dispatcher_server_credentials(tls: TlsSpec | None) -> grpc.ServerCredentials | None:
    """The dispatcher port's credentials; None: plaintext (loopback, or a token on a trusted network)."""
    if tls is None:
        return None
    return server_credentials(tls.cert_file, tls.key_file, tls.client_ca_file)


def channel_credentials(ca_file: str | None, cert_file: str | None = None, key_file: str | None = None,
                        fields: tuple[str, str, str] = ("ca_file", "cert_file", "key_file")) -> grpc.ChannelCredentials:
    """TLS channel credentials that trust ``ca_file`` (None: the system's roots) and present
    ``cert_file``/``key_file`` as the client certificate when both are given."""
    if bool(cert_file) != bool(key_file):
        raise ConfigError(f"{fields[1]}, {fields[2]}: give both for a client certificate, or neither")
    ca = read_pem(ca_file, fields[0]) if ca_file else None
    cert = read_pem(cert_file, fields[1]) if cert_file else None
    key = read_pem(key_file, fields[2]) if key_file else None
    return grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)


class WorkerChannelSecurity:
    """How the dispatcher dials its workers: credentials and the name their certificates carry
    (read once at start); :data:`PLAINTEXT` when the config has no ``dispatcher.worker_tls``."""

    def __init__(self, credentials: grpc.ChannelCredentials | None = None, server_name: str = "") -> None:
        self.credentials = credentials
        self.server_name = server_name

    @classmethod
    def from_spec(cls, spec: WorkerTlsSpec | None) -> "WorkerChannelSecurity":
        if spec is None:
            return PLAINTEXT
        names = tuple(f"dispatcher.worker_tls.{f}" for f in ("ca_file", "cert_file", "key_file"))
        return cls(channel_credentials(spec.ca_file, spec.cert_file, spec.key_file, names),  # type: ignore[arg-type]
                   spec.server_name)

    def options(self) -> Sequence[tuple[str, str]]:
        """Channel options: the certificate's name checked in place of the worker's address."""
        return [("grpc.ssl_target_name_override", self.server_name)] if self.credentials and self.server_name else []


PLAINTEXT = WorkerChannelSecurity()
