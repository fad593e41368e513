"""Checks of a parsed config that need more than one field, or data beside the YAML: what would
otherwise pass ``costscale validate`` and fail later, in the daemon (DESIGN invariant 5).

``config_problems(cfg)`` returns the problems as one line each; ``validate`` prints them and exits
2, and ``costscale run`` refuses to start on them. ``config_warnings(cfg)`` returns what works but
deserves a look (a model without latency profiles: the daemon profiles it, INFaaS §3.2);
``validate`` prints them and exits 0; among them, each allowed type a model has only an estimate on
(``config/type_estimates.csv``), planned on or left out (:func:`estimate_warnings`). Pure but for reading the profile CSV and botocore's bundled
region table (no network); ``security_file_problems`` reads the certificates, keys and tokens the
config names (as the daemon reads them at start), and only ``validate`` and ``run`` at start ask
for it (``load_checked_config(path, files=True)``).
"""
from __future__ import annotations

from pathlib import Path

from config.budget import BUDGET_EPS
from config.errors import ConfigError
from config.hostport import split_hostport
from config.profiles import ProfileTable, load_profiles_csv
from config.type_estimates import with_type_estimates
from config.schema import Config, load_config
from config.sections.dispatcher import DispatcherSpec
from config.sections.security import client_auth_missing, is_loopback, read_pem, read_token
from config.sections.spot import spot_problems, spot_types
from config.spot_catalog import load_spot_table


def known_regions() -> frozenset[str]:
    """Every EC2 region of every AWS partition, from botocore's bundled endpoint table."""
    import botocore.session

    session = botocore.session.get_session()
    out: set[str] = set()
    for partition in session.get_available_partitions():
        out.update(session.get_available_regions("ec2", partition_name=partition, allow_non_regional=False))
    return frozenset(out)


def config_problems(cfg: Config) -> list[str]:
    """One line per problem that the daemon would hit later; empty when none."""
    problems: list[str] = []
    if cfg.region not in known_regions():
        problems.append(f"region: unknown AWS region {cfg.region!r} (for example us-east-1, eu-west-3)")

    catalog = cfg.catalog()
    budget = cfg.budget_per_hour
    floor = sum(catalog[t.type].price_per_hour * t.min for t in cfg.instance_types)
    if floor > budget + BUDGET_EPS:
        mins = ", ".join(f"{t.type}×{t.min}" for t in cfg.instance_types if t.min)
        problems.append(f"instance_types: the minimum counts ({mins}) cost {floor:.3f} $/hr, "
                        f"over budget_per_hour {budget:g}")
    cheapest = min(catalog.values(), key=lambda it: it.price_per_hour)
    if cheapest.price_per_hour > budget + BUDGET_EPS:
        problems.append(f"budget_per_hour: {budget:g} $/hr buys no allowed instance type "
                        f"(the cheapest, {cheapest.name}, costs {cheapest.price_per_hour:g} $/hr)")
    if cfg.pinned_pool:
        pinned = sum(catalog[t].price_per_hour * n for t, n in cfg.pinned_pool.items())
        if pinned > budget + BUDGET_EPS:
            problems.append(f"pinned_pool: costs {pinned:.3f} $/hr, over budget_per_hour {budget:g}")

    problems += spot_problems(cfg.instance_types, cfg.spot, {t: it.price_per_hour for t, it in catalog.items()}, budget)
    try:
        load_profiles_csv(cfg.profiles)
    except ValueError as exc:
        problems.append(f"profiles: {exc}")

    d = cfg.dispatcher
    launches_on_aws = cfg.aws.endpoint_url is None   # an emulator (moto) runs its workers on this host
    if launches_on_aws and d.advertise is None and is_loopback(d.listen):
        problems.append(f"dispatcher: listen {d.listen} is loopback and no advertise is set: launched instances "
                        "would dial 127.0.0.1; set dispatcher.advertise to an address they can reach")
    unauthenticated = client_auth_missing(d.listen, d.auth_token_file, d.tls)
    if unauthenticated:
        problems.append(unauthenticated)
    if cfg.metrics.listen and not cfg.metrics.public and not is_loopback(cfg.metrics.listen):
        problems.append(f"metrics: listen {cfg.metrics.listen} is not loopback and the endpoint has no "
                        "authentication: keep it on 127.0.0.1 behind an authenticating proxy, or set "
                        "metrics.public: true")
    if cfg.metrics.listen and split_hostport(cfg.metrics.listen)[1] == split_hostport(d.listen)[1] != 0:
        problems.append(f"metrics: listen {cfg.metrics.listen} takes the dispatcher's port ({d.listen}); "
                        "give the metrics endpoint a port of its own")
    return problems


def security_file_problems(d: DispatcherSpec) -> list[str]:
    """One line per certificate, key or CA bundle (``dispatcher.tls``, ``dispatcher.worker_tls``)
    or token file (``auth_token_file``, ``cluster_token_file``) that the daemon would refuse at
    start: unreadable, empty, not PEM. The contents are never part of a line."""
    pems: list[tuple[str | None, str]] = []
    for section in ("tls", "worker_tls"):
        spec = getattr(d, section)
        if spec is not None:
            pems += [(getattr(spec, f), f"dispatcher.{section}.{f}") for f in type(spec).model_fields if f.endswith("_file")]
    tokens = [(d.auth_token_file, "dispatcher.auth_token_file"), (d.cluster_token_file, "dispatcher.cluster_token_file")]
    problems = []
    for read, files in ((read_pem, pems), (read_token, tokens)):
        for path, field in files:
            if path:
                try:
                    read(path, field)
                except ConfigError as exc:
                    problems.append(str(exc))
    return problems


