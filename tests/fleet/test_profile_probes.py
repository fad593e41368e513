"""``costscale profile CONFIG`` on the embedded default (moto in server mode on 127.0.0.1): one probe
per type that lacks a measured profile, launched through the fleet actuator (write-ahead intents,
cluster tags, the budget with the probes counted), measured through its worker (a local process, as
in the demo) and terminated; the command prints what the probes cost."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from config.catalog import load_catalog
from daemon.cli import main as cli_main
from scaler.cloud.ec2 import Ec2Cloud
from tests.byom_helpers import KAIROS_TYPES, MODEL, build_user_model, user_config, write_config

pytestmark = pytest.mark.slow


def test_probes_measure_every_type_within_the_budget_and_are_terminated(
        moto_endpoint: str, ec2_client, tmp_path: Path, capsys: pytest.CaptureFixture[str],  # noqa: ANN001
        monkeypatch: pytest.MonkeyPatch) -> None:
    ami = ec2_client.describe_images()["Images"][0]["ImageId"]
    onnx_path = build_user_model(tmp_path / "mymodel.onnx")
    raw = user_config(tmp_path, onnx_path, budget_per_hour=1.3, aws={"endpoint_url": moto_endpoint},
                      launch={"ami_id": ami, "pending_timeout_s": 120},
                      dispatcher={"listen": "127.0.0.1:0", "cluster_token": "t0ken"})
    cfg = write_config(tmp_path / "c.yaml", raw)
    prices = {t: it.price_per_hour for t, it in load_catalog().items()}
    live_costs: list[float] = []
    live_counts: list[int] = []
    launch = Ec2Cloud.launch

    def recording_launch(self, instance_type, count, client_token, tags=None):  # noqa: ANN001, ANN202
        got = launch(self, instance_type, count, client_token, tags)
        live = [i for i in self.list_managed() if i.live]
        live_costs.append(sum(prices[i.instance_type] for i in live))
        live_counts.append(len(live))
        return got

    monkeypatch.setattr(Ec2Cloud, "launch", recording_launch)
    assert cli_main(["profile", str(cfg), "--batches", "1,16,64", "--repeats", "2", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    probes = doc["probes"]
    assert sorted(probes["launched"].values()) == sorted(KAIROS_TYPES) and probes["failed"] == {}
    assert probes["left_running"] == [] and probes["cost_usd"] > 0
    assert probes["line"].startswith("probes: 4 launched and terminated")
    # 1.3 $/hr holds all four probes at once (1.2734 $/hr); never more than the budget
    assert max(live_costs) == pytest.approx(1.2734) and max(live_costs) <= 1.3 and max(live_counts) == 4
    m = doc["models"][0]
    assert m["model"] == MODEL and set(m["types"]) == set(KAIROS_TYPES)
    assert all(row["source"] == "measured" and row["provider"] == "CPUExecutionProvider"
               for row in m["types"].values())
    # every probe is terminated in EC2, and each carried the cluster's tags
    described = ec2_client.describe_instances(InstanceIds=sorted(probes["launched"]))
    insts = [i for r in described["Reservations"] for i in r["Instances"]]
    assert {i["State"]["Name"] for i in insts} <= {"shutting-down", "terminated"}
    assert all({"Key": "costscale:cluster", "Value": "byom"} in i["Tags"] for i in insts)
    # measured profiles are stored: plan finds them; a second run has nothing to probe
    assert cli_main(["plan", str(cfg), "--json"]) == 0
    assert sum(json.loads(capsys.readouterr().out)["chosen"].values()) >= 1
    assert cli_main(["profile", str(cfg)]) == 0
    assert "profiled on every type already" in capsys.readouterr().out
