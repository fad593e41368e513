"""Which pre-flight checks run, in which order (issue #38, deliverable 5): ``costscale doctor`` runs
every check the config makes relevant; ``costscale run`` runs the fast subset before anything is
launched (:func:`preflight`). The checks themselves are the adapters of this folder
(``account``, ``launch``, ``network``, ``services``); none spends anything.

Order: credentials first (without them every other check fails the same way: it stops there),
then the region (a region the account has not enabled refuses every call: it stops there too),
the launch (DryRun, IAM's policy simulator, image), the network, the vCPU quotas' headroom, the
services, the dispatcher address, the prices.

The fast subset (credentials, the DryRun of the first launch, each type's image) fails the
start only on an AWS verdict (an error code): an endpoint that does not answer is left to the
daemon's own start, which names the service it could not reach. On an emulator on this host an
image it does not list is not a verdict either (moto launches any image id).
"""
from __future__ import annotations

import logging

from config.errors import UsageError
from config.schema import Config
from daemon.doctor.account import check_credentials, check_prices, check_region
from daemon.doctor.images import check_image
from daemon.doctor.launch import check_offerings, check_permissions
from daemon.doctor.network import check_dispatcher, check_network, real_instances
from daemon.doctor.quotas import check_quotas
from daemon.doctor.simulate import check_simulated
from daemon.doctor.report import Clients, Finding, clients_for
from daemon.doctor.services import check_buckets, check_lease_table, check_token_parameter, token_parameter_used

log = logging.getLogger("costscale")


class PreflightFailed(UsageError):
    """``costscale run``'s fast pre-flight found what would fail: its one line, exit 1."""

    exit_code = 1


def run_doctor(cfg: Config, clients: Clients | None = None) -> list[Finding]:
    """Every relevant check, in order (module docstring)."""
    clients = clients or clients_for(cfg)
    first = check_credentials(clients)
    if first.status == "fail":
        return [first]
    region = check_region(cfg, clients)
    if region.status == "fail":
        return [first, region]
    out = [first, region, check_permissions(cfg, clients), check_simulated(cfg, clients), check_image(cfg, clients),
           check_network(cfg, clients), check_offerings(cfg, clients), check_quotas(cfg, clients),
           check_lease_table(cfg, clients)]
    if token_parameter_used(cfg):
        out.append(check_token_parameter(cfg, clients))
    if cfg.aws.buckets:
        out.append(check_buckets(cfg, clients))
    out += [check_dispatcher(cfg, clients), check_prices(cfg, clients)]
    return out


def fast_findings(cfg: Config, clients: Clients | None = None) -> list[Finding]:
    """The fast subset: credentials, a DryRun of the first slot, the image and its architecture."""
    clients = clients or clients_for(cfg)
    first = check_credentials(clients)
    if first.status == "fail":
        return [first]
    return [first, check_permissions(cfg, clients, only_first=True), check_image(cfg, clients)]


def is_verdict(cfg: Config, finding: Finding) -> bool:
    """A failed check that stops ``costscale run`` (module docstring): AWS answered with a code."""
    if finding.status != "fail" or not finding.code:
        return False
    return not (finding.check == "image" and finding.code.startswith("InvalidAMIID") and not real_instances(cfg))


def preflight(cfg: Config, clients: Clients | None = None) -> list[Finding]:
    """``costscale run``'s fast pre-flight: :class:`PreflightFailed` with the first verdict's line
    (the line ``costscale doctor`` prints), else the findings (logged by the caller)."""
    findings = fast_findings(cfg, clients)
    for f in findings:
        if is_verdict(cfg, f):
            raise PreflightFailed(f"{f.line()} (costscale doctor CONFIG checks the rest)")
    return findings


__all__ = ["PreflightFailed", "fast_findings", "is_verdict", "preflight", "run_doctor"]
