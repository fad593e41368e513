"""A local instance metadata service (IMDSv2) standing for EC2's, for ``costscale demo --spot`` and
the tests (issue #28): session tokens from ``PUT /latest/api/token``, metadata only with a valid
token (401 otherwise), 404 for what is not set. ``/{instance id}/latest/...`` serves one instance's
view (the local runner points each worker at its own, ``--imds-endpoint``), ``/latest/...`` the
default one. :meth:`LocalImds.interrupt` gives an instance EC2's spot interruption notice. An
adapter: a stdlib HTTP server on 127.0.0.1 in a thread; it decides nothing."""
from __future__ import annotations

import json
import threading
import time
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class LocalImds:
    def __init__(self) -> None:
        self.docs: dict[tuple[str, str], str] = {}      # (instance id or "", path under meta-data/) -> body
        self.tokens: set[str] = set()
        self.puts = 0
        self.unauthorized = 0
        self.asked: dict[str, int] = {}                  # instance id -> GETs
        #: (instance id, path) -> monotonic times a set document was served (a worker read its notice)
        self.served: dict[tuple[str, str], list[float]] = {}
        imds = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a: Any) -> None:
                pass

            def _send(self, code: int, body: str = "") -> None:
                self.send_response(code)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body.encode())

            def _split(self) -> tuple[str, str]:
                head, sep, rest = self.path.lstrip("/").partition("latest/")
                return head.strip("/"), rest

            def do_PUT(self) -> None:
                _, rest = self._split()
                if rest != "api/token" or "X-aws-ec2-metadata-token-ttl-seconds" not in self.headers:
                    return self._send(400)
                imds.puts += 1
                tok = f"tok{imds.puts}"
                imds.tokens.add(tok)
                self._send(200, tok)

            def do_GET(self) -> None:
                if self.headers.get("X-aws-ec2-metadata-token") not in imds.tokens:
                    imds.unauthorized += 1
                    return self._send(401)
                iid, rest = self._split()
                imds.asked[iid] = imds.asked.get(iid, 0) + 1
                key = (iid, rest.removeprefix("meta-data/"))
                doc = imds.docs.get(key)
                if doc is not None:
                    imds.served.setdefault(key, []).append(time.monotonic())
                self._send(404) if doc is None else self._send(200, doc)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def interrupt(self, instance_id: str, at_epoch: float) -> None:
        """EC2's two-minute notice for ``instance_id``: reclaimed at ``at_epoch``."""
        stamp = datetime.fromtimestamp(at_epoch, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        self.docs[(instance_id, "spot/instance-action")] = json.dumps({"action": "terminate", "time": stamp})

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


__all__ = ["LocalImds"]
