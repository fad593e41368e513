"""An unauthenticated client flooding the dispatcher's gRPC port (issue #40, fault (f)), run as its
own process: ``python -m tests.fault_flood_query PORT SEED SECONDS PAYLOAD_LIMIT``. Threads send,
for ``SECONDS``, a seeded mix of

* ``garbage``: random bytes on a plain TCP socket (no HTTP/2 preface);
* ``frames``: the HTTP/2 client preface, then random bytes as frames;
* ``malformed``: random bytes as the body of ``Inference/Submit`` (no token), of
  ``Control/RegisterWorker`` and of ``Inference/Status`` (a generic ``unary_unary`` with no serializer);
* ``oversized``: a body of 4 x ``PAYLOAD_LIMIT`` bytes to ``Inference/Submit``;
* ``bad_token``: a well-formed ``SubmitRequest`` with a wrong bearer token;

and prints one JSON line: per kind, how each call ended (a status code name; for the raw sockets
``closed`` when the server closed the connection, ``open`` when it still held it after 5 s).
127.0.0.1 only."""
from __future__ import annotations

import json
import random
import socket
import sys
import threading
import time
from collections import Counter

import grpc

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
KINDS = ("garbage", "frames", "malformed", "oversized", "bad_token")
METHODS = ("/costscale.v1.Inference/Submit", "/costscale.v1.Control/RegisterWorker", "/costscale.v1.Inference/Status")
THREADS = 4
#: field 1, length-delimited, 16 MiB long: any body shorter than that is a truncated message
TRUNCATED = b"\x0a\x80\x80\x80\x08"


def _raw(port: int, payload: bytes) -> str:
    """Send ``payload`` on a fresh connection; ``closed`` once the server closes it."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        try:
            s.sendall(payload)
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                if not s.recv(65536):
                    return "closed"
        except (ConnectionResetError, BrokenPipeError):
            return "closed"
        except socket.timeout:
            return "open"
    return "open"


def _call(ch: grpc.Channel, method: str, body: bytes, metadata: tuple[tuple[str, str], ...] = ()) -> str:
    try:
        ch.unary_unary(method)(body, timeout=5, metadata=metadata)
        return "OK"
    except grpc.RpcError as exc:
        return exc.code().name  # type: ignore[attr-defined, no-any-return]


def flood(port: int, seed: int, seconds: float, limit: int) -> dict[str, dict[str, int]]:
    """Flood ``127.0.0.1:port`` for ``seconds``; how each call ended, per kind."""
    from dispatcher.proto import costscale_pb2 as pb

    counts: dict[str, Counter[str]] = {k: Counter() for k in KINDS}
    mu = threading.Lock()
    end = time.monotonic() + seconds
    valid = pb.SubmitRequest(model="big", batch_size=1).SerializeToString()
    options = [("grpc.max_send_message_length", 8 * limit)]

    def worker(i: int) -> None:
        rng = random.Random(seed * 1000 + i)
        with grpc.insecure_channel(f"127.0.0.1:{port}", options=options) as ch:
            while time.monotonic() < end:
                kind = rng.choice(KINDS)
                if kind == "garbage":
                    out = _raw(port, b"\x00" + rng.randbytes(rng.randint(1, 4096)))
                elif kind == "frames":
                    out = _raw(port, PREFACE + rng.randbytes(rng.randint(9, 4096)))
                elif kind == "malformed":
                    body = TRUNCATED + rng.randbytes(rng.randint(1, 2048))
                    out = _call(ch, rng.choice(METHODS), body)
                elif kind == "oversized":
                    out = _call(ch, METHODS[0], rng.randbytes(4 * limit))
                else:
                    out = _call(ch, METHODS[0], valid, (("authorization", "Bearer not-the-token"),))
                with mu:
                    counts[kind][out] += 1

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {k: dict(sorted(c.items())) for k, c in counts.items()}


if __name__ == "__main__":
    port_, seed_, seconds_, limit_ = sys.argv[1:5]
    print(json.dumps(flood(int(port_), int(seed_), float(seconds_), int(limit_))), flush=True)
