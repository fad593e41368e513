"""INFaaS §2.2 Tables 2-3: three ResNet50 variants and the cheapest configuration for each
QPS/SLO row, with both solvers and through ``costscale variants plan --json``."""
from __future__ import annotations

import json
import math

import pytest

from daemon.cli import main
from variants.infaas.autoscale_greedy import greedy_scale
from variants.infaas.autoscale_ilp import ScalingProblem, ScalingVariant, solve_ilp
from variants.infaas.cheapest import NoCombination, cheapest

# Table 2: latency (ms), saturation throughput (req/s), normalized cost ($/s).
TABLE2 = [
    ScalingVariant("A", "resnet50", "cpu", latency_ms=200, saturation_qps=5, cost_per_second=1),
    ScalingVariant("B", "resnet50", "inferentia", latency_ms=20, saturation_qps=100, cost_per_second=3),
    ScalingVariant("C", "resnet50", "gpu", latency_ms=15, saturation_qps=800, cost_per_second=16),
]
# Table 3: (QPS, SLO ms) -> (#A, #B, #C), cost $/s.
TABLE3 = [
    ((10, 300), {"A": 2, "B": 0, "C": 0}, 2),
    ((10, 50), {"A": 0, "B": 1, "C": 0}, 3),
    ((1000, 300), {"A": 0, "B": 2, "C": 1}, 22),
]
YAML = """variants:
  - {name: A, latency_ms: 200, saturation_qps: 5, cost_per_second: 1}
  - {name: B, latency_ms: 20, saturation_qps: 100, cost_per_second: 3}
  - {name: C, latency_ms: 15, saturation_qps: 800, cost_per_second: 16}
"""


@pytest.mark.parametrize("solver", ["ilp", "greedy"])
@pytest.mark.parametrize(("row", "counts", "cost"), TABLE3)
def test_table3_cheapest(row: tuple[int, int], counts: dict[str, int], cost: float, solver: str) -> None:
    # The greedy agrees with the ILP on all three rows: at 1000 qps it first takes C (16/800 $/qps
    # beats B's 3/100), then covers the remaining 200 qps with B (3/100 beats C's 16/200).
    qps, slo = row
    combo = cheapest(TABLE2, qps, slo, solver=solver)
    assert dict(combo.counts) == counts
    assert combo.cost_per_second == pytest.approx(cost)


@pytest.mark.parametrize(("row", "counts", "cost"), TABLE3)
def test_table3_autoscaler_cold_start(row: tuple[int, int], counts: dict[str, int], cost: float) -> None:
    """The model autoscaler (ILP §4.2.1 and greedy §4.2.2) from nothing running, slack 0, lambda 0."""
    qps, slo = row
    problem = ScalingProblem(tuple(TABLE2), {"resnet50": qps}, {"resnet50": slo}, headroom=0.0, lam=0.0)
    ilp = solve_ilp(problem)
    greedy, _ = greedy_scale(problem, now=0.0)
    for plan in (ilp, greedy):
        assert plan.feasible
        assert dict(plan.counts) == counts
        assert plan.cost_per_second == pytest.approx(cost)
        assert sum(a.count for a in plan.actions) == sum(counts.values())


def test_ratios_quoted_in_the_text() -> None:
    # "two instances of Variant A is the cheapest choice (8x cheaper than using Variant C)";
    # "Variant B becomes the cheapest choice (5.3x cheaper than using Variant C)".
    assert cheapest(TABLE2[2:], 10, 300).cost_per_second / cheapest(TABLE2, 10, 300).cost_per_second == 8
    assert cheapest(TABLE2[2:], 10, 50).cost_per_second / cheapest(TABLE2, 10, 50).cost_per_second == pytest.approx(5.33, abs=0.01)


def test_no_variant_meets_slo() -> None:
    with pytest.raises(NoCombination, match="fastest: C at 15 ms"):
        cheapest(TABLE2, 10, 10)


def test_resource_limits_change_the_answer() -> None:
    limited = [ScalingVariant(v.name, v.model, v.hardware, v.latency_ms, v.saturation_qps, v.cost_per_second,
                              resources={"inferentia": 1} if v.name == "B" else {}) for v in TABLE2]
    combo = cheapest(limited, 1000, 300, limits={"inferentia": 1})
    # One B at most: 1 B + 1 C leaves 100 qps -> 20 A (cost 3 + 16 + 20 = 39) vs 2 C (32).
    assert dict(combo.counts) == {"A": 0, "B": 0, "C": 2}
    assert combo.cost_per_second == 32


@pytest.mark.parametrize("solver", ["ilp", "greedy"])
@pytest.mark.parametrize(("row", "counts", "cost"), TABLE3)
def test_cli_json(tmp_path, capsys, row, counts, cost, solver) -> None:
    f = tmp_path / "resnet50.yaml"
    f.write_text(YAML)
    qps, slo = row
    rc = main(["variants", "plan", "--variants", str(f), "--qps", str(qps), "--slo-ms", str(slo),
               "--solver", solver, "--json"])
    out = capsys.readouterr().out
    assert rc == 0
    doc = json.loads(out)
    assert doc["counts"] == counts
    assert doc["cost"] == pytest.approx(cost)
    assert doc["solver"] == solver
    assert math.isfinite(doc["solve_ms"]) and doc["solve_ms"] > 0     # the solve's own time, filled in


def test_cli_human_table(tmp_path, capsys) -> None:
    f = tmp_path / "v.yaml"
    f.write_text(YAML)
    assert main(["variants", "plan", "--variants", str(f), "--qps", "1000", "--slo-ms", "300"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["variant", "latency_ms", "qps/replica", "$/s", "replicas"]
    assert out[2].split() == ["B", "20", "100", "3", "2"]
    assert out[-1].startswith("cost 22 $/s")


@pytest.mark.parametrize(("text", "args", "message"), [
    ("variants:\n  - {name: A, latency_ms: 200, saturation_qps: 0, cost_per_second: 1}\n", [],
     "line 2: variants[0].saturation_qps: must be > 0"),
    ("variants:\n  - {name: A, latency_ms: 200, cost_per_second: 1}\n", [], "missing field 'saturation_qps'"),
    ("variants:\n  - {name: A, latency_ms: fast, saturation_qps: 5, cost_per_second: 1}\n", [],
     "variants[0].latency_ms: must be a number"),
    ("variants:\n  - {name: A, latency_ms: 1, saturation_qps: 5, cost_per_second: 1, colour: red}\n", [],
     "unknown field 'colour'"),
    ("variants:\n  - {name: A, latency_ms: 1, saturation_qps: 5, cost_per_second: 1}\n"
     "  - {name: A, latency_ms: 1, saturation_qps: 5, cost_per_second: 1}\n", [], "duplicate variant name 'A'"),
    ("models: []\n", [], "expected a mapping with a 'variants:' list"),
    ("variants: [\n", [], "not valid YAML"),
    (YAML, ["--slo-ms", "10"], "no variant meets the SLO of 10 ms"),
    (YAML, ["--qps", "-1"], "--qps: must be a number >= 0"),
])
def test_cli_bad_input_one_line_exit_2(tmp_path, capsys, text, args, message) -> None:
    f = tmp_path / "v.yaml"
    f.write_text(text)
    argv = ["variants", "plan", "--variants", str(f), "--qps", "10", "--slo-ms", "300", *args]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], lines


def test_cli_missing_file(tmp_path, capsys) -> None:
    assert main(["variants", "plan", "--variants", str(tmp_path / "nope.yaml"), "--qps", "1", "--slo-ms", "1"]) == 2
    assert "cannot read" in capsys.readouterr().err
