"""The one YAML file a user writes: pydantic models, loading, and line-numbered error messages.

The sections of their own modules, imported from there: ``dispatcher`` and ``metrics``
(:mod:`config.sections.dispatcher`), ``intervals``, ``model_scaling`` and its ``accuracy_scaling``
(:mod:`config.sections.loops`), ``pipelines``, ``spot``, ``lease`` and the TLS models
(:mod:`config.sections.pipelines`, :mod:`config.sections.spot`, :mod:`config.sections.lease`,
:mod:`config.sections.security`), ``launch`` (:mod:`config.sections.launch`: its per-type image
checks run after the schema's, each problem a line of its own). This module holds the top-level
:class:`Config` and the sections it defines itself (models, instance types, workload, aws).

``load_config(path)`` returns a validated :class:`Config` or raises :class:`ConfigError` whose
``lines`` hold one message per problem, each naming the field path and its YAML line
(DESIGN invariant 5).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal, Mapping

import yaml
from pydantic import (Field, PrivateAttr, ValidationError, field_validator,
                      model_validator)

from config.sections.batch_dist import parse_batch_dist
from config.catalog import InstanceType, load_catalog
from config.sections.dispatcher import DispatcherSpec, MetricsSpec
from config.errors import ConfigError
from config.files import unreadable
from config.families import shipped as shipped_families
from config.fields import Name, Strict
from config.sections.launch import LaunchSpec, LaunchTemplateRef, launch_problems
from config.sections.forecast import ForecastSpec
from config.sections.lease import LeaseSpec
from config.sections.quotas import QuotasSpec
from config.sections.retention import AuditLogSpec, StateRetentionSpec
from config.sections.loops import IntervalsSpec, ModelScalingSpec
from config.sections.pipelines import PipelineSpec, check_models
from config.sections.spot import Market, SpotSpec, check_spot


class ModelSpec(Strict):
    """One served model (an application's default model in INFaaS terms)."""

    name: Name
    onnx: str = Field("builtin:mlp", description="path to an .onnx file, or builtin:mlp for the demo model")
    qos_ms: Annotated[float, Field(gt=0)] = Field(..., description="p99 latency target in ms")
    max_batch: Annotated[int, Field(ge=1, le=100_000)] = 1000
    min_accuracy: Annotated[float, Field(ge=0, le=1)] = Field(
        0.0, description="the least accuracy its queries are served at when they ask for less (getVariant and the "
                         "accuracy plan's routing): for an application, 0 lets INFaaS pick any variant")
    profile: str | None = Field(None, description="model name in the latency profile CSV (default: name)")
    application: str | None = None
    weight: Annotated[float, Field(gt=0, le=1e6)] = Field(
        1.0, description="share of the budget when it cannot cover every model (issue #24): max_throughput serves "
                         "demand x weight alike; min_cost makes a model of weight 2 half as short as one of weight 1")
    expected_qps: Annotated[float, Field(ge=0)] | None = Field(
        None, description="this model's declared rate, planned for until the dispatcher has measured it "
                          "(default: workload.expected_qps)")
    family: str | None = Field(
        None, description="an application over a variant family (issue #25): a shipped family (resnet, digits) or "
                          "a CSV of its variants (model,variant,instance_type,batch_size,latency_ms,accuracy; a "
                          "relative path is relative to the config file). The fleet plans it at its most accurate "
                          "variant; accuracy scaling serves it with the others")

    @field_validator("family")
    @classmethod
    def _family(cls, v: str | None) -> str | None:
        if v is None or v.endswith(".csv"):
            return v
        shipped = shipped_families()
        if v not in shipped:
            raise ValueError(f"unknown family {v!r} (shipped: {', '.join(shipped)}; or the path of a .csv)")
        return v

    @model_validator(mode="after")
    def _family_profile(self) -> "ModelSpec":
        if self.family is not None and self.profile is not None:
            raise ValueError("give family or profile, not both (a family's profiles are its variants')")
        return self

    @property
    def profile_name(self) -> str:
        return self.profile or self.name


class InstanceTypeSpec(Strict):
    type: str
    min: Annotated[int, Field(ge=0)] = 0
    max: Annotated[int, Field(ge=0)] | None = None
    price_per_hour: Annotated[float, Field(gt=0)] | None = None
    #: plan models on this type from an estimate by config/type_estimates.csv (a sibling type's
    #: measurement x a latency factor) where it has no measurement; off: such a type is left out of
    #: those models' plans (issue #29, scaler.planner.estimate_gate). A measurement is always used.
    allow_estimates: bool = False
    market: Market = Field("on_demand", description="on_demand, spot or both (config.sections.spot; issue #28)")

    @field_validator("type")
    @classmethod
    def _known(cls, v: str) -> str:
        known = load_catalog()
        if v not in known:
            raise ValueError(f"unknown instance type {v!r} (known: {', '.join(sorted(known))})")
        return v

    @model_validator(mode="after")
    def _bounds(self) -> "InstanceTypeSpec":
        if self.max is not None and self.max < self.min:
            raise ValueError(f"max ({self.max}) is below min ({self.min})")
        return self


class WorkloadSpec(Strict):
    """What the planner assumes before the dispatcher has measured anything."""

    batch_dist: str = "deeprecsys"
    expected_qps: Annotated[float, Field(ge=0)] = 0.0

    @field_validator("batch_dist")
    @classmethod
    def _dist(cls, v: str) -> str:
        parse_batch_dist(v)
        return v


class AwsSpec(Strict):
    """How boto3 reaches AWS. The standard credential chain is used; endpoint_url is for testing
    against a local EC2 emulator (moto) and should stay unset in production. max_attempts: the
    attempts per EC2 call, retries included, botocore retrying throttling, 5xx and dropped
    connections in its standard retry mode (``scaler.cloud.aws_client``)."""

    endpoint_url: str | None = None
    max_attempts: Annotated[int, Field(ge=1, le=20)] = 8
    buckets: list[str] = Field(
        default_factory=list, description="the S3 buckets the daemon reads and writes (s3:// models, offline "
                                          "inputs and outputs; config/iam/s3-models.json's {bucket}): "
                                          "costscale doctor checks that each is reachable")


class Config(Strict):
    cluster: Name
    region: str = "us-east-1"
    budget_per_hour: Annotated[float, Field(gt=0)]
    objective: Literal["max_throughput", "min_cost"] = "max_throughput"
    headroom: Annotated[float, Field(ge=0, le=10)] = 0.1
    confirm_evaluations: Annotated[int, Field(ge=0, le=64)] = Field(
        4, description="max_throughput: the fleet loop confirms each pick by simulating up to this many pools in "
                       "the background (Kairos+, scaler.planner.confirm; >= 2, or 0: hold the similarity pick)")
    models: Annotated[list[ModelSpec], Field(min_length=1)]
    pipelines: list[PipelineSpec] = Field([], description="inference pipelines over the models (issue #26, Loki)")
    instance_types: Annotated[list[InstanceTypeSpec], Field(min_length=1)]
    spot: SpotSpec | None = Field(None, description="spot capacity: zones, overprovision, max_price, fallback")
    launch: LaunchSpec
    dispatcher: DispatcherSpec = DispatcherSpec()
    metrics: MetricsSpec = MetricsSpec()
    intervals: IntervalsSpec = IntervalsSpec()
    model_scaling: ModelScalingSpec = ModelScalingSpec()
    workload: WorkloadSpec = WorkloadSpec()
    profiles: str | None = Field(None, description="latency profile CSV (default: the shipped Kairos profiles)")
    state_path: str = "/var/lib/costscale/state.db"
    on_shutdown: Literal["keep", "terminate"] = "keep"
    log_format: Literal["text", "json"] = Field(
        "text", description="json: one JSON object per log line, audit events with their fields (costscale run)")
    audit_log: AuditLogSpec | None = Field(None, description="the audit events also in a file (config.sections.retention)")
    state_retention: StateRetentionSpec = Field(StateRetentionSpec(), description="what the state store forgets")
    aws: AwsSpec = AwsSpec()
    lease: LeaseSpec = LeaseSpec()
    quotas: QuotasSpec | None = Field(None, description="running-vCPU quotas per family, on-demand and spot "
                                                         "(config.sections.quotas; none: unlimited)")
    forecast: ForecastSpec = Field(ForecastSpec(), description="planning ahead of demand (config.sections.forecast)")
    pinned_pool: dict[str, Annotated[int, Field(ge=0)]] | None = Field(
        None, description="manual mode: hold exactly this pool instead of planning (still within budget)")
    # the region's on-demand prices (scaler.pricing.region), under the YAML overrides; None: the table's
    _region_prices: dict[str, float] | None = PrivateAttr(None)

    @field_validator("confirm_evaluations")
    @classmethod
    def _confirm_two(cls, v: int) -> int:
        if v == 1:
            raise ValueError("must be 0 (off) or >= 2 (the pick and the homogeneous pool)")
        return v

    @model_validator(mode="after")
    def _unique(self) -> "Config":
        names = [m.name for m in self.models]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"duplicate model name(s): {', '.join(sorted(dup))}")
        types = [t.type for t in self.instance_types]
        dupt = {n for n in types if types.count(n) > 1}
        if dupt:
            raise ValueError(f"duplicate instance type(s): {', '.join(sorted(dupt))}")
        check_models(self.pipelines, names)
        check_spot(self.instance_types, self.spot, self.region)
        if self.pinned_pool:
            allowed = set(types)
            bad = sorted(set(self.pinned_pool) - allowed)
            if bad:
                raise ValueError(f"pinned_pool names type(s) not in instance_types: {', '.join(bad)}")
        return self

    # -- derived views used by the decisions ---------------------------------------------------
    def with_region_prices(self, prices: Mapping[str, float]) -> "Config":
        """This config priced in its region: ``prices`` ($/hr by type) replace the shipped table's
        (us-east-1) in every catalog view; the YAML ``price_per_hour`` overrides still win."""
        cfg = self.model_copy()
        cfg._region_prices = dict(prices)
        return cfg

    def full_catalog(self) -> dict[str, InstanceType]:
        """Every catalog type: the region's prices where known, else the table's, with the YAML
        price overrides applied."""
        overrides = {t.type: t.price_per_hour for t in self.instance_types if t.price_per_hour}
        return load_catalog({**(self._region_prices or {}), **overrides})

    def catalog(self) -> dict[str, InstanceType]:
        """The catalog restricted to the allowed types, with YAML price overrides applied."""
        full = self.full_catalog()
        return {t.type: full[t.type] for t in self.instance_types}

    def table_prices(self) -> dict[str, float]:
        """$/hr of every catalog type as the shipped table prices it (no region prices, no YAML
        overrides): what the fleet actuator prices an instance of a type the config does not allow."""
        return {t: it.price_per_hour for t, it in load_catalog().items()}

    def prices(self, allowed_only: bool = False) -> dict[str, float]:
        """$/hr by instance type, as :meth:`full_catalog` (or :meth:`catalog`) prices them."""
        return {t: it.price_per_hour for t, it in (self.catalog() if allowed_only else self.full_catalog()).items()}

    def model(self, name: str | None = None) -> ModelSpec:
        if name is None:
            return self.models[0]
        for m in self.models:
            if m.name == name:
                return m
        raise KeyError(name)

    def type_bounds(self) -> dict[str, tuple[int, int | None]]:
        return {t.type: (t.min, t.max) for t in self.instance_types}


