"""The daemon's AWS wiring: its region's prices, the cluster's owner lease, and the EC2 provider
that the lease fences (what ``Daemon.start`` builds when no cloud is handed to it).

1. ``priced(cfg)``: the config priced in its region (``scaler.pricing.region``; the shipped table
   for an emulator), so the planner, the actuator's budget check and the dispatcher's catalog
   all use the region's prices; what ``costscale validate`` checks on prices is checked again at
   them (a pinned pool over the budget there: one line, exit 2).
2. ``open()``: the lease table (created when missing, and the log says so), the cluster's lease
   (``scaler.replicas.lease_holder``; another live holder → ``LeaseHeld``, one line, exit 1; with
   ``lease.replicas`` the daemon goes on as a standby replica instead, ``daemon.replicas.role``), then
   ``Ec2Cloud`` wrapped in ``FencedCloud``. All before reconciliation, which would adopt the
   other daemon's instances.
   With a cluster token and ``dispatcher.token_parameter`` (the default), the token goes into that
   SSM SecureString parameter (the parameter's value wins when it exists) and user data names the
   parameter, never the token (``scaler.cloud.token_parameter``, issue #27).
3. ``schedule()``: renewal every ttl/3 (an APScheduler job like the loops); a renewal that finds
   the lease lost has the fence refuse every launch and terminate from then on, logs one line
   and stops the daemon. The token parameter is read again every minute: a rotated token reaches
   the dispatcher (``attach``) without a restart.
4. ``left_running()``: with the lease lost, ``on_shutdown: terminate`` does not try (the fence
   would refuse): one line says which instances are left running and that the new holder owns them.
5. ``close()`` (the end of ``Daemon.stop``): gives the lease back, or raises ``LeaseLost`` so that
   ``costscale run`` exits 1 with that line.

The lease table is reached at the config's ``aws.endpoint_url`` (the demo's and the tests' moto).
"""
from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
from typing import Any, Callable, Sequence

from config.checks import config_problems
from config.errors import ConfigError, UsageError
from config.schema import Config
from config.sections.security import worker_tls_flags
from scaler.cloud.provider import CloudConfigError, CloudError, CloudProvider, ManagedInstance
from scaler.replicas.lease_holder import CLOCK_SAFETY, ClusterLease, FencedCloud
from scaler.cloud.ec2 import Ec2Cloud
from scaler.cloud.user_data import WorkerInstall, worker_install
from scaler.replicas.lease_decision import Claimant, Lease, LeaseHeld, LeaseLost, holder_text, renew_interval_s, utc
from scaler.replicas.lease_table import DynamoLeaseTable, make_dynamodb_client
from scaler.pricing.region import RegionPrices, cache_path_for, regional_config
from scaler.cloud.token_parameter import TokenParameter, make_ssm_client, parameter_name
from dispatcher.auth import TOKEN_GRACE_S, TOKEN_REFRESH_S

log = logging.getLogger("costscale")


class DaemonError(UsageError):
    """The daemon cannot start (lock held, port busy, profiles missing): one line, exit 1."""

    exit_code = 1


def aws_error(service: str, cfg: Config, exc: CloudError, allowed: str) -> DaemonError:
    """The one line for an AWS service that refused the daemon or could not be reached at start."""
    if isinstance(exc, CloudConfigError):
        return DaemonError(f"{service} in {cfg.region} refused the daemon: {exc}; give it AWS credentials (an "
                           f"instance role, AWS_PROFILE or the standard credential chain) allowed to {allowed}")
    where = cfg.aws.endpoint_url or f"the {service} endpoint of {cfg.region}"
    return DaemonError(f"{service} unreachable at {where}: {exc}; check the network, region and aws.endpoint_url")


def claimant(cluster: str) -> Claimant:
    """This process as a lease holder: host, pid and a nonce (a pid is reused, the owner never)."""
    host, pid = socket.gethostname(), os.getpid()
    return Claimant(cluster=cluster, owner=f"{host}:{pid}:{secrets.token_hex(4)}", host=host, pid=pid)


