"""The worker's user data: what an instance runs at first boot (issue #38, "Workers that install
themselves from a stock image").

Two shapes. Without :class:`WorkerInstall` (an image that already has ``costscale`` on its PATH):
IMDS facts, the worker's settings, then ``exec costscale worker ...``. With it (what the daemon
launches): the same settings, the daemon's exact costscale version and ONNX Runtime range, the
wheelhouse when one is configured, then the shipped bootstrap script
(``scaler/cloud/bootstrap/costscale-worker-bootstrap.sh``), written to
``/opt/costscale/bin/costscale-worker-bootstrap.sh`` and run with the worker's flags: it installs
Python, costscale and the hardware's ONNX Runtime build, fetches s3:// models and starts the
``costscale-worker.service`` systemd unit. The script travels gzip-compressed (deterministic: mtime
0, so a launch's user data, and so its ClientToken's parameters, do not change between retries) and
base64-encoded, as ``base64 -d | gunzip`` of coreutils and gzip read it on any image.

EC2 limits user data to 16 KB in raw form, before base64 encoding
(docs.aws.amazon.com/AWSEC2/latest/UserGuide/user-data.html): :func:`build_user_data` refuses more
with one line (:data:`USER_DATA_LIMIT`).
"""
from __future__ import annotations

import base64
import gzip
import re
import shlex
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, requires
from importlib.resources import files
from typing import Sequence

from config.version import DISTRIBUTION, UNKNOWN, costscale_version
from scaler.cloud.provider import CloudConfigError

#: EC2's limit on user data, in bytes before base64 (module docstring)
USER_DATA_LIMIT = 16 * 1024
#: where the user data writes the bootstrap script on the instance (under $COSTSCALE_TEST_ROOT in tests)
BOOTSTRAP_PATH = "/opt/costscale/bin/costscale-worker-bootstrap.sh"
SCRIPT_NAME = "costscale-worker-bootstrap.sh"
#: the instance metadata service; a test points the user data at its own with $COSTSCALE_TEST_IMDS
IMDS_ENDPOINT = "http://169.254.169.254"


@dataclass(frozen=True)
class WorkerInstall:
    """What the bootstrap installs: ``costscale==version``, ONNX Runtime of the ``onnxruntime``
    range (the CPU or GPU build of it), from the ``wheelhouse`` (s3://B/PREFIX) when one is set, else the index."""

    version: str
    onnxruntime: str
    wheelhouse: str | None = None


def onnxruntime_range(requirements: Sequence[str]) -> str:
    """The version range of the ``onnxruntime`` requirement among ``requirements`` (package
    metadata's ``Requires-Dist``), e.g. ``<1.32,>=1.31.1``."""
    for req in requirements:
        m = re.match(r"^onnxruntime\s*([<>=!~][^;]*)", req)
        if m:
            return m.group(1).replace(" ", "")
    raise CloudConfigError("costscale's package metadata names no onnxruntime range")


def worker_install(wheelhouse: str | None = None) -> WorkerInstall:
    """This daemon's version and ONNX Runtime range, read from its package metadata now (at launch
    time on the control host). CloudConfigError when costscale runs uninstalled (no metadata)."""
    version = costscale_version()
    try:
        reqs = requires(DISTRIBUTION) or []
    except PackageNotFoundError:
        reqs = []
    if version == UNKNOWN or not reqs:
        raise CloudConfigError("costscale has no package metadata (run from a tree never installed): workers "
                               "cannot install its version; pip install costscale (or pip install -e .)")
    return WorkerInstall(version, onnxruntime_range(reqs), wheelhouse)


def bootstrap_script() -> str:
    """The shipped bootstrap script's text."""
    return (files("scaler.cloud.bootstrap") / SCRIPT_NAME).read_text()


def _embedded_script() -> list[str]:
    packed = base64.b64encode(gzip.compress(bootstrap_script().encode(), 9, mtime=0)).decode()
    return ['BOOT="${COSTSCALE_TEST_ROOT:-}' + BOOTSTRAP_PATH + '"',
            'install -d -m 0700 "$(dirname "$BOOT")"',
            f'# {SCRIPT_NAME} of costscale (gzip, base64)',
            "base64 -d <<'COSTSCALE_BOOTSTRAP' | gunzip > \"$BOOT\"",
            *(packed[i:i + 76] for i in range(0, len(packed), 76)),
            "COSTSCALE_BOOTSTRAP",
            'chmod 0700 "$BOOT"']