# --- loading with YAML line numbers -------------------------------------------------------------

def _node_lines(node: yaml.Node, path: tuple[Any, ...], out: dict[tuple[Any, ...], int], source: str) -> None:
    """Record the line of every field; a key given twice in one mapping is an error (YAML would
    silently keep the last: ``budget_per_hour: 2.5`` then ``250`` must not mean 250)."""
    out[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        first: dict[Any, int] = {}
        for k, _ in node.value:
            if k.value in first:
                where = _fmt_loc(path + (k.value,))
                raise ConfigError(f"{source}: line {k.start_mark.line + 1}: {where}: duplicate key "
                                  f"(first given at line {first[k.value]})")
            first[k.value] = k.start_mark.line + 1
        for k, v in node.value:
            key = k.value
            out[path + (key,)] = k.start_mark.line + 1
            _node_lines(v, path + (key,), out, source)
            out[path + (key,)] = k.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _node_lines(item, path + (i,), out, source)


def _line_for(loc: tuple[Any, ...], lines: dict[tuple[Any, ...], int]) -> int | None:
    loc = tuple(loc)
    while loc:
        if loc in lines:
            return lines[loc]
        loc = loc[:-1]
    return lines.get(())


def _fmt_loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


_FIELD_IN_MSG = re.compile(r"^((?:[A-Za-z_]\w*|\[\d+\])(?:\.[A-Za-z_]\w*|\[\d+\])*): (.*)$", re.S)


def _parse_loc(path: str) -> tuple[Any, ...]:
    """``tasks[1].children[0].task`` -> ("tasks", 1, "children", 0, "task")."""
    return tuple(int(p[1:-1]) if p.startswith("[") else p for p in re.findall(r"\[\d+\]|[A-Za-z_]\w*", path))


def parse_config_text(text: str, source: str = "<config>") -> Config:
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{source}: {where}YAML syntax error: {problem}") from None
    if data is None:
        raise ConfigError(f"{source}: the file is empty")
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: line 1: the top level must be a mapping of fields")
    lines: dict[tuple[Any, ...], int] = {}
    if node is not None:
        _node_lines(node, (), lines, source)
    try:
        cfg = Config.model_validate(data)
    except ValidationError as exc:
        msgs = []
        for err in exc.errors():
            loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and "[" in p and "]" in p and p.startswith(("function", "constrained"))))
            line = _line_for(loc, lines)
            msg = err["msg"]
            if msg.startswith("Value error, "):
                msg = msg[len("Value error, "):]
            named = _FIELD_IN_MSG.match(msg)     # a validator naming the field below its own: "tasks[1].model: ..."
            if named and tuple(loc) + _parse_loc(named.group(1)) in lines:
                loc, msg = tuple(loc) + _parse_loc(named.group(1)), named.group(2)
                line = lines[loc]
            if err["type"] == "missing":
                msg = "required field is missing"
            elif err["type"] == "extra_forbidden":
                msg = "unknown field"
            lines_txt = f"line {line}: " if line else ""
            msgs.append(f"{source}: {lines_txt}{_fmt_loc(loc)}: {msg}")
        raise ConfigError(msgs[0], lines=msgs) from None
    launch = [f"{source}: line {_line_for(loc, lines)}: {_fmt_loc(loc)}: {msg}"      # config.sections.launch
              for loc, msg in launch_problems(cfg.launch, [t.type for t in cfg.instance_types])]
    if launch:
        raise ConfigError(launch[0], lines=launch)
    return cfg


def load_config(path: str | Path) -> Config:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{p}: {unreadable(exc)}") from None
    cfg = parse_config_text(text, str(p))
    if cfg.profiles and not Path(cfg.profiles).is_absolute():
        # a relative profile CSV is relative to the config file (as every command reads it)
        cfg = cfg.model_copy(update={"profiles": str(p.parent / cfg.profiles)})
    models = []
    for m in cfg.models:        # a family CSV is relative to the config file too, and must be there
        if m.family and m.family.endswith(".csv"):
            csv = p.parent / m.family      # an absolute path stays as it is
            if not csv.is_file():
                raise ConfigError(f"{p}: models[{m.name}].family: no such file {csv}")
            m = m.model_copy(update={"family": str(csv)})
        models.append(m)
    return cfg.model_copy(update={"models": models})


__all__ = ["AwsSpec", "Config", "InstanceTypeSpec", "LaunchSpec", "LaunchTemplateRef", "ModelSpec", "WorkloadSpec",
           "load_config", "parse_config_text"]