def pipeline_qos_warnings(cfg: Config) -> list[str]:
    """A pipeline whose tasks' models' QoS add up, along a path, to more than its SLO: the fleet plans
    each model for its own ``qos_ms``, so the pipeline's SLO is not what it plans for (issue #26)."""
    out = []
    names = {m.name for m in cfg.models}
    for p in cfg.pipelines:
        g = p.graph()
        for leaf in g.leaves():
            path = g.path_to(leaf)
            if any(g.models[t] not in names for t in path):
                continue                      # an application's latency is the daemon's to know
            total = sum(cfg.model(g.models[t]).qos_ms for t in path)
            if total > p.slo_ms + 1e-9:
                out.append(f"pipelines: {p.name}: the models along {' > '.join(path)} have QoS adding up to {total:g} ms, "
                           f"over the pipeline's {p.slo_ms:g} ms: give each its part of the SLO as its qos_ms (the fleet "
                           "plans each model for its own)")
    return out


def config_warnings(cfg: Config, stored: ProfileTable | None = None, path: str = "CONFIG") -> list[str]:
    """One line per thing that works but deserves a look; ``validate`` prints them and still exits
    0. A model the profile CSV does not name with no latency profile on an allowed type (in
    ``stored``, the profiles measured since) is one: the daemon profiles it at start, ``costscale
    profile`` now."""
    try:
        table = load_profiles_csv(cfg.profiles)
    except ValueError:
        return []   # a problem, reported by config_problems
    named = set(table.models())    # a model the CSV names keeps it as its source (plan reports its gaps)
    if stored is not None:
        table = table.merged(stored)
    table = with_type_estimates(table)
    out = pipeline_qos_warnings(cfg)
    d = cfg.dispatcher
    if not d.token_parameter and (d.cluster_token or d.cluster_token_file or not is_loopback(d.listen)):
        out.append("dispatcher.token_parameter: empty, so the cluster token goes into launched workers' user data, "
                   "readable by anyone allowed ec2:DescribeInstanceAttribute and by every process on the instance; "
                   "keep it in SSM (the default /costscale/{cluster}/cluster-token)")
    table_prices = load_spot_table(cfg.region)
    for t in spot_types(cfg.instance_types):
        unpriced = [z for z in (cfg.spot.zones if cfg.spot else {}) if z not in table_prices.get(t, {})]
        if unpriced:
            out.append(f"spot: the shipped spot price table has no price for {t} in {', '.join(unpriced)}: the daemon "
                       "asks describe_spot_price_history (IAM ec2:DescribeSpotPriceHistory); without an answer "
                       f"{t} is planned on-demand there")
    for m in cfg.models:
        if m.family:      # its latencies are its family CSV's (load_config checked it is there)
            continue
        missing = [t.type for t in cfg.instance_types if not table.has(m.profile_name, t.type)]
        if missing and m.profile_name not in named:
            on = "any allowed type" if len(missing) == len(cfg.instance_types) else ", ".join(missing)
            out.append(f"models: {m.name!r} has no latency profile on {on}: run `costscale profile {path}` "
                       f"(or `costscale profile {path} --local` for estimates from this machine); until then the "
                       "daemon profiles it at start and serves it on a conservative pool")
    return out + estimate_warnings(cfg, table, path)


def estimate_warnings(cfg: Config, table: ProfileTable, path: str = "CONFIG") -> list[str]:
    """One line per allowed type where a model has only an estimate by ``config/type_estimates.csv``
    (issue #29): left out of its plans (``allow_estimates`` off), or planned on from that estimate
    (on): either way not a measurement (``scaler.planner.estimate_gate`` decides the same)."""
    out = []
    for t in cfg.instance_types:
        for m in cfg.models:
            e = table.estimate(m.profile_name, t.type)
            if e is None or e.sibling is None or m.family:
                continue
            if t.allow_estimates:
                out.append(f"instance_types: {t.type}: model {m.name!r} is planned there from an estimate, not a "
                           f"measurement ({e.basis}); the daemon may launch it on that estimate")
            else:
                out.append(f"instance_types: {t.type}: model {m.name!r} has only an estimate there ({e.basis}), so it "
                           f"is left out of {m.name}'s plans: set allow_estimates: true on it to plan with the estimate, "
                           f"or measure it (costscale profile {path} --model {m.name} --types {t.type})")
    return out


def load_checked_config(path: str | Path, files: bool = False) -> Config:
    """The config, refused (ConfigError, exit 2) on what ``costscale validate`` refuses: a daemon must
    not start into a config that fails later (a budget no allowed type fits, say). ``files``: also
    read the TLS and token files it names (:func:`security_file_problems`; ``validate`` and ``run``
    at start: the only places they are read, a reload keeps the running ones)."""
    cfg = load_config(path)
    problems = checked_problems(cfg, path, files)
    if problems:
        raise ConfigError(problems[0], lines=problems)
    return cfg


def checked_problems(cfg: Config, path: str | Path, files: bool = False) -> list[str]:
    """:func:`config_problems` (and with ``files`` :func:`security_file_problems`), each line
    prefixed with ``path``."""
    found = config_problems(cfg) + (security_file_problems(cfg.dispatcher) if files else [])
    return [f"{path}: {p}" for p in found]
