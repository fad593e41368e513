"""``costscale status`` and the Prometheus metrics: a running daemon's pool by type and state, its
$/hr and spend, per-model demand and attainment, decisions with reasons and the last error -- and
``status --json`` and ``/metrics`` agree. Also the pieces: the outcome ledger, the spend meter, the
status feed's reading of the loops, the CLI's errors, the Grafana dashboard."""
from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from config.profiles import load_profiles_csv
from config.schema import Config
from daemon.app import Daemon
from daemon.observe.fleet_status import FleetStatus
from daemon.commands.status import status_dict
from daemon.observe.recent import Recent
from daemon.observe.spend import SpendMeter, day_start
from daemon.observe.status_feed import LoopFacts, StatusFeed, build_feed
from dispatcher.latency_model import LatencyModel
from dispatcher.outcomes import LATENCY_BUCKETS_S, OutcomeLedger
from dispatcher.proto import costscale_pb2 as pb, costscale_pb2_grpc as pbg
from dispatcher.server import Dispatcher
from scaler.cloud.provider import ManagedInstance
from scaler.cloud.fake import FakeCloud
from tests.conftest import free_port
from tests.dispatch_helpers import RunningWorker, make_config, start_worker
from tests.dispatcher.test_dispatcher_live import run

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "config" / "grafana-dashboard.json"
G4, C5, R5 = 0.526, 0.432, 0.149     # $/hr (config/instance_catalog.csv)


def daemon_config(tmp_path: Path) -> Config:
    return Config.model_validate({
        "cluster": "ops", "budget_per_hour": 2.5,
        "models": [{"name": "ncf", "qos_ms": 1000, "max_batch": 100}],
        "instance_types": [{"type": "g4dn.xlarge"}, {"type": "c5n.2xlarge"}, {"type": "r5n.large"}],
        "launch": {"ami_id": "ami-1"}, "pinned_pool": {"g4dn.xlarge": 1, "c5n.2xlarge": 1, "r5n.large": 1},
        "dispatcher": {"listen": "127.0.0.1:0", "on_deadline": "best_effort"},
        "metrics": {"listen": "127.0.0.1:0"},
        "state_path": str(tmp_path / "state.db"), "model_scaling": {"generate_variants": False},
    })


