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


def test_profile_bench_puts_each_sampled_stack_in_one_part() -> None:
    """py-spy's raw stacks (root first): a library leaf first, else the first project part on the stack."""
    from collections import Counter

    from bench.dispatch.profile_bench import OTHER, part_of, shares

    loop = "run_forever (asyncio/base_events.py:607);_run_once (asyncio/base_events.py:1922)"
    assert part_of(loop + ";round (dispatcher/routing.py:120);match (dispatcher/policies/kairos.py:88)").startswith(
        "matching round")
    assert part_of(loop + ";submit (dispatcher/admission.py:200);SerializeToString (google/protobuf/message.py:1)") \
        .startswith("protobuf")
    assert part_of(loop + ";_run (asyncio/events.py:80)").startswith("the event loop")
    assert part_of("_bootstrap_inner (threading.py:1045);run (threading.py:982)").startswith("threads besides")
    assert part_of("main (bench.py:1)") == OTHER
    others: Counter[str] = Counter()
    got = shares([loop + ";round (dispatcher/routing.py:120) 7", "main (bench.py:1) 2", "garbage"], others)
    assert sum(got.values()) == 9 and got[OTHER] == 2 and others == Counter({"main (bench.py:1)": 2})
