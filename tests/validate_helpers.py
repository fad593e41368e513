"""``costscale validate`` on a config text, for the tests of what it refuses (config checks, spot)."""
from __future__ import annotations

from pathlib import Path

import pytest

from daemon.cli import main


def validate_text(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    """Write ``text`` to a config file and run ``costscale validate`` on it: the exit code and the
    non-empty lines it printed (stdout, then stderr)."""
    f = tmp_path / "c.yaml"
    f.write_text(text)
    code = main(["validate", str(f)])
    cap = capsys.readouterr()
    return code, [ln for ln in (cap.out + cap.err).splitlines() if ln.strip()]
