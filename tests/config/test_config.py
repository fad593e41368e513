from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from daemon.cli import main
from config.schema import load_config, parse_config_text
from config.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "config" / "costscale.example.yaml"

GOOD = """\
cluster: t
budget_per_hour: 2.5
models:
  - name: ncf
    qos_ms: 5
instance_types:
  - type: g4dn.xlarge
  - type: r5n.large
    price_per_hour: 0.2
launch:
  ami_id: ami-1
"""


def test_example_is_valid() -> None:
    cfg = load_config(EXAMPLE)
    assert cfg.cluster == "demo"
    assert cfg.budget_per_hour == 2.5
    assert main(["validate", str(EXAMPLE)]) == 0


def test_price_override_and_defaults() -> None:
    cfg = parse_config_text(GOOD)
    cat = cfg.catalog()
    assert list(cat) == ["g4dn.xlarge", "r5n.large"]
    assert cat["g4dn.xlarge"].price_per_hour == 0.526
    assert cat["r5n.large"].price_per_hour == 0.2
    assert cfg.dispatcher.policy == "kairos-strict"   # the default changed with issue 16 (was "kairos")
    assert cfg.on_shutdown == "keep"


@pytest.mark.parametrize(
    "text,expect",
    [
        (GOOD.replace("budget_per_hour: 2.5", "budget_per_hour: -1"), "line 2: budget_per_hour: Input should be greater than 0"),
        (GOOD.replace("type: g4dn.xlarge", "type: p9.huge"), "line 7: instance_types[0].type: unknown instance type 'p9.huge'"),
        (GOOD.replace("models:\n  - name: ncf\n    qos_ms: 5\n", ""), "models: required field is missing"),
        (GOOD.replace("cluster: t", "cluster: [t"), "YAML syntax error"),
        (GOOD + "bogus: 1\n", "line 12: bogus: unknown field"),
        (GOOD + "model_scaling:\n  solver: cplex\n", "line 13: model_scaling.solver: Input should be 'greedy' or 'ilp'"),
    ],
)
def test_bad_configs_name_field_and_line(text: str, expect: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError) as ei:
        load_config(f)
    assert any(expect in line for line in ei.value.lines), ei.value.lines
    assert main(["validate", str(f)]) == 2
    err = capsys.readouterr().err
    assert expect in err
    assert "Traceback" not in err


def test_missing_file_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "/nonexistent/costscale.yaml"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["costscale: /nonexistent/costscale.yaml: no such file"]


def test_console_script_no_traceback(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text("budget_per_hour: [\n")
    proc = subprocess.run([sys.executable, "-m", "daemon.cli", "validate", str(f)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_relative_profiles_path_is_relative_to_the_config_file(tmp_path: Path) -> None:
    sub = tmp_path / "etc"
    sub.mkdir()
    (sub / "p.csv").write_text("x")
    f = sub / "c.yaml"
    f.write_text(GOOD + "profiles: p.csv\n")
    assert load_config(f).profiles == str(sub / "p.csv")
    f.write_text(GOOD + "profiles: /abs/p.csv\n")
    assert load_config(f).profiles == "/abs/p.csv"


def test_model_scaling_section_sets_the_model_loop(tmp_path: Path) -> None:
    from variants.infaas.model_decision import model_params_for

    f = tmp_path / "c.yaml"
    f.write_text(GOOD + "model_scaling:\n  solver: ilp\n  vm_remove_cooldown_s: 45\n")
    p = model_params_for(load_config(f))
    assert p.solver == "ilp" and p.vm.remove_cooldown_s == 45.0 and p.vm.add_cooldown_s == 30.0
    f.write_text(GOOD)
    assert model_params_for(load_config(f)).solver == "greedy"


def test_version_flag_prints_the_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"costscale {version('costscale')}"


def test_systemd_unit_is_hardened() -> None:
    """``systemd-analyze security`` rates the shipped unit at most 3.0 (OK); skipped where systemd is absent."""
    import re
    import shutil

    exe = shutil.which("systemd-analyze")
    if exe is None:
        pytest.skip("systemd-analyze is not installed here")
    r = subprocess.run([exe, "security", "--offline=yes", str(ROOT / "systemd" / "costscale.service")],
                       capture_output=True, text=True, timeout=60)
    m = re.search(r"Overall exposure level for costscale.service: ([0-9.]+)", r.stdout)
    assert m, r.stdout + r.stderr
    assert float(m.group(1)) <= 3.0, r.stdout
