"""A what-if for a model that has latency profiles but is not in the config yet: ``plan``,
``simulate`` and ``capacity`` take ``--model M --qos-ms T`` (issue 14, item 7)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from daemon.cli import main


@pytest.fixture()
def cfg(tmp_path: Path) -> str:
    p = tmp_path / "costscale.yaml"
    p.write_text("cluster: test\nbudget_per_hour: 2.5\nmodels:\n  - name: ncf\n    qos_ms: 5\n"
                 "instance_types:\n  - type: g4dn.xlarge\n  - type: c5n.2xlarge\n"
                 "launch:\n  ami_id: ami-0123456789abcdef0\n", encoding="utf-8")
    return str(p)


def test_plan_a_profiled_model_the_config_does_not_have(cfg: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", cfg, "--model", "rm2", "--qos-ms", "350", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["model"] == "rm2" and sum(d["chosen"].values()) > 0


def test_simulate_and_capacity_take_the_what_if_too(cfg: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", cfg, "--model", "rm2", "--qos-ms", "350", "--pool", "g4dn.xlarge=1",
                 "--rate", "20", "--duration", "5", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)


def test_without_qos_ms_it_says_what_to_give(cfg: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", cfg, "--model", "rm2"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "give --qos-ms" in err


def test_a_model_nobody_profiled_is_still_unknown(cfg: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", cfg, "--model", "nope", "--qos-ms", "10"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "unknown model 'nope'" in err and "profiled: " in err
