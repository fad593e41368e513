"""Online latency model (Kairos §5.1 remarks): profile seeding, linear fit → lookup, errors."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from dispatcher.latency_model import LatencyModel
from config.profiles import load_profiles_csv

PROFILES = load_profiles_csv()


def test_profile_seeding_rounds_up_to_the_grid() -> None:
    lm = LatencyModel.from_profiles(PROFILES)
    assert lm.predict_ms("ncf", "g4dn.xlarge", 95) == pytest.approx(0.8757)     # profile row 100
    assert lm.predict_ms("ncf", "g4dn.xlarge", 100) == pytest.approx(0.8757)
    assert lm.predict_ms("rm2", "c5n.2xlarge", 1000) == pytest.approx(387.5988)
    assert lm.source("ncf", "g4dn.xlarge") == "profile"
    p99 = LatencyModel.from_profiles(PROFILES, stat="p99")
    assert p99.predict_ms("ncf", "g4dn.xlarge", 10) == pytest.approx(0.7137)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(min_value=0.5, max_value=1500), min_size=1, max_size=30),
       st.sampled_from(["ncf", "rm2", "dien"]), st.sampled_from(["g4dn.xlarge", "t3.xlarge"]))
def test_predict_many_matches_the_profile(batches: list[float], model: str, itype: str) -> None:
    lm = LatencyModel.from_profiles(PROFILES)
    b = np.array(batches)
    want = PROFILES.latency_ms(model, itype, np.ceil(b))
    got = lm.predict_many(model, itype, b)
    np.testing.assert_allclose(got, want, rtol=1e-9)
    assert lm.predict_ms(model, itype, batches[0]) == pytest.approx(float(want[0]))


def test_fallbacks_before_any_data() -> None:
    lm = LatencyModel.from_profiles(PROFILES)
    # unknown model: the constant fallback 1 ms + 0.01 ms per item
    assert lm.source("new", "g4dn.xlarge") == "fallback"
    assert lm.predict_ms("new", "g4dn.xlarge", 200) == pytest.approx(3.0)
    # known model on an unprofiled type: median of the model's other types at that batch
    others = [PROFILES.latency_ms("ncf", t, 100.0) for t in PROFILES.types("ncf")]
    assert lm.predict_ms("ncf", "p3.2xlarge", 100) == pytest.approx(float(np.median(others)))


def test_linear_fit_then_lookup() -> None:
    lm = LatencyModel()
    lm.observe("x", "t", 10, 2.0)   # predicted 1.1 (fallback)
    assert lm.source("x", "t") == "linear"
    assert lm.predict_ms("x", "t", 20) == pytest.approx(4.0)      # one size: proportional
    lm.observe("x", "t", 20, 3.0)   # predicted 4.0
    assert lm.predict_ms("x", "t", 30) == pytest.approx(4.0)      # line 1 + 0.1·b
    lm.observe("x", "t", 30, 4.0)   # predicted 4.0
    # bucket 40 (batches 31..40) fills up with 3 samples of 9 ms: it becomes a lookup entry
    for _ in range(3):
        lm.observe("x", "t", 40, 9.0)
    assert lm.source("x", "t", 35) == "lookup"
    assert lm.predict_ms("x", "t", 35) == pytest.approx(9.0)
    # other batch sizes still follow the least-squares line over all six points
    b = np.array([10, 20, 30, 40, 40, 40.0])
    ms = np.array([2, 3, 4, 9, 9, 9.0])
    slope, icpt = np.polyfit(b, ms, 1)
    assert lm.predict_ms("x", "t", 15) == pytest.approx(icpt + slope * 15)
    assert lm.observations("x", "t") == 6


def test_observations_override_a_profile_bucket() -> None:
    lm = LatencyModel.from_profiles(PROFILES)
    for _ in range(3):
        lm.observe("ncf", "g4dn.xlarge", 10, 0.5)
    assert lm.predict_ms("ncf", "g4dn.xlarge", 7) == pytest.approx(0.5)
    assert lm.predict_ms("ncf", "g4dn.xlarge", 11) == pytest.approx(0.7102)   # untouched bucket 20


def test_a_bucket_keeps_the_profile_shape_inside_it() -> None:
    """A small-batch family (100 ms per query, profiled at 1, 2, 4, 8): calls of one query fill
    bucket 10 (batches 1..10), and the prediction for 5 queries stays the profile's (rounded up to
    8: 800 ms) times the measured ÷ profiled ratio; the bucket's plain mean (100 ms) once stood for
    every batch in it, and SlackFit chose the 100 ms variant for five queued queries."""
    from config.profiles import LatencyProfile, ProfileTable

    b = np.array([1, 2, 4, 8.0])
    lm = LatencyModel.from_profiles(ProfileTable({("v", "t"): LatencyProfile("v", "t", b, 100 * b, 100 * b, 100 * b)}))
    lm.predict_ms("v", "t", 1)                           # a cached table, patched by observe
    for _ in range(3):
        lm.observe("v", "t", 1, 100.0)
    assert lm.source("v", "t", 5) == "lookup"
    assert lm.predict_ms("v", "t", 5) == pytest.approx(800.0)
    for _ in range(3):
        lm.observe("v", "t", 2, 400.0)                   # 2x the profile: the bucket's ratio (3·1 + 3·2) / 6
    assert lm.predict_ms("v", "t", 4) == pytest.approx(400.0 * 1.5)
    assert LatencyModel.from_profiles(lm.profiles).predict_ms("v", "t", 4) == pytest.approx(400.0)
    lm._tables.clear(), lm._stacks.clear()               # rebuilt from the observations: the same
    assert lm.predict_ms("v", "t", 4) == pytest.approx(600.0)
    assert lm.predict_many("v", "t", np.array([1, 3, 8.0])).tolist() == pytest.approx([150.0, 600.0, 1200.0])


def test_fallback_type_follows_every_observation_of_the_model() -> None:
    """An unprofiled type predicts by the fallback (median of the model's other types): its
    cached table must not go stale while the other types keep learning."""
    lm, fresh = LatencyModel(), LatencyModel()
    batches = [1, 5, 10, 20] * 5
    for b in batches:
        lm.observe("m", "t", b, 100.0)
        lm.predict_ms("m", "u", 20)          # caches u's fallback table after every observation
        fresh.observe("m", "t", b, 100.0)
    assert lm.observations("m", "t") == 20 and lm.source("m", "u") == "fallback"
    for b in (1, 5, 10, 20, 35, 500):
        assert lm.predict_ms("m", "u", b) == fresh.predict_ms("m", "u", b)
    assert lm.predict_ms("m", "u", 20) == pytest.approx(100.0)   # not the first observation's 2000


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["g4dn.xlarge", "c5n.2xlarge", "t3.xlarge"]),
                          st.sampled_from([1, 3, 8, 40, 300]), st.floats(1.0, 500.0)), max_size=40))
def test_predict_ms_reads_the_table_as_it_is_after_every_observation(obs: list[tuple[str, int, float]]) -> None:
    """predict_ms reads a Python list kept beside each cached table (issue #39, replay speed): after
    any observations (a profiled pair's table patched in place, a fallback's dropped) it returns
    exactly the table's float."""
    lm = LatencyModel.from_profiles(load_profiles_csv())
    types = ["g4dn.xlarge", "c5n.2xlarge", "t3.xlarge"]
    for model in ("rm2", "unprofiled"):
        for t in types:
            lm.predict_ms(model, t, 1)                 # lists cached before the observations
    for t, b, ms in obs:
        for model in ("rm2", "unprofiled"):
            lm.observe(model, t, b, ms)
            for t2 in types:
                tab = lm.table(model, t2)
                for bb in (1, b, 7, 64, 256, 5000):
                    want = float(tab[bb]) if bb < len(tab) else float(lm.predict_many(model, t2, np.array([bb]))[0])
                    assert lm.predict_ms(model, t2, bb) == want
