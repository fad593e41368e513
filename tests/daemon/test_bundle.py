"""``costscale bundle`` (issue #38): bad input is one line and exit 2; the manifest names each
wheel with its sha256 per target; publishing skips wheels already there and writes the manifest."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import boto3
import pytest

from daemon.aws.wheelhouse import Target, manifest, parse_targets, platform_flags, publish
from daemon.cli import main as cli_main


@pytest.mark.parametrize("argv, line", [
    (["bundle"], "costscale: bundle: give --bucket (and --prefix), or a CONFIG with launch.wheelhouse: s3://BUCKET/PREFIX"),
    (["bundle", "--bucket", "s3://b/p"], "costscale: --bucket: 's3://b/p' is a bucket name, not a URI"),
    (["bundle", "--bucket", "b", "--python", "3.10", "--region", "us-east-1"],
     "costscale: bundle: python '3.10': give 3.11 or later as X.Y"),
    (["bundle", "--bucket", "b", "--arch", "armv7l", "--region", "us-east-1"],
     "costscale: bundle: arch 'armv7l': give x86_64 or aarch64"),
])
def test_bad_input_is_one_line_and_exit_2(argv: list[str], line: str, capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    assert cli_main(argv) == 2
    assert capsys.readouterr().err.splitlines() == [line]


def test_targets_and_platforms() -> None:
    assert [t.tag for t in parse_targets(["3.11", "3.12"], ["x86_64", "aarch64"])] == [
        "cp311-x86_64", "cp311-aarch64", "cp312-x86_64", "cp312-aarch64"]
    flags = platform_flags("aarch64")
    assert flags[:2] == ["--platform", "manylinux_2_17_aarch64"]
    assert flags[-4:] == ["--platform", "manylinux_2_34_aarch64", "--platform", "manylinux2014_aarch64"]


def test_the_manifest_and_publishing(tmp_path: Path, moto_endpoint: str) -> None:
    a, b = tmp_path / "costscale-0.1.0-py3-none-any.whl", tmp_path / "onnxruntime_gpu-1.31.1-cp311-cp311-x.whl"
    a.write_bytes(b"own wheel")
    b.write_bytes(b"gpu wheel")
    doc = manifest("0.1.0", "<1.32,>=1.31.1", {Target("3.11", "x86_64"): [a, b], Target("3.11", "aarch64"): [a]})
    assert doc["targets"]["cp311-x86_64"] == {"python": "3.11", "arch": "x86_64", "gpu": True, "wheels": [
        {"file": a.name, "sha256": hashlib.sha256(b"own wheel").hexdigest(), "size": 9},
        {"file": b.name, "sha256": hashlib.sha256(b"gpu wheel").hexdigest(), "size": 9}]}
    assert doc["targets"]["cp311-aarch64"]["gpu"] is False
    s3 = boto3.client("s3", region_name="us-east-1", endpoint_url=moto_endpoint)
    s3.create_bucket(Bucket="wh-bucket")
    steps: list[str] = []
    assert publish(s3, "s3://wh-bucket/costscale/wh", {a.name: a, b.name: b}, doc, steps.append) == 2
    assert publish(s3, "s3://wh-bucket/costscale/wh/", {a.name: a, b.name: b}, doc, steps.append) == 0   # already there
    assert steps == [a.name, b.name] * 2
    assert json.loads(s3.get_object(Bucket="wh-bucket", Key="costscale/wh/manifest.json")["Body"].read()) == doc
    assert s3.get_object(Bucket="wh-bucket", Key=f"costscale/wh/wheels/{b.name}")["Body"].read() == b"gpu wheel"
