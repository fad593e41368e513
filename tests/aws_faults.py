"""Transient AWS faults injected under botocore's retry handler (tests only).

``Faults(client)`` registers on the client's ``before-send`` event, botocore's documented hook
between a signed request and the HTTP layer: a handler that returns an ``AWSResponse`` answers the
attempt instead of the endpoint, and one that raises stands for the HTTP layer failing. Both happen
inside botocore's retry loop (``needs-retry``), so a fault injected here is retried, backed off and
given up on exactly as one from the network would be. (botocore's ``Stubber`` answers at
``before-call``, above that loop: nothing it returns is ever retried.)

Attempts of one call are told apart by botocore's ``amz-sdk-invocation-id`` header, the same on
every retry of a call. Every attempt is recorded (operation, call, attempt number, the query
parameters of an EC2 request, the fault it got).

``botocore_backoff`` in ``conftest.py`` keeps botocore's backoff from sleeping in the tests.
"""
from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Callable, Iterator
from urllib.parse import parse_qs

from botocore.awsrequest import AWSResponse
from botocore.exceptions import ConnectionClosedError, EndpointConnectionError, ReadTimeoutError

ANY = "*"


@dataclass(frozen=True)
class Fault:
    """An HTTP error response (``status`` with the service error ``code``) or a raised
    HTTP-layer exception (``exc``, built with the request's URL)."""

    status: int = 0
    code: str = ""
    exc: type[Exception] | None = None

    def __str__(self) -> str:
        return self.exc.__name__ if self.exc is not None else f"{self.status} {self.code}"


def http_error(status: int, code: str) -> Fault:
    return Fault(status=status, code=code)


def reset() -> Fault:
    """The connection closed before a response came (a reset)."""
    return Fault(exc=ConnectionClosedError)


def refused() -> Fault:
    """The endpoint could not be reached (a refused connect)."""
    return Fault(exc=EndpointConnectionError)


def read_timeout() -> Fault:
    return Fault(exc=ReadTimeoutError)


@dataclass
class Attempt:
    operation: str
    call: str                   # botocore's invocation id: one per call, kept by its retries
    number: int                 # 1-based, within the call
    params: dict[str, str]      # an EC2 (query protocol) request's parameters, first value each
    fault: Fault | None


class _Raw:
    """The ``raw`` of an ``AWSResponse``: its body in one chunk."""

    def __init__(self, body: bytes) -> None:
        self.body = body

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self.body


def _error_body(protocol: str, code: str) -> tuple[bytes, dict[str, str]]:
    message = f"injected {code}"
    if protocol in ("json", "rest-json"):
        body = json.dumps({"__type": code, "message": message}).encode()
        return body, {"Content-Type": "application/x-amz-json-1.0"}
    xml = (f'<?xml version="1.0" encoding="UTF-8"?><Response><Errors><Error><Code>{code}</Code>'
           f"<Message>{message}</Message></Error></Errors><RequestID>fault</RequestID></Response>")
    return xml.encode(), {"Content-Type": "text/xml"}


class Faults:
    """Planned faults on one boto3 client. ``queue``: the next attempts of an operation, whatever
    call they belong to, take these faults in turn; ``per_call``: attempt k of every call takes
    the k-th fault; ``always``: every attempt fails. An attempt with no fault goes to the endpoint,
    or, with ``answer`` (operation → (status, body)), is answered by it (a service moto lacks)."""

    def __init__(self, client: Any, answer: Callable[[str], tuple[int, bytes]] | None = None) -> None:
        self.protocol = client.meta.service_model.protocol
        self.answer = answer
        self.attempts: list[Attempt] = []
        self._queued: dict[str, list[Fault]] = defaultdict(list)
        self._per_call: dict[str, list[Fault]] = {}
        self._always: dict[str, Fault] = {}
        self._numbers: dict[str, int] = defaultdict(int)
        client.meta.events.register("before-send", self._before_send)

    def queue(self, operation: str, *faults: Fault) -> None:
        self._queued[operation].extend(faults)

    def per_call(self, *faults: Fault, operation: str = ANY) -> None:
        self._per_call[operation] = list(faults)

    def always(self, operation: str, fault: Fault) -> None:
        self._always[operation] = fault

    def clear(self) -> None:
        self._queued.clear()
        self._per_call.clear()
        self._always.clear()

    def calls(self, operation: str) -> list[list[Attempt]]:
        """The calls of ``operation``, each as its attempts in order."""
        by_call: dict[str, list[Attempt]] = {}
        for a in self.attempts:
            if a.operation == operation:
                by_call.setdefault(a.call, []).append(a)
        return list(by_call.values())

    def _fault_for(self, operation: str, number: int) -> Fault | None:
        for op in (operation, ANY):
            if op in self._always:
                return self._always[op]
            if self._queued.get(op):
                return self._queued[op].pop(0)
            planned = self._per_call.get(op)
            if planned is not None and number <= len(planned):
                return planned[number - 1]
        return None

    def _before_send(self, request: Any, event_name: str, **_: Any) -> AWSResponse | None:
        operation = event_name.rsplit(".", 1)[-1]
        call = request.headers.get("amz-sdk-invocation-id", b"")
        call = call.decode() if isinstance(call, bytes) else str(call)
        self._numbers[call] += 1
        number = self._numbers[call]
        body = request.body.decode() if isinstance(request.body, bytes) else (request.body or "")
        params = {k: v[0] for k, v in parse_qs(body).items()} if self.protocol in ("ec2", "query") else {}
        fault = self._fault_for(operation, number)
        self.attempts.append(Attempt(operation, call, number, params, fault))
        if fault is not None and fault.exc is not None:
            raise fault.exc(endpoint_url=request.url, error="injected")
        if fault is not None:
            data, headers = _error_body(self.protocol, fault.code)
            return AWSResponse(request.url, fault.status, headers, _Raw(data))
        if self.answer is not None:
            status, data = self.answer(operation)
            return AWSResponse(request.url, status, {"Content-Type": "application/x-amz-json-1.1"}, _Raw(data))
        return None
