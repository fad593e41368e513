"""The vCPU quotas the daemon plans within (issue #38 deliverable 6): read from Service Quotas at
start and every :data:`REFRESH_S` (``scaler.cloud.service_quotas``), under the config's ``quotas``
(the config wins per family and market), and lowered by a launch EC2 refused for the quota until the
next read (``scaler.planner.quota.lowered_quotas``).

The daemon plans with a config whose ``quotas`` is the effective section
(:func:`config.sections.quotas.merged_quotas`), built here as the region's prices are merged by
``AwsWiring.priced``: every decision that reads ``cfg.quotas`` (the planner, the joint plan, the
spot placement) then keeps within what the account runs. Only the families the configured types
touch are read (``scaler.planner.quota.wanted_quotas``), on-demand and spot apart.

A quota not read (no ``servicequotas:GetServiceQuota``, the endpoint down) is one warning line, and
that family plans with the config's value or no cap; the daemon never fails to start for it. The
log says which quotas were read and from where (``vCPU quotas: on-demand g_vt 64 (L-DB2E81BA
applied), ...``), and again when a read or a refused launch moves them.

A daemon given its cloud (the tests, the local runner) reads nothing unless a client is given, but
a refused launch still lowers the known quota.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable, Sequence

from config.schema import Config
from config.sections.quotas import merged_quotas
from scaler.cloud.provider import ManagedInstance
from scaler.cloud.service_quotas import make_quotas_client, read_quotas
from scaler.planner.quota import lowered_quotas, wanted_quotas

log = logging.getLogger("costscale")

#: how often Service Quotas is read again (a raised quota reaches the plan within the hour; a
#: lowered one is forgotten then)
REFRESH_S = 3600.0

Key = tuple[str, str]


def _text(limits: dict[Key, int], why: Callable[[Key], str]) -> str:
    return ", ".join(f"{m.replace('_', '-')} {f} {n} ({why((m, f))})" for (m, f), n in sorted(limits.items()))


class KnownQuotas:
    """The quotas known now: ``read`` from Service Quotas (``sources``: from where), ``lowered`` by a
    refused launch, under ``override`` (the config's section as loaded)."""

    def __init__(self, client: Any = None) -> None:
        self.client = client
        self.override: Any = None
        self.read: dict[Key, int] = {}
        self.sources: dict[Key, str] = {}
        self.lowered: dict[Key, int] = {}

    def adopt(self, cfg: Config) -> Config:
        """A config as loaded (start, reload): its ``quotas`` is the override; returns it with the
        effective quotas."""
        self.override = cfg.quotas
        return self.applied(cfg)

    def applied(self, cfg: Config) -> Config:
        """``cfg`` (the running one) with the effective quotas."""
        return cfg.model_copy(update={"quotas": merged_quotas(self.override, self.read, self.lowered)})

    def start(self, cfg: Config, aws: bool) -> Config:
        """At start: Service Quotas read (on AWS: ``aws`` and no ``aws.endpoint_url``, an emulator
        having none, as for the Price List API; or a client was given), then :meth:`adopt`."""
        self.override = cfg.quotas
        if (aws and not cfg.aws.endpoint_url) or self.client is not None:
            self.refresh(cfg)
        return self.adopt(cfg)

    def refresh(self, cfg: Config) -> bool:
        """Service Quotas read again (blocking); the lowered quotas forgotten. True when the known
        quotas moved."""
        try:
            if self.client is None:
                self.client = make_quotas_client(cfg.region, cfg.aws.endpoint_url)
        except Exception as exc:  # noqa: BLE001 - no client: the quotas known are kept
            log.warning("vCPU quotas not read from Service Quotas (%s: %s); planning with the config's quotas or "
                        "none", type(exc).__name__, exc)
            return False
        got = read_quotas(self.client, wanted_quotas(cfg))
        if got.unread:
            log.warning("vCPU quotas not read from Service Quotas: %s; planning with the config's quotas or none "
                        "there", "; ".join(got.unread[k] for k in sorted(got.unread)))
        moved = got.limits != self.read or bool(self.lowered)
        self.read, self.sources, self.lowered = dict(got.limits), dict(got.sources), {}
        log.info("%s", self.describe())
        return moved

    def lower(self, cfg: Config, refused: Sequence[str], listed: Sequence[ManagedInstance]) -> bool:
        """Launches of ``refused`` slots were refused for the vCPU quota: each family's quota in that
        market lowered to the vCPUs the cluster runs there now (``listed``); True when that moved
        the effective quotas (then plan again)."""
        vcpus = {t: int(it.vcpu) for t, it in cfg.full_catalog().items()}
        new = lowered_quotas(refused, [i.instance_type for i in listed if i.live], vcpus)
        before = merged_quotas(self.override, self.read, self.lowered)
        self.lowered.update(new)
        if merged_quotas(self.override, self.read, self.lowered) == before:
            return False
        log.warning("vCPU quota refused a launch of %s: planning within %s until Service Quotas is read again",
                    ", ".join(refused), _text(new, lambda k: "running now"))
        return True

    def describe(self) -> str:
        """One line: every quota known, and where it comes from."""
        over, merged = self.override, merged_quotas(self.override, self.read, self.lowered)
        named = {("on_demand", f) for f in (over.on_demand if over else {})} | \
            {("spot", f) for f in (over.spot if over else {})}
        limits = {("on_demand", f): n for f, n in (merged.on_demand if merged else {}).items()}
        limits |= {("spot", f): n for f, n in (merged.spot if merged else {}).items()}

        def why(k: Key) -> str:
            if k in self.lowered and self.lowered[k] == limits[k]:
                return "lowered by a refused launch"
            return "config" if k in named else f"Service Quotas {self.sources.get(k, '')}".rstrip()
        return f"vCPU quotas: {_text(limits, why) or 'none known (no cap)'}"

    def schedule(self, scheduler: Any, cfg_of: Callable[[], Config], moved: Callable[[], Any]) -> None:
        """Read again every :data:`REFRESH_S` (an APScheduler job); ``moved()`` when the quotas moved."""
        if self.client is None:
            return

        async def again() -> None:
            try:
                if await asyncio.to_thread(self.refresh, cfg_of()):
                    moved()
            except Exception as exc:  # noqa: BLE001 - the quotas known are kept; the next hour again
                log.warning("vCPU quotas not read again: %s", exc)
        scheduler.add_job(again, "interval", seconds=REFRESH_S, max_instances=1, coalesce=True, id="quotas")


__all__ = ["REFRESH_S", "KnownQuotas"]
