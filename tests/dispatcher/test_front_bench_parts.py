"""The front-end benchmark's pure parts (``bench/dispatch/front_bench.py``): nginx's config is the
demo's with upstream keepalive, room for every call in flight and no access log; ``--baseline``
adds a "before" row after each dispatcher row, and only after those."""
from __future__ import annotations

from pathlib import Path

from bench.dispatch.front_bench import (BEFORE, NGINX_CONNECTIONS, NGINX_KEEPALIVE, kinds_run,
                                        nginx_bench_config)
from daemon.demos.replica_cluster import nginx_config


def test_the_bench_nginx_config_is_the_demos_with_keepalive_connections_and_no_access_log() -> None:
    demo = nginx_config(Path("/tmp/x"), 9000, [9001, 9002])
    text = nginx_bench_config(Path("/tmp/x"), 9000, [9001, 9002])
    upstream = text[text.index("upstream costscale {"):text.index("}", text.index("upstream costscale {"))]
    assert upstream.splitlines()[1:] == ["    server 127.0.0.1:9001 max_fails=0;",
                                         "    server 127.0.0.1:9002 max_fails=0;",
                                         f"    keepalive {NGINX_KEEPALIVE};", "  "]
    assert f"worker_connections {NGINX_CONNECTIONS};" in text and "worker_connections 256;" not in text
    assert "  access_log off;" in text and "access_log /tmp/x/upstream.log" in demo
    assert "upstream.log" not in text
    assert "listen 127.0.0.1:9000 http2;" in text and "grpc_pass grpc://costscale;" in text


def test_a_baseline_adds_a_before_row_after_each_dispatcher_row() -> None:
    assert kinds_run("") == ["proxy", "proxy-1", "dispatcher", "dispatcher+stream", "nginx"]
    assert kinds_run("/some/checkout") == ["proxy", "proxy-1", "dispatcher", "dispatcher" + BEFORE, "dispatcher+stream",
                                           "dispatcher+stream" + BEFORE, "nginx"]
