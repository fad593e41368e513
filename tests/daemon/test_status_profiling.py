"""``costscale status`` says when a model is being profiled and served on a conservative pool
(issue 15): a daemon serving a user's ONNX model that no profile CSV knows measures it here, holds
the conservative pool (the cheapest type meeting its SLO at its largest batch by the local
estimate) while it waits to measure it on the fleet, and Status -- ``status --json``, the human
view and ``/metrics`` -- says which model, which pool and why, and the types not measured yet.
In process over the fake cloud (no worker registers: the profiler keeps waiting for its pool)."""
from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from config.schema import Config
from scaler.cloud.fake import FakeCloud
from tests.byom_helpers import KAIROS_TYPES, MODEL, build_user_model, user_config
from tests.dispatcher.test_dispatcher_live import run
from tests.daemon.test_status import cli, scrape

REASON = "r5n.large meets p99 <= 50 ms at batch 64 by the local estimate ("


def test_status_says_a_model_is_profiled_and_served_on_a_conservative_pool(tmp_path: Path) -> None:
    from daemon.app import Daemon

    onnx_path = build_user_model(tmp_path / "mymodel.onnx")
    cfg = Config.model_validate(user_config(
        tmp_path, onnx_path, dispatcher={"listen": "127.0.0.1:0"}, metrics={"listen": "127.0.0.1:0"},
        launch={"ami_id": "ami-1", "pending_timeout_s": 300}, intervals={"fleet_s": 3600, "reconcile_s": 3600}))

    async def body() -> tuple[dict[str, Any], str, dict, dict[str, Any]]:
        d = Daemon(cfg, None, cloud=FakeCloud(cfg.cluster), listen="127.0.0.1:0")
        await d.start()
        try:
            prof = d.profiling
            assert prof is not None and prof._task is not None
            while not prof.hold():           # measured here, estimated per type: the conservative pool
                assert not prof._task.done(), prof._task
                await asyncio.sleep(0.05)
            rc, out, err = await cli("status", "--dispatcher", f"127.0.0.1:{d.port}", "--json")
            assert rc == 0, err
            rc, text, err = await cli("status", "--dispatcher", f"127.0.0.1:{d.port}")
            assert rc == 0, err
            assert d.metrics is not None
            metrics = await asyncio.to_thread(scrape, d.metrics.port)
            prof.held.clear(), prof.todo.clear()       # as when the round ends: nothing said any more
            rc, after, err = await cli("status", "--dispatcher", f"127.0.0.1:{d.port}", "--json")
            assert rc == 0, err
            return json.loads(out), text, metrics, json.loads(after)
        finally:
            await d.stop(grace=0.0)

    st, text, metrics, after = run(body, timeout=120)
    [p] = st["profiling"]
    assert p["model"] == MODEL and p["conservative_pool"] == {"r5n.large": 1} and p["probing"] is False
    assert p["reason"].startswith(REASON) and p["reason"].endswith("and is the cheapest that does")
    assert p["types_left"] == list(KAIROS_TYPES)
    assert st["pool"] == {"r5n.large": 1}              # the fleet holds it
    line = next(ln for ln in text.splitlines() if "being profiled" in ln)
    assert line.startswith(f"  {MODEL}: being profiled (not measured yet on {', '.join(KAIROS_TYPES)}); served on "
                           f"a conservative pool r5n.large×1 until then: {REASON}"), line
    assert metrics[("costscale_model_profiling", (("model", MODEL),))] == 1
    assert after["profiling"] == []


def test_a_model_planned_from_its_local_estimates_is_said_so() -> None:
    from daemon.commands.status import render, status_dict
    from dispatcher.proto import costscale_pb2 as pb

    reply = pb.StatusReply(cluster="c", budget_per_hour=1.0, daemon=True)
    reply.profiling.add(model="m", reason="planned from its local estimates", types_left=["t3.xlarge"], probing=True)
    st = status_dict(reply)
    assert st["profiling"] == [{"model": "m", "conservative_pool": None, "reason": "planned from its local estimates",
                                "types_left": ["t3.xlarge"], "probing": True}]
    assert "  m: being profiled (probes up; not measured yet on t3.xlarge); planned from its local estimates" in \
        render(st, "127.0.0.1:1", 0.0).splitlines()
