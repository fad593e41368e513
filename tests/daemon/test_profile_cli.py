"""``costscale profile --local`` on a user's own ONNX model: validate warns, profile measures it here
and estimates every type by its emulation factor, plan then picks a pool for it."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from config.emulation import emulation_factors, reference_profiles
from daemon.cli import main as cli_main
from tests.byom_helpers import KAIROS_TYPES, MODEL, build_user_model, user_config, write_config
from variants.registry import VariantRegistry, registry_path_for


@pytest.fixture()
def cfg_path(tmp_path: Path) -> Path:
    onnx_path = build_user_model(tmp_path / "mymodel.onnx")
    return write_config(tmp_path / "c.yaml", user_config(tmp_path, onnx_path))


def test_validate_warns_plan_fails_then_profile_local_gives_plan_a_pick(cfg_path: Path, tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["validate", str(cfg_path)]) == 0
    err = capsys.readouterr().err
    assert f"'{MODEL}' has no latency profile on any allowed type" in err and f"costscale profile {cfg_path}" in err
    assert cli_main(["plan", str(cfg_path)]) == 2
    assert "run `costscale profile" in capsys.readouterr().err

    out_csv = tmp_path / "profiles.csv"
    assert cli_main(["profile", str(cfg_path), "--local", "--out", str(out_csv), "--batches", "1,8,64"]) == 0
    out, err = capsys.readouterr()
    assert "estimate" in out and "[#" not in err        # no progress bar when stderr is not a terminal
    for t in KAIROS_TYPES:
        assert t in out

    assert cli_main(["plan", str(cfg_path), "--profiles", str(out_csv), "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["model"] == MODEL and sum(plan["chosen"].values()) >= 1
    # the registry holds the same profiles: plain `plan` finds them too, and validate no longer warns
    assert cli_main(["plan", str(cfg_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["chosen"] == plan["chosen"]
    assert cli_main(["validate", str(cfg_path)]) == 0
    assert "warning" not in capsys.readouterr().err


def test_estimates_differ_by_type_exactly_as_the_emulation_factors_say(cfg_path: Path, tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["profile", str(cfg_path), "--local", "--batches", "1,8,64", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [m["model"] for m in doc["models"]] == [MODEL]
    assert set(doc["models"][0]["types"]) == set(KAIROS_TYPES)
    assert all(row["source"] == "estimate" for row in doc["models"][0]["types"].values())
    reg = VariantRegistry(registry_path_for(str(tmp_path / "state" / "state.db")))
    try:
        local = reg.profile(MODEL, "local")
        assert local is not None and [b.batch_size for b in local.batches] == [1, 8, 64]
        up = np.maximum.accumulate        # profiles never fall with the batch (type_profiles.monotone)
        for t in KAIROS_TYPES:
            got = reg.profile(MODEL, t)
            f = emulation_factors(reference_profiles(), t, [1, 8, 64])
            for stat in ("mean_ms", "p99_ms"):
                here = np.array([getattr(b, stat) for b in local.batches])
                np.testing.assert_allclose([getattr(b, stat) for b in got.batches], up(up(here) * f), rtol=1e-12)
    finally:
        reg.close()


def test_profile_local_with_variants_and_a_model_no_type_can_serve_in_time(tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    onnx_path = build_user_model(tmp_path / "mymodel.onnx")
    raw = user_config(tmp_path, onnx_path, model_scaling={"generate_variants": True})
    raw["models"][0]["qos_ms"] = 0.001
    cfg = write_config(tmp_path / "c.yaml", raw)
    assert cli_main(["profile", str(cfg), "--local", "--batches", "1,64", "--json"]) == 0
    m = json.loads(capsys.readouterr().out)["models"][0]
    assert m["slo"].startswith(f"model '{MODEL}' cannot meet its SLO (p99 <= 0.001 ms) at its largest batch 64")
    assert len(m["variants"]) > 1
    # CPU variants are estimated on the CPU types, GPU variants on the GPU type
    assert m["variant_types"][f"{MODEL}-int8-cpu"] == ["c5n.2xlarge", "r5n.large", "t3.xlarge"]
    assert m["variant_types"][f"{MODEL}-fp32-gpu"] == ["g4dn.xlarge"]
    assert cli_main(["profile", str(cfg), "--local"]) == 0      # a second run has nothing left to do
    assert "profiled on every type already" in capsys.readouterr().out


@pytest.mark.parametrize("argv, needle", [
    (["--batches", "1,x"], "--batches"),
    (["--batches", "0"], "--batches"),
    (["--types", "m5.xlarge"], "not an allowed type"),
    (["--model", "nope"], "unknown model 'nope'"),
    (["--repeats", "0"], "--repeats"),
])
def test_bad_flags_are_one_line_exit_2(cfg_path: Path, argv: list[str], needle: str,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["profile", str(cfg_path), "--local", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_a_missing_model_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = write_config(tmp_path / "c.yaml", user_config(tmp_path, tmp_path / "absent.onnx"))
    assert cli_main(["profile", str(cfg), "--local"]) == 2
    err = capsys.readouterr().err.strip()
    assert "model file not found" in err and len(err.splitlines()) == 1


def test_the_readme_emulation_factors_at_batch_1000() -> None:
    """README "Serve your own model": at batch 1000, g4dn.xlarge 1.00, c5n.2xlarge 3.25, r5n.large 3.65,
    t3.xlarge 5.76 (how much slower the Kairos reference models run there than on their fastest type)."""
    ref = reference_profiles()
    got = {t: round(float(emulation_factors(ref, t, [1000])[0]), 2)
           for t in ("g4dn.xlarge", "c5n.2xlarge", "r5n.large", "t3.xlarge")}
    assert got == {"g4dn.xlarge": 1.0, "c5n.2xlarge": 3.25, "r5n.large": 3.65, "t3.xlarge": 5.76}
