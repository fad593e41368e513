"""``costscale validate`` refuses what would pass the schema and fail later (issue: a new user's
trial): duplicate keys, infinite numbers, unknown regions, budgets no type fits, minimum counts
over the budget, unreadable profile CSVs, and launched workers told to dial 127.0.0.1."""
from __future__ import annotations

from pathlib import Path

import pytest

from config.checks import config_problems, known_regions
from config.sections.security import is_loopback
from config.errors import ConfigError
from config.schema import parse_config_text
from tests.validate_helpers import validate_text

BASE = """\
cluster: t
budget_per_hour: 2.5
models:
  - name: ncf
    qos_ms: 5
instance_types:
  - type: g4dn.xlarge
  - type: r5n.large
launch:
  ami_id: ami-1
dispatcher:
  listen: 127.0.0.1:50051
  advertise: 10.0.0.5:50051
"""


def test_the_base_config_is_valid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = validate_text(tmp_path, BASE, capsys)
    assert code == 0 and out[-1].endswith("ok (cluster t, budget 2.5 $/hr, 1 model(s), 2 instance type(s))")


@pytest.mark.parametrize("text, expect", [
    # YAML keeps the last of two equal keys: 250 $/hr instead of 2.5 must not pass as "ok"
    (BASE.replace("budget_per_hour: 2.5\n", "budget_per_hour: 2.5\nbudget_per_hour: 250\n"),
     "line 3: budget_per_hour: duplicate key (first given at line 2)"),
    (BASE.replace("    qos_ms: 5\n", "    qos_ms: 5\n    qos_ms: 50\n"),
     "line 6: models[0].qos_ms: duplicate key (first given at line 5)"),
    (BASE.replace("budget_per_hour: 2.5", "budget_per_hour: .inf"), "line 2: budget_per_hour: Input should be a finite number"),
    (BASE.replace("    qos_ms: 5", "    qos_ms: .nan"), "line 5: models[0].qos_ms: Input should be a finite number"),
    (BASE.replace("cluster: t", "cluster: t\nregion: mars-north-1"), "region: unknown AWS region 'mars-north-1'"),
    (BASE.replace("  - type: r5n.large", "  - type: r5n.large\n    min: 20"),
     "instance_types: the minimum counts (r5n.large×20) cost 2.980 $/hr, over budget_per_hour 2.5"),
    (BASE.replace("budget_per_hour: 2.5", "budget_per_hour: 0.1"),
     "budget_per_hour: 0.1 $/hr buys no allowed instance type (the cheapest, r5n.large, costs 0.149 $/hr)"),
    (BASE.replace("launch:", "profiles: nowhere.csv\nlaunch:"), "profiles: "),
    (BASE.replace("  advertise: 10.0.0.5:50051\n", ""), "dispatcher: listen 127.0.0.1:50051 is loopback and no advertise is set"),
])
def test_validate_refuses_what_would_fail_later(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str,
                                               expect: str) -> None:
    code, out = validate_text(tmp_path, text, capsys)
    assert code == 2
    assert any(expect in ln for ln in out), out
    assert not any("Traceback" in ln for ln in out)


def test_a_profile_csv_without_its_columns_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "p.csv").write_text("model,instance_type,batch_size\nncf,r5n.large,1\n")
    code, out = validate_text(tmp_path, BASE.replace("launch:", "profiles: p.csv\nlaunch:"), capsys)
    assert code == 2 and any("profile CSV lacks column(s)" in ln for ln in out), out


def test_an_emulated_cloud_may_keep_its_workers_on_loopback() -> None:
    cfg = parse_config_text(BASE.replace("  advertise: 10.0.0.5:50051\n", "")
                            + "aws:\n  endpoint_url: http://127.0.0.1:5000\n")
    assert config_problems(cfg) == []


def test_duplicate_keys_raise_a_config_error_naming_both_lines() -> None:
    with pytest.raises(ConfigError, match=r"line 3: cluster: duplicate key \(first given at line 1\)"):
        parse_config_text("cluster: a\nbudget_per_hour: 1\ncluster: b\n")


def test_regions_and_loopback_helpers() -> None:
    regions = known_regions()
    assert {"us-east-1", "eu-west-3", "ap-southeast-2"} <= regions and "mars-north-1" not in regions
    assert is_loopback("127.0.0.1:1") and is_loopback("localhost:1") and is_loopback("[::1]:1")
    assert not is_loopback("0.0.0.0:1") and not is_loopback("10.0.0.5:1") and not is_loopback("ctl.internal:1")


def test_validate_reads_the_certificates_keys_and_tokens_the_config_names(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """What `run` would refuse at start -- a TLS file or token file unreadable, empty or not PEM --
    `validate` refuses now, one line per file naming its field, never the file's contents."""
    from tests.tls_helpers import TestCa

    ca = TestCa(tmp_path / "ca")
    pem = ca.issue("dispatcher")
    (tmp_path / "token").write_text("tok-1\n")

    def text(cert: Path, key: Path, client_ca: Path, workers_ca: Path, token: Path, cluster: Path) -> str:
        return BASE + (f"  auth_token_file: {token}\n  cluster_token_file: {cluster}\n"
                       f"  tls: {{cert_file: {cert}, key_file: {key}, client_ca_file: {client_ca}}}\n"
                       f"  worker_tls: {{ca_file: {workers_ca}}}\n")

    good = (pem.cert, pem.key, ca.ca_file, ca.ca_file, tmp_path / "token", tmp_path / "token")
    code, out = validate_text(tmp_path, text(*good), capsys)
    assert code == 0, out
    (tmp_path / "plain.key").write_text("my-secret-key-material\n")
    (tmp_path / "empty").write_text("  \n")
    code, out = validate_text(tmp_path, text(tmp_path / "missing.crt", tmp_path / "plain.key", tmp_path / "empty",
                                         tmp_path / "nowhere", tmp_path / "empty", tmp_path / "gone"), capsys)
    assert code == 2 and not any("Traceback" in ln or "my-secret" in ln for ln in out), out
    # a blank file is no PEM file and no token: each says which
    for field, words in (("dispatcher.tls.cert_file: ", "cannot read"), ("dispatcher.tls.key_file: ", "is not a PEM file"),
                         ("dispatcher.tls.client_ca_file: ", "is not a PEM file"),
                         ("dispatcher.worker_tls.ca_file: ", "cannot read"), ("dispatcher.auth_token_file: ", "is empty"),
                         ("dispatcher.cluster_token_file: ", "cannot read")):
        assert sum(field in ln and words in ln for ln in out) == 1, (field, words, out)
