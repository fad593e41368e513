"""/metrics stays bounded while instances come and go (issue #40: the metrics' label sets bounded):
every scrape builds its families from one status snapshot (:mod:`daemon.observe.metrics`), so the
series of an instance that is gone leave with it, and no series is labelled by an instance id."""
from __future__ import annotations

import asyncio
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from config.profiles import load_profiles_csv
from config.version import PROTOCOL_VERSION, costscale_version
from daemon.observe.metrics import MetricsServer, snapshot_on_loop
from dispatcher.latency_model import LatencyModel
from dispatcher.proto import costscale_pb2 as pb
from dispatcher.server import Dispatcher
from scaler.cloud.provider import ManagedInstance
from tests.dispatch_helpers import make_config, run, start_worker

TYPES = ("g4dn.xlarge", "c5n.2xlarge")
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c", "us-east-1d", "us-east-1f")


def _series(port: int) -> set[tuple[str, tuple[tuple[str, str], ...]]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:  # loopback only
        text = resp.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))) for fam in text_string_to_metric_families(text)
            for s in fam.samples}


def _wave(k: int) -> list[ManagedInstance]:
    """100 instances of wave ``k``: on-demand and spot slots (TYPE@ZONE) over both types, pending and running."""
    return [ManagedInstance(f"i-{k:02d}{n:03d}", TYPES[n % 2] + (f"@{ZONES[n % 5]}" if n % 4 else ""),
                            "pending" if n % 3 == 0 else "running") for n in range(100)]


def test_the_series_count_returns_to_the_live_ones_after_100_instances_come_and_go() -> None:
    async def body() -> list[int]:
        d = Dispatcher(make_config(), LatencyModel.from_profiles(load_profiles_csv()))
        await d.start("127.0.0.1:0")
        metrics = MetricsServer(snapshot_on_loop(d, asyncio.get_running_loop()), lambda: list(TYPES))
        port = metrics.start("127.0.0.1:0")
        counts: list[int] = []
        try:
            baseline = await asyncio.to_thread(_series, port)
            counts.append(len(baseline))
            for k in range(3):          # three waves of 100 instances, 4 of them with registered workers
                wave = _wave(k)
                workers = [await start_worker(i.instance_id, i.instance_type.split("@")[0]) for i in wave[1:5]]
                d.set_cloud_view(wave)
                for i, w in zip(wave[1:5], workers):
                    d.add_worker_direct(i.instance_id, i.instance_type.split("@")[0], w.address)
                while len(d.workers) < 4:
                    await asyncio.sleep(0.01)
                during = await asyncio.to_thread(_series, port)
                counts.append(len(during))
                assert not any(v.startswith("i-") for _, labels in during for _, v in labels)   # no per-instance label
                d.set_cloud_view([])    # all gone
                for w in workers:
                    await w.server.stop(0)
                after = await asyncio.to_thread(_series, port)
                counts.append(len(after))
                assert after == baseline
        finally:
            metrics.stop()
            await d.stop(grace=0.0)
        return counts

    counts = run(body, timeout=60)
    base = counts[0]
    # during a wave: 10 spot slots (type, zone) x 4 states, the pool's $/hr by market (on_demand, spot) and
    # the workers' variants by type (2 x 2); after: the baseline, wave after wave
    assert counts == [base, *([base + 10 * 4 + 2 + 4, base] * 3)]


def test_instances_listed_terminated_can_no_longer_register() -> None:
    """The dispatcher's allowances follow the instances: 100 launched, then listed terminated, none
    of them may register any more (they do not pile up over months of launches)."""
    d = Dispatcher(make_config(), LatencyModel.from_profiles(load_profiles_csv()))
    wave = _wave(0)

    def register(i: ManagedInstance) -> pb.RegisterWorkerReply:
        return d.register(pb.RegisterWorkerRequest(instance_id=i.instance_id, instance_type=i.instance_type.split("@")[0],
                                                   address="127.0.0.1:1", costscale_version=costscale_version(),
                                                   protocol_version=PROTOCOL_VERSION))

    d.set_cloud_view(wave)
    booting = d.booting()
    d.set_cloud_view([ManagedInstance(i.instance_id, i.instance_type, "terminated") for i in wave])
    replies = [register(i) for i in wave]
    assert len(booting) == 100 and d.booting() == []
    assert {r.accepted for r in replies} == {False}
    assert {r.message.split(":")[0] for r in replies} == {f"unknown instance {i.instance_id!r}" for i in wave}
