"""The pipeline runner (issue #26, dispatcher/pipeline_exec.py) over a stand-in dispatcher: steps in
tree order with their fan-out, one answer or one typed error, early dropping, derived retry keys."""
from __future__ import annotations

import asyncio
from types import SimpleNamespace

import grpc
import pytest

from dispatcher.pipeline_exec import PipelineRunner
from dispatcher.proto import costscale_pb2 as pb

SC = grpc.StatusCode


def _cfg(factor: float = 2.0, slo: float = 1000.0):  # type: ignore[no-untyped-def]
    from config.sections.pipelines import PipelineSpec

    spec = PipelineSpec.model_validate({"name": "recs", "slo_ms": slo, "tasks": [
        {"name": "retrieve", "model": "rm2", "children": [{"task": "rank", "factor": factor}]},
        {"name": "rank", "model": "ranker"}]})
    return SimpleNamespace(pipelines=[spec])


class _Stand:
    """What the runner is given, in one stand-in: submit, the clock, the serving workers (workers,
    serves), the known models (models, apps), the latency model and the base type."""

    def __init__(self, cfg, fail: dict | None = None, ms: float = 10.0) -> None:  # type: ignore[no-untyped-def]
        self.cfg, self.fail, self.ms = cfg, fail or {}, ms
        self.calls: list[pb.SubmitRequest] = []
        self.now = 0.0
        self.workers = {}
        self.serves: dict = {}
        self.base_type = "c5n.2xlarge"
        self.models: dict = {}
        self.apps: dict = {}
        self.predictor = SimpleNamespace(predict_ms=lambda key, t, b: self.ms)

    def clock(self) -> float:
        return self.now

    async def submit(self, r: pb.SubmitRequest):  # type: ignore[no-untyped-def]
        self.calls.append(r)
        self.now += self.ms / 1000.0
        name = r.model or r.application
        if name in self.fail:
            return self.fail[name]
        acc = {"rm2": 0.9, "ranker": 0.8}[name]
        return pb.SubmitReply(model=name, variant=f"{name}-v", accuracy=acc, service_ms=self.ms, total_ms=self.ms)


def _runner(d: _Stand, seed: int = 0) -> PipelineRunner:
    """The runner over the stand-in."""
    return PipelineRunner(d.cfg.pipelines, d.submit, d.clock, d, d, d.predictor, lambda: d.base_type, seed=seed)  # type: ignore[arg-type]


def test_a_query_runs_the_root_then_its_fanout_and_answers_once() -> None:
    d = _Stand(_cfg(factor=2.0))
    run = _runner(d)
    rep = asyncio.run(run.submit(pb.SubmitRequest(application="recs", batch_size=3, idempotency_key="k1")))
    assert isinstance(rep, pb.SubmitReply)
    assert [c.model for c in d.calls] == ["rm2", "ranker", "ranker"]
    assert all(c.batch_size == 3 for c in d.calls)
    assert rep.model == "recs" and rep.variant == "retrieve=rm2-v;rank=ranker-v"
    assert rep.accuracy == pytest.approx(0.9 * 0.8) and rep.slo_met
    # each step has its own retry key, derived from the query's
    assert [c.idempotency_key for c in d.calls] == ["k1/0", "k1/0.rank0", "k1/0.rank1"]
    # the root's step SLO leaves the rank task its expected 10 ms
    assert d.calls[0].latency_slo_ms == pytest.approx(990.0)
    assert run.measured_factor("recs", "retrieve", "rank") == 2.0


def test_a_fractional_factor_makes_that_many_requests_on_average() -> None:
    d = _Stand(_cfg(factor=1.5))
    run = _runner(d, seed=3)
    for _ in range(400):
        assert isinstance(asyncio.run(run.submit(pb.SubmitRequest(application="recs", batch_size=1))), pb.SubmitReply)
    assert 1.4 <= run.measured_factor("recs", "retrieve", "rank") <= 1.6
    counts = run.fanout[("recs", "retrieve", "rank")]
    assert counts[0] == 400 and counts[1] == sum(1 for c in d.calls if c.model == "ranker")


def test_a_failed_step_ends_the_query_with_one_typed_error_never_half_an_answer() -> None:
    d = _Stand(_cfg(), fail={"ranker": (SC.UNAVAILABLE, "no worker serves ranker")})
    out = asyncio.run(_runner(d).submit(pb.SubmitRequest(application="recs", batch_size=1)))
    assert out == (SC.UNAVAILABLE, "pipeline recs: task rank: no worker serves ranker")


def test_a_request_that_cannot_meet_the_slo_any_more_is_dropped_early() -> None:
    # SLO 25 ms, 10 ms a step: the root gets 15 (leaving rank its 10), then 15 ms are left for rank;
    # exactly at the edge: SLO 20 goes through, 19.99 is dropped before the root
    for slo, ok in ((20.0, True), (19.99, False)):
        out = asyncio.run(_runner(_Stand(_cfg(factor=1.0, slo=slo))).submit(
            pb.SubmitRequest(application="recs", batch_size=1)))
        assert isinstance(out, pb.SubmitReply) == ok
    d = _Stand(_cfg(factor=1.0, slo=25.0))
    run = _runner(d)
    assert isinstance(asyncio.run(run.submit(pb.SubmitRequest(application="recs", batch_size=1))), pb.SubmitReply)
    # the steps take 20 ms where 10 were expected: the root runs (25 ms left >= 10 + 10) and takes 20;
    # 5 ms are left and rank needs 10: dropped before it runs, one error, counted
    d = _Stand(_cfg(factor=1.0, slo=25.0), ms=20.0)
    d.predictor = SimpleNamespace(predict_ms=lambda key, t, b: 10.0)    # it expected 10 ms a step
    run = _runner(d)
    out = asyncio.run(run.submit(pb.SubmitRequest(application="recs", batch_size=1)))
    assert isinstance(out, tuple) and out[0] == SC.DEADLINE_EXCEEDED and "dropped before rank" in out[1]
    assert [c.model for c in d.calls] == ["rm2"] and run.dropped_early == 1


def test_a_task_whose_model_is_a_registered_application_is_asked_by_its_application_name() -> None:
    d = _Stand(_cfg())
    d.apps = {"ranker": object()}
    assert isinstance(asyncio.run(_runner(d).submit(pb.SubmitRequest(application="recs", batch_size=1))),
                      pb.SubmitReply)
    assert [(c.model, c.application) for c in d.calls] == [("rm2", ""), ("", "ranker"), ("", "ranker")]


def test_no_batch_and_no_inputs_is_invalid() -> None:
    out = asyncio.run(_runner(_Stand(_cfg())).submit(pb.SubmitRequest(application="recs")))
    assert out == (SC.INVALID_ARGUMENT, "give batch_size or inputs")


def test_a_task_is_budgeted_on_the_workers_that_serve_its_model() -> None:
    """With several models, each task's expected time is its model's on that model's workers: rm2's
    worker is a g4dn (5 ms), the ranker's an r5n (30 ms); all workers' fastest type would say 5 ms."""
    d = _Stand(_cfg())
    d.workers = {"a": SimpleNamespace(instance_type="g4dn.xlarge", draining=False, removed=False),
                 "b": SimpleNamespace(instance_type="r5n.large", draining=False, removed=False)}
    d.serves = {"a": "rm2", "b": "ranker"}
    ms = {"g4dn.xlarge": 5.0, "r5n.large": 30.0}
    d.predictor = SimpleNamespace(predict_ms=lambda key, t, b: ms[t])
    assert _runner(d)._budgets(_runner(d).graphs["recs"], 1) == {"retrieve": 5.0, "rank": 30.0}
