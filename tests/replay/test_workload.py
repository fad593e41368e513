"""Workload generators: rate, CV², ramp and trace statistics for fixed seeds; determinism."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sim.workload import (gamma_arrivals, load_trace_csv, make_workload, poisson_arrivals, ramp_arrivals, ramp_rate,
                          unit_poisson_workload)


def cv2(x: np.ndarray) -> float:
    d = np.diff(np.concatenate([[0.0], x]))
    return float(d.var() / d.mean() ** 2)


def test_poisson_rate_and_cv2() -> None:
    a = poisson_arrivals(500.0, np.random.default_rng(1), duration=60.0)
    assert a.size / 60.0 == pytest.approx(500.0, rel=0.02)
    assert cv2(a) == pytest.approx(1.0, abs=0.05)
    assert a.min() >= 0 and a.max() < 60.0 and np.all(np.diff(a) >= 0)
    b = poisson_arrivals(500.0, np.random.default_rng(1), n=1000)
    assert b.size == 1000


@pytest.mark.parametrize("c2", [0.25, 4.0])
def test_gamma_cv2(c2: float) -> None:
    a = gamma_arrivals(200.0, c2, np.random.default_rng(2), duration=200.0)
    assert a.size / 200.0 == pytest.approx(200.0, rel=0.05)
    assert cv2(a) == pytest.approx(c2, rel=0.1)


def test_ramp() -> None:
    # 100 -> 1100 q/s at 50 q/s²: the ramp takes 20 s, then holds for 10 s
    a = ramp_arrivals(100.0, 1100.0, 50.0, 30.0, np.random.default_rng(3))
    expected_ramp = 100 * 20 + 0.5 * 50 * 20**2      # integral of the rate over the ramp
    assert ((a < 20).sum()) == pytest.approx(expected_ramp, rel=0.03)
    assert ((a >= 20).sum()) == pytest.approx(1100 * 10, rel=0.03)
    first, last = (a < 2).sum() / 2, ((a >= 18) & (a < 20)).sum() / 2
    assert first == pytest.approx(150, rel=0.15) and last == pytest.approx(1050, rel=0.06)
    assert ramp_rate(np.array([0.0, 10.0, 99.0]), 500.0, 100.0, 20.0) == pytest.approx([500.0, 300.0, 100.0])


def test_trace_replay(tmp_path: Path) -> None:
    p = tmp_path / "t.csv"
    p.write_text("timestamp,model,batch_size\n100.5,wnd,30\n100.0,wnd,20\n100.2,ncf,7\n101.0,wnd,1000\n")
    wl = load_trace_csv(p, model="wnd")
    assert wl.arrivals == pytest.approx([0.0, 0.5, 1.0])
    assert wl.batches.tolist() == [20, 30, 1000]
    assert len(load_trace_csv(p)) == 4
    bad = tmp_path / "bad.csv"
    bad.write_text("time,model,batch_size\n1,wnd,3\n")
    with pytest.raises(ValueError, match="lacks column"):
        load_trace_csv(bad)
    bad.write_text("timestamp,model,batch_size\n1,wnd,x\n")
    with pytest.raises(ValueError, match="line 2"):
        load_trace_csv(bad)


def test_make_workload_deterministic_and_batches_independent_of_rate() -> None:
    a = make_workload(100.0, 50.0, "gaussian", seed=5)
    b = make_workload(100.0, 50.0, "gaussian", seed=5)
    c = make_workload(300.0, 50.0, "gaussian", seed=5)
    assert np.array_equal(a.arrivals, b.arrivals) and np.array_equal(a.batches, b.batches)
    n = min(len(a), len(c))
    assert np.array_equal(a.batches[:n], c.batches[:n])
    assert a.batches.mean() == pytest.approx(250, rel=0.05)
    f = make_workload(50.0, 10.0, "fixed:40", seed=1)
    assert set(f.batches.tolist()) == {40}


def test_unit_poisson_workload() -> None:
    u = unit_poisson_workload(1000, seed=4)
    assert len(u) == 1000 and u.arrivals[-1] == pytest.approx(1000.0)
    assert cv2(u.arrivals) == pytest.approx(1.0, abs=0.15)
    with pytest.raises(ValueError):
        poisson_arrivals(0.0, np.random.default_rng(0), n=3)
