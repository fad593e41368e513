"""The EC2 cloud provider on boto3 (DESIGN "Actuators are narrow"; Kairos §5.2 and INFaaS §4.2.3
assume such a VM actuator under the planner).

Every instance is launched with the cluster, managed-by and intent (= ClientToken) tags in the
same run_instances call (TagSpecifications), so no instance exists untagged even for an instant.
Listing is always filtered by the cluster tag, through botocore's ``describe_instances``
paginator; termination verifies the tag on every id first (DESIGN invariant 2).

Transient faults are retried by botocore, not here: the client is built by
``scaler.cloud.aws_client`` in botocore's ``standard`` retry mode with ``max_attempts`` attempts in all
(8 by default, config ``aws.max_attempts``); that module says what is retried and why
``standard`` rather than ``adaptive``. What botocore gives up on becomes the typed errors of
``scaler.cloud.provider`` here:

* RequestLimitExceeded / Throttling after the last attempt → ``Throttled``;
* VcpuLimitExceeded (spot: MaxSpotInstanceCountExceeded), the family's vCPU quota → ``VcpuLimitExceeded``
  (the known quota is lowered, ``scaler.planner.quota.lowered_quotas``; the type stays plannable);
* InsufficientInstanceCapacity / InstanceLimitExceeded / Unsupported → ``InsufficientCapacity``, and
  for a spot launch also SpotMaxPriceTooLow and capacity-not-available
  (the slot, ``TYPE@ZONE``, is then out for the cooldown: the fleet tries the next zone, then
  on-demand, by ``scaler.spot.market.zone_order``);
* authentication and parameter errors → ``CloudConfigError``;
* anything else (a 5xx or a dropped connection after the last attempt) → ``CloudError``.

With 8 attempts, a call that stays throttled waits at most 1+2+4+8+16+20+20 = 71 s in backoff
(each wait a uniform draw below its bound: about 35 s on average) before ``Throttled``; other
transient faults back off from 50 ms (at most 6.35 s in all). EC2 sends its capacity errors
(InsufficientInstanceCapacity) as HTTP 500, so botocore retries those too, at that short backoff,
before they come back here as ``InsufficientCapacity``.

Spot capacity (issue #28) is launched by the same ``run_instances`` call, asked for a slot
``TYPE@ZONE`` (:mod:`scaler.cloud.slots`): ``InstanceMarketOptions`` MarketType ``spot`` with
SpotOptions one-time, InstanceInterruptionBehavior terminate and ``MaxPrice`` when
``spot.max_price`` is set (else EC2's default, the on-demand price), in the zone's subnet
(``spot.zones``; none named: the zone by ``Placement``). ``run_instances`` rather than
``create_fleet`` (type instant, ``price-capacity-optimized``): run_instances keeps one write-ahead
intent and one ClientToken per launch, exactly as on-demand, and leaves the zone to our own zone order
and budget decision (``scaler.spot.market.place``), which prices every instance at its own zone's
billed price; an instant fleet also takes a ClientToken, but picks the zone itself, so the budget
check would learn the zone (and the price) only after the launch. IAM: ``ec2:RunInstances`` (no
``ec2:CreateFleet``). Every instance carries a ``costscale:slot`` tag (its slot) and
``costscale:market`` (spot or on_demand), so the listing, and reconcile after a restart, give each
instance its slot back; an untagged spot instance's slot comes from ``InstanceLifecycle`` and its
zone.

Launch is idempotent per ClientToken: before run_instances the instances already tagged with the
token are looked up and returned instead (moto ignores ClientToken; AWS honours it as well). The
ClientToken is also what makes botocore's retry of a run_instances safe: an attempt whose answer
was lost (a reset connection, a read timeout) may have launched, and its retry carries the same
token, so EC2 answers it with that launch instead of a second one. A retried terminate_instances
or describe_instances is harmless as it is (terminating a terminating instance changes nothing).
"""
from __future__ import annotations

import time
from datetime import datetime
from typing import Any, Callable, Sequence

