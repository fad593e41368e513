"""Variant profiler (INFaaS §3.2 Variant-Profiler): latencies for batch 1..64, load latency, memory,
stored in and reloaded from SQLite identically, and usable as a LatencyProfile."""
from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from variants.runtime.builtin_models import build_mlp
from variants.profiler import (DEFAULT_BATCHES, BatchLatency, ProfileStore, VariantProfile, profile_variant,
                               summarize)


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> VariantProfile:
    path = build_mlp(tmp_path_factory.mktemp("m") / "mlp.onnx")
    return profile_variant(path, "mlp-fp32-cpu", "c5.2xlarge", model="mlp", repeats=3, threads=1)


def test_profile_covers_batches_1_to_64(measured: VariantProfile) -> None:
    assert DEFAULT_BATCHES == (1, 2, 4, 8, 16, 32, 64)
    assert measured.batch_sizes == [1, 2, 4, 8, 16, 32, 64]
    for b in measured.batches:
        assert b.mean_ms > 0 and b.p50_ms > 0 and b.p99_ms >= b.p50_ms and b.runs == 3
    assert measured.load_ms > 0
    assert measured.peak_memory_mb >= 0 and measured.memory_method
    assert measured.provider == "CPUExecutionProvider"
    assert (measured.variant, measured.model, measured.instance_type) == ("mlp-fp32-cpu", "mlp", "c5.2xlarge")


def test_store_round_trip(measured: VariantProfile, tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    with ProfileStore(db) as store:
        store.save(measured)
        assert store.load("mlp-fp32-cpu", "c5.2xlarge") == measured
        assert store.load("mlp-fp32-cpu", "t3.xlarge") is None
    with ProfileStore(db) as again:  # a fresh connection reads the same thing back
        assert again.all() == [measured]
        assert again.keys() == [("mlp-fp32-cpu", "c5.2xlarge")]
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert con.execute("SELECT COUNT(*) FROM variant_profiles").fetchone()[0] == 7
    con.close()


def test_save_replaces_and_shares_db_file(measured: VariantProfile, tmp_path: Path) -> None:
    db = tmp_path / "shared.db"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE someone_elses (k TEXT)")
    con.execute("INSERT INTO someone_elses VALUES ('keep me')")
    con.commit()
    con.close()
    shorter = VariantProfile(variant=measured.variant, model=measured.model, instance_type=measured.instance_type,
                             provider=measured.provider, batches=measured.batches[:2], load_ms=1.5,
                             peak_memory_mb=2.0, memory_method="test")
    with ProfileStore(db) as store:
        store.save(measured)
        store.save(shorter)
        assert store.load(measured.variant, measured.instance_type) == shorter
        store.delete(measured.variant, measured.instance_type)
        assert store.all() == []
    con = sqlite3.connect(db)
    assert con.execute("SELECT k FROM someone_elses").fetchall() == [("keep me",)]
    con.close()


def test_to_latency_profile(measured: VariantProfile) -> None:
    lp = measured.to_latency_profile()
    assert lp.model == "mlp-fp32-cpu" and lp.instance_type == "c5.2xlarge"
    np.testing.assert_array_equal(lp.batch_sizes, [1, 2, 4, 8, 16, 32, 64])
    np.testing.assert_array_equal(lp.mean_ms, [b.mean_ms for b in measured.batches])
    # a batch of 5 rounds up to the profiled 8 (config.profiles semantics)
    assert float(lp.latency_ms(5, "p50")) == measured.batches[3].p50_ms
    assert measured.to_latency_profile(model="mlp").model == "mlp"


def test_summarize_hand_computed() -> None:
    s = summarize(4, [1.0, 2.0, 3.0, 4.0])
    assert (s.batch_size, s.mean_ms, s.p50_ms, s.runs) == (4, 2.5, 2.5, 4)
    assert s.p99_ms == pytest.approx(3.97)
    with pytest.raises(ValueError):
        summarize(1, [])


_ms = st.floats(min_value=1e-6, max_value=1e6, allow_nan=False, allow_infinity=False)


@settings(max_examples=30, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 4096), min_size=1, max_size=8, unique=True),
    lat=st.lists(st.tuples(_ms, _ms, _ms, st.integers(1, 100)), min_size=8, max_size=8),
    load=_ms, mem=st.floats(min_value=0, max_value=1e5, allow_nan=False),
    names=st.tuples(st.text(min_size=1, max_size=12), st.text(min_size=1, max_size=12)),
)
def test_round_trip_is_exact_for_any_profile(tmp_path_factory: pytest.TempPathFactory, sizes: list[int],
                                             lat: list[tuple[float, float, float, int]], load: float, mem: float,
                                             names: tuple[str, str]) -> None:
    batches = tuple(BatchLatency(b, *lat[i]) for i, b in enumerate(sorted(sizes)))
    prof = VariantProfile(variant=names[0], model="m", instance_type=names[1], provider="CPUExecutionProvider",
                          batches=batches, load_ms=load, peak_memory_mb=mem, memory_method="x")
    with ProfileStore(":memory:") as store:
        store.save(prof)
        assert store.load(names[0], names[1]) == prof
