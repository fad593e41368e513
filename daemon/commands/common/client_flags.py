"""How the client commands (``status``, ``models``, ``offline``) reach a dispatcher that has TLS or
client authentication: ``--tls`` / ``--ca PEM`` (TLS, trusting the system's roots or that CA),
``--cert PEM --key PEM`` (a client certificate, for mutual TLS) and ``--token-file F`` (a bearer
token, sent as ``authorization: Bearer <token>``). Without them: plaintext, as on loopback. Bad
files: one line, exit 2 (UsageError). :func:`call` makes one Inference call that way; the
dispatcher unreachable or refusing: one line, exit 1 (:class:`RpcFailed`)."""
from __future__ import annotations

import argparse
from typing import Any

import grpc

from config.errors import UsageError
from config.sections.security import read_token
from dispatcher.auth import bearer_metadata
from dispatcher.credentials import channel_credentials


def add_client_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("connection (a dispatcher with TLS or client authentication)")
    g.add_argument("--tls", action="store_true", help="TLS, trusting the system's root CAs")
    g.add_argument("--ca", metavar="PEM", help="TLS, trusting this CA for the dispatcher's certificate")
    g.add_argument("--cert", metavar="PEM", help="client certificate (mutual TLS), with --key")
    g.add_argument("--key", metavar="PEM", help="its private key")
    g.add_argument("--token-file", metavar="F", help="bearer token for the Inference API (dispatcher.auth_token_file)")


def open_channel(target: str, args: argparse.Namespace) -> grpc.Channel:
    """A channel to ``target`` as the flags say (TLS when --tls, --ca or --cert is given)."""
    ca, cert, key = getattr(args, "ca", None), getattr(args, "cert", None), getattr(args, "key", None)
    if not (getattr(args, "tls", False) or ca or cert or key):
        return grpc.insecure_channel(target)
    return grpc.secure_channel(target, channel_credentials(ca, cert, key, ("--ca", "--cert", "--key")))


def call_metadata(args: argparse.Namespace) -> tuple[tuple[str, str], ...] | None:
    """The bearer token's metadata (--token-file), or None."""
    path = getattr(args, "token_file", None)
    return bearer_metadata(read_token(path, "--token-file")) if path else None


class RpcFailed(UsageError):
    """The dispatcher unreachable, or refusing a call: one line, exit 1."""

    exit_code = 1


def call(target: str, method: str, request: Any, conn: argparse.Namespace | None = None,
         timeout: float = 30.0) -> Any:
    """The reply of the Inference service's ``method`` on the dispatcher at ``target``, over the
    channel and with the token ``conn``'s connection flags say (:func:`add_client_flags`; None:
    plaintext, no token). RpcFailed when it cannot be reached or refuses."""
    from dispatcher.proto import costscale_pb2_grpc as pbg

    conn = conn or argparse.Namespace()
    try:
        with open_channel(target, conn) as ch:
            return getattr(pbg.InferenceStub(ch), method)(request, timeout=timeout, metadata=call_metadata(conn))
    except grpc.RpcError as exc:
        code = exc.code()  # type: ignore[attr-defined]
        if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            raise RpcFailed(f"cannot reach dispatcher {target}: {code.name}") from None
        raise RpcFailed(f"{method}: {code.name}: {exc.details()}") from None  # type: ignore[attr-defined]