from config.sections.launch import ImageChoice, image_for
from config.sections.spot import SpotSpec
from scaler.cloud.image_parameter import ImageParameters, ImageUnresolved
from scaler.cloud.subnet_launch import launch_over_subnets
from scaler.cloud.subnets import subnet_token
from scaler.cloud.slots import market_of, slot_of, split_slot
from scaler.cloud.user_data import WorkerInstall, build_user_data
from scaler.cloud.aws_client import (AUTH_CODES, EC2_MAX_ATTEMPTS, THROTTLE_CODES, Typed, after, aws_call, error_fields,
                                     iam_action, make_client, naming_action)
from scaler.cloud.provider import (
    CLUSTER_TAG,
    INTENT_TAG,
    MANAGED_BY_TAG,
    MANAGED_BY_VALUE,
    CloudConfigError,
    CloudError,
    InsufficientCapacity,
    ManagedInstance,
    NotManaged,
    Throttled,
    VcpuLimitExceeded,
)

CAPACITY_CODES = frozenset({"InsufficientInstanceCapacity", "InstanceLimitExceeded", "Unsupported",
                            "InsufficientHostCapacity"})
#: a spot launch refused for want of spot capacity (or at our MaxPrice) in the zone asked: the next zone
SPOT_CAPACITY_CODES = frozenset({"SpotMaxPriceTooLow", "capacity-not-available", "InsufficientCapacityOnHost"})
#: a launch over the account's running-vCPU quota of the type's family (On-Demand; Spot: "Max spot
#: instance count exceeded", EC2 User Guide "Spot Instance quotas") → ``VcpuLimitExceeded``
QUOTA_CODES = frozenset({"VcpuLimitExceeded", "MaxSpotInstanceCountExceeded"})
#: the tags that name an instance's slot and market (reconcile after a restart reads them)
SLOT_TAG = "costscale:slot"
MARKET_TAG = "costscale:market"
#: the ClientToken of a DryRun launch (``Ec2Cloud.dry_run``): nothing is launched under it
DRY_RUN_TOKEN = "costscale-dry-run"
NOT_TERMINATED = ["pending", "running", "shutting-down", "stopping", "stopped"]


def make_ec2_client(region: str, endpoint_url: str | None = None, max_attempts: int = EC2_MAX_ATTEMPTS) -> Any:
    """A boto3 EC2 client, botocore retrying transient faults in its standard mode
    (``scaler.cloud.aws_client``) with ``max_attempts`` attempts in all."""
    return make_client("ec2", region, endpoint_url=endpoint_url, max_attempts=max_attempts, connect_timeout=5,
                       read_timeout=30)


def _epoch(v: Any) -> float:
    if isinstance(v, datetime):
        return v.timestamp()
    if isinstance(v, (int, float)):
        return float(v)
    return 0.0


def instance_slot(inst: dict[str, Any], tags: dict[str, str]) -> str:
    """The slot of a described instance: its ``costscale:slot`` tag when it names this type, else
    ``TYPE@ZONE`` for a spot instance (``InstanceLifecycle`` spot), else the type."""
    itype = inst.get("InstanceType", "")
    tagged = tags.get(SLOT_TAG)
    if tagged and split_slot(tagged)[0] == itype:
        return tagged
    zone = (inst.get("Placement") or {}).get("AvailabilityZone")
    return slot_of(itype, zone) if inst.get("InstanceLifecycle") == "spot" and zone else itype


def spot_market_options(max_price: float | None) -> dict[str, Any]:
    """``InstanceMarketOptions`` of a spot launch (module docstring)."""
    opts: dict[str, Any] = {"SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"}
    if max_price is not None:
        opts["MaxPrice"] = f"{max_price:.6f}"
    return {"MarketType": "spot", "SpotOptions": opts}


def _to_managed(inst: dict[str, Any]) -> ManagedInstance:
    tags = {t["Key"]: t["Value"] for t in inst.get("Tags", []) or []}
    return ManagedInstance(
        instance_id=inst["InstanceId"],
        instance_type=instance_slot(inst, tags),
        state=(inst.get("State") or {}).get("Name", "pending"),
        launch_time=_epoch(inst.get("LaunchTime")),
        private_ip=inst.get("PrivateIpAddress"),
        tags=tags,
    )