def build_user_data(cluster: str, dispatcher: str | None, extra: str | None = None,
                    cluster_token: str | None = None, models: Sequence[tuple[str, str]] = (),
                    worker_port: int = 50052, worker_flags: Sequence[str] = (),
                    token_parameter: str | None = None, spot_watch: bool = False,
                    install: WorkerInstall | None = None) -> str:
    """The worker's cloud-init script: the user's extra lines, then ``costscale worker``
    (with ``worker_flags``: the TLS files, :func:`config.sections.security.worker_tls_flags`),
    through the bootstrap script when ``install`` is given (module docstring).

    The instance learns its own id, type and private address from the instance metadata service
    (IMDSv2, token-based) and registers with the dispatcher under them; the dispatcher accepts only
    instances the daemon launched. ``models`` are (name, ONNX spec) pairs to serve (with ``install``,
    an ``s3://`` spec is fetched with the instance profile first). The cluster token: with
    ``token_parameter`` only that SSM parameter's name (the worker reads it with its instance profile,
    :mod:`scaler.cloud.token_parameter`); else ``cluster_token`` itself. ``spot_watch`` (a spot
    instance): the worker watches IMDS for the interruption notice (``worker.spot_watch``).
    CloudConfigError when the result is over EC2's 16 KB."""
    lines = ["#!/bin/bash", "set -euo pipefail"]
    if extra:
        body = extra[len("#!/bin/bash"):] if extra.startswith("#!/bin/bash") else extra
        lines.append(body.strip("\n"))
    imds = "${COSTSCALE_TEST_IMDS:-" + IMDS_ENDPOINT + "}" if install is not None else IMDS_ENDPOINT
    lines += [
        f"IMDS={imds}/latest",
        'IMDS_TOKEN=$(curl -fsS -X PUT "$IMDS/api/token" -H "X-aws-ec2-metadata-token-ttl-seconds: 300")',
        'md() { curl -fsS -H "X-aws-ec2-metadata-token: $IMDS_TOKEN" "$IMDS/meta-data/$1"; }',
        "export COSTSCALE_INSTANCE_ID=$(md instance-id)",
        "export COSTSCALE_INSTANCE_TYPE=$(md instance-type)",
        "COSTSCALE_ADDRESS=$(md local-ipv4)",
        f"export COSTSCALE_CLUSTER={shlex.quote(cluster)}",
    ]
    if token_parameter:    # the worker reads the token with its instance profile; none is written here
        lines.append("export AWS_DEFAULT_REGION=$(md placement/region)")
        lines.append(f"export COSTSCALE_TOKEN_PARAMETER={shlex.quote(token_parameter)}")
    elif cluster_token:
        lines.append(f"export COSTSCALE_CLUSTER_TOKEN={shlex.quote(cluster_token)}")
    start = "exec costscale worker"
    if install is not None:
        lines += [f"export COSTSCALE_VERSION={shlex.quote(install.version)}",
                  f"export COSTSCALE_ONNXRUNTIME={shlex.quote(install.onnxruntime)}"]
        if install.wheelhouse:
            lines.append(f"export COSTSCALE_WHEELHOUSE={shlex.quote(install.wheelhouse.rstrip('/'))}")
        lines += _embedded_script()
        start = 'exec "$BOOT" worker'
    # the bootstrap's worker listens on the instance's private address only (IMDS local-ipv4), not 0.0.0.0
    listen = f'"$COSTSCALE_ADDRESS:{int(worker_port)}"' if install is not None else f"0.0.0.0:{int(worker_port)}"
    cmd = f"{start} --listen {listen} --advertise \"$COSTSCALE_ADDRESS:{int(worker_port)}\""
    for name, spec in models:
        cmd += f" --model {shlex.quote(f'{name}={spec}')}"
    if dispatcher:
        cmd += f" --dispatcher {shlex.quote(dispatcher)}"
    cmd += "".join(f" {shlex.quote(f)}" for f in worker_flags)
    if spot_watch:
        cmd += f" --imds-endpoint {imds}" if install is None else f' --imds-endpoint "{imds}"'
    lines.append(cmd)
    text = "\n".join(lines) + "\n"
    size = len(text.encode())
    if size > USER_DATA_LIMIT:
        raise CloudConfigError(f"the worker's user data is {size} bytes, over EC2's {USER_DATA_LIMIT} "
                               "(launch.user_data too long?)")
    return text


__all__ = ["BOOTSTRAP_PATH", "SCRIPT_NAME", "USER_DATA_LIMIT", "WorkerInstall", "bootstrap_script", "build_user_data",
           "onnxruntime_range", "worker_install"]
