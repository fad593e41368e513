"""The replay's query loop (sim/replay/query_loop.py) over a pool that changes under it: a worker serves
one query at a time, every query ends once, and the state kept incrementally (the workers taking
queries, their idle count, the next deadline) always equals a fresh count."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from config.profiles import load_profiles_csv
from config.schema import Config
from sim.replay.outcomes import PENDING, SERVED
from sim.replay.query_loop import QueryLoop
from sim.replay.run import ReplaySpec, make_query_loop
from sim.workload import Workload

TYPES = ("g4dn.xlarge", "c5n.2xlarge", "r5n.large", "t3.xlarge")


@pytest.fixture(scope="module")
def profiles():  # type: ignore[no-untyped-def]
    return load_profiles_csv(None)


def _cfg(tmp: Path, on_deadline: str, queue_limit: int) -> Config:
    return Config.model_validate({
        "cluster": "query-loop-test", "budget_per_hour": 2.5,
        "models": [{"name": "rm2", "onnx": "builtin:mlp", "qos_ms": 350, "max_batch": 1000}],
        "instance_types": [{"type": t} for t in TYPES],
        "launch": {"ami_id": "ami-0123456789abcdef0"},
        "dispatcher": {"listen": "127.0.0.1:0", "policy": "kairos", "on_deadline": on_deadline,
                       "queue_limit": queue_limit},
        "state_path": str(tmp / "state.db"),
    })


class _EndsOnce(np.ndarray):
    """An outcome array that refuses to end a query twice."""

    def __setitem__(self, k, v):  # type: ignore[no-untyped-def]
        assert self[k] == PENDING, f"query {k} ended twice"
        super().__setitem__(k, v)


class _Checked(QueryLoop):
    """Asserts, at every dispatch, that the worker has no query in flight and the query is in none."""

    def _dispatch(self, q, w, now, joined=()):  # type: ignore[no-untyped-def]
        assert w.idle and w.query < 0, f"{w.wid} got query {q} while serving {w.query}"
        for x in (q, *joined):
            assert all(o.query != x and x not in o.joined for o in self.workers.values()), f"query {x} dispatched twice"
        super()._dispatch(q, w, now, joined)


def _check_derived_state(loop: QueryLoop) -> None:
    live = [w for w in loop.workers.values() if not w.draining and not w.leaving]
    if loop._live is not None:
        assert loop._live == live
        assert loop._idle_live == sum(w.idle for w in live)
    if loop._td is not None:
        heads = [next(iter(d)) for d in (loop._queue, loop._retry) if d]
        assert loop._td == (min(loop._arr[q] for q in heads) + loop.timeout_s if heads else math.inf)
    for w in live:
        if w.view is not None:
            assert (w.view.busy_until, w.view.idle) == (w.busy_until, w.idle)


_EVENT = st.tuples(st.floats(0.01, 3.0), st.sampled_from(("add", "drain", "undrain", "remove")),
                   st.integers(0, 7), st.sampled_from(TYPES))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**16), rate=st.floats(2.0, 60.0), events=st.lists(_EVENT, max_size=40),
       on_deadline=st.sampled_from(("drop", "best_effort")), queue_limit=st.sampled_from((5, 10_000)),
       service=st.sampled_from(("mean", "sampled")), batching=st.booleans())
def test_a_worker_serves_one_query_at_a_time_and_every_query_ends_once(  # type: ignore[no-untyped-def]
        tmp_path: Path, profiles, seed: int, rate: float, events: list, on_deadline: str,
        queue_limit: int, service: str, batching: bool) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.poisson(rate * 40.0))
    wl = Workload(np.sort(rng.uniform(0.0, 40.0, n)), rng.integers(1, 1001, n))
    loop = make_query_loop(_cfg(tmp_path, on_deadline, queue_limit), profiles, wl,
                           ReplaySpec(service=service, seed=seed))   # type: ignore[arg-type]
    loop.__class__ = _Checked
    loop.batching = batching        # dispatcher.batching: work_conserving (queries join a call)
    loop.outcome = loop.outcome.view(_EndsOnce)
    loop.add_worker("w0", TYPES[seed % 4], 0.0)
    t = 0.0
    for dt, op, k, itype in events:
        t += dt
        loop.run_until(t)
        _check_derived_state(loop)
        wid = f"w{k}"
        if op == "add":
            loop.add_worker(wid, itype, t)
        elif op == "remove":
            loop.remove_worker(wid, t)
        else:
            loop.set_draining(wid, op == "drain", t)
        _check_derived_state(loop)
    loop.add_worker("last", "g4dn.xlarge", t)      # a worker that stays, so every query can end
    loop.finish(max(t, 40.0) + 120.0)
    out = np.asarray(loop.outcome)
    assert (out != PENDING).all()
    served = out == SERVED
    assert np.isfinite(loop.latency[served]).all() and np.isinf(loop.latency[~served]).all()
    assert (loop.worker_type[served] >= 0).all() and (loop.worker_type[~served] == -1).all()