class Ec2Cloud:
    """``scaler.cloud.provider.CloudProvider`` on boto3 EC2.

    ``max_attempts``: the attempts botocore makes per call (retries included) on the client built
    here; a ``client`` handed in keeps its own retry config (tests, ``scaler.fleet.actuator_cli``)."""

    def __init__(
        self,
        cluster: str,
        region: str,
        launch: Any,  # config.schema.LaunchSpec (duck-typed so scaler does not import daemon)
        *,
        endpoint_url: str | None = None,
        max_attempts: int = EC2_MAX_ATTEMPTS,
        client: Any = None,
        dispatcher: str | None = None,
        cluster_token: str | None = None,
        models: Sequence[tuple[str, str]] = (),
        worker_port: int = 50052,
        worker_flags: Sequence[str] = (),
        token_parameter: str | None = None,
        spot: SpotSpec | None = None,   # each zone's subnet, max_price
        ssm_client: Any = None,         # resolves launch images given as SSM parameters (built on first use)
        clock: Callable[[], float] = time.monotonic,    # the image cache's and the subnet cooldowns' clock
        install: WorkerInstall | None = None,   # user data installs costscale (scaler.cloud.user_data)
    ) -> None:
        if max_attempts < 1:
            raise ValueError("max_attempts must be >= 1")
        self.cluster = cluster
        self.launch_spec = launch
        self.max_attempts = max_attempts
        self.client = client if client is not None else make_ec2_client(region, endpoint_url, max_attempts)
        self.dispatcher = dispatcher
        self.cluster_token = cluster_token
        self.token_parameter = token_parameter      # when set, user data names it instead of the token
        self.models = tuple(models)
        self.worker_port = worker_port
        self.worker_flags = tuple(worker_flags)
        self.spot = spot
        self.install = install
        self.clock = clock
        self._ssm = ssm_client
        self.images = ImageParameters(lambda: self._ssm_client(region, endpoint_url), clock)
        self.subnet_cooling: dict[tuple[str, str], float] = {}     # (type, subnet) -> end of its cooldown

    def _ssm_client(self, region: str, endpoint_url: str | None) -> Any:
        if self._ssm is None:
            self._ssm = make_client("ssm", region, endpoint_url=endpoint_url, max_attempts=self.max_attempts,
                                    connect_timeout=5, read_timeout=30)
        return self._ssm

    # -- the error boundary ------------------------------------------------------------------
    @staticmethod
    def _typed(op: str, instance_type: str | None = None) -> Typed:
        """How an EC2 error code that botocore gave up on (or does not retry) maps to a typed error."""
        def typed(code: str, msg: str, attempts: int) -> CloudError:
            if code in THROTTLE_CODES:
                return Throttled(f"{op}: throttled by EC2 ({code}){after(attempts)}")
            if code in QUOTA_CODES:
                return VcpuLimitExceeded(instance_type or "?", f"{op}: {code}: {msg}")
            if code in CAPACITY_CODES or code in SPOT_CAPACITY_CODES:
                return InsufficientCapacity(instance_type or "?", f"{op}: {code}: {msg}")
            if code in AUTH_CODES or code.startswith("Invalid"):
                return CloudConfigError(f"{op}: {code}: {msg}")
            return CloudError(f"{op}: {code}: {msg}{after(attempts)}")

        return typed

    def _call(self, op: str, instance_type: str | None = None, **kwargs: Any) -> Any:
        """One EC2 call (botocore retrying its transient faults), its failure typed."""
        return aws_call(op, lambda: getattr(self.client, op)(**kwargs), self._typed(op, instance_type),
                        iam_action("ec2", op))

    def _describe(self, filters: list[dict[str, Any]]) -> list[ManagedInstance]:
        """Every instance matching ``filters``, through botocore's paginator (each page's request
        retried by botocore on its own)."""
        def pages() -> list[ManagedInstance]:
            paginator = self.client.get_paginator("describe_instances")
            return [_to_managed(inst) for page in paginator.paginate(Filters=filters)
                    for res in page.get("Reservations", []) for inst in res.get("Instances", [])]

        return aws_call("describe_instances", pages, self._typed("describe_instances"), "ec2:DescribeInstances")

    def _cluster_filter(self) -> dict[str, Any]:
        return {"Name": f"tag:{CLUSTER_TAG}", "Values": [self.cluster]}

    # -- CloudProvider -----------------------------------------------------------------------
    def list_managed(self) -> list[ManagedInstance]:
        return self._describe([self._cluster_filter(),
                               {"Name": "instance-state-name", "Values": NOT_TERMINATED}])

    def find_by_intent(self, client_token: str) -> list[ManagedInstance]:
        """Instances (any state, terminated included) launched under ``client_token``."""
        return self._describe([self._cluster_filter(), {"Name": f"tag:{INTENT_TAG}", "Values": [client_token]}])

    def launch(self, instance_type: str, count: int, client_token: str,
               tags: dict[str, str] | None = None) -> list[ManagedInstance]:
        """Launch ``count`` instances of a slot (a type: on-demand, over ``launch.subnets`` in order:
        :mod:`scaler.cloud.subnet_launch`; ``TYPE@ZONE``: spot in that zone)."""
        slot = instance_type
        if count < 1:
            return []
        found = self.find_by_intent(client_token)
        if found:
            return found
        itype, zone = split_slot(slot)
        subnets = self.subnets()
        if zone is None and len(subnets) > 1:
            resp = launch_over_subnets(self, itype, count, client_token, tags)
        else:
            resp = self._call("run_instances", instance_type=slot, **self.run_params(slot, count, client_token, tags))
        # Partial success (MinCount=1 < MaxCount) is returned as what EC2 gave.
        return [_to_managed(i) for i in resp.get("Instances", [])]

    def subnets(self) -> list[str]:
        """The on-demand subnets in order of preference (``launch.subnets``, or ``subnet_id``)."""
        spec = self.launch_spec
        listed = getattr(spec, "subnet_ids", None)
        return list(listed) if listed is not None else [s for s in [getattr(spec, "subnet_id", None)] if s]

    def image_of(self, instance_type: str) -> ImageChoice:
        """The type's image as the config gives it (``config.sections.launch.image_for``)."""
        choice = image_for(self.launch_spec, instance_type)
        if choice is None:
            raise CloudConfigError(f"no image for {instance_type}: give launch.by_type."
                                   f"{instance_type.split('.', 1)[0]} an image, or launch.ami_id")
        return choice

    def image_id(self, choice: ImageChoice) -> str | None:
        """Its ``ami_id``, or its SSM parameter resolved (cached); None: the launch template's image."""
        return self.images.resolve(choice.ssm_parameter) if choice.ssm_parameter else choice.ami_id

    def run_params(self, slot: str, count: int, client_token: str,
                   tags: dict[str, str] | None = None, subnet: str | None = None) -> dict[str, Any]:
        """The RunInstances parameters of a launch of ``count`` instances of ``slot`` (a type, or
        ``TYPE@ZONE`` for spot), as :meth:`launch` sends them and :meth:`dry_run` checks them: the
        type's image (``image_for``) or template, subnet (on-demand: ``subnet``, else the first),
        groups, key, profile, tags, user data with the type's lines. ClientToken: the intent's
        (``client_token``, the intent tag), or the subnet's own (``scaler.cloud.subnets``)."""
        instance_type, zone = split_slot(slot)
        spec = self.launch_spec
        image = self.image_of(instance_type)
        subnets = self.subnets()
        all_tags = dict(getattr(spec, "tags", {}) or {})
        all_tags.update(tags or {})
        all_tags.update({CLUSTER_TAG: self.cluster, MANAGED_BY_TAG: MANAGED_BY_VALUE, INTENT_TAG: client_token,
                         SLOT_TAG: slot, MARKET_TAG: market_of(slot)})
        tag_list = [{"Key": k, "Value": v} for k, v in all_tags.items()]
        if zone is None:
            subnet = subnet or (subnets[0] if subnets else None)
        else:   # a spot zone's subnet; without one, the launch's only subnet (several: EC2 picks by Placement)
            subnet = (self.spot.zones.get(zone) if self.spot is not None else None) or \
                (subnets[0] if len(subnets) == 1 else None)
        kw: dict[str, Any] = {
            "InstanceType": instance_type,
            "MinCount": 1,
            "MaxCount": int(count),
            "ClientToken": subnet_token(client_token, subnet, subnets) if zone is None else client_token,
            "TagSpecifications": [{"ResourceType": "instance", "Tags": tag_list},
                                  {"ResourceType": "volume", "Tags": tag_list}],
            "UserData": build_user_data(self.cluster, self.dispatcher, image.user_data,
                                        self.cluster_token, self.models, self.worker_port, self.worker_flags,
                                        self.token_parameter, spot_watch=zone is not None, install=self.install),
        }
        ami = self.image_id(image)
        if ami:
            kw["ImageId"] = ami
        lt = image.launch_template
        if lt is not None:
            ref: dict[str, Any] = {"Version": lt.version}
            if lt.id:
                ref["LaunchTemplateId"] = lt.id
            else:
                ref["LaunchTemplateName"] = lt.name
            kw["LaunchTemplate"] = ref
        if zone is not None:
            kw["InstanceMarketOptions"] = spot_market_options(self.spot.max_price if self.spot is not None else None)
            kw["Placement"] = {"AvailabilityZone": zone}
        if subnet:
            kw["SubnetId"] = subnet
        if getattr(spec, "security_group_ids", None):
            kw["SecurityGroupIds"] = list(spec.security_group_ids)
        if getattr(spec, "key_name", None):
            kw["KeyName"] = spec.key_name
        prof = getattr(spec, "iam_instance_profile", None)
        if prof:
            kw["IamInstanceProfile"] = {"Arn": prof} if prof.startswith("arn:") else {"Name": prof}
        return kw

    def dry_run(self, slot: str, subnet: str | None = None) -> tuple[str, str]:
        """RunInstances of one instance of ``slot`` (on-demand: in ``subnet``, else the first) with
        ``DryRun=True``, as :meth:`launch` would send it: nothing is launched, nothing is spent.
        Returns EC2's (code, one-line message): ``DryRunOperation`` when the launch would have been
        allowed, else the refusal's code (``UnauthorizedOperation`` naming ec2:RunInstances,
        ``InvalidAMIID.NotFound``, ...), or SSM's when the type's image parameter does not resolve
        (``ParameterNotFound``). No credentials → ``CloudConfigError``; an unreachable endpoint →
        ``CloudError``."""
        from botocore.exceptions import ClientError

        try:
            kw = self.run_params(slot, 1, DRY_RUN_TOKEN, subnet=subnet)
        except ImageUnresolved as exc:
            return exc.code, str(exc)
        try:
            aws_call("run_instances", lambda: self.client.run_instances(DryRun=True, **kw), lambda c, m, a: None,
                     iam_action("ec2", "run_instances"))
        except ClientError as exc:
            code, message = error_fields(exc.response.get("Error", {}))
            return code, naming_action(code, message, iam_action("ec2", "run_instances"))
        return "", "EC2 answered the DryRun without DryRunOperation (an emulator that launched?)"

    def terminate(self, instance_ids: list[str]) -> None:
        ids = sorted(set(instance_ids))
        if not ids:
            return
        # Verify ownership with a filter (no error for unknown ids), then terminate only those.
        seen = self._describe([{"Name": "instance-id", "Values": ids}])
        owned = {i.instance_id for i in seen if i.tags.get(CLUSTER_TAG) == self.cluster}
        bad = [i for i in ids if i not in owned]
        if bad:
            raise NotManaged(f"refusing to terminate {', '.join(bad)}: not tagged {CLUSTER_TAG}={self.cluster}")
        live = [i.instance_id for i in seen if i.instance_id in owned and i.state != "terminated"]
        if live:
            self._call("terminate_instances", InstanceIds=live)
