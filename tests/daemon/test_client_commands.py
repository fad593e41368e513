"""The client commands (``models``, ``offline``, ``status``): local files they send are read here
with the config's one-line errors, and every one of them reaches the dispatcher through one call
(:func:`daemon.commands.common.client_flags.call`): unreachable or refusing, one line, exit 1. Loopback only."""
from __future__ import annotations

from pathlib import Path

import pytest

from daemon.cli import main
from dispatcher.object_store import is_s3_uri
from tests.conftest import free_port


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, list[str]]:
    rc = main(list(argv))
    cap = capsys.readouterr()
    return rc, cap.out, cap.err.strip().splitlines()


def test_s3_names_and_local_paths() -> None:
    assert is_s3_uri("s3://b/k.onnx") and is_s3_uri("s3://b/")
    assert not any(is_s3_uri(t) for t in ("model.onnx", "/tmp/s3://x", "S3://b/k", "file:///b/k"))


@pytest.mark.parametrize("flag", ["--onnx", "--validation"])
def test_register_refuses_an_unreadable_or_empty_local_file_before_calling(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str) -> None:
    """A missing, unreadable or empty local file is one line naming the flag, exit 2, and nothing
    is sent (the dispatcher here is not even listening)."""
    good = tmp_path / "m.onnx"
    good.write_bytes(b"\x08\x07onnx")
    (tmp_path / "empty").write_bytes(b"")
    target = f"127.0.0.1:{free_port()}"
    for bad, words in ((tmp_path / "empty", "is empty"), (tmp_path / "missing", "cannot read"),
                       (tmp_path, "cannot read")):
        files = {"--onnx": str(good), "--validation": None, flag: str(bad)}
        argv = ["models", "register", "m2", "--dispatcher", target, "--application", "app"]
        argv += [x for f, v in files.items() if v for x in (f, v)]
        rc, out, err = _cli(capsys, *argv)
        assert (rc, out, len(err)) == (2, "", 1), err
        assert err[0].startswith(f"costscale: {flag}: ") and words in err[0] and str(bad) in err[0]


@pytest.mark.parametrize("argv", [["status"], ["models", "list"], ["offline", "status", "job-1"]])
def test_an_unreachable_dispatcher_is_the_same_line_for_every_command(
        capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    target = f"127.0.0.1:{free_port()}"
    rc, out, err = _cli(capsys, *argv, "--dispatcher", target)
    assert (rc, out) == (1, "")
    assert err == [f"costscale: cannot reach dispatcher {target}: UNAVAILABLE"]
