"""kairos-strict's dense round in a few numpy calls (issue #39, replay speed): the matrix of
:func:`dispatcher.policies.strict_dense.strict_matrix` must be ``_restrict(_terms(...))``'s bit for
bit, and ``KairosStrictPolicy.match_dense`` (which takes it) must return what the general path
(``KairosPolicy.match_dense`` over ``_restrict``) returns, pair for pair and in order, on seeded
random rounds: ties in batch, wait, deadline and remaining time, late and hopeless queries, one to
four instance types, two models, busy workers past their predicted finish."""
from __future__ import annotations

import random

import numpy as np

from config.profiles import load_profiles_csv
from dispatcher.latency_model import LatencyModel
from dispatcher.policies import KairosPolicy, KairosStrictPolicy
from dispatcher.policies.strict_dense import MAX_PREDICTIONS, strict_matrix
from dispatcher.policy import QueryView, WorkerView

TYPES = ["g4dn.xlarge", "c5n.2xlarge", "r5n.large", "t3.xlarge"]
LM = LatencyModel.from_profiles(load_profiles_csv())
CASES = 3000


def _round(rng: random.Random) -> tuple[KairosStrictPolicy, list[QueryView], list[WorkerView], float]:
    pol = KairosStrictPolicy(LM, rng.choice(TYPES))
    now = rng.choice([10.0, 1234.5678901])
    types = rng.sample(TYPES, rng.choice([1, 1, 1, 2, 3, 4]))
    models = ["rm2"] if rng.random() < 0.8 else ["rm2", "wnd"]
    batches = rng.choice([[1], [1, 2, 4], [1, 16, 256, 1000], list(range(1, 1301))])
    waits = rng.choice([[0.0], [0.0, 0.005, 0.02], [0.0, 0.1, 0.3, 1.0], [rng.random() * 0.5 for _ in range(5)]])
    qos = rng.choice([[350.0], [25.0, 35.0, 350.0], [35.0, 2000.0]])
    queue = [QueryView(f"q{i}", rng.choice(models), rng.choice(batches), now - rng.choice(waits), rng.choice(qos))
             for i in range(rng.randint(1, 45))]
    rems = rng.choice([[0.0], [0.0, 0.01, 0.05], [-0.05, 0.0, 0.0000001, 0.2], [rng.uniform(-0.1, 0.3) for _ in range(6)]])
    workers = []
    for j in range(rng.randint(1, 20)):
        rem = rng.choice(rems)
        workers.append(WorkerView(f"w{j}", rng.choice(types), now + rem, rem == 0.0 or rng.random() < 0.2))
    return pol, queue, workers, now


def test_strict_matrix_is_the_restricted_cost_bit_for_bit() -> None:
    rng = random.Random(39)
    built = hopeless = ties = 0
    for _ in range(CASES):
        pol, queue, workers, now = _round(rng)
        got = strict_matrix(pol.predictor, pol.base_type, pol.xi, queue, workers, now)
        cost, allowed = pol._restrict(pol._terms(queue, workers, now))
        if got is None:
            hopeless += allowed is None
            assert allowed is None or len(queue) * len({w.instance_type for w in workers}) > MAX_PREDICTIONS
            continue
        built += 1
        assert allowed is not None
        assert got[0].dtype == cost.dtype and got[0].shape == cost.shape
        assert got[0].tobytes() == cost.tobytes() and np.array_equal(got[1], allowed)
        ties += any(len(set(r)) < len(r) for r in cost.tolist())
    assert built > CASES // 2 and hopeless > 50 and ties > CASES // 4


def test_strict_match_dense_is_the_general_path() -> None:
    rng = random.Random(3939)
    dispatched = 0
    for _ in range(CASES):
        pol, queue, workers, now = _round(rng)
        want = KairosPolicy.match_dense(pol, queue, workers, now)      # _restrict(_terms(...)), then the solve
        assert pol.match_dense(queue, workers, now) == want
        dispatched += len(want)
    assert dispatched > CASES // 2


def test_a_subclass_with_its_own_cost_takes_the_general_path() -> None:
    class Plain(KairosStrictPolicy):
        def _restrict(self, t):  # type: ignore[no-untyped-def]
            return t.cost, None

    rng = random.Random(7)
    for _ in range(200):
        pol, queue, workers, now = _round(rng)
        sub = Plain(LM, pol.base_type)
        assert sub.match_dense(queue, workers, now) == KairosPolicy.match_dense(sub, queue, workers, now)
