"""Acceptance: bring your own model, end to end against moto in server mode on 127.0.0.1.

A user's ONNX model (built here with onnx.helper) that no profile CSV knows: ``validate`` warns and
names ``costscale profile``; the daemon measures it here, holds a conservative pool for it (the
cheapest type meeting its SLO at its largest batch by the local estimate), measures it on that
pool's running worker and on probes for the other types (launched through the actuator within the
budget, terminated after), then plans from the measured profiles and serves queries. The $/hr of
pending + running instances is recorded after every launch: it never exceeds the budget.
"""
from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import grpc
import pytest

from config.catalog import load_catalog
from config.schema import Config
from daemon.cli import main as cli_main
from scaler.cloud.ec2 import Ec2Cloud
from tests.byom_helpers import KAIROS_TYPES, MODEL, build_user_model, user_config, write_config

pytestmark = pytest.mark.slow
BUDGET = 1.0


class RecordingCloud:
    """The EC2 provider, with the live $/hr recorded after every launch."""

    def __init__(self, inner: Ec2Cloud) -> None:
        self.inner = inner
        self.cluster = inner.cluster
        self.prices = {t: it.price_per_hour for t, it in load_catalog().items()}
        self.live_costs: list[float] = []

    def launch(self, instance_type, count, client_token, tags=None):  # noqa: ANN001, ANN201
        got = self.inner.launch(instance_type, count, client_token, tags)
        self.live_costs.append(sum(self.prices[i.instance_type] for i in self.inner.list_managed() if i.live))
        return got

    def __getattr__(self, name: str):  # noqa: ANN204
        return getattr(self.inner, name)


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


async def until(cond, timeout: float, what: str) -> None:  # noqa: ANN001
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        await asyncio.sleep(0.2)


def test_the_daemon_profiles_plans_and_serves_a_users_model(moto_endpoint: str, ec2_client, tmp_path: Path,  # noqa: ANN001
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    ami = ec2_client.describe_images()["Images"][0]["ImageId"]
    onnx_path = build_user_model(tmp_path / "mymodel.onnx")
    raw = user_config(tmp_path, onnx_path, budget_per_hour=BUDGET, objective="min_cost", headroom=0.5,
                      aws={"endpoint_url": moto_endpoint}, launch={"ami_id": ami, "pending_timeout_s": 120},
                      dispatcher={"listen": "127.0.0.1:0", "cluster_token": "t0ken"},
                      intervals={"fleet_s": 2, "model_s": 0.5, "reconcile_s": 30},
                      workload={"expected_qps": 5}, on_shutdown="terminate")
    path = write_config(tmp_path / "c.yaml", raw)
    assert cli_main(["validate", str(path)]) == 0
    assert f"costscale profile {path}" in capsys.readouterr().err
    asyncio.run(asyncio.wait_for(_scenario(Config.model_validate(raw), onnx_path, ec2_client), timeout=240))


async def _scenario(cfg: Config, onnx_path: Path, ec2) -> None:  # noqa: ANN001
    from daemon.app import Daemon
    from daemon.local.runner import LocalRunner
    from dispatcher.proto import costscale_pb2 as pb, costscale_pb2_grpc as pbg

    cloud = RecordingCloud(Ec2Cloud(cfg.cluster, cfg.region, cfg.launch, endpoint_url=cfg.aws.endpoint_url,
                                    models=[(MODEL, str(onnx_path))]))
    log = Lines()
    logging.getLogger("costscale").addHandler(log)
    logging.getLogger("costscale").setLevel(logging.INFO)
    holder: dict[str, LocalRunner] = {}

    async def on_fleet_change(instances):  # noqa: ANN001
        if "r" in holder:
            await holder["r"].sync(instances)

    daemon = Daemon(cfg, None, cloud=cloud, on_fleet_change=on_fleet_change, listen="127.0.0.1:0")
    await daemon.start()
    holder["r"] = runner = LocalRunner(f"127.0.0.1:{daemon.port}", daemon.dispatcher.cluster_token(), [(MODEL, str(onnx_path), MODEL)])
    try:
        prof = daemon.profiling
        assert prof is not None and prof._task is not None
        await until(lambda: prof._task.done(), 180, "profiling on the fleet")
        prof._task.result()
        held = [ln for ln in log.lines if "served on a conservative pool" in ln]
        assert held and held[0].startswith(f"model {MODEL} has no latency profiles: served on a conservative pool "
                                           "r5n.large×1 (r5n.large meets p99 <= 50 ms at batch 64")
        # measured (not estimated) on every type: the running r5n.large worker and probes for the rest
        for t in KAIROS_TYPES:
            p = daemon.registry.profile(MODEL, t)
            assert p is not None and not p.provider.startswith("estimate"), t
        outcome = prof.probes
        assert outcome is not None and sorted(outcome.instances.values()) == ["c5n.2xlarge", "g4dn.xlarge", "t3.xlarge"]
        assert outcome.left_running == [] and outcome.failed == {} and outcome.cost > 0
        described = ec2.describe_instances(InstanceIds=sorted(outcome.instances))
        assert {i["State"]["Name"] for r in described["Reservations"] for i in r["Instances"]} <= {"shutting-down",
                                                                                                  "terminated"}
        # then the planner's pool, and queries served on it
        await until(lambda: daemon.status.plan is not None and bool(daemon.dispatcher.workers), 60, "a planned pool")
        ok = 0
        async with grpc.aio.insecure_channel(f"127.0.0.1:{daemon.port}") as ch:
            stub = pbg.InferenceStub(ch)
            for i in range(20):
                reply = await stub.Submit(pb.SubmitRequest(model=MODEL, batch_size=1 + i % 64), timeout=10.0)
                ok += reply.instance_type in KAIROS_TYPES
        assert ok == 20
        assert max(cloud.live_costs) <= BUDGET + 1e-9
        assert any("fleet (" in ln and "conservative pool" in ln for ln in log.lines)
    finally:
        logging.getLogger("costscale").removeHandler(log)
        await daemon.stop(grace=3.0)
        await runner.stop_all()
    live = [i for r in ec2.describe_instances()["Reservations"] for i in r["Instances"]
            if i["State"]["Name"] in ("pending", "running")]
    assert live == []