class AwsWiring:
    """Prices, lease and fenced EC2 provider of one daemon."""

    def __init__(self, cfg: Config, listen: str | None, *, prices: RegionPrices | None = None,
                 dynamodb: Any = None, ssm: Any = None) -> None:
        self.cfg = cfg
        self.listen = listen
        emulated = cfg.aws.endpoint_url is not None      # no Pricing API there: the table's prices
        self.prices = prices or (None if emulated else RegionPrices(cfg.region, cache_path_for(cfg.state_path)))
        self._dynamodb = dynamodb
        self._ssm = ssm
        self.lease: ClusterLease | None = None
        self.dynamodb: Any = None                           # the lease table's client (replicas share it)
        self.token: str | None = None                       # the cluster token, as its parameter holds it
        self.token_parameter: TokenParameter | None = None
        self._dispatcher: Any = None

    def priced(self, cfg: Config, fetch: bool = True, also: Sequence[str] = (), check: bool = True) -> Config:
        """``cfg`` with its region's prices (``fetch`` False: the cache only, as on a reload;
        ``also``: more catalog types to price, ``costscale plan --types``); ConfigError (exit 2)
        when a check that passed at the table's prices fails at these (a pinned pool or the type
        minimums over the budget, a budget that buys no type)."""
        priced = regional_config(cfg, self.prices, fetch, also)
        if priced is cfg or not check:      # (check False: the caller checks the priced config itself)
            return priced
        before = set(config_problems(cfg))
        problems = [f"at the on-demand prices of {cfg.region}: {p}" for p in config_problems(priced) if p not in before]
        if problems:
            raise ConfigError(problems[0], lines=problems)
        return priced

    def open(self) -> CloudProvider:
        """Take the cluster's lease, then the EC2 provider fenced by it (blocking: run in a thread)."""
        cfg = self.cfg
        token = cfg.dispatcher.token()
        if token and cfg.dispatcher.token_parameter:       # user data names the parameter, never the token
            self._publish_token(token)                     # (refused: one line, before the lease is taken)
        name = cfg.lease.table
        client = self._dynamodb or make_dynamodb_client(cfg.region, cfg.aws.endpoint_url)
        table = DynamoLeaseTable(name, client)
        lease = ClusterLease(table, claimant(cfg.cluster), cfg.lease.ttl_s, table_name=name)
        try:
            if table.ensure_table():
                log.info("created the DynamoDB table %s (PAY_PER_REQUEST) for cluster leases", name)
            held: Lease | None = lease.acquire()
        except LeaseHeld as exc:
            if not cfg.lease.replicas:
                raise
            held = None     # a standby replica (daemon.replicas.role): it serves, and retries the lease
            log.info("cluster %s: starting as a standby replica: %s", cfg.cluster, str(exc).split(";")[0])
        except CloudError as exc:
            raise aws_error("DynamoDB", cfg, exc, f"describe, create, read and write the table {name} "
                                                  "(the cluster lease)") from None
        if held is not None:
            prev = lease.taken_from
            log.info("cluster %s: lease taken in %s (generation %d, ttl %gs)%s", cfg.cluster, name, held.generation,
                     cfg.lease.ttl_s, f"; its last holder ({holder_text(prev)}) is gone" if prev else "")
        self.lease, self.dynamodb = lease, client
        advertise = cfg.dispatcher.advertise or (self.listen or cfg.dispatcher.listen)
        ec2 = Ec2Cloud(cfg.cluster, cfg.region, cfg.launch, endpoint_url=cfg.aws.endpoint_url,
                       max_attempts=cfg.aws.max_attempts, dispatcher=advertise,
                       cluster_token=None if self.token_parameter else token,
                       token_parameter=self.token_parameter.name if self.token_parameter else None,
                       models=[(m.name, m.onnx) for m in cfg.models], worker_port=cfg.dispatcher.worker_port,
                       worker_flags=worker_tls_flags(cfg.dispatcher.tls, cfg.dispatcher.worker_tls), spot=cfg.spot,
                       install=self._worker_install())
        return FencedCloud(ec2, lease)

    def _worker_install(self) -> WorkerInstall | None:
        """What launched workers install at boot (``launch.bootstrap``; scaler.cloud.user_data), or a
        ConfigError line when this costscale has no package metadata to name its version."""
        if not self.cfg.launch.bootstrap:
            return None
        try:
            return worker_install(self.cfg.launch.wheelhouse)
        except CloudConfigError as exc:
            raise ConfigError(f"launch.bootstrap: {exc}") from None

    def _publish_token(self, token: str) -> None:
        """The cluster token into its SSM parameter (issue #27; the parameter's value wins when it
        exists: it may have been rotated), or one line naming the permission."""
        cfg = self.cfg
        name = parameter_name(cfg.dispatcher.token_parameter or "", cfg.cluster)
        param = TokenParameter(self._ssm or make_ssm_client(cfg.region, cfg.aws.endpoint_url), name)
        try:
            self.token = param.publish(token)
        except CloudError as exc:
            raise aws_error("SSM", cfg, exc, f"ssm:GetParameter and ssm:PutParameter on {name} (or set "
                                             "dispatcher.token_parameter: '' to put the token in user data)") from None
        self.token_parameter = param
        log.info("cluster %s: workers read the cluster token from SSM parameter %s", cfg.cluster, name)

    def attach(self, dispatcher: Any) -> None:
        """The dispatcher whose cluster token follows the parameter: set now, read again every
        :data:`dispatcher.auth.TOKEN_REFRESH_S` (:meth:`schedule`)."""
        self._dispatcher = dispatcher
        if self.token is not None:
            dispatcher.set_cluster_token(self.token)

    async def _refresh_token(self) -> None:
        param, d = self.token_parameter, self._dispatcher
        if param is None or d is None:
            return
        try:
            value = await asyncio.to_thread(param.read)
        except CloudError as exc:
            log.warning("cluster token parameter %s not read (%s): keeping the token held", param.name, exc)
            return
        if value and d.set_cluster_token(value):
            log.info("cluster token rotated in %s: registering and calling workers with the new one (the old one "
                     "stays valid for %.0f s)", param.name, TOKEN_GRACE_S)

    def schedule(self, scheduler: Any, stop: Callable[[], None]) -> None:
        """Renew the lease every ttl/3; on its loss, one log line and ``stop()`` (from any thread:
        the fence may find the loss in the actuator's)."""
        if self.lease is None:
            return
        loop = asyncio.get_running_loop()

        def lost(exc: LeaseLost) -> None:
            log.error("%s", exc)
            loop.call_soon_threadsafe(stop)

        self.lease.on_lost = lost
        scheduler.add_job(self._renew, "interval", seconds=renew_interval_s(self.lease.ttl_s), max_instances=1,
                          coalesce=True, id="lease")
        if self.token_parameter is not None:
            scheduler.add_job(self._refresh_token, "interval", seconds=TOKEN_REFRESH_S, max_instances=1, coalesce=True,
                              id="token")

    def left_running(self, instances: Sequence[ManagedInstance]) -> str | None:
        """With the lease lost, the one line ``on_shutdown: terminate`` logs instead of terminating
        ``instances`` (they belong to the lease's new holder); None while it is not lost."""
        lease = self.lease
        if lease is None or lease.lost is None:
            return None
        ids = sorted(i.instance_id for i in instances if i.live)
        new = lease.lost_to
        why = (f"lost to host {new.host} pid {new.pid} (generation {new.generation}), whose daemon owns them now"
               if new is not None else "lost (its item was deleted); the next daemon to take it owns them")
        return (f"on_shutdown: terminate skipped: {len(ids)} instance{'s' * (len(ids) != 1)} left running "
                f"({', '.join(ids) or 'none'}): the lease of cluster {lease.me.cluster} was {why}")

    async def _lease_call(self, method: str) -> CloudError | None:
        """``lease.<method>()`` in a worker thread; a cloud error comes back for one log line."""
        if self.lease is None:
            return None
        try:
            await asyncio.to_thread(getattr(self.lease, method))
        except CloudError as exc:
            return exc
        return None

    async def _renew(self) -> None:
        try:
            failed = await self._lease_call("renew")
        except LeaseLost:
            return                  # said once by ``lost`` above, and the daemon is stopping
        lease = self.lease
        if failed is not None and lease is not None:
            held = lease.held
            until = utc(held.expires_at - lease.ttl_s * CLOCK_SAFETY) if held is not None else "now"
            log.warning("lease of cluster %s not renewed: %s; launches and terminations stop at %s until a "
                        "renewal lands", lease.me.cluster, failed, until)

    async def close(self) -> None:
        """Give the lease back (after the last fleet action of a stop); LeaseLost if it was lost."""
        failed = await self._lease_call("release")
        if failed is not None and self.lease is not None:
            log.warning("lease of cluster %s not given back (%s): the next daemon waits until it expires",
                        self.lease.me.cluster, failed)
