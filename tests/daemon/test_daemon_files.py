"""Files the daemon creates are its own (issue #14, deliverable 4): the generated cluster token is
0600 and read back on the next start; `costscale run` creates its state folder 0700 and its state
store, variant registry and generated variants 0600/0700. Against moto on 127.0.0.1."""
from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import boto3
import pytest

from config.errors import ConfigError
from daemon.aws.cluster_token import cluster_token_path, with_cluster_token
from tests.dispatch_helpers import make_config
from tests.daemon.test_daemon_lifecycle import _config, _NotifyReader, _reap

REPO = Path(__file__).resolve().parents[2]


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def test_a_cluster_token_is_generated_beyond_loopback_only(tmp_path: Path) -> None:
    cfg = make_config().model_copy(update={"state_path": str(tmp_path / "var" / "state.db")})
    assert with_cluster_token(cfg, "127.0.0.1:50051") is cfg          # loopback: nothing generated
    assert not cluster_token_path(cfg).exists()
    got = with_cluster_token(cfg, "0.0.0.0:50051")
    path = cluster_token_path(cfg)
    assert got.dispatcher.cluster_token_file == str(path) and _mode(path) == 0o600
    token = got.dispatcher.token()
    assert token and len(token) >= 40
    assert with_cluster_token(cfg, "10.0.0.5:50051").dispatcher.token() == token    # read back, not replaced
    named = make_config(cluster_token="mine").model_copy(update={"state_path": str(tmp_path / "other.db")})
    assert with_cluster_token(named, "0.0.0.0:50051") is named
    assert not cluster_token_path(named).exists()


def test_an_empty_cluster_token_file_is_refused_not_read_as_no_token(tmp_path: Path) -> None:
    """An empty token file once read as "no token": registration was then open to any worker."""
    (tmp_path / "t").write_text("  \n")
    cfg = make_config().model_copy(update={"state_path": str(tmp_path / "state.db")})
    cfg = cfg.model_copy(update={"dispatcher": cfg.dispatcher.model_copy(update={"cluster_token_file": str(tmp_path / "t")})})
    with pytest.raises(ConfigError, match=r"dispatcher.cluster_token_file: .*/t is empty"):
        cfg.dispatcher.token()


def test_an_empty_inline_cluster_token_is_no_token(tmp_path: Path) -> None:
    """A blank inline token is no token: beyond loopback one is generated (it once left registration
    open there, a whitespace token being "named")."""
    for i, blank in enumerate(("", "  ")):
        cfg = make_config(cluster_token=blank).model_copy(update={"state_path": str(tmp_path / f"s{i}.db")})
        assert cfg.dispatcher.token() is None
        got = with_cluster_token(cfg, "0.0.0.0:50051")
        assert got.dispatcher.token() and cluster_token_path(cfg).exists()


def test_an_unwritable_token_file_is_one_line(tmp_path: Path) -> None:
    """The token file cannot be created: in a read-only directory, or (for root, who writes anywhere,
    as CI runs) under a path whose "directory" is a plain file."""
    (tmp_path / "ro").mkdir(mode=0o500)
    where = tmp_path / "ro"
    if os.access(where, os.W_OK):
        where = tmp_path / "a-file"
        where.write_text("not a directory")
    cfg = make_config().model_copy(update={"state_path": str(where / "state.db")})
    with pytest.raises(ConfigError, match=r"dispatcher.cluster_token_file: cannot create .*state.db.cluster-token") as e:
        with_cluster_token(cfg, "0.0.0.0:50051")
    assert len(str(e.value).splitlines()) == 1


@pytest.mark.slow
def test_costscale_run_creates_its_files_private(moto_endpoint: str, tmp_path: Path) -> None:
    ec2 = boto3.client("ec2", region_name="us-east-1", endpoint_url=moto_endpoint)
    ami = ec2.describe_images()["Images"][0]["ImageId"]
    cfg, var = tmp_path / "costscale.yaml", tmp_path / "var"
    _config(cfg, moto_endpoint, var / "state.db", ami)
    notify_path = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(notify_path)
    notes = _NotifyReader(sock)
    log = tmp_path / "daemon.log"
    os.umask(old := os.umask(0o022))   # the test's own umask is the usual one; the daemon's is not
    with log.open("w") as logf:
        proc = subprocess.Popen([sys.executable, "-m", "daemon.cli", "run", str(cfg)], stdout=logf,
                                stderr=subprocess.STDOUT, env=dict(os.environ, NOTIFY_SOCKET=notify_path), cwd=REPO)
    try:
        assert "READY=1" in notes.until("READY=1", 60), log.read_text()[-3000:]
        deadline = time.monotonic() + 120           # rm2's variants are generated after READY
        while time.monotonic() < deadline and "generated" not in log.read_text() and proc.poll() is None:
            time.sleep(0.2)
        assert "variants of rm2" in log.read_text(), log.read_text()[-3000:]
        created = [var, *var.rglob("*")]
        files = [p for p in created if p.is_file()]
        assert {"state.db", "state.db.variants.db"} <= {p.name for p in files}
        assert any(p.suffix == ".onnx" for p in files), "no generated variant"   # rm2's variants
        wide = {str(p.relative_to(tmp_path)): oct(_mode(p)) for p in created
                if _mode(p) & 0o077 or (p.is_file() and _mode(p) & 0o111)}
        assert not wide, wide
        assert _mode(var) == 0o700
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, log.read_text()[-3000:]
    finally:
        _reap(proc, notes, sock)
        os.umask(old)
