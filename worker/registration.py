"""How a worker joins its dispatcher: ``Control.RegisterWorker`` retried with exponential backoff
(at most 10 s apart) until the dispatcher answers; a refusal (accepted=false, or the token denied;
another costscale or protocol version among them, ``config.version``) is final, an unreachable
dispatcher gives up after ``register_attempts``, and a token refused while
the cluster token rotates is read again and retried (:mod:`worker.token`). The channel is TLS
trusting ``dispatcher_ca`` (the worker's certificate as its client certificate) or plaintext."""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable

import grpc

from config.version import PROTOCOL_VERSION, costscale_version
from dispatcher.auth import TOKEN_REFRESH_S, TokenRing
from dispatcher.credentials import channel_credentials
from dispatcher.proto import costscale_pb2 as pb, costscale_pb2_grpc as pbg
from worker.options import WorkerOptions
from worker.token import TokenKeeper

log = logging.getLogger("worker.server")   # the worker's own lines, as before the split

#: the longest wait between two registration attempts (s)
MAX_BACKOFF_S = 10.0


class RegistrationRefused(RuntimeError):
    """The dispatcher answered RegisterWorker with accepted=false (or denied the token)."""


class RegistrationFailed(RuntimeError):
    """The dispatcher could not be reached within the allowed attempts."""


class DispatcherLink:
    """The worker's side of registration: the channel to the dispatcher and the retrying
    RegisterWorker call. ``ring`` and ``keeper``: the cluster token as the server holds it now
    (set when it starts)."""

    def __init__(self, opts: WorkerOptions, ring: Callable[[], TokenRing | None],
                 keeper: Callable[[], TokenKeeper | None]) -> None:
        self.opts = opts
        self._ring = ring
        self._keeper = keeper
        self._creds: grpc.ChannelCredentials | None = None   # read once, on first use

    def channel(self) -> grpc.aio.Channel:
        """The channel to the dispatcher: TLS trusting ``dispatcher_ca`` (this worker's certificate
        as its client certificate, for a dispatcher under mutual TLS) or plaintext without one."""
        assert self.opts.dispatcher
        if not self.opts.dispatcher_ca:
            return grpc.aio.insecure_channel(self.opts.dispatcher)
        if self._creds is None:    # not on every registration retry
            self._creds = channel_credentials(self.opts.dispatcher_ca, self.opts.tls_cert, self.opts.tls_key,
                                              ("--dispatcher-ca", "--tls-cert", "--tls-key"))
        return grpc.aio.secure_channel(self.opts.dispatcher, self._creds)

    async def register(self, address: str, providers: list[str], executor: str) -> pb.RegisterWorkerReply:
        """Control.RegisterWorker with retries (exponential backoff, at most 10 s apart) until the
        dispatcher answers. Raises RegistrationRefused / RegistrationFailed."""
        assert self.opts.dispatcher, "no dispatcher address"
        req = pb.RegisterWorkerRequest(
            instance_id=self.opts.instance_id, instance_type=self.opts.instance_type,
            address=address, token=self.opts.token, providers=providers, executor=executor,
            costscale_version=costscale_version(), protocol_version=PROTOCOL_VERSION)
        delay, attempt = self.opts.register_backoff_s, 0
        rotating_until = time.monotonic() + 2 * TOKEN_REFRESH_S    # a dispatcher may read a rotated token later
        while True:
            attempt += 1
            ring, keeper = self._ring(), self._keeper()
            if ring is not None:
                req.token = ring.outbound()
            try:
                async with self.channel() as ch:
                    reply = await pbg.ControlStub(ch).RegisterWorker(req, timeout=5.0)
            except grpc.aio.AioRpcError as exc:
                if exc.code() in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
                    raise RegistrationRefused(exc.details() or exc.code().name) from None
                if self.opts.register_attempts is not None and attempt >= self.opts.register_attempts:
                    raise RegistrationFailed(f"dispatcher {self.opts.dispatcher} unreachable after {attempt} "
                                             f"attempt(s): {exc.code().name}") from None
                log.warning("registering with %s failed (%s); retrying in %.1f s",
                            self.opts.dispatcher, exc.code().name, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, MAX_BACKOFF_S)
                continue
            if not reply.accepted and reply.message == "bad cluster token" and keeper is not None \
                    and time.monotonic() < rotating_until:     # rotated: one side has not read it yet
                await keeper.refresh()
                await asyncio.sleep(delay)
                delay = min(delay * 2, MAX_BACKOFF_S)
                continue
            if not reply.accepted:
                raise RegistrationRefused(reply.message or "no reason given")
            log.info("registered with dispatcher %s as %s", self.opts.dispatcher, req.address)
            return reply


__all__ = ["DispatcherLink", "MAX_BACKOFF_S", "RegistrationFailed", "RegistrationRefused"]