async def oip_client(*args: str) -> dict[str, Any]:
    proc = await asyncio.create_subprocess_exec(sys.executable, str(REPO / "tests" / "oip_client.py"), *args,
                                                cwd=str(REPO), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()[-3000:]
    return json.loads(out)


async def cli(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "daemon.cli", *args, cwd=str(REPO),
                                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = await proc.communicate()
    return int(proc.returncode or 0), out.decode(), err.decode()


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:  # loopback only
        text = resp.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_status_json_and_metrics_agree_on_a_running_daemon(tmp_path: Path) -> None:
    """Pool by type and state, $/hr, served counts (queries sent with Submit and with tritonclient),
    spend and decisions: the same in both."""
    reads_s: list[float] = []
    async def body() -> tuple[int, dict[str, Any], dict, str]:
        workers: list[RunningWorker] = []
        cloud = FakeCloud("ops")
        cloud.stick_pending("r5n.large")

        async def follow(instances: list[ManagedInstance]) -> None:   # a worker per running instance
            for i in instances:
                if i.state == "running" and i.instance_id not in {w.servicer.instance_id for w in workers}:
                    w = await start_worker(i.instance_id, i.instance_type)
                    workers.append(w)
                    assert d.dispatcher is not None
                    d.dispatcher.add_worker_direct(i.instance_id, i.instance_type, w.address)

        d = Daemon(daemon_config(tmp_path), None, cloud=cloud, on_fleet_change=follow, listen="127.0.0.1:0",
                   generate_variants=False)
        await d.start()
        try:
            await d.fleet_tick("test")
            while d.dispatcher is None or len(d.dispatcher.workers) < 2:
                await asyncio.sleep(0.01)
            async with grpc.aio.insecure_channel(f"127.0.0.1:{d.port}") as ch:
                stub = pbg.InferenceStub(ch)
                for i in range(8):
                    await stub.Submit(pb.SubmitRequest(model="ncf", batch_size=1 + i % 4))
                with pytest.raises(grpc.aio.AioRpcError):
                    await stub.Submit(pb.SubmitRequest(model="nope", batch_size=1))
            # and through the Open Inference Protocol, with a stock client (tritonclient)
            assert await oip_client("--infer", f"127.0.0.1:{d.port}", "ncf", "4") == {"OK": 4}
            assert d.status_feed is not None and d.metrics is not None and d._scheduler is not None
            t_read = time.monotonic()
            d.status_feed.observe()
            d._scheduler.pause_job("status-feed")    # no spend sample between the two reads
            rc, out, err = await cli("status", "--dispatcher", f"127.0.0.1:{d.port}", "--json")
            assert rc == 0, err
            metrics = await asyncio.to_thread(scrape, d.metrics.port)
            reads_s.append(time.monotonic() - t_read)
            rc2, text, err2 = await cli("status", "--dispatcher", f"127.0.0.1:{d.port}")
            assert rc2 == 0, err2
            return d.metrics.port, json.loads(out), metrics, text
        finally:
            await d.stop(grace=0.0)
            for w in workers:
                await w.server.stop(0)

    port, st, m, text = run(body, timeout=60)
    assert port > 0
    assert st["daemon"] and st["budget_per_hour"] == 2.5
    assert st["instances"] == {"g4dn.xlarge": {"running": 1}, "c5n.2xlarge": {"running": 1},
                               "r5n.large": {"pending": 1}}
    assert st["pool_cost_per_hour"] == pytest.approx(G4 + C5 + R5)
    assert st["models"]["ncf"]["served"] == 12 and st["served"] == 12
    assert st["models"]["ncf"]["attainment"]["1m"] == 1.0
    assert st["models"]["(unknown)"]["queries"] == {"INVALID_ARGUMENT": 1}
    assert {w["instance_type"] for w in st["workers"]} == {"g4dn.xlarge", "c5n.2xlarge"}
    assert all(w["variants"] == ["ncf"] for w in st["workers"])
    plan = [x for x in st["decisions"] if x["kind"] == "plan"]
    assert plan and plan[0]["reason"] == "pinned pool (config) for 0.0 q/s (declared)"
    assert sorted(x["kind"] for x in st["decisions"] if x["kind"] == "launch") == ["launch"] * 3
    assert st["last_error"] is None and st["profiling"] == []     # every model has its profiles
    # the metrics say the same
    assert m[("costscale_pool_cost_dollars_per_hour", ())] == pytest.approx(st["pool_cost_per_hour"])
    assert m[("costscale_budget_dollars_per_hour", ())] == 2.5
    # a status-feed tick already handed to the event loop when the job was paused may still sample
    # between the two reads: they differ by at most the pool's $/hr over the time the reads took
    apart = st["pool_cost_per_hour"] * reads_s[0] / 3600.0
    assert abs(m[("costscale_spent_dollars_total", ())] - st["spent_usd_total"]) <= apart + 1e-12
    for itype, states in st["instances"].items():
        for state in ("pending", "running", "parked", "draining"):
            assert m[("costscale_instances", (("instance_type", itype), ("market", "on_demand"), ("state", state), ("zone", "")))] == states.get(state, 0)
    assert m[("costscale_queries_total", (("code", "OK"), ("model", "ncf")))] == 12
    assert m[("costscale_query_latency_seconds_count", (("model", "ncf"),))] == 12
    assert m[("costscale_slo_violations_total", (("model", "ncf"),))] == 0
    assert m[("costscale_fleet_decisions_total", (("kind", "launch"),))] == 3
    assert m[("costscale_variant_instances", (("instance_type", "g4dn.xlarge"), ("variant", "ncf")))] == 1
    assert m[("costscale_queue_depth", ())] == 0
    # the human view shows the same pool and decisions
    assert "g4dn.xlarge" in text and "pinned pool" in text and "last error: none" in text


def test_status_counts_instances_by_state_on_a_dispatcher_alone() -> None:
    async def body() -> pb.StatusReply:
        d = Dispatcher(make_config(), LatencyModel.from_profiles(load_profiles_csv()))
        await d.start("127.0.0.1:0")
        ws = [await start_worker(f"i-{k}", "g4dn.xlarge") for k in range(3)]
        try:
            d.set_cloud_view([ManagedInstance(f"i-{k}", "g4dn.xlarge", "running") for k in range(3)]
                             + [ManagedInstance("i-boot", "c5n.2xlarge", "pending")])
            for k, w in enumerate(ws):
                d.add_worker_direct(f"i-{k}", "g4dn.xlarge", w.address)
            while len(d.workers) < 3:
                await asyncio.sleep(0.01)
            d.mark_parked("i-1")
            await d.drain("i-2")
            return d.status_reply()
        finally:
            await d.stop(grace=0.0)
            for w in ws:
                await w.server.stop(0)

    st = status_dict(run(body))
    assert not st["daemon"] and st["spent_usd_today"] == 0 and st["decisions"] == []
    assert st["instances"] == {"g4dn.xlarge": {"running": 1, "parked": 1, "draining": 1}, "c5n.2xlarge": {"pending": 1}}
    assert st["pool_cost_per_hour"] == pytest.approx(3 * G4 + C5)
    assert {w["instance_id"]: w["state"] for w in st["workers"]} == {"i-0": "running", "i-1": "parked", "i-2": "draining"}
    assert list(st["models"]) == ["ncf", "big"]
    assert st["models"]["ncf"]["attainment"] == {"1m": None, "5m": None, "15m": None}


def test_unreachable_dispatcher_is_one_line_and_exit_1() -> None:
    rc, out, err = run(lambda: cli("status", "--dispatcher", f"127.0.0.1:{free_port()}"))
    assert rc == 1 and out == "" and len(err.strip().splitlines()) == 1 and "cannot reach dispatcher" in err


@pytest.mark.parametrize("args, words", [(["--dispatcher", "nowhere"], "HOST:PORT"),
                                         (["--interval", "0"], "--interval"), (["--colour"], "unrecognized")])
def test_bad_flags_are_one_line_and_exit_2(args: list[str], words: str) -> None:
    rc, out, err = run(lambda: cli("status", *args))
    assert rc == 2 and len(err.strip().splitlines()) == 1 and words in err


def test_watch_json_prints_one_object_per_refresh() -> None:
    async def body() -> list[dict]:
        d = Dispatcher(make_config(), LatencyModel.from_profiles(load_profiles_csv()))
        port = await d.start("127.0.0.1:0")
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "daemon.cli", "status", "--dispatcher", f"127.0.0.1:{port}", "--json", "--watch",
            "--interval", "0.1", cwd=str(REPO), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            assert proc.stdout is not None
            return [json.loads(await proc.stdout.readline()) for _ in range(3)]
        finally:
            proc.terminate()
            await proc.wait()
            await d.stop(grace=0.0)

    objs = run(body)
    assert [o["cluster"] for o in objs] == ["test"] * 3


# -- the pieces ----------------------------------------------------------------------------------

def test_ledger_windows_attainment_and_counters() -> None:
    led = OutcomeLedger(started=0.0)
    led.record("m", "OK", 100.0, slo_met=True, latency_s=0.5)   # 15 minutes before: out of every window
    for k in range(8):
        led.record("m", "OK", 1000.0 + k, slo_met=k < 6, latency_s=0.004, accuracy=0.9)
    led.record("m", "DEADLINE_EXCEEDED", 1001.0)          # a miss
    led.record("m", "INVALID_ARGUMENT", 1002.0)           # the client's mistake: not counted
    w1 = led.window("m", 60, 1010.0)
    assert (w1.queries, w1.slo_met) == (10, 6)
    assert w1.attainment == pytest.approx(6 / 9)
    assert w1.served_accuracy == pytest.approx(0.9)
    assert w1.demand_qps == pytest.approx(10 / 60)
    m = led.models["m"]
    assert m.queries == {"OK": 9, "DEADLINE_EXCEEDED": 1, "INVALID_ARGUMENT": 1}
    assert m.slo_violations == 3
    assert m.latency_counts[LATENCY_BUCKETS_S.index(0.005)] == 8 and m.latency_counts[LATENCY_BUCKETS_S.index(0.5)] == 1
    assert led.window("m", 900, 1010.0).queries == 10
    assert led.window("other", 60, 1010.0).attainment is None


def test_windows_shorter_than_the_window_rate_over_the_time_since_start() -> None:
    led = OutcomeLedger(started=1000.0)
    for k in range(20):
        led.record("m", "OK", 1000.0 + k, slo_met=True)
    assert led.window("m", 300, 1020.0).demand_qps == pytest.approx(20 / 20)


def test_spend_integrates_the_pool_and_splits_at_midnight_utc(tmp_path: Path) -> None:
    midnight = day_start(1_700_000_000.0) + 86400
    meter = SpendMeter(None, midnight - 3600)
    meter.sample(midnight - 3600, 2.0)     # 2 $/hr from 23:00
    meter.sample(midnight - 1800, 4.0)     # 1 $ so far, then 4 $/hr
    meter.sample(midnight + 900, 4.0)      # 3 $ more, 1 of them after midnight
    assert meter.total == pytest.approx(4.0)
    assert meter.today == pytest.approx(1.0)


def test_spend_today_survives_a_restart_and_counts_the_downtime_at_the_last_price(tmp_path: Path) -> None:
    path = tmp_path / "state.db.spend.json"
    t0 = day_start(1_700_000_000.0) + 3600
    a = SpendMeter(path, t0)
    a.sample(t0, 1.0)
    a.sample(t0 + 3600, 2.0)
    a.save(t0 + 3600)
    assert path.stat().st_mode & 0o777 == 0o600
    b = SpendMeter(path, t0 + 5400)        # down for half an hour at 2 $/hr
    assert b.today == pytest.approx(1.0 + 1.0) and b.total == 0.0
    path.write_text("{not json")
    assert SpendMeter(path, t0).today == 0.0


def _stub_daemon(tmp_path: Path) -> SimpleNamespace:
    cfg = daemon_config(tmp_path)
    return SimpleNamespace(
        cfg=cfg, status=FleetStatus(), fleet_events=[], dispatcher=None, actuator=None, capacity_hint={},
        decide=lambda demand: ({"g4dn.xlarge": 2}, None),
        model_loop=SimpleNamespace(applied=Recent(), failed=Recent(),
                                   accuracy=SimpleNamespace(allocations=Recent(), failed=Recent())),
        model_params=SimpleNamespace(solver="greedy"))


def stub_feed(d: SimpleNamespace, clock: Callable[[], float] = time.time) -> StatusFeed:
    """The feed as ``Daemon.start`` composes it (:func:`daemon.observe.status_feed.build_feed`), over the
    parts of a stub daemon (:func:`_stub_daemon`, with a ``store`` and an ``actuator`` when set)."""
    return build_feed(lambda: d.cfg, fleet=lambda: d.status, fleet_events=lambda: d.fleet_events,
                      store=getattr(d, "store", None), dispatcher=d.dispatcher,
                      price=lambda t: d.actuator.price(t) if d.actuator is not None else 0.0, stopping=lambda: False,
                      profiles=getattr(d, "profiles", None), model_loop=d.model_loop,
                      solver=lambda: d.model_params.solver, clock=clock,
                      facts=LoopFacts(lambda: d.capacity_hint, lambda: d.status.plan))


def test_feed_records_an_accuracy_plan_when_its_placement_changes(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    d = _stub_daemon(tmp_path)
    feed = stub_feed(d, clock=lambda: 0.0)
    caplog.set_level("INFO", logger="costscale.audit")

    def alloc(placement: dict, served: float, acc: float) -> tuple:
        plan = SimpleNamespace(served_qps={"digits": served}, demand_qps={"digits": 31.5}, effective_accuracy=acc)
        return (0.0, SimpleNamespace(placement=placement, plan=plan))

    acc = d.model_loop.accuracy
    acc.allocations += [alloc({"i-1": "svm", "i-2": "svm"}, 5.25, 0.9944), alloc({"i-1": "svm", "i-2": "svm"}, 6.3, 0.9944)]
    feed.observe()
    acc.allocations.append(alloc({"i-1": "mlp", "i-2": "softmax"}, 31.5, 0.9612))
    acc.failed.append(("i-2", "softmax", "LoadVariant softmax on i-2: unavailable"))
    feed.observe()
    feed.observe()
    facts = feed.facts()
    assert [(x.kind, x.summary) for x in facts.decisions] == [
        ("accuracy_plan", "i-1=svm, i-2=svm"), ("accuracy_plan", "i-1=mlp, i-2=softmax")]
    assert facts.decisions[1].reason == "accuracy planner (Proteus §4): serves digits 31.5 of 31.5 q/s at accuracy 0.9612"
    assert facts.last_error == "accuracy plan: load softmax on i-2: LoadVariant softmax on i-2: unavailable"
    events = [r.audit for r in caplog.records if hasattr(r, "audit")]
    assert [e["event"] for e in events] == ["accuracy_plan", "accuracy_plan", "error"]
    assert events[1]["placement"] == {"i-1": "mlp", "i-2": "softmax"} and events[1]["effective_accuracy"] == 0.9612


def test_feed_records_new_targets_intents_events_placements_and_errors_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from scaler.fleet.state import StateStore

    t0 = 1_700_000_000.0
    d = _stub_daemon(tmp_path)
    d.store = StateStore.open(":memory:")
    d.actuator = SimpleNamespace(price=lambda t: 0.5)
    d.store.record_intent("old", "launch", "g0-x", "c5n.2xlarge", 1, 0, t0 - 10)   # before the feed: not reported
    d.store.set_intent_status("old", "done", t0 - 10, instance_ids=["i-0"])
    feed = stub_feed(d, clock=lambda: t0)
    caplog.set_level("INFO", logger="costscale.audit")
    feed.start(SimpleNamespace(add_job=lambda *a, **k: None))   # type: ignore[arg-type]
    feed.planned(*d.decide(None), None)           # what Daemon.fleet_tick tells the feed
    d.store.record_intent("tok-1", "launch", "g1-abc", "g4dn.xlarge", 2, 0, t0)
    d.store.set_intent_status("tok-1", "done", t0 + 1, instance_ids=["i-1", "i-2"])
    feed.observe()
    feed.planned(*d.decide(None), None)            # the same target again: no new decision
    d.fleet_events += [(5.0, "launch", "i-1"), (6.0, "park", "i-2")]   # launches come from the intents
    d.model_loop.applied.append(SimpleNamespace(action="load", variant="ncf@int8", worker="i-1"))
    d.store.record_intent("tok-2", "launch", "g1-abc", "r5n.large", 1, 1, t0 + 2)
    d.store.set_intent_status("tok-2", "failed", t0 + 2, note="InsufficientInstanceCapacity")
    feed.observe()
    feed.observe()
    assert feed.facts().last_error == "fleet: launch r5n.large×1 (intent tok-2) failed: InsufficientInstanceCapacity"
    d.model_loop.failed.append((SimpleNamespace(action="unload", variant="ncf", worker="i-2"), "worker gone"))
    feed.observe()
    assert feed.facts().last_error == "model loop: unload ncf on i-2: worker gone"
    d.status.last_error = "PlanError: no pool fits"
    feed.observe()
    feed.observe()
    facts = feed.facts()
    assert [(x.loop, x.kind) for x in facts.decisions] == [
        ("fleet", "plan"), ("fleet", "launch"), ("fleet", "park"), ("model", "load")]
    assert facts.decisions[0].reason == "pinned pool (config)"
    assert facts.decisions[1].summary == "launch i-1, i-2 (g4dn.xlarge); pool 1.000 $/hr after"
    assert facts.decisions[2].summary == "park i-2" and "surplus to the target g4dn.xlarge×2" in facts.decisions[2].reason
    assert facts.decision_counts == {("fleet", "plan"): 1, ("fleet", "launch"): 1, ("fleet", "park"): 1,
                                     ("model", "load"): 1}
    assert facts.last_error == "fleet: PlanError: no pool fits"
    d.status.last_error = None
    feed.observe()
    assert feed.facts().last_error == "fleet: PlanError: no pool fits"   # the last one is kept, with its time
    # every decision and error is one audit event, with what it takes to reconstruct the spend
    events = [r.audit for r in caplog.records if hasattr(r, "audit")]
    assert [e["event"] for e in events] == ["plan", "launch", "error", "park", "load", "error", "error"]
    launch = events[1]
    assert (launch["intent"], launch["instance_ids"], launch["instance_type"], launch["cost_per_hour_after"]) == (
        "tok-1", ["i-1", "i-2"], "g4dn.xlarge", 1.0)
    assert events[0]["target"] == {"g4dn.xlarge": 2} and events[0]["cost_per_hour"] == 1.0


def test_json_log_lines_carry_the_audit_fields() -> None:
    import logging

    from daemon.observe.audit import JsonFormatter

    rec = logging.LogRecord("costscale.audit", logging.INFO, __file__, 1, "audit launch: %s", ("i-1",), None)
    rec.audit = {"event": "launch", "intent": "tok-1", "cost_per_hour_after": 0.5}
    line = JsonFormatter().format(rec)
    assert "\n" not in line
    got = json.loads(line)
    assert got["message"] == "audit launch: i-1" and got["event"] == "launch" and got["intent"] == "tok-1"
    assert got["level"] == "INFO" and got["logger"] == "costscale.audit" and got["ts"].endswith("+00:00")


def test_feed_hears_the_vm_autoscaler_with_its_reason(tmp_path: Path) -> None:
    """Daemon._on_vm tells the feed each add or remove, and still turns them into the capacity hint."""
    from variants.infaas.vm_autoscaler import VmDecision

    d = _stub_daemon(tmp_path)
    feed = stub_feed(d)
    feed.start(SimpleNamespace(add_job=lambda *a, **k: None))   # type: ignore[arg-type]
    d.status_feed, d._hint_planned, d._loop = feed, {}, None
    vm = [VmDecision("add", "gpu", "80% of gpu instances overloaded", interfered=True), VmDecision("hold", "cpu", "")]
    run(lambda: Daemon._on_vm(d, vm, {}))    # type: ignore[arg-type]
    assert d.capacity_hint == {m.name: pytest.approx(1.1) for m in d.cfg.models}
    assert [(x.kind, x.reason) for x in feed.decisions] == [("vm_add", "80% of gpu instances overloaded")]


def test_grafana_dashboard_plots_metrics_the_daemon_exports() -> None:
    from daemon.observe.metrics import families

    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    used = {n for e in exprs for n in re.findall(r"costscale_[a-z_]+", e)}
    reply = pb.StatusReply(models=[pb.ModelStatus(name="m")])
    exported = {f.name for f in families(reply, {"m": ([0] * (len(LATENCY_BUCKETS_S) + 1), 0.0)}, ["g4dn.xlarge"])}
    suffixes = ("_total", "_bucket", "_count", "_sum")
    base = {re.sub("(" + "|".join(suffixes) + ")$", "", n) for n in used}
    assert base <= exported, base - exported
    titles = " ".join(p["title"].lower() for p in dash["panels"])
    for words in ("spend", "budget", "attainment", "latency", "pool"):
        assert words in titles


def test_validate_refuses_a_metrics_port_that_is_the_dispatchers(tmp_path: Path) -> None:
    from config.checks import config_problems
    from config.errors import ConfigError
    from config.schema import parse_config_text

    cfg = daemon_config(tmp_path).model_copy(update={
        "dispatcher": daemon_config(tmp_path).dispatcher.model_copy(update={"listen": "0.0.0.0:50051"}),
        "metrics": daemon_config(tmp_path).metrics.model_copy(update={"listen": "127.0.0.1:50051"})})
    assert any(p.startswith("metrics: listen 127.0.0.1:50051 takes the dispatcher's port") for p in config_problems(cfg))
    text = (REPO / "config" / "costscale.example.yaml").read_text().replace("listen: 127.0.0.1:9464", "listen: localhost")
    with pytest.raises(ConfigError, match=r"metrics.listen: must be HOST:PORT"):
        parse_config_text(text, "c.yaml")
    off = parse_config_text((REPO / "config" / "costscale.example.yaml").read_text()
                            .replace("listen: 127.0.0.1:9464", "listen: null"), "c.yaml")
    assert off.metrics.listen is None


def test_a_loop_record_keeps_the_latest_and_counts_them_all() -> None:
    """daemon.observe.recent.Recent: bounded, and a reader remembering the total gets exactly what is new."""
    r: Recent[int] = Recent(keep=3)
    r += [1, 2]
    assert r.since(0) == [1, 2] and r.total == 2 and r == [1, 2]
    r += [3, 4, 5]
    assert list(r) == [3, 4, 5] and len(r) == 3 and r.total == 5
    assert r.since(2) == [3, 4, 5] and r.since(4) == [5] and r.since(5) == []
    assert r.since(0) == [3, 4, 5]          # the first two are gone: what is kept
