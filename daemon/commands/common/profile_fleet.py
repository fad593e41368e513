"""``costscale profile`` without ``--local``: one probe per type that lacks a measured profile,
launched through the fleet actuator under the cluster's lease and state store (so never beside a
running daemon of the cluster, which profiles on its own), measured through its worker and
terminated (``daemon.profiling.probing.Prober``). In the embedded default (``aws.endpoint_url`` set) each
probe's worker is a local process, as in the demo (``daemon.local.runner``)."""
from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Sequence

from config.profiles import ProfileTable
from config.schema import Config, ModelSpec
from daemon.commands.common.progress import Progress
from daemon.profiling.probing import ProbeOutcome, Prober
from daemon.profiling.model_profiles import ModelProfiles, measure_fn, measured_only, model_variants, record_measured
from dispatcher.latency_model import LatencyModel
from scaler.fleet.actuator import FleetActuator
from scaler.replicas.lease_decision import renew_interval_s
from scaler.fleet.state import StateStore
from variants.profiler import VariantProfile
from variants.registry import VariantRegistry

log = logging.getLogger("costscale.profile")


async def _keep_lease(wiring) -> None:  # noqa: ANN001
    """Renew the cluster's lease while probing (every ttl/3, as the daemon does): its fence refuses
    launches and terminations once it lapses, and probes must always be terminated."""
    lease = wiring.lease
    while lease is not None:
        await asyncio.sleep(renew_interval_s(lease.ttl_s))
        try:
            await asyncio.to_thread(lease.renew)
        except Exception as exc:  # noqa: BLE001 - lost or unreachable: the fence says so on the next call
            log.warning("lease of cluster %s not renewed: %s", lease.me.cluster, exc)


def have_measured(csv: ProfileTable, cfg: Config, registry: VariantRegistry) -> ProfileTable:
    """The profiles that count as measured: the CSV's and the registry's, less estimates."""
    return measured_only(csv.merged(registry.type_profiles()), registry)


async def profile_on_fleet(cfg: Config, specs: Sequence[ModelSpec], srcs: dict[str, Path], registry: VariantRegistry,
                           types: Sequence[str], batches: Sequence[int] | None, repeats: int,
                           bar: Progress, have: ProfileTable) -> tuple[list[ModelProfiles], ProbeOutcome]:
    """Probe every type of ``types`` some model of ``specs`` has no profile on in ``have``."""
    from daemon.aws.wiring import AwsWiring
    from daemon.aws.cluster_token import with_cluster_token
    from daemon.local.runner import LocalRunner
    from daemon.local.embedded import on_this_host
    from dispatcher.server import Dispatcher

    results = [ModelProfiles(m, model_variants(cfg, m, registry, srcs[m.name], cfg.model_scaling.generate_variants))
               for m in specs]
    todo = [t for t in types if any(not have.has(r.spec.profile_name, t) for r in results)]
    store = StateStore.open(cfg.state_path)   # the daemon's lock: refused (one line) while it runs
    cfg = with_cluster_token(cfg)             # probes register as the daemon's workers do
    wiring = AwsWiring(cfg, None)
    dispatcher = runner = renewal = None
    try:
        cfg = await asyncio.to_thread(wiring.priced, cfg)
        cloud = await asyncio.to_thread(wiring.open)
        dispatcher = Dispatcher(cfg, LatencyModel(), registry=registry)
        wiring.attach(dispatcher)                 # the token its SSM parameter holds (issue #27)
        port = await dispatcher.start(cfg.dispatcher.listen)
        if on_this_host(cfg):   # an emulator on this host: probes' workers run here
            runner = LocalRunner(f"127.0.0.1:{port}", dispatcher.cluster_token(),
                                 [(m.name, str(srcs.get(m.name, m.onnx)), m.profile_name) for m in cfg.models],
                                 profiles_csv=cfg.profiles)
        renewal = asyncio.create_task(_keep_lease(wiring))
        actuator = FleetActuator(cloud, store, cfg.catalog(), cfg.budget_per_hour, other_prices=cfg.table_prices(),
                                 pending_timeout_s=cfg.launch.pending_timeout_s)
        await asyncio.to_thread(actuator.reconcile)
        fns = [measure_fn(cfg, r.spec, r.variants, batches, repeats, on_step=bar.step) for r in results]

        async def measure(client, instance_type: str) -> dict[str, VariantProfile | str]:  # noqa: ANN001
            out: dict[str, VariantProfile | str] = {}
            for fn in fns:
                out.update(await fn(client, instance_type))
            return out

        bar.grow(sum(len(r.variants) for r in results) * len(todo))
        prober = Prober(actuator, cloud, dispatcher, on_fleet_change=runner.sync if runner else None,
                        register_timeout_s=cfg.launch.pending_timeout_s)
        outcome = await prober.run(todo, measure, on_step=bar.step)
        for r in results:
            record_measured(r, {t: {v: p for v, p in per.items() if v in {x.name for x in r.variants}}
                                for t, per in outcome.profiles.items()}, registry)
            for t, why in outcome.failed.items():
                r.not_done.setdefault(t, why)
        return results, outcome
    finally:
        if renewal is not None:
            renewal.cancel()
        if runner is not None:
            await runner.stop_all()
        if dispatcher is not None:
            await dispatcher.stop(0.0)
        store.close()
        await wiring.close()
